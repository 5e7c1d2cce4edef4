"""Collecting samples, medians and ratios, and printing them as markdown tables / JSON."""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .targets import Target, baseline_of, memory_reference

# units whose ratio to the baseline means something (dimensionless ones get none)
_RATIO_UNITS = {"bytes", "ms", "turns/s", "ops/s"}


@dataclass(frozen=True)
class Share:
    """A summary column: each saver's median of ``metric`` as a percentage of ``reference``'s."""

    label: str
    metric: str
    reference: str  # a saver name, e.g. the InMemorySaver ceiling


@dataclass
class Section:
    key: str
    title: str
    description: list[str] = field(default_factory=list)
    status: str = "ok"  # ok | skipped
    notes: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    # metric -> unit, and (metric, saver name) -> samples, in insertion order
    units: dict[str, str] = field(default_factory=dict)
    samples: dict[tuple[str, str], list[float]] = field(default_factory=dict)
    targets: dict[str, Target] = field(default_factory=dict)
    # (metric, saver name) -> the target as it ran for that metric: a sync saver with an
    # async API runs on an event loop at concurrency > 1, and is compared with async savers
    flavours: dict[tuple[str, str], Target] = field(default_factory=dict)
    # columns of the compact table: a metric, (label, before, after) shown as "a -> b", or a
    # share of a reference saver's median
    summary: list[str | tuple[str, str, str] | Share] = field(default_factory=list)
    # which official implementation a row's ratio is taken against
    baseline_of: Callable[[Target], Target] = baseline_of

    def add(self, target: Target, metrics: dict[tuple[str, str], float]) -> None:
        self.targets.setdefault(target.name, target)
        for (metric, unit), value in metrics.items():
            self.units.setdefault(metric, unit)
            self.flavours.setdefault((metric, target.name), target)
            self.samples.setdefault((metric, target.name), []).append(float(value))

    def baseline(self, metric: str, saver: str) -> Target:
        """The official implementation this row is compared with (by the flavour it ran as)."""
        return self.baseline_of(self.flavours.get((metric, saver), self.targets[saver]))

    def share(self, column: Share, saver: str) -> float | None:
        value = self.median(column.metric, saver)
        reference = self.median(column.metric, column.reference)
        return value / reference if value is not None and reference else None

    def median(self, metric: str, saver: str) -> float | None:
        values = [v for v in self.samples.get((metric, saver), []) if not math.isnan(v)]
        return statistics.median(values) if values else None

    def ratio(self, metric: str, saver: str) -> float | None:
        value = self.median(metric, saver)
        base_value = self.median(metric, self.baseline(metric, saver).name)
        if self.units.get(metric) in _RATIO_UNITS and value is not None and base_value:
            return value / base_value
        return None

    def ratio_vs_memory(self, metric: str, saver: str) -> float | None:
        """Redis rows: the median over InMemorySaver's (None for other rows)."""
        reference = memory_reference(self.flavours.get((metric, saver), self.targets[saver]))
        if reference is None or self.units.get(metric) not in _RATIO_UNITS:
            return None
        value = self.median(metric, saver)
        base_value = self.median(metric, reference.name)
        return value / base_value if value is not None and base_value else None

    def rows(self) -> list[dict[str, Any]]:
        out = []
        for metric, unit in self.units.items():
            for saver in self.targets:
                if (metric, saver) not in self.samples:
                    continue
                value = self.median(metric, saver)
                base = self.baseline(metric, saver).name
                ratio = self.ratio(metric, saver)
                out.append(
                    {
                        "saver": saver,
                        "metric": metric,
                        "unit": unit,
                        "median": value,
                        "ratio": ratio,
                        "baseline": base,
                        "ratio_vs_memory": self.ratio_vs_memory(metric, saver),
                        "samples": self.samples[(metric, saver)],
                    }
                )
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "title": self.title,
            "status": self.status,
            "description": self.description,
            "notes": self.notes,
            "errors": self.errors,
            "rows": self.rows() if self.status == "ok" else [],
        }


def format_value(value: float | None, unit: str) -> str:
    if value is None or math.isnan(value):
        return "n/a"
    if unit == "bytes":
        for size, label in ((1e9, "GB"), (1e6, "MB"), (1e3, "KB")):
            if value >= size:
                return f"{value / size:.2f} {label}"
        return f"{value:.0f} B"
    if unit == "exp":
        return f"{value:.2f}"
    if unit == "x":
        return f"{value:.2f}x"
    if unit == "count":
        return f"{value:.0f}"
    if value >= 100:
        number = f"{value:.0f}"
    elif value >= 10:
        number = f"{value:.1f}"
    elif value >= 0.1:
        number = f"{value:.2f}"
    else:
        number = f"{value:.2g}"
    return f"{number} {unit}"


def format_ratio(ratio: float | None) -> str:
    if ratio is None:
        return "-"
    return f"{ratio:.2f}x" if ratio >= 0.1 else f"{ratio:.2g}x"


def _cell(section: Section, metric: str, saver: str, with_ratio: bool = True) -> str:
    if (metric, saver) not in section.samples:
        return ""
    text = format_value(section.median(metric, saver), section.units[metric])
    if not with_ratio:
        return text
    ratios = []
    if (ratio := section.ratio(metric, saver)) is not None:
        ratios.append(format_ratio(ratio))
    if (memory := section.ratio_vs_memory(metric, saver)) is not None:
        ratios.append(f"{format_ratio(memory)} mem")
    return f"{text} ({'; '.join(ratios)})" if ratios else text


def summary_markdown(section: Section) -> str:
    """The compact table: one row per saver, the section's key metrics as columns."""

    def present(c: str | tuple[str, str, str] | Share) -> bool:
        if isinstance(c, str):
            return c in section.units
        if isinstance(c, Share):
            return (c.metric, c.reference) in section.samples
        return all(m in section.units for m in c[1:])

    columns = [c for c in section.summary if present(c)]
    if not columns:
        return ""
    names = [
        c if isinstance(c, str) else c.label if isinstance(c, Share) else c[0] for c in columns
    ]
    lines = [
        "| saver | " + " | ".join(names) + " |",
        "|---" * (len(columns) + 1) + "|",
    ]
    for saver in section.targets:
        cells = []
        for c in columns:
            if isinstance(c, str):
                cells.append(_cell(section, c, saver))
            elif isinstance(c, Share):
                share = section.share(c, saver)
                cells.append(f"{share:.0%}" if share is not None else "")
            else:
                before, after = (_cell(section, m, saver, with_ratio=False) for m in c[1:])
                cells.append(f"{before} -> {after}" if before and after else "")
        lines.append(f"| {saver} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def section_markdown(section: Section) -> str:
    lines = [f"### {section.title}", ""]
    if section.status != "ok":
        lines += [*(f"_{note}_" for note in section.notes), ""]
        return "\n".join(lines)
    lines += [*section.description, ""] if section.description else []
    summary = summary_markdown(section)
    if summary:
        lines += [
            "Summary (ratio vs the official baseline in parentheses; Redis rows also vs "
            "InMemorySaver, `mem`):",
            "",
            summary,
        ]
    lines += [
        "| saver | metric | median | ratio vs official | vs InMemorySaver |",
        "|---|---|---|---|---|",
    ]
    for row in section.rows():
        lines.append(
            f"| {row['saver']} | {row['metric']} | {format_value(row['median'], row['unit'])} "
            f"| {format_ratio(row['ratio'])} | {format_ratio(row['ratio_vs_memory'])} |"
        )
    lines.append("")
    for note in section.notes:
        lines.append(f"- {note}")
    for error in section.errors:
        lines.append(f"- **error**: {error}")
    if section.notes or section.errors:
        lines.append("")
    return "\n".join(lines)
