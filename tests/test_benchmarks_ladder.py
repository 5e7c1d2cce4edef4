"""A smoke run of ``benchmarks/ladder.py``: the rungs are savers that keep a conversation.

Not a benchmark: nothing here depends on speed. It proves that every rung of the feature
ladder reads back what the chat graph wrote (so its time is that of a saver that stores it),
that the features the rungs add do what they stand for (the thread index's row and status,
rung 4's tombstone and expiry), and that one run reports every saver and leaves nothing
behind.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any, TypedDict

import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # benchmarks/ is not installed; it lives beside tests/
    sys.path.insert(0, str(ROOT))

from test_benchmarks_smoke import assert_nothing_left  # noqa: E402

from benchmarks import ladder, workloads  # noqa: E402
from benchmarks import targets as tg  # noqa: E402

pytestmark = pytest.mark.storage

RUNGS = [t for _, _, rungs, _ in ladder.BACKENDS for t in rungs]
INDEXED = [t for t in RUNGS if ladder.level_of(t) >= 3]
FENCED = [t for t in RUNGS if ladder.level_of(t) == 4]


def _chat(saver: Any, thread_id: str, turns: int) -> Any:
    graph = workloads.chat_graph().compile(checkpointer=saver)
    config: RunnableConfig = {"configurable": {"thread_id": thread_id}}
    for turn in range(1, turns + 1):
        graph.invoke({"messages": [workloads.user_message(turn)]}, config)
    return graph


def _thread_row(saver: Any, thread_id: str) -> tuple[Any, ...]:
    """(latest checkpoint id, status, title, checkpoint count) of the thread index."""
    if isinstance(saver, ladder.LadderSqliteSaver):
        sql = "SELECT checkpoint_id, status, title, checkpoints FROM threads WHERE thread_id = ?"
        return tuple(saver.conn.execute(sql, (thread_id,)).fetchone())
    if isinstance(saver, ladder.LadderPostgresSaver):
        sql = "SELECT checkpoint_id, status, title, checkpoints FROM threads WHERE thread_id = %s"
        with saver.pool.connection() as conn:
            return tuple(conn.execute(sql, (thread_id,)).fetchone() or ())
    row = saver.client.hgetall(saver._thread(thread_id))
    return (
        row[b"checkpoint"].decode(),
        row[b"status"].decode(),
        row[b"title"].decode() if b"title" in row else None,
        int(row[b"count"]),
    )


@pytest.mark.parametrize("target", RUNGS, ids=lambda t: t.slug)
def test_rungs_keep_a_conversation(target: tg.Target, pg_url: str, redis_url: str) -> None:
    env = tg.Env(pg=pg_url, redis=redis_url)
    with ladder.open_saver(target, env) as (saver, marker):
        config: RunnableConfig = {"configurable": {"thread_id": f"{marker}-chat"}}
        graph = _chat(saver, f"{marker}-chat", 3)
        state = graph.get_state(config)
        assert len(workloads._check_conversation(dict(state.values), 3, target.name)) == 6
        history = list(graph.get_state_history(config))
        assert [t.config for t in saver.list(config)] == [h.config for h in history]
        assert len(list(saver.list(config, before=history[1].config))) == len(history) - 2
        assert [h.parent_config for h in history[:-1]] == [h.config for h in history[1:]]
        first = next(h for h in history if h.values.get("turns") == 1 and not h.next)
        assert len(graph.get_state(first.config).values["messages"]) == 2
        # the checkpoint before remember ran holds remember's writes, in order
        middle = next(h for h in history if h.next == ("remember",))
        pending = saver.get_tuple(middle.config)
        assert pending is not None
        assert [w[1:] for w in pending.pending_writes] == [("turns", 1), ("last_reply_chars", 190)]
        other: RunnableConfig = {"configurable": {"thread_id": f"{marker}-none"}}
        assert saver.get_tuple(other) is None


class _Asked(TypedDict):
    x: int


def _asking() -> StateGraph:
    def ask(state: _Asked) -> dict[str, Any]:
        return {"x": interrupt("?")}

    builder = StateGraph(_Asked)
    builder.add_node("ask", ask)
    builder.add_edge(START, "ask")
    builder.add_edge("ask", END)
    return builder


@pytest.mark.parametrize(
    "target", [t for t in RUNGS if ladder.level_of(t) >= 3], ids=lambda t: t.slug
)
def test_thread_index_row(target: tg.Target, pg_url: str, redis_url: str) -> None:
    env = tg.Env(pg=pg_url, redis=redis_url)
    with ladder.open_saver(target, env) as (saver, marker):
        chat = f"{marker}-chat"
        _chat(saver, chat, 2)
        latest = saver.get_tuple({"configurable": {"thread_id": chat}})
        checkpoint_id, status, title, count = _thread_row(saver, chat)
        assert checkpoint_id == latest.config["configurable"]["checkpoint_id"]
        assert status == "idle" and count == len(
            list(saver.list({"configurable": {"thread_id": chat}}))
        )
        assert title and workloads.user_message(1).content.startswith(title.rstrip("\u2026"))

        graph = _asking().compile(checkpointer=saver)
        config: RunnableConfig = {"configurable": {"thread_id": f"{marker}-asked"}}
        graph.invoke({"x": 0}, config)
        assert _thread_row(saver, f"{marker}-asked")[1] == "interrupted"
        graph.invoke(Command(resume=5), config)
        assert _thread_row(saver, f"{marker}-asked")[1] == "idle"


@pytest.mark.parametrize(
    "target", [t for t in RUNGS if ladder.level_of(t) == 4], ids=lambda t: t.slug
)
def test_tombstone_and_expiry(
    target: tg.Target, pg_url: str, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = tg.Env(pg=pg_url, redis=redis_url)
    with ladder.open_saver(target, env) as (saver, marker):
        gone = f"{marker}-gone"
        graph = _chat(saver, gone, 1)
        saver.delete_thread(gone)
        config: RunnableConfig = {"configurable": {"thread_id": gone}}
        assert saver.get_tuple(config) is None
        with pytest.raises(ladder.Refused):
            graph.invoke({"messages": [workloads.user_message(1)]}, config)
        assert saver.get_tuple(config) is None

        # a thread whose expiry has passed loses its data on the next write
        old = f"{marker}-old"
        monkeypatch.setattr(ladder, "TTL_SECONDS", -1.0)
        _chat(saver, old, 1)
        monkeypatch.setattr(ladder, "TTL_SECONDS", 3600.0)
        _chat(saver, old, 1)
        checkpoints = list(saver.list({"configurable": {"thread_id": old}}))
        assert len(checkpoints) == 4  # one fresh turn's, the expired turn's are gone
        assert _thread_row(saver, old)[3] == 4


def test_ladder_run_reports_every_saver(
    pg_url: str, redis_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    report = ladder.main(
        ["--pg", pg_url, "--redis", redis_url, "--turns", "1", "--turns-sample", "3",
         "--warmup", "1", "--rounds", "1"]
    )  # fmt: skip
    printed = capsys.readouterr().out
    savers = report["savers"]["1"]
    assert set(savers) == {t.name for t in ladder.SAVERS}
    for metrics in savers.values():
        assert math.isfinite(metrics["cpu ms/turn"]) and metrics["turn p50 ms"] > 0
    for target in ladder.SAVERS[1:]:
        assert f"| {target.name} | 1 |" in printed
    assert_nothing_left(pg_url, redis_url, report["meta"]["run_id"])
