"""How the CLI talks: tables or JSON on stdout, progress and questions on stderr."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Sequence
from typing import Any, TextIO

# Exit codes (documented in docs/cli.md and in ``langgraph-memory --help``).
OK = 0
FOUND_PROBLEMS = 1  # verify found differences, doctor found problems, an operation failed
USAGE = 2  # bad arguments or a bad URL (argparse uses 2 too)
UNREACHABLE = 3  # the server (or file) a URL names cannot be reached
NOT_FOUND = 4  # no such thread
REFUSED = 5  # a destructive command without --yes and no terminal to ask on
UNSUPPORTED = 6  # the backend (or this version of the package) cannot do it

EXIT_CODES = {
    OK: "success",
    FOUND_PROBLEMS: "done, but problems found (verify differences, doctor findings), or failed",
    USAGE: "bad arguments, URL or option",
    UNREACHABLE: "the backend cannot be reached",
    NOT_FOUND: "no such thread",
    REFUSED: "a destructive command was not confirmed (give --yes)",
    UNSUPPORTED: "not available for this backend or this version",
}


class CliError(Exception):
    """Ends the command with a one-line message on stderr and ``code``."""

    def __init__(self, message: str, code: int = FOUND_PROBLEMS) -> None:
        super().__init__(message)
        self.code = code


def emit_json(value: Any, out: TextIO | None = None) -> None:
    print(json.dumps(value, indent=2, default=str, ensure_ascii=False), file=out or sys.stdout)


def table(rows: Sequence[Sequence[Any]], headers: Sequence[str], out: TextIO | None = None) -> None:
    """Columns padded to their widest cell; numbers right-aligned."""
    out = out or sys.stdout
    cells = [[str(h) for h in headers], *[["" if c is None else str(c) for c in r] for r in rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    numeric = [
        all(isinstance(r[i], (int, float)) for r in rows) and rows for i in range(len(headers))
    ]
    for n, row in enumerate(cells):
        line = "  ".join(
            c.rjust(w) if numeric[i] and n else c.ljust(w)
            for i, (c, w) in enumerate(zip(row, widths, strict=True))
        )
        print(line.rstrip(), file=out)


def human_bytes(n: float | None) -> str:
    if n is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"  # pragma: no cover


class Progress:
    """Progress on stderr: a bar with the total, rate and ETA redrawn in place on a
    terminal; plain lines every ``every`` steps (and at the total) otherwise, for logs."""

    WIDTH = 24
    REDRAW = 0.1  # seconds between redraws: a step per checkpoint would flood a slow tty

    def __init__(self, what: str, stream: TextIO | None = None, every: int = 100) -> None:
        self.what = what
        self.stream = stream or sys.stderr
        self.live = self.stream.isatty()
        self.every = every
        self.start = time.monotonic()
        self.last_line = 0
        self.drawn_at = 0.0
        self.drawn = False
        self.state: tuple[int, str, int | None] = (0, "", None)

    def update(self, done: int, detail: str = "", total: int | None = None) -> None:
        self.state = (done, detail, total)
        now = time.monotonic()
        if self.live:
            if now - self.drawn_at >= self.REDRAW or (total is not None and done >= total):
                self._draw(now)
        elif done - self.last_line >= self.every or (total and done >= total > self.last_line):
            self.last_line = done
            print(self.line(now), file=self.stream)

    def line(self, now: float | None = None) -> str:
        """The current state as text: ``what: [bar] done/total pct, rate, ETA, detail``."""
        done, detail, total = self.state
        elapsed = max((now or time.monotonic()) - self.start, 1e-9)
        rate = done / elapsed
        parts = []
        if total:
            filled = int(self.WIDTH * min(done, total) / total)
            bar = "#" * filled + "." * (self.WIDTH - filled)
            parts.append(f"[{bar}] {done}/{total} {100 * min(done, total) // total}%")
            left = max(total - done, 0)
            eta = left / rate if rate > 0 else None
            parts.append(f"{rate:.1f}/s, ETA {_duration(eta)}" if left else f"{rate:.1f}/s")
        else:
            parts.append(f"{done} ({rate:.1f}/s)")
        if detail:
            parts.append(detail)
        return f"{self.what}: {', '.join(parts)}"

    def _draw(self, now: float) -> None:
        self.stream.write("\r" + self.line(now)[:160].ljust(80))
        self.stream.flush()
        self.drawn_at = now
        self.drawn = True

    def close(self) -> None:
        """The last state drawn (or printed) once more, then the line ended."""
        if self.live and self.drawn:
            self._draw(time.monotonic())
            self.stream.write("\n")
            self.stream.flush()


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    s = int(seconds + 0.5)
    if s >= 3600:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s"


def confirm(prompt: str, yes: bool, expected: str = "yes") -> None:
    """Go on with a destructive command: ``--yes``, or the answer typed on a terminal."""
    if yes:
        return
    if not sys.stdin.isatty():
        raise CliError(f"{prompt}: refused without --yes (no terminal to ask on)", REFUSED)
    sys.stderr.write(f"{prompt}\nThis cannot be undone. Type {expected!r} to go on: ")
    sys.stderr.flush()
    if sys.stdin.readline().strip() != expected:
        raise CliError("not confirmed; nothing was changed", REFUSED)
