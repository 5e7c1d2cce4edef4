"""The goals of issue 22 ("fast from the first turn"), read from ``benchmarks.run --json``
reports, as one table: each goal's ratio, its bound and whether it is met.

    python -m benchmarks.goals part1.json [part2.json ...] [--markdown out.md]

The reports may come from several runs (``--savers`` applies to every section, so the
concurrency-8 and SQLite concurrency-1 throughput runs are runs of their own); rows of a
section found in more than one report are merged. A goal whose rows are missing is
reported as such, not skipped. The medians are the reports' own (median over rounds);
compare before and after only from runs on the same machine under similar load.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .report import format_ratio

Medians = dict[tuple[str, str, str], float]  # (section, metric, saver) -> median


@dataclass(frozen=True)
class Goal:
    """``saver``'s median of ``metric`` over ``reference``'s must be ``<=`` or ``>=`` bound
    (no bound: a ratio that must stay where it was, compared between reports by hand)."""

    area: str
    section: str
    metric: str
    saver: str
    reference: str
    bound: float | None
    at_most: bool = True  # False: at least (turns/s, shares)

    def ratio(self, medians: Medians) -> float | None:
        value = medians.get((self.section, self.metric, self.saver))
        base = medians.get((self.section, self.metric, self.reference))
        return value / base if value is not None and base else None


SHORT = ("first turn p50, new thread", "turn p50 @T=1", "turn p50 @T=10", "turn p50 @T=50")
PAIRS_SHORT = (
    ("ours PostgresSaver", "official PostgresSaver", 0.7),
    ("ours AsyncPostgresSaver", "official AsyncPostgresSaver", 0.7),
    ("ours SqliteSaver", "official SqliteSaver", 0.7),
    ("ours AsyncSqliteSaver", "official AsyncSqliteSaver", 0.7),
    ("ours RedisSaver", "InMemorySaver", 1.5),
    ("ours AsyncRedisSaver", "InMemorySaver", 1.5),
)
BY_ID = ("get_tuple by id, middle", "get_tuple by id, 10th")
# every backend against the official PostgreSQL saver of the same flavour
PAIRS_BY_ID = tuple(
    (ours, "official AsyncPostgresSaver" if "Async" in ours else "official PostgresSaver")
    for ours, _, _ in PAIRS_SHORT
)
STORES = ("ours PostgresStore", "ours RedisStore", "ours SqliteStore")
SETUP = (
    ("ours PostgresSaver", "official PostgresSaver"),
    ("ours SqliteSaver", "official SqliteSaver"),
    ("ours PostgresStore", "official PostgresStore"),
    ("ours SqliteStore", "official SqliteStore"),
)


def goals() -> list[Goal]:
    out = [
        Goal("short threads", "chat", metric, ours, ref, bound)
        for metric in SHORT
        for ours, ref, bound in PAIRS_SHORT
    ]
    out += [
        Goal("long threads (no loss: compare with before)", "chat", metric, ours, ref, None)
        for metric in ("footprint @T=200", "turn p50, last 10% @T=200")
        for ours, ref, _ in PAIRS_SHORT[:4]
    ]
    out += [
        Goal("reads by checkpoint_id", "reads", metric, ours, ref, 0.3)
        for metric in BY_ID
        for ours, ref in PAIRS_BY_ID
    ]
    out += [
        Goal("throughput", "throughput", "turns/s @c=8", "ours AsyncPostgresSaver",
             "InMemorySaver", 0.6, at_most=False),
        Goal("throughput", "throughput", "turns/s @c=8", "ours AsyncRedisSaver",
             "InMemorySaver", 0.7, at_most=False),
        Goal("throughput", "throughput", "turns/s @c=1", "ours SqliteSaver",
             "official SqliteSaver", 1.3, at_most=False),
    ]  # fmt: skip
    out += [
        Goal("store search across namespaces", "stores", "search(('users',), filter, limit=10)",
             store, "official PostgresStore", 1.0)
        for store in STORES
    ]  # fmt: skip
    out += [Goal("setup() on a fresh database", "setup", "setup()", o, r, 1.0) for o, r in SETUP]
    return out


def load(paths: Sequence[str]) -> tuple[Medians, dict[str, float], list[dict[str, Any]]]:
    """Medians of every row of every report; put p50 per store; the reports' headers."""
    medians: Medians = {}
    puts: dict[str, float] = {}
    metas = []
    for path in paths:
        report = json.loads(Path(path).read_text())
        metas.append(report["meta"])
        for key, section in report["sections"].items():
            for row in section["rows"]:
                if row["median"] is None:
                    continue
                medians[(key, row["metric"], row["saver"])] = float(row["median"])
                if key == "stores" and row["metric"] == "put":
                    puts[row["saver"]] = float(row["median"])
    return medians, puts, metas


def table(medians: Medians, puts: dict[str, float]) -> str:
    lines = [
        "| goal | metric | ours | against | ratio | bound | met |",
        "|---|---|---|---|---|---|---|",
    ]
    for goal in goals():
        ratio = goal.ratio(medians)
        bound = "-" if goal.bound is None else f"{'<=' if goal.at_most else '>='} {goal.bound:g}x"
        if ratio is None:
            met = "not measured"
        elif goal.bound is None:
            met = "-"
        else:
            ok = ratio <= goal.bound if goal.at_most else ratio >= goal.bound
            met = "yes" if ok else "no"
        lines.append(
            f"| {goal.area} | {goal.metric} | {goal.saver} | {goal.reference} | "
            f"{format_ratio(ratio)} | {bound} | {met} |"
        )
    if puts:
        lines += [
            "",
            "Store put p50 (a search change may cost puts at most 20% over these): "
            + ", ".join(f"{name} {value:.2f} ms" for name, value in puts.items()),
        ]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> str:
    p = argparse.ArgumentParser(prog="python -m benchmarks.goals", description=__doc__)
    p.add_argument("reports", nargs="+", help="JSON reports of benchmarks.run (--json)")
    p.add_argument("--markdown", help="also write the table here")
    args = p.parse_args(argv)
    medians, puts, metas = load(args.reports)
    head = [
        f"- {meta['run_id']}: {meta['label'] or '(no label)'}, load average "
        f"{meta['loadavg_at_start'][0]} -> {meta.get('loadavg_at_end', ['?'])[0]}, our code "
        f"@ {meta['langgraph_memory_plus_source'].get('git_head')}"
        for meta in metas
    ]
    text = "\n".join(head) + "\n\n" + table(medians, puts)
    print(text)
    if args.markdown:
        Path(args.markdown).write_text(text)
    return text


if __name__ == "__main__":
    main()
