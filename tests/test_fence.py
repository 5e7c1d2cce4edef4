"""One writer per thread: the fence (``saver.fence``, ``fence=True``), on every backend.

The installed ``langgraph-checkpoint-conformance`` (0.0.2) has no ``write_ownership``
capability; LangGraph's proposal (PR #8894, issues #8115 and #8796) states the contract:
*a saver that advertises write ownership must observably refuse a write from a superseded
owner*. Its clauses are written here as our own tests, named ``test_write_ownership_*``,
with the cases the issue adds: two processes frozen on the same parent checkpoint, N
concurrent writers (threads and asyncio), an expired lease, deletion and copies.
"""

from __future__ import annotations

import asyncio
import itertools
import multiprocessing
import os
import sqlite3
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.base.id import uuid6
from langgraph.graph import END, START, StateGraph
from typing_extensions import TypedDict

from langgraph_memory_plus import FencedWriteError, FenceHeldError, FenceOptions, Lease
from langgraph_memory_plus.checkpoint.sqlite import SqliteSaver
from langgraph_memory_plus.errors import ConflictError, InvalidConfigError

pytestmark = pytest.mark.storage

_IDS = itertools.count(1)
_IDS_LOCK = threading.Lock()


def new_id() -> str:
    """Checkpoint ids in the order they are made, across this process's threads."""
    with _IDS_LOCK:
        return str(uuid6(clock_seq=next(_IDS)))


def thread() -> str:
    return f"fence-{uuid.uuid4().hex[:12]}"


def checkpoint(cid: str, n: int) -> Any:
    cp = empty_checkpoint()
    cp["id"] = cid
    cp["channel_values"] = {"n": n}
    cp["channel_versions"] = {"n": f"{n:07d}.000000"}
    return cp


def put(saver: Any, config: Any, n: int, writer: str, cid: str | None = None) -> Any:
    """One checkpoint after ``config``'s (a new thread's first when it names none)."""
    return saver.put(
        config, checkpoint(cid or new_id(), n), {"writer": writer, "step": n}, {"n": f"{n:07d}"}
    )


def stored(saver: Any, thread_id: str) -> list[Any]:
    return list(saver.list({"configurable": {"thread_id": thread_id}}))


# -- the contract: a superseded owner is refused, observably -----------------------------


def test_write_ownership_superseded_owner_is_refused(saver_factory: Any) -> None:
    tid = thread()
    with saver_factory() as saver:
        a = saver.fence.acquire(tid, owner="worker-a", lease_s=60)
        base = put(saver, a.config(), 0, "a")
        with pytest.raises(FenceHeldError) as held:
            saver.fence.acquire(tid, owner="worker-b", lease_s=60)
        assert held.value.current_owner == "worker-a"
        b = saver.fence.acquire(tid, owner="worker-b", lease_s=60, force=True)
        assert b.token > a.token
        # put and put_writes of the superseded owner: refused, named, nothing stored
        with pytest.raises(FencedWriteError) as refused:
            put(saver, {**base, "configurable": {**base["configurable"], **_lease_of(a)}}, 1, "a")
        err = refused.value
        assert (err.thread_id, err.owner, err.current_owner) == (tid, "worker-a", "worker-b")
        assert tid in str(err) and "worker-a" in str(err) and "worker-b" in str(err)
        assert isinstance(err, ConflictError)
        with pytest.raises(FencedWriteError):
            saver.put_writes(_with(base, a), [("n", 99)], "task-a")
        assert [t.metadata["writer"] for t in stored(saver, tid)] == ["a"]
        assert saver.get_tuple(base).pending_writes == []
        # the current owner writes
        put(saver, _with(base, b), 1, "b")
        saver.put_writes(_with(base, b), [("n", 7)], "task-b")
        assert [t.metadata["writer"] for t in stored(saver, tid)] == ["b", "a"]
        assert [w[1:] for w in saver.get_tuple(base).pending_writes] == [("n", 7)]


def _lease_of(lease: Lease) -> dict[str, Any]:
    return dict(lease.config()["configurable"])


def _with(config: Any, lease: Lease) -> Any:
    return {**config, "configurable": {**config["configurable"], **_lease_of(lease)}}


def test_write_ownership_current_owner_may_fork_from_an_old_checkpoint(saver_factory: Any) -> None:
    tid = thread()
    with saver_factory() as saver:
        lease = saver.fence.acquire(tid, owner="me", lease_s=60)
        c1 = put(saver, lease.config(), 1, "me")
        put(saver, _with(c1, lease), 2, "me")
        fork = put(saver, _with(c1, lease), 3, "me")  # time travel: c1 again
        found = saver.get_tuple(fork)
        assert (
            found.parent_config["configurable"]["checkpoint_id"]
            == (c1["configurable"]["checkpoint_id"])
        )
        assert len(stored(saver, tid)) == 3


def test_write_ownership_expired_lease_is_refused_once_another_took_over(
    saver_factory: Any,
) -> None:
    tid = thread()
    with saver_factory() as saver:
        a = saver.fence.acquire(tid, owner="a", lease_s=0.05)
        c1 = put(saver, a.config(), 1, "a")
        _past(a.expires_at)
        # expired, but nobody took over: still the owner (its number is current)
        c2 = put(saver, _with(c1, a), 2, "a")
        b = saver.fence.acquire(tid, owner="b", lease_s=60)  # no force needed: expired
        assert b.token > a.token
        with pytest.raises(FencedWriteError) as refused:
            put(saver, _with(c2, a), 3, "a")
        assert refused.value.current_owner == "b"
        with pytest.raises(FencedWriteError):
            saver.fence.renew(a)
        renewed = saver.fence.renew(b, lease_s=120)
        assert renewed.token == b.token and renewed.expires_at > b.expires_at - 1
        # the same owner acquiring again keeps its number (owner names are per worker)
        assert saver.fence.acquire(tid, owner="b").token == b.token


def _past(deadline: float) -> None:
    """Wait until a lease's expiry has passed (every server here shares this clock)."""
    while time.time() <= deadline + 0.05:
        time.sleep(0.02)


def test_write_ownership_release_and_deletion(saver_factory: Any) -> None:
    tid, copy = thread(), thread()
    with saver_factory() as saver:
        a = saver.fence.acquire(tid, owner="a", lease_s=60)
        c1 = put(saver, a.config(), 1, "a")
        assert saver.fence.release(a) is True
        assert saver.fence.release(a) is False
        with pytest.raises(FencedWriteError) as refused:
            put(saver, _with(c1, a), 2, "a")
        assert refused.value.current_owner is None
        b = saver.fence.acquire(tid, owner="b", lease_s=60)  # released: free
        assert b.token > a.token
        put(saver, _with(c1, b), 2, "b")
        state = saver.fence.get(tid)
        assert (state.owner, state.token) == ("b", b.token)
        # copy_thread does not copy the fence: the copy is a new thread, owned by nobody
        saver.copy_thread(tid, copy)
        assert saver.fence.get(copy) is None
        assert saver.fence.get(tid) == state
        put(saver, {"configurable": {"thread_id": copy, "checkpoint_ns": ""}}, 9, "anyone")
        # delete_thread removes the fence: deletion is final, the old lease is refused
        saver.delete_thread(tid)
        assert saver.fence.get(tid) is None
        with pytest.raises(FencedWriteError) as refused:
            put(saver, b.config(), 1, "b")
        assert refused.value.current_owner is None
        assert stored(saver, tid) == []
        # a new owner after deletion gets a larger number than any before
        c = saver.fence.acquire(tid, owner="c", lease_s=60)
        assert c.token > b.token


def test_copy_threads_copies_no_fence_and_takes_none(saver_factory: Any) -> None:
    """``copy_threads`` (between savers) writes past runs' checkpoints, run ids in their
    metadata: the target's fence stays as it was, its owner keeps the thread."""
    from langgraph.checkpoint.memory import InMemorySaver

    from langgraph_memory_plus.migration import copy_threads

    tid = thread()
    source = InMemorySaver()
    app = graph().compile(checkpointer=source)
    for _ in range(2):
        run_id = uuid.uuid4()
        config = {"configurable": {"thread_id": tid}, "run_id": run_id}
        app.invoke({"log": []}, {**config, "metadata": {"run_id": str(run_id)}})
    with saver_factory(fence=True) as target:
        lease = target.fence.acquire(tid, owner="keeper", lease_s=60)
        report = copy_threads(source, target, [tid])
        assert report.checkpoints_copied == len(
            list(source.list({"configurable": {"thread_id": tid}}))
        )
        state = target.fence.get(tid)
        assert (state.owner, state.token) == ("keeper", lease.token)
        assert len(stored(target, tid)) == report.checkpoints_copied


def test_write_ownership_without_an_owner_is_not_fenced(saver_factory: Any) -> None:
    """A write with no lease and no run id (update_state outside a run, direct puts)."""
    tid = thread()
    with saver_factory(fence=True) as saver:
        saver.fence.acquire(tid, owner="a", lease_s=60)
        put(saver, {"configurable": {"thread_id": tid, "checkpoint_ns": ""}}, 1, "tool")
        assert len(stored(saver, tid)) == 1


def test_fence_options_are_checked() -> None:
    with pytest.raises(InvalidConfigError):
        FenceOptions(lease_s=0)
    with pytest.raises(InvalidConfigError):
        SqliteSaver(sqlite3.connect(":memory:"), fence="yes")  # type: ignore[arg-type]
    lease = Lease("t", "o", 5, 0.0)
    with pytest.raises(InvalidConfigError):
        lease.config({"configurable": {"thread_id": "other"}})


# -- concurrency: N writers, threads and asyncio ------------------------------------------


def test_fence_lease_from_a_url_and_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``fence_lease_s`` sets a run's lease (URL, keyword, or ``LANGGRAPH_MEMORY_URL``);
    it needs the fence on and agrees with a ``FenceOptions`` given beside it."""
    from langgraph_memory_plus import from_url

    url = f"sqlite:///{tmp_path / 'm.db'}"
    for memory in (
        from_url(f"{url}?fence=1&fence_lease_s=30"),
        from_url(url, fence=True, fence_lease_s="30"),
        from_url(url, fence=FenceOptions(lease_s=30), fence_lease_s=30),
    ):
        with memory:
            saver = memory.checkpointer
            assert saver._fence_options == FenceOptions(lease_s=30)
            lease = saver.fence.acquire(thread(), owner="w")
            assert 25 < lease.expires_at - time.time() <= 30
    monkeypatch.setenv("LANGGRAPH_MEMORY_URL", f"{url}?fence=true&fence_lease_s=7.5")
    with from_url() as memory:
        assert memory.checkpointer._fence_options.lease_s == 7.5
    for bad in ("fence_lease_s=30", "fence=0&fence_lease_s=30", "fence=1&fence_lease_s=0"):
        with pytest.raises(InvalidConfigError, match="fence"):
            from_url(f"{url}?{bad}")
    with pytest.raises(InvalidConfigError, match="give the lease once"):
        from_url(url, fence=FenceOptions(lease_s=10), fence_lease_s=30)


def _check_eras(results: dict[str, tuple[int, list[str], bool]], every: list[Any]) -> None:
    """Fencing's promise: a writer's stored checkpoints all come before the first stored
    checkpoint of any writer that took the thread after it; the last one is never refused.
    ``results``: writer -> (its number, the ids it stored, whether it was refused)."""
    by_token = sorted(results.items(), key=lambda kv: kv[1][0])
    assert len({token for token, _, _ in results.values()}) == len(results)
    assert not by_token[-1][1][2], "the last owner was refused"
    kept = {t.config["configurable"]["checkpoint_id"]: t.metadata["writer"] for t in every}
    for name, (_, ids, _) in results.items():
        assert all(kept.get(cid) == name for cid in ids), f"{name}: a stored write is missing"
    assert len(kept) == sum(len(ids) for _, ids, _ in results.values()) + 1  # + the base
    for (_, (_, earlier, _)), (_, (_, later, _)) in itertools.pairwise(by_token):
        if earlier and later:
            assert max(earlier) < min(later)


N_WRITERS = 6
WRITES_EACH = 4


def test_write_ownership_threads_n_concurrent_writers(saver_factory: Any) -> None:
    tid = thread()
    with saver_factory() as saver:
        base = put(saver, {"configurable": {"thread_id": tid, "checkpoint_ns": ""}}, 0, "base")
        start = threading.Barrier(N_WRITERS)
        results: dict[str, tuple[int, list[str], bool]] = {}

        def writer(name: str) -> None:
            start.wait()
            lease = saver.fence.acquire(tid, owner=name, lease_s=60, force=True)
            config, ids, refused = _with(base, lease), [], False
            for n in range(1, WRITES_EACH + 1):
                cid = new_id()
                try:
                    config = _with(put(saver, config, n, name, cid), lease)
                except FencedWriteError as exc:
                    assert exc.owner == name and exc.current_owner != name
                    refused = True
                    break
                ids.append(cid)
            results[name] = (lease.token, ids, refused)

        workers = [threading.Thread(target=writer, args=(f"w{i}",)) for i in range(N_WRITERS)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        _check_eras(results, stored(saver, tid))


async def test_write_ownership_asyncio_n_concurrent_writers(async_saver_factory: Any) -> None:
    tid = thread()
    async with async_saver_factory() as saver:
        base = await saver.aput(
            {"configurable": {"thread_id": tid, "checkpoint_ns": ""}},
            checkpoint(new_id(), 0),
            {"writer": "base"},
            {"n": "0"},
        )
        results: dict[str, tuple[int, list[str], bool]] = {}

        async def writer(name: str) -> None:
            lease = await saver.fence.aacquire(tid, owner=name, lease_s=60, force=True)
            config, ids, refused = _with(base, lease), [], False
            for n in range(1, WRITES_EACH + 1):
                cid = new_id()
                try:
                    saved = await saver.aput(
                        config, checkpoint(cid, n), {"writer": name}, {"n": f"{n:07d}"}
                    )
                except FencedWriteError:
                    refused = True
                    break
                ids.append(cid)
                config = _with(saved, lease)
                try:
                    await saver.aput_writes(config, [("n", n)], f"t-{name}")
                except FencedWriteError:
                    refused = True
                    break
            results[name] = (lease.token, ids, refused)

        await asyncio.gather(*(writer(f"a{i}") for i in range(N_WRITERS)))
        every = [t async for t in saver.alist({"configurable": {"thread_id": tid}})]
        _check_eras(results, every)


# -- runs: fence=True takes the fence from the run id ------------------------------------


class State(TypedDict, total=False):
    log: Annotated[list[str], lambda a, b: a + b]


def graph(work: Any = None) -> Any:
    builder = StateGraph(State)
    builder.add_node("prepare", lambda s: {"log": ["prepared"]})
    builder.add_node("work", work or (lambda s: {"log": ["worked"]}))
    builder.add_edge(START, "prepare")
    builder.add_edge("prepare", "work")
    builder.add_edge("work", END)
    return builder


def test_write_ownership_run_takes_the_fence_at_its_start(saver_factory: Any) -> None:
    """Two runs resumed from one checkpoint in one process: the later start wins."""
    tid = thread()
    config: Any = {"configurable": {"thread_id": tid}}
    entered = [threading.Event(), threading.Event()]
    go = [threading.Event(), threading.Event()]

    def work(state: State, config: RunnableConfig) -> State:
        me = int(config["configurable"]["who"])
        entered[me].set()
        go[me].wait(60)
        return {"log": [f"run{me}"]}

    with saver_factory(fence=True) as saver:
        app = graph(work).compile(checkpointer=saver, interrupt_before=["work"])
        app.invoke({"log": []}, {**config, "run_id": uuid.uuid4()})
        parent = saver.get_tuple(config).config["configurable"]["checkpoint_id"]
        outcome: dict[int, Any] = {}

        def run(me: int) -> None:
            try:
                cfg = {"configurable": {"thread_id": tid, "who": str(me)}, "run_id": uuid.uuid4()}
                outcome[me] = app.invoke(None, cfg)
            except FencedWriteError as exc:
                outcome[me] = exc

        runs = [threading.Thread(target=run, args=(i,)) for i in range(2)]
        runs[0].start()
        assert entered[0].wait(60)
        runs[1].start()
        assert entered[1].wait(60)
        go[0].set()  # the superseded run commits first
        runs[0].join()
        go[1].set()
        runs[1].join()
        assert isinstance(outcome[0], FencedWriteError), outcome
        assert outcome[1]["log"] == ["prepared", "run1"]
        _one_lineage(saver, tid, parent, "run1")


async def test_write_ownership_a_slow_take_holds_up_no_other_threads_run(
    async_saver_factory: Any,
) -> None:
    """fence=True: a run's start takes its thread's fence, a round trip. A take held up
    on one thread leaves the runs of other threads free; one lock per saver made every
    run start of the process wait behind it."""
    slow, fast = thread(), thread()
    entered, release = asyncio.Event(), asyncio.Event()
    async with async_saver_factory(fence=True) as saver:
        arun = saver._arun

        async def held_on_slow(plan: Any) -> Any:
            frame = getattr(plan, "gi_frame", None)
            if plan.__name__ == "_take_plan" and frame.f_locals["target"].thread_id == slow:
                entered.set()
                await release.wait()
            return await arun(plan)

        saver._arun = held_on_slow
        app = graph().compile(checkpointer=saver)

        def cfg(tid: str) -> Any:
            return {"configurable": {"thread_id": tid}, "run_id": uuid.uuid4()}

        held = asyncio.ensure_future(app.ainvoke({"log": []}, cfg(slow)))
        await asyncio.wait_for(entered.wait(), 60)
        try:
            done = await asyncio.wait_for(app.ainvoke({"log": []}, cfg(fast)), 10)
        finally:
            release.set()
        assert done["log"] == ["prepared", "worked"]
        assert (await held)["log"] == ["prepared", "worked"]


def test_write_ownership_covers_a_superseded_runs_subgraph(saver_factory: Any) -> None:
    """LangGraph gives a subgraph's writes no run id: they are fenced as their run's
    (found by the differential test with the fence on: a superseded run's subgraph
    checkpoints were stored, in the namespace the current run's subgraph uses too)."""
    tid = thread()
    entered = [threading.Event(), threading.Event()]
    go = [threading.Event(), threading.Event()]

    def inner(state: State, config: RunnableConfig) -> State:
        me = int(config["configurable"]["who"])
        entered[me].set()
        go[me].wait(60)
        return {"log": [f"sub{me}"]}

    sub = StateGraph(State)
    sub.add_node("inner", inner)
    sub.add_node("after", lambda s: {"log": ["after"]})
    sub.add_edge(START, "inner")
    sub.add_edge("inner", "after")
    sub.add_edge("after", END)
    with saver_factory(fence=True) as saver:
        app = graph(sub.compile(checkpointer=True)).compile(
            checkpointer=saver, interrupt_before=["work"]
        )
        app.invoke({"log": []}, {"configurable": {"thread_id": tid}, "run_id": uuid.uuid4()})
        outcome: dict[int, Any] = {}

        def run(me: int) -> None:
            cfg = {"configurable": {"thread_id": tid, "who": str(me)}, "run_id": uuid.uuid4()}
            try:
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
        assert isinstance(outcome[0], FencedWriteError), outcome
        assert outcome[1]["log"][-2:] == ["sub1", "after"]
        subs = [t for t in stored(saver, tid) if t.config["configurable"]["checkpoint_ns"]]
        logs = [t.checkpoint["channel_values"].get("log", []) for t in subs]
        assert not any("sub0" in log for log in logs), logs


def _one_lineage(saver: Any, tid: str, parent: str, winner: str) -> None:
    every = stored(saver, tid)
    children = [t for t in every if (t.parent_config or {}).get("configurable", {}).get(
        "checkpoint_id") == parent]  # fmt: skip
    assert len(children) == 1, [t.checkpoint["channel_values"] for t in every]
    assert children[0].checkpoint["channel_values"]["log"][-1] == winner
    writes = saver.get_tuple(
        {"configurable": {"thread_id": tid, "checkpoint_ns": "", "checkpoint_id": parent}}
    ).pending_writes
    assert [v for _, ch, v in writes if ch == "log"] == [[winner]], writes


# -- two processes frozen on the same parent checkpoint ----------------------------------

_FORKS = multiprocessing.get_context("forkserver")
_FORKS.set_forkserver_preload(["langgraph.graph", "langgraph_memory_plus", "test_fence"])


def _open(kind: str, url: str, options: dict[str, Any]) -> Any:
    from langgraph_memory_plus import PostgresSaver, RedisSaver

    cls = {"postgres": PostgresSaver, "sqlite": SqliteSaver, "redis": RedisSaver}[kind]
    return cls.from_conn_string(url, **options)


def _process_run(
    target: tuple[str, str, dict[str, Any]], tid: str, me: str, entered: Any, go: Any, out: Any
) -> None:
    """A worker process: resume the thread (a run of its own), stop inside the node until
    told, then commit; report what happened."""

    def work(state: State) -> State:
        entered.set()
        go.wait(60)
        return {"log": [me]}

    try:
        with _open(*target) as saver:
            app = graph(work).compile(checkpointer=saver)
            try:
                app.invoke(None, {"configurable": {"thread_id": tid}, "run_id": uuid.uuid4()})
                out.put((me, "ok", None, None))
            except FencedWriteError as exc:
                out.put((me, "fenced", exc.owner, exc.current_owner))
    except BaseException as exc:  # anything else: the parent reports it
        out.put((me, "error", repr(exc), None))
        entered.set()


def test_write_ownership_two_processes_frozen_on_the_same_parent(
    storage: Any, saver_factory: Any, tmp_path: Path
) -> None:
    tid = thread()
    url = os.path.join(storage.url, "memory.db") if storage.kind == "sqlite" else storage.url
    target = (storage.kind, url, {**storage.options, "fence": True})
    with saver_factory(fence=True) as saver:
        app = graph().compile(checkpointer=saver, interrupt_before=["work"])
        app.invoke({"log": []}, {"configurable": {"thread_id": tid}, "run_id": uuid.uuid4()})
        parent = saver.get_tuple({"configurable": {"thread_id": tid}}).config["configurable"][
            "checkpoint_id"
        ]
    out = _FORKS.Queue()
    events = [(_FORKS.Event(), _FORKS.Event()) for _ in range(2)]
    procs = []
    for i, (entered, go) in enumerate(events):
        p = _FORKS.Process(target=_process_run, args=(target, tid, f"p{i}", entered, go, out))
        p.start()
        procs.append(p)
        assert entered.wait(90), f"p{i} never reached the node"
    # both are frozen on the same parent; p1 started last and owns the thread
    try:
        events[0][1].set()  # the superseded one commits first
        first = out.get(timeout=90)
        events[1][1].set()
        second = out.get(timeout=90)
    finally:
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
    outcomes = {first[0]: first, second[0]: second}
    assert outcomes["p0"][1] == "fenced", outcomes
    assert outcomes["p0"][2].startswith("run:") and outcomes["p0"][3].startswith("run:")
    assert outcomes["p1"][1] == "ok", outcomes
    with saver_factory(fence=True) as saver:
        _one_lineage(saver, tid, parent, "p1")
        state = graph().compile(checkpointer=saver).get_state({"configurable": {"thread_id": tid}})
        assert state.values["log"] == ["prepared", "p1"]


# -- the fence off costs nothing ----------------------------------------------------------


@contextmanager
def _traced(tmp_path: Path, **options: Any) -> Iterator[tuple[Any, list[str]]]:
    conn = sqlite3.connect(tmp_path / "traced.db", check_same_thread=False)
    statements: list[str] = []
    conn.set_trace_callback(statements.append)
    saver = SqliteSaver(conn, **options)
    saver.setup()
    try:
        yield saver, statements
    finally:
        conn.close()


def test_fence_off_sends_no_statement(tmp_path: Path) -> None:
    """Off (the default) and without a lease, a put and a put_writes send exactly what
    they sent before the fence existed; a fenced write sends one statement more."""
    with _traced(tmp_path) as (saver, statements):
        tid = thread()
        config = put(saver, {"configurable": {"thread_id": tid, "checkpoint_ns": ""}}, 0, "x")
        statements.clear()
        config = put(saver, config, 1, "x")
        saver.put_writes(config, [("n", 1)], "t")
        plain = len(statements)
        assert not any("lgmp_fences" in s for s in statements)
        lease = saver.fence.acquire(tid, owner="o", lease_s=60)
        statements.clear()
        config = put(saver, _with(config, lease), 2, "x")
        saver.put_writes(_with(config, lease), [("n", 2)], "t")
        assert sum("lgmp_fences" in s for s in statements) == 2
        assert len(statements) == plain + 2
