"""``copy_threads`` / ``acopy_threads`` / ``copy_store``: threads and items moved between savers.

Sources are LangGraph's own savers (in memory, ``langgraph-checkpoint-postgres`` on a fresh
database, ``langgraph-checkpoint-sqlite`` on a file) and ours; targets are ours on every
backend. Every source thread comes from a real graph: a chat, a pending interrupt, a nested
subgraph waiting for approval (a namespace two levels deep), a failed superstep whose
sibling's writes are pending, DeltaChannel state, and a fork made with ``update_state``. A
copy is checked three ways: ``verify`` (every checkpoint's ``get_tuple`` on both sides),
the graph's own ``get_state`` / ``get_state_history`` on the target equal to the source's,
and resuming the pending interrupts on the target giving what resuming them on the source
gives.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import pytest
from conftest import _fresh_database
from graphs import chat_graph, delta_graph, fan_graph, human, review_graph, team_graph
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import StateGraph
from langgraph.store.memory import InMemoryStore
from langgraph.types import Command

from langgraph_memory_plus import InvalidConfigError, from_url
from langgraph_memory_plus.checkpoint.sqlite import AsyncSqliteSaver, SqliteSaver
from langgraph_memory_plus.transfer.migration import (
    CopyProgress,
    acopy_store,
    acopy_threads,
    copy_store,
    copy_threads,
    verify_threads,
)

pytestmark = pytest.mark.storage

OFFICIAL = ["memory", "official-postgres", "official-sqlite"]


def cfg(thread_id: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread_id}}


@contextmanager
def official(kind: str, tmp_path: Any) -> Iterator[Any]:
    """One of LangGraph's savers on storage of this test's own."""
    if kind == "memory":
        yield InMemorySaver()
    elif kind == "official-postgres":
        from conftest import PG_ADMIN_URL
        from langgraph.checkpoint.postgres import PostgresSaver

        with (
            _fresh_database(PG_ADMIN_URL, "PostgreSQL") as url,
            PostgresSaver.from_conn_string(url) as saver,
        ):
            saver.setup()
            yield saver
    else:
        from langgraph.checkpoint.sqlite import SqliteSaver as OfficialSqlite

        with OfficialSqlite.from_conn_string(str(tmp_path / "official.db")) as saver:
            yield saver


@asynccontextmanager
async def official_async(kind: str, tmp_path: Any) -> AsyncIterator[Any]:
    if kind == "official-postgres":
        from conftest import PG_ADMIN_URL
        from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

        with _fresh_database(PG_ADMIN_URL, "PostgreSQL") as url:
            async with AsyncPostgresSaver.from_conn_string(url) as saver:
                await saver.setup()
                yield saver
    else:
        from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver as OfficialAsyncSqlite

        async with OfficialAsyncSqlite.from_conn_string(str(tmp_path / "official.db")) as saver:
            yield saver


# -- the threads ---------------------------------------------------------------------------


def builders() -> dict[str, StateGraph]:
    """The graph of each kind of thread (the thread ids get a prefix per test)."""
    return {
        "chat": chat_graph(),
        "review": review_graph(),
        "team": team_graph(nested=True),
        "team-done": team_graph(),
        "fan": fan_graph(Counter(), {"flaky": True}),
        "delta": delta_graph(),
        "fork": chat_graph(),
    }


def populate(saver: Any, prefix: str) -> dict[str, StateGraph]:
    """Run every kind of thread on ``saver``; returns the graphs by thread id."""
    graphs = builders()
    out = {}
    for name, builder in graphs.items():
        graph = builder.compile(checkpointer=saver)
        tid = f"{prefix}{name}"
        out[tid] = builder
        config = cfg(tid)
        if name in ("chat", "fork"):
            for i in range(3):
                graph.invoke({"messages": [human(f"hi {i}", f"{name}-{i}")]}, config)
            if name == "fork":  # a branch from an older checkpoint
                older = list(graph.get_state_history(config))[4].config
                graph.update_state(older, {"last_reply": "forked"})
        elif name == "review":
            graph.invoke({"messages": [human("draft it", "r-1")]}, config)
        elif name.startswith("team"):
            graph.invoke({"messages": [human("plan", "t-1")]}, config)
            if name == "team-done":
                graph.invoke(Command(resume="yes"), config)
        elif name == "fan":
            with pytest.raises(ValueError, match="flaky"):
                graph.invoke({"request": "r1"}, {**config, "max_concurrency": 1})
        else:
            for i in range(4):
                graph.invoke({"messages": [human(f"d{i}", f"d-{i}")], "items": []}, config)
    return out


async def apopulate(saver: Any, prefix: str) -> dict[str, StateGraph]:
    graphs = builders()
    out = {}
    for name in ("chat", "review", "team", "delta"):
        builder = graphs[name]
        graph = builder.compile(checkpointer=saver)
        tid = f"{prefix}{name}"
        out[tid] = builder
        for i in range(2):
            await graph.ainvoke({"messages": [human(f"x{i}", f"{name}-{i}")], "items": []}
                                if name == "delta" else {"messages": [human("x", f"{name}-{i}")]},
                                cfg(tid))  # fmt: skip
    return out


def snapshot(state: Any) -> tuple[Any, ...]:
    return (
        state.values,
        state.next,
        state.config,
        state.metadata,
        state.parent_config,
        [(t.id, t.name, t.path, t.interrupts, t.error is not None) for t in state.tasks],
    )


def same_graph_view(source: Any, target: Any, graphs: dict[str, StateGraph]) -> None:
    """The graph sees the same threads through either saver, and resumes them alike."""
    for tid, builder in graphs.items():
        a, b = builder.compile(checkpointer=source), builder.compile(checkpointer=target)
        assert snapshot(a.get_state(cfg(tid), subgraphs=True)) == snapshot(
            b.get_state(cfg(tid), subgraphs=True)
        ), tid
        history_a = [snapshot(s) for s in a.get_state_history(cfg(tid))]
        assert history_a == [snapshot(s) for s in b.get_state_history(cfg(tid))], tid
        assert history_a, tid
    for tid, builder in graphs.items():
        if tid.endswith(("review", "team")):  # the pending interrupts survive the move
            a, b = builder.compile(checkpointer=source), builder.compile(checkpointer=target)
            assert a.get_state(cfg(tid)).interrupts, tid
            assert a.invoke(Command(resume="ok"), cfg(tid)) == b.invoke(
                Command(resume="ok"), cfg(tid)
            )


def count_checkpoints(saver: Any, thread_ids: Any) -> int:
    return sum(len(list(saver.list(cfg(t)))) for t in thread_ids)


# -- official savers -> ours ---------------------------------------------------------------


@pytest.mark.parametrize("source_kind", OFFICIAL)
def test_copy_from_official_into_ours(source_kind: str, saver_factory: Any, tmp_path: Any) -> None:
    prefix = f"mv-{uuid.uuid4().hex[:8]}-"
    seen: list[CopyProgress] = []
    with official(source_kind, tmp_path) as source, saver_factory() as target:
        graphs = populate(source, prefix)
        # All threads: the source is this test's own, so its thread list is exactly these.
        report = copy_threads(source, target, verify=True, progress=seen.append)
        assert report.differences == []
        assert sorted(report.threads) == sorted(graphs)
        total = count_checkpoints(source, graphs)
        assert report.checkpoints_copied == total == count_checkpoints(target, graphs)
        assert report.writes_copied > 0
        assert seen and seen[-1].threads_done == len(graphs)
        again = copy_threads(source, target, list(graphs))
        assert (again.checkpoints_copied, again.checkpoints_skipped) == (0, total)
        same_graph_view(source, target, graphs)


@pytest.mark.parametrize("source_kind", ["official-postgres", "official-sqlite"])
async def test_acopy_from_official_async_into_ours(
    source_kind: str, async_saver_factory: Any, tmp_path: Any
) -> None:
    prefix = f"amv-{uuid.uuid4().hex[:8]}-"
    async with official_async(source_kind, tmp_path) as source, async_saver_factory() as target:
        graphs = await apopulate(source, prefix)
        report = await acopy_threads(source, target, verify=True, batch_size=3)
        assert report.differences == []
        assert sorted(report.threads) == sorted(graphs)
        for tid, builder in graphs.items():
            a, b = builder.compile(checkpointer=source), builder.compile(checkpointer=target)
            history_a = [snapshot(s) async for s in a.aget_state_history(cfg(tid))]
            assert history_a == [snapshot(s) async for s in b.aget_state_history(cfg(tid))]
        tid = f"{prefix}team"
        a = graphs[tid].compile(checkpointer=source)
        b = graphs[tid].compile(checkpointer=target)
        assert await a.ainvoke(Command(resume="y"), cfg(tid)) == await b.ainvoke(
            Command(resume="y"), cfg(tid)
        )


# -- between ours ------------------------------------------------------------------------


def test_copy_between_ours(saver_factory: Any, tmp_path: Any) -> None:
    """From each backend into SQLite and back into a fresh thread set on the backend."""
    prefix = f"ours-{uuid.uuid4().hex[:8]}-"
    with saver_factory() as ours, SqliteSaver.from_conn_string(str(tmp_path / "b.db")) as other:
        other.setup()
        graphs = populate(ours, prefix)
        report = copy_threads(ours, other, list(graphs), verify=True)
        assert report.differences == []
        assert report.checkpoints_copied == count_checkpoints(ours, graphs)
        same_graph_view(ours, other, graphs)
        # and the other way: a thread only the SQLite side has now, copied onto the backend
        extra = f"{prefix}extra"
        graph = chat_graph().compile(checkpointer=other)
        graph.invoke({"messages": [human("new", "e-1")]}, cfg(extra))
        back = copy_threads(other, ours, [extra], verify=True)
        assert back.differences == [] and back.checkpoints_copied == 4


async def test_acopy_between_ours(async_saver_factory: Any, tmp_path: Any) -> None:
    prefix = f"aours-{uuid.uuid4().hex[:8]}-"
    async with (
        async_saver_factory() as ours,
        AsyncSqliteSaver.from_conn_string(str(tmp_path / "b.db")) as other,
    ):
        await other.setup()
        graphs = await apopulate(ours, prefix)
        report = await acopy_threads(ours, other, list(graphs), verify=True)
        assert report.differences == []
        assert report.checkpoints_copied > 0


# -- resuming, verifying, memory -----------------------------------------------------------


class Stop(Exception):
    pass


def test_killed_copy_resumes(tmp_path: Any) -> None:
    source = InMemorySaver()
    graphs = populate(source, "k-")
    total = count_checkpoints(source, graphs)
    with SqliteSaver.from_conn_string(str(tmp_path / "t.db")) as target:
        target.setup()

        def stop_after(n: int) -> Any:
            def progress(p: CopyProgress) -> None:
                if p.checkpoints_copied >= n:
                    raise Stop

            return progress

        with pytest.raises(Stop):
            copy_threads(source, target, progress=stop_after(7))
        assert count_checkpoints(target, graphs) == 7
        with pytest.raises(Stop):  # killed again, further on
            copy_threads(source, target, progress=stop_after(20))
        assert count_checkpoints(target, graphs) == 27
        rest = copy_threads(source, target, verify=True)
        assert rest.checkpoints_copied == total - 27
        assert rest.checkpoints_skipped == 27
        assert rest.differences == []
        same_graph_view(source, target, graphs)


def test_checkpoint_without_its_writes_gets_them(tmp_path: Any) -> None:
    """A copy killed between ``put`` and ``put_writes``: the re-run adds the writes."""
    source = InMemorySaver()
    graphs = populate(source, "w-")
    tid = "w-review"
    with SqliteSaver.from_conn_string(str(tmp_path / "t.db")) as target:
        target.setup()
        latest = source.get_tuple(cfg(tid))
        assert latest is not None and latest.pending_writes  # the interrupt
        copy_threads(source, target, [tid])
        target.delete_thread(tid)
        for t in reversed(list(source.list(cfg(tid)))):  # checkpoints only, no writes
            parent = t.parent_config["configurable"]["checkpoint_id"] if t.parent_config else None
            put_config = {
                "configurable": {
                    "thread_id": tid,
                    "checkpoint_ns": "",
                    **({"checkpoint_id": parent} if parent else {}),
                }
            }
            target.put(put_config, t.checkpoint, t.metadata, t.checkpoint["channel_versions"])
        assert verify_threads(source, target, [tid])  # the writes are missing
        report = copy_threads(source, target, [tid], verify=True)
        assert report.differences == []
        assert report.writes_copied >= len(latest.pending_writes)
        same_graph_view(source, target, {tid: graphs[tid]})


def test_verify_finds_differences(tmp_path: Any) -> None:
    source = InMemorySaver()
    populate(source, "v-")
    with SqliteSaver.from_conn_string(str(tmp_path / "t.db")) as target:
        target.setup()
        assert copy_threads(source, target, verify=True).differences == []
        latest = target.get_tuple(cfg("v-review"))
        assert latest is not None
        target.put_writes(latest.config, [("messages", "tampered")], "task-x")
        target.delete_thread("v-chat")
        found = verify_threads(source, target)
        assert any("v-review" in d and "pending writes differ" in d for d in found)
        assert any("v-chat" in d and "missing on the target" in d for d in found)
        assert copy_threads(source, target, ["v-chat"], verify=True).differences == []


class CountingSaver(InMemorySaver):
    """LangGraph's in-memory saver, remembering how many checkpoints each read handed out."""

    def __init__(self) -> None:
        super().__init__()
        self.pages: list[int] = []
        self.gets = 0

    def list(self, config: Any, **kwargs: Any) -> Iterator[Any]:  # type: ignore[override]
        found = list(super().list(config, **kwargs))
        if config is not None and kwargs.get("limit") is not None:
            self.pages.append(len(found))
        return iter(found)

    def get_tuple(self, config: Any) -> Any:
        self.gets += 1
        return super().get_tuple(config)


def test_long_thread_copied_in_bounded_batches(tmp_path: Any) -> None:
    source = CountingSaver()
    graph = chat_graph().compile(checkpointer=source)
    for i in range(60):
        graph.invoke({"messages": [human(f"m{i}", f"m-{i}")]}, cfg("long"))
    total = count_checkpoints(source, ["long"])
    assert total == 240
    with SqliteSaver.from_conn_string(str(tmp_path / "t.db")) as target:
        target.setup()
        source.pages.clear()
        source.gets = 0
        report = copy_threads(source, target, ["long"], batch_size=16)
        assert report.checkpoints_copied == total
        assert max(source.pages) == 16 and sum(source.pages) == total
        assert source.gets == 1  # the latest (whose user it is), the rest in pages
        assert verify_threads(source, target, ["long"]) == []
        assert (
            graph.get_state(cfg("long")).values
            == chat_graph().compile(checkpointer=target).get_state(cfg("long")).values
        )


def test_bad_arguments() -> None:
    saver = InMemorySaver()
    with pytest.raises(InvalidConfigError, match="two different savers"):
        copy_threads(saver, saver)
    with pytest.raises(InvalidConfigError, match="not a single string"):
        copy_threads(saver, InMemorySaver(), "t1")
    with pytest.raises(InvalidConfigError, match="batch_size"):
        copy_threads(saver, InMemorySaver(), batch_size=0)


# -- stores --------------------------------------------------------------------------------

STORE_BACKENDS = ["postgres", "redis", "sqlite"]


def pg_as_url(conninfo: str) -> str:
    """The test database's conninfo string as the URL ``from_url`` takes."""
    from psycopg.conninfo import conninfo_to_dict

    c = conninfo_to_dict(conninfo)
    return f"postgresql://{c['user']}@{c['host']}:{c['port']}/{c['dbname']}"


@contextmanager
def our_store(backend: str, request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[Any]:
    if backend == "postgres":
        url, options = pg_as_url(request.getfixturevalue("pg_url")), {}
    elif backend == "redis":
        prefix = request.getfixturevalue("redis_prefix")
        url, options = request.getfixturevalue("redis_url"), {"key_prefix": f"{prefix}-cp"}
    else:
        url, options = f"sqlite:///{tmp_path / 'store.db'}", {}
    with from_url(url, **options) as memory:
        yield memory.store


def fill_store(store: Any, prefix: str) -> dict[tuple[tuple[str, ...], str], Any]:
    items = {}
    for user in range(3):
        for kind in ("profile", "notes"):
            ns = (prefix, f"user-{user}", kind)
            for k in range(7):
                value = {"text": f"{kind} {k} of {user}", "n": k, "nested": {"ok": [1, 2]}}
                store.put(ns, f"k{k}", value)
                items[(ns, f"k{k}")] = value
    store.put((prefix,), "root", {"top": True})
    items[((prefix,), "root")] = {"top": True}
    return items


@pytest.mark.parametrize("store_backend", STORE_BACKENDS)
def test_copy_store_into_ours(
    store_backend: str, request: pytest.FixtureRequest, tmp_path: Any
) -> None:
    prefix = f"st-{uuid.uuid4().hex[:8]}"
    source = InMemoryStore()
    items = fill_store(source, prefix)
    fill_store(source, "other")  # outside the prefix: not copied
    with our_store(store_backend, request, tmp_path) as target:
        seen: list[int] = []
        report = copy_store(
            source, target, (prefix,), batch_size=4, progress=lambda p: seen.append(p.items_copied)
        )
        assert report.items_copied == len(items) and seen[-1] == len(items)
        for (ns, key), value in items.items():
            got = target.get(ns, key)
            assert got is not None and got.value == value
        assert target.search(("other",)) == []
        source.put((prefix, "user-0", "notes"), "k0", {"changed": 1})
        again = copy_store(source, target, (prefix,), batch_size=4)
        assert (again.items_copied, again.items_skipped) == (1, len(items) - 1)
        assert target.get((prefix, "user-0", "notes"), "k0").value == {"changed": 1}


async def test_acopy_store_between_ours(tmp_path: Any, pg_url: str) -> None:
    prefix = f"ast-{uuid.uuid4().hex[:8]}"
    async with from_url(pg_as_url(pg_url)) as a, from_url(f"sqlite:///{tmp_path / 's.db'}") as b:
        for k in range(5):
            await a.store.aput((prefix, "x"), f"k{k}", {"k": k})
        report = await acopy_store(a.store, b.store, (prefix,), batch_size=2)
        assert report.items_copied == 5
        assert [i.value["k"] for i in await b.store.asearch((prefix,), limit=10)] != []
        assert {i.key for i in await b.store.asearch((prefix,), limit=10)} == {
            f"k{k}" for k in range(5)
        }


def _stored_paths(path: str, table: str, where: str = "") -> set[tuple[str, str, str]]:
    import sqlite3

    with sqlite3.connect(path) as conn:
        rows = conn.execute(f"SELECT checkpoint_id, task_id, task_path FROM {table} {where}")
        return {tuple(r) for r in rows}


@pytest.mark.parametrize("source_kind", ["memory", "official-sqlite"])
def test_task_paths_are_kept(source_kind: str, tmp_path: Any) -> None:
    """``get_tuple`` leaves task paths out; the copy still stores each write's own path."""
    with official(source_kind, tmp_path) as source:
        populate(source, "p-")
        target_path = str(tmp_path / "t.db")
        with SqliteSaver.from_conn_string(target_path) as target:
            target.setup()
            copy_threads(source, target)
        if source_kind == "memory":
            expected = {
                (cid, w[0], w[3])
                for (_, _, cid), writes in source.writes.items()
                for w in writes.values()
            }
        else:
            expected = _stored_paths(str(tmp_path / "official.db"), "writes")
    copied = _stored_paths(target_path, "lgmp_writes")
    assert copied == expected
    assert len({p for _, _, p in copied if p}) > 3  # real paths, not all empty
