"""A run whose thread expired mid-run, and whose parent checkpoint another write purged
(reviving the thread) or the sweep deleted, stores its next checkpoint whole.

Such a put names its parent's rows (the blobs of channels it left unchanged, the list
items its messages build on) without storing them; stored as it was, every later read of
the thread failed (``CorruptDataError``). Each test stops the run between two steps,
lets the thread expire and removes the parent, then lets the run go on.
"""

from __future__ import annotations

import asyncio
import operator
import threading
import time
import uuid
from typing import Annotated, Any

import pytest
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.graph import START, StateGraph
from langgraph.graph.message import add_messages
from typing_extensions import TypedDict

from tests.conftest import AsyncSaverFactory, SaverFactory

TTL_S = 0.3


class State(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]
    items: Annotated[list[str], operator.add]
    note: str


def _graph(gate: threading.Event, inside: threading.Event) -> StateGraph:
    def first(state: State) -> dict[str, Any]:
        return {"messages": [AIMessage("one", id="one")], "items": ["one"], "note": "kept " * 20}

    def second(state: State) -> dict[str, Any]:
        inside.set()
        assert gate.wait(10)
        return {"messages": [AIMessage("two", id="two")], "items": ["two"]}

    b = StateGraph(State)
    b.add_node("first", first)
    b.add_node("second", second)
    b.add_edge(START, "first")
    b.add_edge("first", "second")
    return b


def _remove_parent(saver: Any, how: str, thread_id: str) -> None:
    if how == "revive":  # another write on the expired thread: a fresh run's first put
        cfg = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
        saver.put(cfg, empty_checkpoint(), {"source": "input", "step": -1}, {})
    else:  # Redis: the keys expired by themselves, the sweep finds nothing to do
        swept = saver.sweep_expired()
        assert swept >= 1 or type(saver).__name__.startswith("Redis")


@pytest.mark.parametrize("how", ["revive", "sweep"])
def test_a_run_on_an_expired_thread_whose_parent_went_stores_whole(
    saver_factory: SaverFactory, how: str
) -> None:
    thread_id = f"gone-{how}-{uuid.uuid4().hex[:8]}"
    cfg = {"configurable": {"thread_id": thread_id}}
    gate, inside = threading.Event(), threading.Event()
    events: list[Any] = []
    with saver_factory(ttl={"default_ttl": TTL_S / 60}) as saver:
        saver.add_listener(events.append)
        graph = _graph(gate, inside).compile(checkpointer=saver)
        out: list[Any] = []
        run = threading.Thread(
            target=lambda: out.append(
                graph.invoke(
                    {"messages": [HumanMessage("hi", id="hi")], "items": ["hi"]},
                    cfg,
                    durability="sync",
                )
            )
        )
        run.start()
        assert inside.wait(10)
        time.sleep(TTL_S + 0.2)
        _remove_parent(saver, how, thread_id)
        gate.set()
        run.join(20)
        assert out, "the run failed"
    # the put tried on the gone parent and put again whole is one put, not an error
    saved = [e for e in events if type(e).__name__ == "CheckpointSaved"]
    assert [e.error for e in saved if e.error is not None] == []
    assert len({e.checkpoint_id for e in saved}) == len(saved)
    # read back by another saver (a restarted worker: nothing of the run in memory)
    with saver_factory(ttl={"default_ttl": 60}) as fresh:
        graph = _graph(gate, inside).compile(checkpointer=fresh)
        state = graph.get_state(cfg)
        assert [m.id for m in state.values["messages"]] == ["hi", "one", "two"]
        assert state.values["items"] == ["hi", "one", "two"]
        assert state.values["note"] == "kept " * 20
        # the history reads too, checkpoint by checkpoint
        for snapshot in graph.get_state_history(cfg):
            assert isinstance(snapshot.values, dict)


@pytest.mark.parametrize("backend", ["sqlite", "postgres", "redis"])
def test_runs_sharing_ids_with_ms_ttl_never_read_corrupt_data(
    async_saver_factory: AsyncSaverFactory, backend: str
) -> None:
    """Three async runs (``Send`` workers, nested subgraphs) over three shared thread
    ids with a 15 ms TTL: threads expire mid-run, and a subgraph's first put or another
    run's revives them. Runs may lose what expired, never read ``CorruptDataError``
    (before: SQLite within a second, PostgreSQL 1 to 3 times in 6 s; Redis did not meet
    it here, its keys expiring whole)."""
    from langgraph_memory_plus.errors import CorruptDataError
    from tests.test_deletion_final import build, cfg, inputs

    ids = [f"share-{k}-{uuid.uuid4().hex[:6]}" for k in range(3)]
    corrupt: list[BaseException] = []
    done = [0]
    stop = time.monotonic() + 4.0

    async def main() -> None:
        async with async_saver_factory(ttl={"default_ttl": 0.015 / 60}) as saver:
            graph = build(None, is_async=True).compile(checkpointer=saver)

            async def runner(w: int) -> None:
                k = 0
                while time.monotonic() < stop and not corrupt:
                    tid = ids[(w + k) % len(ids)]
                    k += 1
                    try:
                        await graph.ainvoke(inputs("a"), cfg(tid))
                        await graph.aget_state(cfg(tid))
                        done[0] += 1
                    except CorruptDataError as exc:
                        corrupt.append(exc)

            await asyncio.wait_for(asyncio.gather(*(runner(w) for w in range(3))), 60)

    asyncio.run(main())
    assert not corrupt, repr(corrupt[0])
    assert done[0] >= 3, "the runs did not run"
