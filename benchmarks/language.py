"""Memory in the user's language: counting error and speed, and the scanner's rates.

1. Token counting. For each language of ``benchmarks/data/language_samples.py`` (en, zh,
   ja, mixed, code) the error of the old default (``langchain_core``'s
   ``count_tokens_approximately``, four characters a token) and of the new one
   (``approximate_text_tokens``, script-aware) against the exact o200k and cl100k counts
   (``ExactTokenCounter``, the ``tokens`` extra). "all texts" is the language's texts
   taken together (what a budget sees); "worst text" the largest error on one text.
2. Counting speed: microseconds per call and per 1k characters, old and new counter
   timed in turns in one run (their ratio is what to compare on a shared machine), on
   one sentence, one 2 KB message and a 100-turn conversation of each language (a list
   as ``Trimmer`` and ``Summarizer`` pass it), and a ``Trimmer`` call and a ``Summarizer``
   turn (no summary due: its trigger count and its trim) on that conversation with each
   counter; the exact counter for scale.
3. The scanner on ``benchmarks/data/scan_corpus.py``: false positives on ordinary
   messages, detection per attack form, the held-out set apart, and its speed.

Run from the repository root (needs the ``tokens`` extra)::

    python -m benchmarks.language [--repeat 200] [--only speed] [--markdown out.md]
"""

from __future__ import annotations

import argparse
import platform
import re
import subprocess
import time
from collections.abc import Callable, Sequence
from datetime import datetime, timezone

from langchain_core.language_models.fake_chat_models import FakeListChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.messages.utils import count_tokens_approximately

from benchmarks.data import scan_corpus
from benchmarks.data.language_samples import SAMPLES
from langgraph_memory_plus.messages import (
    ExactTokenCounter,
    Summarizer,
    Trimmer,
    approximate_text_tokens,
    count_tokens_script_aware,
)
from langgraph_memory_plus.nodes.scanning import DEFAULT_SCANNER

ENCODINGS = ("o200k_base", "cl100k_base")


def old_text_tokens(text: str) -> float:
    return len(text) / 4


def error(estimate: float, exact: int) -> float:
    return (estimate - exact) / exact


def counting_table(exact: dict[str, ExactTokenCounter]) -> list[str]:
    lines = [
        "| language | chars | o200k | cl100k | old vs o200k | old vs cl100k | new vs o200k "
        "| new vs cl100k | new, worst text |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for language, texts in SAMPLES.items():
        joined = "".join(texts)
        real = {name: counter.text_tokens(joined) for name, counter in exact.items()}
        old, new = old_text_tokens(joined), approximate_text_tokens(joined)
        worst = max(
            abs(error(approximate_text_tokens(t), c.text_tokens(t)))
            for t in texts
            for c in exact.values()
        )
        cells = [
            language,
            str(len(joined)),
            *(str(real[name]) for name in ENCODINGS),
            *(f"{error(old, real[name]):+.1%}" for name in ENCODINGS),
            *(f"{error(new, real[name]):+.1%}" for name in ENCODINGS),
            f"{worst:.1%}",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def conversation(texts: Sequence[str], size: int = 100) -> list[BaseMessage]:
    return [
        (HumanMessage if k % 2 == 0 else AIMessage)(texts[k % len(texts)], id=f"m{k}")
        for k in range(size)
    ]


_SENTENCE_END = re.compile(r"(?<=[.!?。！？])\s*|\n")


def shapes(texts: Sequence[str]) -> dict[str, list[BaseMessage]]:
    """The lists the speed table counts: one sentence, one 2 KB message, 100 turns."""
    long_text = "".join(texts)
    long_text = (long_text * (2048 // len(long_text) + 1))[:2048]
    return {
        "short": [HumanMessage(_SENTENCE_END.split(texts[0], maxsplit=1)[0], id="s")],
        "2 KB": [HumanMessage(long_text, id="l")],
        "100 turns": conversation(texts),
    }


def interleaved_us(
    counters: Sequence[Callable[[list[BaseMessage]], object]],
    messages: list[BaseMessage],
    repeat: int,
) -> tuple[list[float], float]:
    """Median µs per call of each counter, and the median over rounds of the second's
    time over the first's. The counters are timed in turns (a, b, a, b ...), so a change
    in the shared machine's load hits both alike; each timing repeats the call for about
    50 µs, which the clock resolves well."""
    calls = max(1, int(50 / (len(messages) * 0.5)))
    timings: list[list[float]] = [[] for _ in counters]
    for _ in range(repeat):
        for counter, out in zip(counters, timings, strict=True):
            start = time.perf_counter()
            for _ in range(calls):
                counter(messages)
            out.append((time.perf_counter() - start) / calls)
    ratios = sorted(b / a for a, b in zip(timings[0], timings[-1], strict=True))
    return [sorted(t)[len(t) // 2] * 1e6 for t in timings], ratios[len(ratios) // 2]


def speed_table(exact: dict[str, ExactTokenCounter], repeat: int) -> list[str]:
    """Old (``count_tokens_approximately``) and new counter, per call and per 1k characters,
    with the new/old ratio; the exact o200k counter for scale."""
    lines = [
        "| language | list | chars | old µs | new µs | new/old | old µs/1k chars "
        "| new µs/1k chars | exact o200k µs |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for language, texts in SAMPLES.items():
        for shape, messages in shapes(texts).items():
            chars = sum(len(m.text) for m in messages)
            (old, new), ratio = interleaved_us(
                [count_tokens_approximately, count_tokens_script_aware], messages, repeat
            )
            (real,), _ = interleaved_us([exact["o200k_base"]], messages, max(3, repeat // 20))
            lines.append(
                f"| {language} | {shape} | {chars} | {old:.2f} | {new:.2f} | {ratio:.2f} "
                f"| {old / chars * 1e3:.2f} | {new / chars * 1e3:.2f} | {real:.0f} |"
            )
        # what a budget costs end to end: each counter's Trimmer keeps about half of
        # the conversation by its own count (so both do the same amount of trimming)
        history = conversation(texts)
        trimmers = [
            Trimmer(max_tokens=counter(history) // 2, token_counter=counter)
            for counter in (count_tokens_approximately, count_tokens_script_aware)
        ]
        (old, new), ratio = interleaved_us(trimmers, history, max(3, repeat // 4))
        chars = sum(len(m.text) for m in history)
        lines.append(
            f"| {language} | Trimmer, 100 turns | {chars} | {old:.0f} | {new:.0f} | {ratio:.2f} "
            "| | | |"
        )
        # a Summarizer turn that needs no summary yet: the trigger count, then the trim
        summarizers = [
            Summarizer(
                _NEVER_CALLED,
                max_tokens=counter(history) // 2,
                trigger_tokens=counter(history) + 1,
                token_counter=counter,
            ).apply
            for counter in (count_tokens_approximately, count_tokens_script_aware)
        ]
        (old, new), ratio = interleaved_us(summarizers, history, max(3, repeat // 4))
        lines.append(
            f"| {language} | Summarizer, 100 turns | {chars} | {old:.0f} | {new:.0f} "
            f"| {ratio:.2f} | | | |"
        )
    return lines


_NEVER_CALLED = FakeListChatModel(responses=["(no summary is due in the speed table)"])


def rate(hits: int, total: int) -> str:
    return f"{hits}/{total} = {hits / total:.1%}" if total else "-"


def scanner_table() -> list[str]:
    benign, attacks = scan_corpus.benign(), scan_corpus.attacks()
    lines = ["| set | language | form | messages | flagged |", "|---|---|---|---:|---:|"]
    for language in ("zh", "en"):
        ours = [m for lang, m in benign if lang == language]
        flagged = sum(bool(DEFAULT_SCANNER.scan(m)) for m in ours)
        lines.append(f"| benign | {language} | - | {len(ours)} | {rate(flagged, len(ours))} |")
    forms = sorted({form for _, form, _ in attacks}, key=lambda f: (f != "plain", f))
    for language in ("zh", "en"):
        for form in forms:
            theirs = [m for lang, f, m in attacks if lang == language and f == form]
            if theirs:
                hits = sum(bool(DEFAULT_SCANNER.scan(m)) for m in theirs)
                lines.append(
                    f"| attacks | {language} | {form} | {len(theirs)} | {rate(hits, len(theirs))} |"
                )
    all_fp = sum(bool(DEFAULT_SCANNER.scan(m)) for _, m in benign)
    all_hits = sum(bool(DEFAULT_SCANNER.scan(m)) for _, _, m in attacks)
    lines.append(f"| **benign, all** | | | {len(benign)} | {rate(all_fp, len(benign))} |")
    lines.append(f"| **attacks, all** | | | {len(attacks)} | {rate(all_hits, len(attacks))} |")
    for language in ("zh", "en"):
        hb = [m for lang, m in scan_corpus.HELDOUT_BENIGN if lang == language]
        ha = [m for lang, m in scan_corpus.HELDOUT_ATTACKS if lang == language]
        fp = sum(bool(DEFAULT_SCANNER.scan(m)) for m in hb)
        hits = sum(bool(DEFAULT_SCANNER.scan(m)) for m in ha)
        lines.append(f"| held-out benign | {language} | - | {len(hb)} | {rate(fp, len(hb))} |")
        lines.append(f"| held-out attacks | {language} | - | {len(ha)} | {rate(hits, len(ha))} |")
    texts = [m for _, m in benign] + [m for _, _, m in attacks]
    start = time.perf_counter()
    for text in texts:
        DEFAULT_SCANNER.scan(text)
    per = (time.perf_counter() - start) / len(texts) * 1e6
    lines.append("")
    lines.append(f"Scanning speed: {per:.0f} µs per message ({len(texts)} messages).")
    return lines


def header() -> list[str]:
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        commit = "unknown"
    load = " ".join(f"{x:.2f}" for x in __import__("os").getloadavg())
    return [
        "# Languages: counting error and speed, scanner rates",
        "",
        f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC, commit {commit}, "
        f"Python {platform.python_version()}, load average {load}.",
        "",
    ]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=200, help="timings per speed cell")
    parser.add_argument("--markdown", help="also write the report to this file")
    parser.add_argument(
        "--only",
        choices=("counting", "speed", "scanner"),
        action="append",
        help="run only this section (repeatable); all three by default",
    )
    args = parser.parse_args(argv)
    only = set(args.only or ("counting", "speed", "scanner"))
    exact = {name: ExactTokenCounter(name) for name in ENCODINGS}
    report = header()
    if "counting" in only:
        report += [
            "## Counting error vs exact counts (signed: + over, - under)",
            "",
            *counting_table(exact),
            "",
        ]
    if "speed" in only:
        report += [
            "## Counting speed (median µs per call, old and new timed in turns)",
            "",
            *speed_table(exact, args.repeat),
            "",
        ]
    if "scanner" in only:
        report += ["## Scanner (benchmarks/data/scan_corpus.py)", "", *scanner_table()]
    text = "\n".join(report) + "\n"
    print(text, end="")
    if args.markdown:
        with open(args.markdown, "w", encoding="utf-8") as out:
            out.write(text)


if __name__ == "__main__":
    main()
