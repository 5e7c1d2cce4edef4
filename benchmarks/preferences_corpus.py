"""Preference learning on the labelled corpus: precision and recall per language.

The corpus is ``tests/corpora/preferences/`` (see its README): ``reporting.jsonl`` was
committed before the rules it measures were written, ``tuning.jsonl`` is what they were
written against. A message's prediction is what the learner would store from it on an
empty profile: the extractor's statements that are not negated. A stored pair equal to
the label is a true positive; any other stored pair a false positive (and, when it is
a pair the message said the user does *not* want, also a "negation stored"); a labelled
pair not stored a false negative.

Run from the repository root::

    python -m benchmarks.preferences_corpus [--half blind|adversarial|reporting|tuning|all]
        [--misses]
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from langgraph_memory_plus.nodes.extraction import Statement, extract_statements

CORPUS = Path(__file__).resolve().parent.parent / "tests" / "corpora" / "preferences"
HALVES = ("blind", "adversarial", "reporting", "tuning")


@dataclass(frozen=True)
class Example:
    lang: str
    text: str
    expect: dict[str, Any]
    negated: dict[str, Any]


def load(half: str) -> list[Example]:
    """The labelled messages of one half of the corpus."""
    examples = []
    with (CORPUS / f"{half}.jsonl").open(encoding="utf-8") as lines:
        for line in lines:
            if line.strip():
                row = json.loads(line)
                examples.append(
                    Example(row["lang"], row["text"], row["expect"], row.get("negated", {}))
                )
    return examples


@dataclass
class Score:
    """Counts over stored (field, value) pairs, and the messages that went wrong."""

    messages: int = 0
    true_positives: int = 0
    false_positives: int = 0
    false_negatives: int = 0
    negations_stored: int = 0
    wrong: list[tuple[str, dict[str, Any], dict[str, Any]]] = field(default_factory=list)

    @property
    def precision(self) -> float:
        stored = self.true_positives + self.false_positives
        return self.true_positives / stored if stored else 1.0

    @property
    def recall(self) -> float:
        labelled = self.true_positives + self.false_negatives
        return self.true_positives / labelled if labelled else 1.0


def stored(statements: Iterable[Statement]) -> dict[str, Any]:
    """What a learner stores from these statements on an empty profile."""
    return {s.field: s.value for s in statements if not s.negated}


def score(
    examples: Sequence[Example], extractor: Callable[[str], Iterable[Statement]]
) -> dict[str, Score]:
    """A :class:`Score` per language."""
    scores: dict[str, Score] = {}
    for example in examples:
        s = scores.setdefault(example.lang, Score())
        s.messages += 1
        got = stored(extractor(example.text))
        good = {k for k, v in got.items() if example.expect.get(k) == v}
        s.true_positives += len(good)
        s.false_positives += len(got) - len(good)
        s.false_negatives += len(example.expect) - len(good)
        s.negations_stored += sum(example.negated.get(k) == v for k, v in got.items())
        if got != example.expect:
            s.wrong.append((example.text, example.expect, got))
    return scores


def table(half: str, scores: dict[str, Score]) -> list[str]:
    lines = [
        f"{half} half: | language | messages | labelled pairs | precision | recall "
        "| negations stored |",
    ]
    for lang, s in sorted(scores.items()):
        lines.append(
            f"| {lang} | {s.messages} | {s.true_positives + s.false_negatives} "
            f"| {s.precision:.3f} ({s.true_positives}/{s.true_positives + s.false_positives}) "
            f"| {s.recall:.3f} ({s.true_positives}/{s.true_positives + s.false_negatives}) "
            f"| {s.negations_stored} |"
        )
    return lines


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--half", choices=(*HALVES, "all"), default="blind")
    parser.add_argument("--misses", action="store_true", help="list the messages read wrong")
    args = parser.parse_args(argv)
    for half in HALVES if args.half == "all" else (args.half,):
        scores = score(load(half), extract_statements)
        print("\n".join(table(half, scores)))
        if args.misses:
            for lang, s in sorted(scores.items()):
                for text, expect, got in s.wrong:
                    print(f"  [{lang}] {text!r}: expected {expect}, stored {got}")


if __name__ == "__main__":
    main()
