"""How the CLI talks: tables or JSON on stdout, progress and questions on stderr."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Sequence
from typing import Any, TextIO

# Exit codes (documented in the README and in ``langgraph-memory --help``).
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
    """A live counter line on a terminal; plain lines every ``every`` steps otherwise."""

    def __init__(self, what: str, stream: TextIO | None = None, every: int = 100) -> None:
        self.what = what
        self.stream = stream or sys.stderr
        self.live = self.stream.isatty()
        self.every = every
        self.start = time.monotonic()
        self.last_line = 0
        self.drawn = False

    def update(self, done: int, detail: str = "", total: int | None = None) -> None:
        rate = done / max(time.monotonic() - self.start, 1e-9)
        if self.live:
            bar = ""
            if total:
                filled = int(30 * min(done, total) / total)
                bar = "[" + "#" * filled + "." * (30 - filled) + f"] {done}/{total} "
            text = f"\r{self.what}: {bar or f'{done} '}({rate:.0f}/s) {detail}"
            self.stream.write(text[:200].ljust(80))
            self.stream.flush()
            self.drawn = True
        elif done - self.last_line >= self.every:
            self.last_line = done
            print(f"{self.what}: {done} ({rate:.0f}/s) {detail}".rstrip(), file=self.stream)

    def close(self) -> None:
        if self.drawn:
            self.stream.write("\n")
            self.stream.flush()


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
