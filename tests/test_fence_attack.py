"""Adversarial tests of the fence (issue 37): what the first round of tests left out."""

from __future__ import annotations

import asyncio
import contextvars
import gc
import uuid
import weakref
from typing import Annotated, Any

import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt
from typing_extensions import TypedDict

from langgraph_memory_plus import FencedWriteError

pytestmark = pytest.mark.storage


class S(TypedDict, total=False):
    log: Annotated[list[str], lambda a, b: a + b]


def _thread() -> str:
    return f"fence-attack-{uuid.uuid4().hex[:12]}"


def test_fence_async_takes_keep_no_closed_event_loop_alive(saver_factory: Any) -> None:
    """A sync saver called from ``asyncio.run`` per request (``aput_writes`` of a run
    racing its own first take): the lock that serializes the take must not keep every
    event loop it ever served alive."""
    with saver_factory(fence=True) as saver:
        loops: list[weakref.ref[asyncio.AbstractEventLoop]] = []
        for _ in range(3):
            tid = _thread()

            async def main(tid: str = tid) -> None:
                loops.append(weakref.ref(asyncio.get_running_loop()))
                cfg: Any = {"configurable": {"thread_id": tid, "checkpoint_ns": ""}}
                saved = await saver.aput(
                    {**cfg, "run_id": str(uuid.uuid4())}, empty_checkpoint(), {}, {}
                )
                writes = {**saved, "run_id": str(uuid.uuid4())}  # a new run: a take
                await asyncio.gather(
                    *(saver.aput_writes(writes, [("x", j)], f"task{j}") for j in range(3))
                )

            asyncio.run(main())
        gc.collect()
        # the newest may stay until the next loop comes: a bound, not a leak
        alive = [ref for ref in loops[:-1] if ref() is not None]
        assert not alive, f"{len(alive)} closed event loops kept alive by the saver"


def test_fence_writes_without_a_run_after_a_run_are_not_fenced(saver_factory: Any) -> None:
    """A caller's context outlives the run it started (``get_tuple`` / ``put`` with a
    run id called directly: a graph's own run is in a copied context): a later write to
    a subgraph namespace of that thread that carries no owner (no run id, not inside a
    task) must not be fenced as that old run's, and refused once another run took over."""
    tid = _thread()
    with saver_factory(fence=True) as saver:

        def scenario() -> None:
            root: Any = {"configurable": {"thread_id": tid, "checkpoint_ns": ""}}
            saver.get_tuple({**root, "run_id": str(uuid.uuid4())})  # the run starts
            saver.put({**root, "run_id": str(uuid.uuid4())}, empty_checkpoint(), {}, {})
            # another worker's run takes the thread over
            saver.fence.acquire(tid, owner="another-worker", force=True)
            # later, outside any run: an owner-less write to a subgraph namespace
            sub: Any = {"configurable": {"thread_id": tid, "checkpoint_ns": "sub:1"}}
            saver.put(sub, empty_checkpoint(), {}, {})

        contextvars.copy_context().run(scenario)


def test_fence_sweep_of_an_expired_thread_removes_its_fence(
    saver_factory: Any, backend: str
) -> None:
    """TTL sweep deletes a thread as ``delete_thread`` does: its fence goes too (it was
    left behind on PostgreSQL, one row per fenced thread forever). Redis needs no sweep:
    its fence key expires by itself (a bounded margin after its lease)."""
    import time

    tid = _thread()
    with saver_factory(fence=True, ttl={"default_ttl": 0.01}) as saver:  # 0.6 s
        root: Any = {"configurable": {"thread_id": tid, "checkpoint_ns": ""}}
        saver.put({**root, "run_id": str(uuid.uuid4())}, empty_checkpoint(), {}, {})
        assert saver.fence.get(tid) is not None
        if backend.startswith("redis"):  # no sweep: the key is never kept forever
            assert saver.client.pttl(saver._plans.fence_key(tid)) > 0
            return
        time.sleep(0.8)
        assert saver.get_tuple(root) is None
        assert saver.sweep_expired() >= 1
        assert saver.fence.get(tid) is None


def _cp(n: int, text: str) -> Any:
    from langchain_core.messages import HumanMessage
    from langgraph.checkpoint.base.id import uuid6

    cp = empty_checkpoint()
    cp["id"] = str(uuid6(clock_seq=n))
    cp["channel_values"] = {"messages": [HumanMessage(text, id=f"m{n}")]}
    cp["channel_versions"] = {"messages": f"{n:07d}"}
    return cp


def test_fence_with_encryption_and_retention_refuses_and_keeps_one_lineage(
    saver_factory: Any,
) -> None:
    """The fence with ``encryption`` and ``keep_last`` (PostgreSQL: the put and its trim
    share a transaction) and transcripts: a superseded run's put and put_writes are
    refused, nothing of them is stored, and the current run goes on on the same saver."""
    from langgraph_memory_plus.encryption import Encryption

    tid = _thread()
    options = {"fence": True, "keep_last": 2, "transcripts": True}
    with saver_factory(**options, encryption=Encryption({"k1": b"1" * 32})) as saver:
        root: Any = {"configurable": {"thread_id": tid, "checkpoint_ns": ""}}
        a, b = {**root, "run_id": "run-a"}, {**root, "run_id": "run-b"}
        saver.get_tuple(a)  # run a starts
        parent = saver.put(a, _cp(1, "first"), {}, {"messages": "0000001"})
        saver.get_tuple(b)  # run b starts on the same thread: a is superseded
        with pytest.raises(FencedWriteError) as refused:
            saver.put({**parent, "run_id": "run-a"}, _cp(2, "stale"), {}, {"messages": "0000002"})
        assert "run-a" in str(refused.value) and "run-b" in str(refused.value)
        with pytest.raises(FencedWriteError):
            saver.put_writes({**parent, "run_id": "run-a"}, [("messages", "stale")], "t-a")
        last = parent
        for n in range(3, 6):
            version = {"messages": f"{n:07d}"}
            last = saver.put({**last, "run_id": "run-b"}, _cp(n, f"b{n}"), {}, version)
        saver.put_writes({**last, "run_id": "run-b"}, [("messages", "fresh")], "t-b")
        kept = list(saver.list({"configurable": {"thread_id": tid}}))
        assert len(kept) == 2
        texts = [m.content for t in kept for m in t.checkpoint["channel_values"]["messages"]]
        assert "stale" not in texts and texts[0] == "b5"
        assert all(w[1] != "stale" for t in kept for w in (t.pending_writes or []))


@pytest.mark.parametrize("name", ["a.b", "a/b/../c", "线程-一", "a\x00b", " "])
def test_fence_thread_ids_of_every_kind(saver_factory: Any, name: str) -> None:
    """Thread ids with dots, slashes, Chinese, NUL or only a space: the fence is per
    thread, a lease is refused once superseded, and deletion removes the fence."""
    from langgraph_memory_plus.errors import InvalidConfigError

    tid = f"{name}-{uuid.uuid4().hex[:6]}"
    with saver_factory() as saver:
        try:
            first = saver.fence.acquire(tid, owner="w1")
        except InvalidConfigError:
            with pytest.raises(InvalidConfigError):  # refused as a thread id everywhere
                saver.put({"configurable": {"thread_id": tid}}, empty_checkpoint(), {}, {})
            return
        saver.put(first.config(), empty_checkpoint(), {}, {})
        second = saver.fence.acquire(tid, owner="w2", force=True)
        assert second.token > first.token
        other = saver.fence.acquire(f"{tid}x", owner="w3")  # another thread: its own
        assert other.owner == "w3"
        with pytest.raises(FencedWriteError):
            saver.put(first.config(), empty_checkpoint(), {}, {})
        state = saver.fence.get(tid)
        assert state is not None and state.owner == "w2"
        saver.delete_thread(tid)
        assert saver.fence.get(tid) is None
        assert saver.fence.acquire(tid, owner="w4").token > second.token


def test_fence_same_run_id_sent_twice_to_one_saver_keeps_one_lineage(
    saver_factory: Any,
) -> None:
    """The same run id started twice on one saver (a queue item delivered twice, a
    client retry that keeps its run id), both frozen on one parent: each start is an
    owner of its own, the later one wins (they were one owner: both lineages stayed)."""
    import threading

    from test_fence import _one_lineage, graph, stored

    tid = _thread()
    config: Any = {"configurable": {"thread_id": tid}}
    entered = [threading.Event(), threading.Event()]
    go = [threading.Event(), threading.Event()]

    def work(state: Any, config: RunnableConfig) -> Any:
        me = int(config["configurable"]["who"])
        entered[me].set()
        go[me].wait(60)
        return {"log": [f"run{me}"]}

    with saver_factory(fence=True) as saver:
        app = graph(work).compile(checkpointer=saver, interrupt_before=["work"])
        app.invoke({"log": []}, {**config, "run_id": uuid.uuid4()})
        parent = saver.get_tuple(config).config["configurable"]["checkpoint_id"]
        run_id = uuid.uuid4()  # the same run, delivered twice
        outcome: dict[int, Any] = {}

        def run(me: int) -> None:
            try:
                cfg = {"configurable": {"thread_id": tid, "who": str(me)}, "run_id": run_id}
                outcome[me] = app.invoke(None, cfg)
            except FencedWriteError as exc:
                outcome[me] = exc

        runs = [threading.Thread(target=run, args=(i,)) for i in range(2)]
        runs[0].start()
        assert entered[0].wait(60)
        runs[1].start()
        assert entered[1].wait(60)
        go[0].set()
        runs[0].join()
        go[1].set()
        runs[1].join()
        assert len(stored(saver, tid)) >= 2
        _one_lineage(saver, tid, parent, "run1")


def test_fence_subgraph_interrupt_resume_and_update_state(saver_factory: Any) -> None:
    """A subgraph interrupts, ``update_state`` on it and ``Command(resume)`` in new runs,
    all in one context, with another worker's run taking the thread in between: the
    owner-less ``update_state`` is not fenced, the resuming run takes the thread back."""
    sub = StateGraph(S)
    sub.add_node("ask", lambda s: {"log": [str(interrupt("q"))]})
    sub.add_edge(START, "ask")
    sub.add_edge("ask", END)
    builder = StateGraph(S)
    builder.add_node("work", sub.compile(checkpointer=True))
    builder.add_edge(START, "work")
    builder.add_edge("work", END)
    tid = _thread()
    config: Any = {"configurable": {"thread_id": tid}}
    with saver_factory(fence=True) as saver, saver_factory(fence=True) as other:
        app = builder.compile(checkpointer=saver)
        app.invoke({"log": []}, {**config, "run_id": uuid.uuid4()})
        # another worker's run starts on the thread (and stops before writing)
        other.get_tuple({**config, "run_id": str(uuid.uuid4())})
        state = app.get_state(config, subgraphs=True)
        sub_config = state.tasks[0].state.config  # type: ignore[union-attr]
        app.update_state(sub_config, {"log": ["edited"]})  # no run: not fenced
        out = app.invoke(Command(resume="yes"), {**config, "run_id": uuid.uuid4()})
        assert out["log"][-2:] == ["edited", "yes"] or out["log"][-1] == "yes", out


def test_fence_get_takes_the_thread_ids_acquire_takes(saver_factory: Any) -> None:
    """LangGraph accepts an int thread id: ``acquire(5)`` takes thread ``"5"``, and
    ``get(5)`` reads it (it raised ``AttributeError``); an empty id is refused by both."""
    from langgraph_memory_plus.errors import InvalidConfigError

    number = uuid.uuid4().int % 10**12
    with saver_factory() as saver:
        lease = saver.fence.acquire(number, owner="w1")  # type: ignore[arg-type]
        assert lease.thread_id == str(number)
        state = saver.fence.get(number)
        assert state is not None and state.owner == "w1"
        assert asyncio.run(saver.fence.aget(number)) == state
        for bad in ("", None):
            with pytest.raises(InvalidConfigError):
                saver.fence.acquire(bad, owner="w1")  # type: ignore[arg-type]
            with pytest.raises(InvalidConfigError):
                saver.fence.get(bad)  # type: ignore[arg-type]


async def test_fence_same_run_id_started_twice_in_two_tasks(async_saver_factory: Any) -> None:
    """asyncio: two tasks start the same run id on one async saver (each task its own
    context, as two ``ainvoke``): the later start owns the thread, the earlier is refused."""
    tid = _thread()
    root: Any = {"configurable": {"thread_id": tid, "checkpoint_ns": ""}, "run_id": "dup"}
    async with async_saver_factory(fence=True) as saver:
        started = [asyncio.Event(), asyncio.Event()]
        go = [asyncio.Event(), asyncio.Event()]

        async def run(me: int) -> Any:
            await saver.aget_tuple(root)
            started[me].set()
            await go[me].wait()
            return await saver.aput(root, _cp(10 + me, f"r{me}"), {}, {"messages": "1"})

        tasks = [asyncio.create_task(run(0))]
        await started[0].wait()
        tasks.append(asyncio.create_task(run(1)))
        await started[1].wait()
        go[0].set()
        go[1].set()
        first, second = await asyncio.gather(*tasks, return_exceptions=True)
        assert isinstance(first, FencedWriteError), first
        assert not isinstance(second, BaseException), second


@pytest.mark.parametrize("backend", ["redis", "redis-cluster"], indirect=True)
def test_fence_redis_key_expires_with_its_lease_and_numbers_still_grow(
    saver_factory: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Redis fence key lives a bounded margin past its lease's end or its owner's last
    fenced write (it lived a day past the lease, whatever the lease); once it expired, the
    old owner is refused as after a deletion, and the next fence's number, seeded from the
    server clock in microseconds, is still larger than every number before."""
    import time

    from langgraph_memory_plus.checkpoint.redis import plans as redis_plans

    tid = _thread()
    root: Any = {"configurable": {"thread_id": tid, "checkpoint_ns": ""}}
    margin_ms = redis_plans.FENCE_KEY_MARGIN_MS
    with saver_factory(fence=True) as saver:
        key = saver._plans.fence_key(tid)
        saver.fence.acquire(tid, owner="long", lease_s=30)
        assert 30_000 + margin_ms - 5_000 < saver.client.pttl(key) <= 30_000 + margin_ms
        saver.fence.release(saver.fence.acquire(tid, owner="long"))

        monkeypatch.setattr(redis_plans, "FENCE_KEY_MARGIN_MS", 300)
        first = saver.fence.acquire(tid, owner="a", lease_s=0.2, force=True)
        assert 0 < saver.client.pttl(key) <= 500
        time.sleep(0.35)  # past the lease: a fenced write keeps the key a margin longer
        saver.put(first.config(root), empty_checkpoint(), {}, {})
        assert 200 < saver.client.pttl(key) <= 300
        deadline = time.monotonic() + 5
        while saver.client.exists(key) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not saver.client.exists(key)
        assert saver.fence.get(tid) is None
        with pytest.raises(FencedWriteError):
            saver.put(first.config(root), empty_checkpoint(), {}, {})
        second = saver.fence.acquire(tid, owner="b", lease_s=0.2)
        assert second.token > first.token
        assert second.token >= int(time.time() * 1_000_000) - 5_000_000  # the clock's
