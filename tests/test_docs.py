"""The reference pages in docs/ name everything the code has: every ``from_url`` option,
every command-line option, every listener event and Prometheus metric. A new option,
command or metric fails here until its page says what it is.

(Their code blocks run in ``test_readme.py``; ``mkdocs build --strict`` in ``.ci/run``
checks their links and anchors, the README's included.)
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

DOCS = Path(__file__).resolve().parent.parent / "docs"


def section(page: str, heading: str) -> str:
    """The text of ``page`` under ``## heading``, up to the next ``## ``."""
    text = (DOCS / page).read_text(encoding="utf-8")
    return text.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]


def table_rows(text: str) -> list[list[str]]:
    """The cells of each row of the markdown tables in ``text`` (not the separator rows)."""
    rows = []
    for line in text.splitlines():
        if line.startswith("|") and not re.fullmatch(r"[|\s:-]+", line):
            rows.append([cell.strip() for cell in re.split(r"(?<!\\)\|", line)[1:-1]])
    return rows


def test_every_from_url_option_has_a_row_with_its_default() -> None:
    from langgraph_memory_plus.url import OPTIONS

    rows = table_rows(section("configuration.md", "`from_url` options"))
    documented = {row[0].strip("`"): row for row in rows[1:]}
    assert set(documented) == set(OPTIONS), set(documented) ^ set(OPTIONS)
    for name, (_, backends, default, meaning) in documented.items():
        assert backends and default and meaning == OPTIONS[name].meaning, name


def _commands(parser: argparse.ArgumentParser, path: str = "") -> dict[str, set[str]]:
    """``{"thread show": {"--limit", "ID"...}}``: each command's own options (long form)."""
    found: dict[str, set[str]] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found.update(_commands(sub, f"{path} {name}".strip()))
    if path and not found:
        found[path] = {
            max(action.option_strings, key=len)
            for action in parser._actions
            if action.option_strings and action.dest not in ("help", "url", "json")
        }
    return found


def test_every_command_and_option_of_the_cli_is_in_the_options_table() -> None:
    from langgraph_memory_plus.cli import _parser

    documented: dict[str, set[str]] = {}
    command = ""
    for cells in table_rows(section("cli.md", "Options"))[1:]:
        command = cells[0] or command
        options = set(re.findall(r"--?[a-z][a-z-]*", cells[1]))
        for name in re.findall(r"`([a-z][a-z -]*)`", command):
            # `threads ls` is the parser's `threads` with an action; `thread show` a subcommand
            key = name if name.startswith("thread ") else name.split(" ")[0]
            documented.setdefault(key, set()).update(options)
    commands = _commands(_parser())
    assert set(documented) == set(commands), set(documented) ^ set(commands)
    for name, options in commands.items():
        assert options <= documented[name], (name, options - documented[name])
    headings = [line for line in section("cli.md", "Commands").splitlines() if line[:4] == "### "]
    for name in commands:
        assert any(f"`{name}" in heading for heading in headings), name


def test_every_listener_event_is_in_the_events_table() -> None:
    from langgraph_memory_plus.observability import events

    def subclasses(cls: type) -> list[type]:
        return [c for sub in cls.__subclasses__() for c in (sub, *subclasses(sub))]

    names = {
        f"{c.kind}.{c.operation}"
        for c in subclasses(events.MemoryEvent)
        if "operation" in vars(c) and not c.__name__.startswith("_")
    }
    documented = set()
    for cells in table_rows(section("observability.md", "Listener events"))[1:]:
        first, *more = re.findall(r"`([a-z_.]+)`", cells[0])
        kind = first.split(".")[0]
        documented |= {first, *(kind + name if name.startswith(".") else name for name in more)}
    assert names and names <= documented, names - documented


def test_every_prometheus_metric_is_in_the_metrics_table() -> None:
    from prometheus_client import CollectorRegistry

    from langgraph_memory_plus.observability.prometheus import PrometheusListener

    registry = CollectorRegistry()
    PrometheusListener(registry=registry, prefix="lgmp_").watch_nodes()
    rows = table_rows(section("observability.md", "Prometheus metrics"))
    documented = {row[0].strip("`").removesuffix("_total") for row in rows[1:]}
    names = {family.name for family in registry.collect()}
    assert len(names) >= 10 and names <= documented, names - documented


def test_every_opentelemetry_instrument_is_in_its_table() -> None:
    from langgraph_memory_plus.observability.metrics import METRICS
    from langgraph_memory_plus.observability.otel import _OTEL_NAMES

    rows = table_rows(section("observability.md", "OpenTelemetry spans and metrics"))
    documented = {row[0].strip("`") for row in rows[1:]}
    names = {"lgmp." + _OTEL_NAMES.get(m, m.replace("_", ".")) for m in METRICS}
    assert names | {"lgmp.approvals.pending"} <= documented, names - documented
