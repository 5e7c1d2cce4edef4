"""Catch rate and false-positive rate of the memory scanner on the injection corpus.

``python -m benchmarks.scanner_corpus`` reads ``tests/corpora/injection/`` and prints, per
half and per language, how many attacks the default scanner catches and how many benign
look-alikes it flags. The reporting half (``report.jsonl``) was written and committed
before the rules it measures, and no rule was written against it: its numbers are the
ones to quote. ``--misses`` also lists what was missed or wrongly flagged (look only
after the rules are done, or the reporting half stops being held out).
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path

from langgraph_memory_plus.nodes.scanning import DEFAULT_SCANNER, Scanner

CORPUS = Path(__file__).resolve().parent.parent / "tests" / "corpora" / "injection"
HALVES = ("report", "adversarial", "tuning")
"""``adversarial`` is a second held-out half (new paraphrases and obfuscations), reported
like ``report``."""
LANGUAGES = ("en", "zh")


@dataclass(frozen=True)
class Example:
    lang: str
    label: str
    text: str


@dataclass(frozen=True)
class Rates:
    """Counts for one half and language."""

    attacks: int
    caught: int
    benign: int
    flagged: int
    misses: tuple[str, ...]
    false_positives: tuple[str, ...]

    @property
    def catch_rate(self) -> float:
        return self.caught / self.attacks if self.attacks else 0.0

    @property
    def false_positive_rate(self) -> float:
        return self.flagged / self.benign if self.benign else 0.0


def load(half: str) -> list[Example]:
    """The examples of one half (``report``, ``adversarial`` or ``tuning``)."""
    if half not in HALVES:
        raise ValueError(f"half must be one of {HALVES}, got {half!r}")
    path = CORPUS / f"{half}.jsonl"
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]
    return [Example(r["lang"], r["label"], r["text"]) for r in rows]


def measure(half: str, lang: str, scanner: Scanner = DEFAULT_SCANNER) -> Rates:
    """The scanner's counts on one half in one language."""
    mine = [e for e in load(half) if e.lang == lang]
    attacks = [e.text for e in mine if e.label == "attack"]
    benign = [e.text for e in mine if e.label == "benign"]
    misses = tuple(t for t in attacks if not scanner.scan(t))
    flagged = tuple(t for t in benign if scanner.scan(t))
    return Rates(len(attacks), len(attacks) - len(misses), len(benign), len(flagged), misses,
                 flagged)  # fmt: skip


def table(halves: tuple[str, ...] = HALVES) -> list[str]:
    lines = [
        "| half | language | attacks caught | benign flagged |",
        "|---|---|---:|---:|",
    ]
    for half in halves:
        for lang in LANGUAGES:
            r = measure(half, lang)
            lines.append(
                f"| {half} | {lang} | {r.caught}/{r.attacks} = {r.catch_rate:.1%} "
                f"| {r.flagged}/{r.benign} = {r.false_positive_rate:.1%} |"
            )
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--half", choices=HALVES, help="only this half (default: both)")
    parser.add_argument("--misses", action="store_true", help="list misses and false positives")
    args = parser.parse_args(argv)
    halves = (args.half,) if args.half else HALVES
    print("\n".join(table(halves)))
    if args.misses:
        for half in halves:
            for lang in LANGUAGES:
                r = measure(half, lang)
                for text in r.misses:
                    print(f"missed    {half} {lang}: {text}")
                for text in r.false_positives:
                    print(f"flagged   {half} {lang}: {text}")


if __name__ == "__main__":
    main()
