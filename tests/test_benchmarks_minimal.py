"""A smoke run of ``benchmarks/minimal.py``: tiny sizes, correct savers, every ratio reported.

Not a benchmark: nothing here depends on speed. It proves that the three featureless savers
keep a conversation (so their times are those of savers that store it), that one run
measures every saver and prints and writes every ratio the goals use, and that it leaves no
database, key or SQLite file behind.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest
from langchain_core.runnables import RunnableConfig

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # benchmarks/ is not installed; it lives beside tests/
    sys.path.insert(0, str(ROOT))

from test_benchmarks_smoke import assert_nothing_left  # noqa: E402

from benchmarks import minimal, workloads  # noqa: E402
from benchmarks import targets as tg  # noqa: E402

pytestmark = pytest.mark.storage

MINIMAL = [minimal.MIN_SQLITE, minimal.MIN_PG, minimal.MIN_REDIS]


@pytest.mark.parametrize("target", MINIMAL, ids=lambda t: t.slug)
def test_minimal_savers_keep_a_conversation(target: tg.Target, pg_url: str, redis_url: str) -> None:
    env = tg.Env(pg=pg_url, redis=redis_url)
    with minimal.open_saver(target, env) as (saver, marker):
        graph = workloads.chat_graph().compile(checkpointer=saver)
        config: RunnableConfig = {"configurable": {"thread_id": f"{marker}-chat"}}
        for turn in (1, 2):
            graph.invoke({"messages": [workloads.user_message(turn)]}, config)
        state = graph.get_state(config)
        messages = workloads._check_conversation(dict(state.values), 2, target.name)
        assert len(messages) == 4 and state.next == ()

        history = list(graph.get_state_history(config))
        latest = saver.get_tuple(config)
        assert latest is not None and latest.config == history[0].config
        assert [t.config for t in saver.list(config)] == [h.config for h in history]
        assert len(list(saver.list(config, limit=2))) == 2
        assert len(list(saver.list(config, before=history[1].config))) == len(history) - 2
        # each checkpoint names its parent; the oldest has none
        assert [h.parent_config for h in history[:-1]] == [h.config for h in history[1:]]
        assert history[-1].parent_config is None
        # an older checkpoint, by id, with its pending writes: the first turn's state
        first = next(h for h in history if h.values.get("turns") == 1 and not h.next)
        assert len(graph.get_state(first.config).values["messages"]) == 2
        other: RunnableConfig = {"configurable": {"thread_id": f"{marker}-none"}}
        assert saver.get_tuple(other) is None


def test_minimal_run_reports_every_ratio(
    pg_url: str, redis_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "minimal.json"
    report = minimal.main(
        ["--pg", pg_url, "--redis", redis_url, "--turns", "1,2", "--turns-sample", "4",
         "--warmup", "2", "--rounds", "2", "--json", str(out)]
    )  # fmt: skip

    assert json.loads(out.read_text()) == json.loads(json.dumps(report))
    assert list(report["savers"]) == ["1", "2"] == list(report["ratios"])
    printed = capsys.readouterr().out
    for length in ("1", "2"):
        savers, ratios = report["savers"][length], report["ratios"][length]
        assert set(savers) == {t.name for t in minimal.SAVERS}
        for metrics in savers.values():
            for metric in ("turn p50 ms", "cpu ms/turn"):
                assert len(metrics["samples"][metric]) == 2  # one per round
                assert math.isfinite(metrics[metric]) and metrics[metric] > 0
        assert list(ratios) == [name for name, *_ in minimal.RATIOS]
        for name, numerator, denominator, goal in minimal.RATIOS:
            ratio = ratios[name]
            expected = (
                savers[numerator.name]["turn p50 ms"] / savers[denominator.name]["turn p50 ms"]
            )
            assert ratio["ratio"] == pytest.approx(expected)
            assert ratio["goal"] == goal and ratio["within goal"] == (ratio["ratio"] <= goal)
            cpu = savers[numerator.name]["cpu ms/turn"] / savers[denominator.name]["cpu ms/turn"]
            assert ratio["cpu ratio"] == pytest.approx(cpu)
            assert f"| {name} | {length} | {ratio['ratio']:.3f}x | <= {goal}x |" in printed
        for target in minimal.SAVERS:
            assert f"| {target.name} | {length} |" in printed
    assert "load average" in printed and len(report["meta"]["load average after"]) == 3

    assert_nothing_left(pg_url, redis_url, report["meta"]["run_id"])
