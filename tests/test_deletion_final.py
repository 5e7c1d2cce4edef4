"""Deletion is final in every namespace, on every backend, sync and async.

A run still going when its thread is deleted keeps putting checkpoints and writes: in the
root namespace (refused: their parent is gone), in its subgraphs' namespaces (``sub:<task>``,
whose first checkpoint has no parent, like a fresh run's) and in its ``Send`` tasks. None of
it may bring the thread back, in any namespace or in the thread index; a refused write
leaves the tombstone as it was (no thread id in clear, its expiry kept); a read racing the
deletion returns the old state or nothing, never an error. A run started after the deletion
on the same thread id works as on a new thread, subgraphs included.
"""

from __future__ import annotations

import asyncio
import operator
import threading
import time
import uuid
from datetime import datetime, timezone
from typing import Annotated, Any

import pytest
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langgraph.checkpoint.base import Checkpoint
from langgraph.checkpoint.base.id import uuid6
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.types import Send
from typing_extensions import TypedDict

from langgraph_memory_plus.privacy.erasure import erase_user, lift_erasure

pytestmark = pytest.mark.storage

CALLERS = 3  # runs of the same thread going on while it is deleted
TTL = {"default_ttl": 60.0}  # so a write that was let in would set an expiry


def small(storage: Any, **options: Any) -> dict[str, Any]:
    """Options of a saver that takes few of the shared PostgreSQL server's connections."""
    return {**options, "pool_max_size": 3} if storage.kind == "postgres" else options


class State(TypedDict, total=False):
    items: Annotated[list[str], operator.add]
    messages: Annotated[list[AnyMessage], add_messages]


class Gate:
    """Holds every run inside its first node until the test has deleted the thread."""

    def __init__(self) -> None:
        self.open = threading.Event()
        self.inside = threading.Semaphore(0)

    def wait_inside(self, n: int) -> None:
        for _ in range(n):
            assert self.inside.acquire(timeout=20), "a run never reached its first node"


def _inner() -> Any:
    b = StateGraph(State)
    b.add_node("deep", lambda s: {"items": ["deep"], "messages": [AIMessage("deep", id="deep")]})
    b.add_edge(START, "deep")
    return b.compile()


def _sub() -> Any:
    b = StateGraph(State)
    b.add_node("mid", lambda s: {"items": ["mid"], "messages": [AIMessage("mid", id="mid")]})
    b.add_node("inner", _inner())
    b.add_edge(START, "mid")
    b.add_edge("mid", "inner")
    return b.compile()


def build(gate: Gate | None, *, is_async: bool) -> StateGraph:
    """``slow`` (held by the gate), then in one step two ``Send`` workers and a subgraph
    with a subgraph of its own."""

    def route(state: State) -> list[Any]:
        return [Send("worker", {"items": [f"w{k}"]}) for k in range(2)] + ["sub"]

    def worker(arg: dict[str, Any]) -> dict[str, Any]:
        return {"items": arg["items"]}

    b = StateGraph(State)
    if is_async:

        async def aslow(state: State) -> dict[str, Any]:
            if gate is not None:
                gate.inside.release()
                while not gate.open.is_set():
                    await asyncio.sleep(0.01)
            return {"items": ["slow"], "messages": [AIMessage("slow", id="slow")]}

        b.add_node("slow", aslow)
    else:

        def slow(state: State) -> dict[str, Any]:
            if gate is not None:
                gate.inside.release()
                assert gate.open.wait(20)
            return {"items": ["slow"], "messages": [AIMessage("slow", id="slow")]}

        b.add_node("slow", slow)
    b.add_node("worker", worker)
    b.add_node("sub", _sub())
    b.add_edge(START, "slow")
    b.add_conditional_edges("slow", route, ["worker", "sub"])
    b.add_edge("worker", END)
    b.add_edge("sub", END)
    return b


def cfg(thread_id: str) -> dict[str, Any]:
    # a user id has no NUL (refused everywhere); a thread id may
    return {
        "configurable": {
            "thread_id": thread_id,
            "user_id": f"user-{thread_id}".replace("\x00", "0"),
        }
    }


def inputs(text: str) -> dict[str, Any]:
    return {"items": [text], "messages": [HumanMessage(text, id=text)]}


def tombstone_faults(storage: Any, saver: Any, thread_id: str) -> list[str]:
    """What of the thread is stored besides a bare tombstone, read from the storage itself."""
    faults: list[str] = []
    if storage.kind == "redis":
        from tests.test_redis_saver import admin_client

        client = admin_client(storage.url)
        try:
            keys = saver._plans.keys(thread_id)
            present = [k for k in keys if client.exists(k)]
            if present != keys[:1]:
                faults.append(f"keys besides the tombstone: {present}")
            if client.hget(keys[0], "id") is not None:
                faults.append("the tombstone holds the thread id")
            if client.pttl(keys[0]) <= 0:
                faults.append("the tombstone has no expiry")
        finally:
            client.close()
        return faults
    from langgraph_memory_plus.checkpoint.config import thread_key

    tk = thread_key(thread_id)
    if storage.kind == "sqlite":
        import sqlite3

        with sqlite3.connect(f"{storage.url}/memory.db") as db:
            rows = db.execute(
                "SELECT thread_id, expires_at, live_after FROM lgmp_threads WHERE thread_key = ?",
                (tk,),
            ).fetchall()
            others = sum(
                db.execute(f"SELECT count(*) FROM {t} WHERE thread_key = ?", (tk,)).fetchone()[0]
                for t in ("lgmp_checkpoints", "lgmp_blobs", "lgmp_writes", "lgmp_items")
            )
    else:
        import psycopg

        schema = saver._plans.schema
        with psycopg.connect(storage.url, autocommit=True) as db:
            rows = db.execute(
                f'SELECT thread_id, expires_at, live_after FROM "{schema}".lgmp_threads '
                "WHERE thread_key = %s",
                (tk,),
            ).fetchall()
            others = sum(
                db.execute(
                    f'SELECT count(*) FROM "{schema}".{t} WHERE thread_key = %s', (tk,)
                ).fetchone()[0]  # type: ignore[index]
                for t in ("lgmp_checkpoints", "lgmp_blobs", "lgmp_task_writes", "lgmp_items")
            )
    if len(rows) != 1 or rows[0][2] is None:
        faults.append(f"no tombstone: {rows}")
    elif rows[0][0] is not None or rows[0][1] is not None:
        faults.append(f"the tombstone holds the thread id or an expiry: {rows[0][:2]}")
    if others:
        faults.append(f"{others} rows of the thread besides the tombstone")
    return faults


def assert_gone(saver: Any, thread_id: str) -> None:
    config = cfg(thread_id)
    assert saver.get_tuple(config) is None
    left = [(t.config["configurable"]["checkpoint_ns"], t.metadata) for t in saver.list(config)]
    assert left == []
    assert saver.threads.get(thread_id) is None
    assert thread_id not in [r["thread_id"] for r in saver.threads.search(limit=1000)]


async def aassert_gone(saver: Any, thread_id: str) -> None:
    config = cfg(thread_id)
    assert await saver.aget_tuple(config) is None
    assert [t async for t in saver.alist(config)] == []
    assert await saver.threads.aget(thread_id) is None
    assert thread_id not in [r["thread_id"] for r in await saver.threads.asearch(limit=1000)]


def expected_fresh_run() -> Any:
    """The state of a run on a new thread, as ``InMemorySaver`` keeps it."""
    graph = build(None, is_async=False).compile(checkpointer=InMemorySaver())
    graph.invoke(inputs("again"), cfg("reference"))
    return graph.get_state(cfg("reference")).values


def assert_fresh_run_works(saver: Any, graph: Any, thread_id: str) -> None:
    """A run after the deletion keeps everything, its subgraphs' checkpoints included."""
    graph.invoke(inputs("again"), cfg(thread_id))
    state = graph.get_state(cfg(thread_id))
    assert state.values == expected_fresh_run()
    namespaces = {t.config["configurable"]["checkpoint_ns"] for t in saver.list(cfg(thread_id))}
    assert "" in namespaces and any(ns.startswith("sub:") for ns in namespaces)
    assert any("|inner:" in ns for ns in namespaces)
    assert saver.threads.get(thread_id) is not None


@pytest.mark.parametrize("how", ["delete", "erase"])
@pytest.mark.parametrize("durability", ["sync", "async", "exit"])
def test_runs_going_on_during_deletion_leave_nothing_in_any_namespace(
    saver_factory: Any, storage: Any, durability: str, how: str
) -> None:
    """Threads: CALLERS runs of one thread are inside their first node (its successors: a
    subgraph with a nested subgraph, and ``Send`` workers) when the thread is deleted
    (``delete_thread``, or ``erase_user`` of its user); after they finish, nothing of them
    is stored, a second erasure finds nothing, and the tombstone is bare."""
    with saver_factory(**small(storage, ttl=TTL)) as saver:
        thread_id = f"final-{uuid.uuid4().hex[:10]}"
        gate = Gate()
        graph = build(gate, is_async=False).compile(checkpointer=saver)
        gate.open.set()
        graph.invoke(inputs("first"), cfg(thread_id), durability=durability)
        gate.open.clear()
        gate.inside = threading.Semaphore(0)
        errors: list[BaseException] = []

        def call(k: int) -> None:
            try:
                graph.invoke(inputs(f"late{k}"), cfg(thread_id), durability=durability)
            except BaseException as exc:
                errors.append(exc)

        callers = [threading.Thread(target=call, args=(k,)) for k in range(CALLERS)]
        for caller in callers:
            caller.start()
        gate.wait_inside(CALLERS)
        user = cfg(thread_id)["configurable"]["user_id"]
        if how == "erase":
            assert erase_user(user, checkpointer=saver).thread_ids == [thread_id]
        else:
            saver.delete_thread(thread_id)
        gate.open.set()
        for caller in callers:
            caller.join(30)
        assert not errors
        assert_gone(saver, thread_id)
        assert erase_user(user, checkpointer=saver, dry_run=True).thread_ids == []
        with saver_factory(**small(storage)) as other:
            assert_gone(other, thread_id)
        assert tombstone_faults(storage, saver, thread_id) == []
        if how == "erase":
            # the erased user's writes are held until the product lets them back
            graph.invoke(inputs("held"), cfg(thread_id))
            assert saver.get_tuple(cfg(thread_id)) is None
            assert lift_erasure(user, checkpointer=saver) is True
        assert_fresh_run_works(saver, graph, thread_id)


@pytest.mark.parametrize("durability", ["sync", "async", "exit"])
async def test_async_runs_going_on_during_deletion_leave_nothing_in_any_namespace(
    async_saver_factory: Any, storage: Any, durability: str
) -> None:
    """The same with asyncio tasks on an async saver."""
    async with async_saver_factory(**small(storage, ttl=TTL)) as saver:
        thread_id = f"afinal-{uuid.uuid4().hex[:10]}"
        gate = Gate()
        graph = build(gate, is_async=True).compile(checkpointer=saver)
        gate.open.set()
        await graph.ainvoke(inputs("first"), cfg(thread_id), durability=durability)
        gate.open.clear()
        runs = [
            asyncio.create_task(
                graph.ainvoke(inputs(f"late{k}"), cfg(thread_id), durability=durability)
            )
            for k in range(CALLERS)
        ]
        while gate.inside._value < CALLERS:  # type: ignore[attr-defined]
            await asyncio.sleep(0.01)
        await saver.adelete_thread(thread_id)
        gate.open.set()
        await asyncio.wait_for(asyncio.gather(*runs), 30)
        await aassert_gone(saver, thread_id)
        assert await asyncio.to_thread(tombstone_faults, storage, saver, thread_id) == []
        await graph.ainvoke(inputs("again"), cfg(thread_id))
        assert (await graph.aget_state(cfg(thread_id))).values == expected_fresh_run()
        namespaces = {
            t.config["configurable"]["checkpoint_ns"] async for t in saver.alist(cfg(thread_id))
        }
        assert any("|inner:" in ns for ns in namespaces)


def _checkpoint(value: str) -> Checkpoint:
    return Checkpoint(
        v=4,
        id=str(uuid6(clock_seq=-1)),
        ts=datetime.now(timezone.utc).isoformat(),
        channel_values={"a": value},
        channel_versions={"a": "1"},
        versions_seen={},
        updated_channels=None,
    )


def test_a_refused_late_write_leaves_the_tombstone_as_it_was(
    saver_factory: Any, storage: Any
) -> None:
    """The order LangGraph's background saves allow: a step's writes before its checkpoint,
    a subgraph's checkpoint and writes before its root checkpoint, all made after the
    deletion by a run that began before it. The writes that come first are newer than the
    deletion and are let in; once the checkpoint they belong to is refused, they go, and
    the tombstone is bare again: no thread id in clear, no expiry of the thread's, the
    tombstone's own expiry kept."""
    with saver_factory(**small(storage, ttl=TTL)) as saver:
        thread_id = f"bare-{uuid.uuid4().hex[:10]}"
        meta = {"source": "loop", "step": 0, "parents": {}}
        first = saver.put(cfg(thread_id), _checkpoint("before"), meta, {"a": "1"})
        saver.delete_thread(thread_id)
        assert tombstone_faults(storage, saver, thread_id) == []

        late = _checkpoint("late")  # the step after the deletion: parent `first`
        at = {"configurable": {**first["configurable"], "checkpoint_id": late["id"]}}
        saver.put_writes(at, [("a", "late-write")], "task-1")
        sub_ns = f"sub:{uuid.uuid4()}"
        sub_cfg = {
            "configurable": {
                "thread_id": thread_id,
                "checkpoint_ns": sub_ns,
                "checkpoint_map": {"": late["id"]},
            }
        }
        sub_meta = {"source": "input", "step": -1, "parents": {"": late["id"]}}
        sub = saver.put(sub_cfg, _checkpoint("sub"), sub_meta, {"a": "1"})
        saver.put_writes(
            {
                "configurable": {
                    **sub_cfg["configurable"],
                    **{"checkpoint_id": sub["configurable"]["checkpoint_id"]},
                }
            },
            [("a", "sub-write")],
            "task-2",
        )
        saver.put(first, late, meta, {"a": "2"})  # refused: its parent was deleted
        assert_gone(saver, thread_id)
        assert tombstone_faults(storage, saver, thread_id) == []
        # what comes after the refusal is refused outright, and changes nothing
        saver.put(sub, _checkpoint("sub-2"), sub_meta, {"a": "2"})
        saver.put_writes(at, [("a", "later-write")], "task-3")
        assert_gone(saver, thread_id)
        assert tombstone_faults(storage, saver, thread_id) == []


READ_SECONDS = 1.5
MESSAGES = 12


def _consistent(found: Any) -> str | None:
    """``None`` if a read result is nothing or a whole checkpoint: every turn's input of
    MESSAGES messages is there whole (missing list items would show as fewer)."""
    if found is None:
        return None
    values = found.checkpoint["channel_values"]
    turns: dict[str, int] = {}
    for m in values.get("messages", []):
        if isinstance(m, HumanMessage):
            gen = m.content.split("-")[0]
            turns[gen] = turns.get(gen, 0) + 1
    broken = {gen: n for gen, n in turns.items() if n != MESSAGES}
    return f"turns with messages missing: {broken}" if broken else None


def _generation(g: int) -> dict[str, Any]:
    return {"messages": [HumanMessage(f"g{g}-{i}", id=f"g{g}-{i}") for i in range(MESSAGES)]}


def _reading_graph() -> StateGraph:
    b = StateGraph(State)
    b.add_node("answer", lambda s: {"messages": [AIMessage(s["messages"][0].content + "-a")]})
    b.add_edge(START, "answer")
    return b


def test_reads_racing_deletion_return_the_old_state_or_nothing(
    saver_factory: Any, storage: Any
) -> None:
    """Threads read a thread (``get_tuple``, ``list``) while another deletes it and runs it
    again, over and over, and a third runs turns on it: no read or turn raises, each read
    returns nothing or a whole checkpoint."""
    with saver_factory(**small(storage)) as saver:
        thread_id = f"race-{uuid.uuid4().hex[:10]}"
        graph = _reading_graph().compile(checkpointer=saver)
        stop = threading.Event()
        problems: list[str] = []
        reads = [0]

        def write() -> None:
            g = 0
            try:
                while not stop.is_set():
                    graph.invoke(_generation(g), cfg(thread_id))
                    saver.delete_thread(thread_id)
                    g += 1
            except Exception as exc:
                problems.append(f"writer: {exc!r}")

        def read() -> None:
            while not stop.is_set():
                try:
                    found = [saver.get_tuple(cfg(thread_id))]
                    found += list(saver.list(cfg(thread_id), limit=2))
                except Exception as exc:
                    problems.append(repr(exc))
                    continue
                reads[0] += 1
                problems.extend(p for f in found if (p := _consistent(f)))

        def turn() -> None:  # turns that start while the thread is being deleted
            g = 10**6
            while not stop.is_set():
                try:
                    graph.invoke(_generation(g), cfg(thread_id))
                except Exception as exc:
                    problems.append(f"turn: {exc!r}")
                g += 1

        workers = [threading.Thread(target=f) for f in (write, turn, read, read, read)]
        for w in workers:
            w.start()
        time.sleep(READ_SECONDS)
        stop.set()
        for w in workers:
            w.join(30)
        assert problems[:5] == [] and reads[0] > 0


async def test_async_reads_racing_deletion_return_the_old_state_or_nothing(
    async_saver_factory: Any, storage: Any
) -> None:
    """The same with asyncio tasks on an async saver."""
    async with async_saver_factory(**small(storage)) as saver:
        thread_id = f"arace-{uuid.uuid4().hex[:10]}"
        graph = _reading_graph().compile(checkpointer=saver)
        deadline = time.monotonic() + READ_SECONDS
        problems: list[str] = []
        reads = [0]

        async def write() -> None:
            g = 0
            while time.monotonic() < deadline:
                await graph.ainvoke(_generation(g), cfg(thread_id))
                await saver.adelete_thread(thread_id)
                g += 1

        async def read() -> None:
            while time.monotonic() < deadline:
                try:
                    found = [await saver.aget_tuple(cfg(thread_id))]
                    found += [t async for t in saver.alist(cfg(thread_id), limit=2)]
                except Exception as exc:
                    problems.append(repr(exc))
                    continue
                reads[0] += 1
                problems.extend(p for f in found if (p := _consistent(f)))

        async def turn() -> None:
            g = 10**6
            while time.monotonic() < deadline:
                try:
                    await graph.ainvoke(_generation(g), cfg(thread_id))
                except Exception as exc:
                    problems.append(f"turn: {exc!r}")
                g += 1

        await asyncio.gather(write(), turn(), *(read() for _ in range(3)))
        assert problems[:5] == [] and reads[0] > 0
