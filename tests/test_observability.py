"""Listeners, Prometheus metrics and OpenTelemetry spans, on every backend, sync and async.

Every storage test runs on the real servers of ``conftest.py`` (the ``backend`` parameter):
the events a listener receives, the metrics a real ``prometheus_client`` exporter serves over
HTTP, and the spans the real OpenTelemetry SDK records.
"""

from __future__ import annotations

import asyncio
import logging
import time
import urllib.request
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import (
    AbstractAsyncContextManager,
    AbstractContextManager,
    asynccontextmanager,
    contextmanager,
)
from typing import Any

import pytest
from backends import EVERY
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.base import empty_checkpoint
from prometheus_client import CollectorRegistry, generate_latest, start_http_server
from prometheus_client.parser import text_string_to_metric_families

from langgraph_memory_plus.errors import ConflictError
from langgraph_memory_plus.nodes._store import Stats
from langgraph_memory_plus.observability import (
    CheckpointLoaded,
    CheckpointSaved,
    CheckpointsListed,
    HistoryLoaded,
    MemoryEvent,
    NodeCounted,
    RunsDeleted,
    StoreRead,
    StoreWritten,
    ThreadCopied,
    WritesSaved,
    add_global_listener,
    remove_global_listener,
)
from langgraph_memory_plus.observability.prometheus import NamespaceTemplates, PrometheusListener

pytestmark = pytest.mark.storage


def new_thread() -> str:
    return f"obs-{uuid.uuid4().hex[:12]}"


def config_of(thread_id: str) -> Any:
    return {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}


def checkpoint_with(saver: Any, messages: int) -> tuple[Any, dict[str, str]]:
    """A checkpoint whose ``messages`` channel holds ``messages`` messages."""
    checkpoint = empty_checkpoint()
    version = saver.get_next_version(None, None)
    checkpoint["channel_values"] = {
        "messages": [
            (HumanMessage if i % 2 == 0 else AIMessage)(f"message {i}", id=f"m{i}")
            for i in range(messages)
        ]
    }
    checkpoint["channel_versions"] = {"messages": version}
    return checkpoint, {"messages": version}


def shape(event: MemoryEvent) -> tuple[Any, ...]:
    """What must be equal between runs: everything but durations, generated ids and sizes
    (a checkpoint's encoding holds its id and timestamp, whose lengths vary by a byte)."""
    varying = ("duration", "checkpoint_id", "bytes_written")
    fields = {k: v for k, v in vars(event).items() if k not in varying}
    fields.pop("error", None)
    return (event.name, event.result, tuple(sorted(fields.items())))


# -- savers ------------------------------------------------------------------------------


def run_saver_sequence(saver: Any, thread: str, copy: str) -> None:
    config = config_of(thread)
    assert saver.get_tuple(config) is None
    checkpoint, versions = checkpoint_with(saver, 3)
    saved = saver.put(config, checkpoint, {"source": "input", "step": 0}, versions)
    assert saver.get_tuple(config) is not None
    saver.put_writes(saved, [("messages", "hello"), ("other", 1)], "task-1")
    saver.copy_thread(thread, copy)
    saver.prune([copy], strategy="keep_latest")
    saver.delete_thread(copy)


async def arun_saver_sequence(saver: Any, thread: str, copy: str) -> None:
    config = config_of(thread)
    assert await saver.aget_tuple(config) is None
    checkpoint, versions = checkpoint_with(saver, 3)
    saved = await saver.aput(config, checkpoint, {"source": "input", "step": 0}, versions)
    assert await saver.aget_tuple(config) is not None
    await saver.aput_writes(saved, [("messages", "hello"), ("other", 1)], "task-1")
    await saver.acopy_thread(thread, copy)
    await saver.aprune([copy], strategy="keep_latest")
    await saver.adelete_thread(copy)


EXPECTED_SAVER = [
    ("checkpoint.loaded", "miss"),
    ("checkpoint.saved", "ok"),
    ("checkpoint.loaded", "hit"),
    ("checkpoint.writes_saved", "ok"),
    ("checkpoint.copied", "ok"),
    ("checkpoint.pruned", "ok"),
    ("checkpoint.deleted", "ok"),
]
SYSTEM = {"postgres": "postgresql", "redis": "redis", "sqlite": "sqlite"}


def db_system_of(backend: str) -> str:
    """The ``db.system`` events of a ``tests/backends.py`` backend carry."""
    return SYSTEM[EVERY[backend].kind]


def test_saver_events_in_order_with_their_fields(saver_factory: Any, backend: str) -> None:
    seen: list[MemoryEvent] = []
    thread, copy = new_thread(), new_thread()
    with saver_factory(listeners=[seen.append]) as saver:
        run_saver_sequence(saver, thread, copy)
        assert saver.listener_errors == 0
    assert [(e.name, e.result) for e in seen] == EXPECTED_SAVER
    assert {e.backend for e in seen} == {db_system_of(backend)}
    assert all(e.duration > 0 and e.error is None for e in seen)
    miss, saved, hit, writes, copied = seen[:5]
    assert isinstance(miss, CheckpointLoaded) and not miss.hit and miss.thread_id == thread
    assert isinstance(hit, CheckpointLoaded) and hit.hit
    assert isinstance(saved, CheckpointSaved)
    assert saved.thread_id == thread and saved.message_count == 3
    assert saved.bytes_written > 3 * len("message 0")
    assert isinstance(writes, WritesSaved) and writes.write_count == 2
    assert writes.task_id == "task-1" and writes.checkpoint_id == saved.checkpoint_id
    assert writes.bytes_written > 0
    assert isinstance(copied, ThreadCopied)
    assert (copied.source_thread_id, copied.target_thread_id) == (thread, copy)


async def test_async_savers_emit_the_same_events(
    saver_factory: Any, async_saver_factory: Any
) -> None:
    sync_seen: list[MemoryEvent] = []
    async_seen: list[MemoryEvent] = []
    thread, copy = new_thread(), new_thread()
    with saver_factory(listeners=[sync_seen.append]) as saver:
        run_saver_sequence(saver, thread, copy)
        saver.delete_thread(thread)
    async with async_saver_factory(listeners=[async_seen.append]) as saver:
        await arun_saver_sequence(saver, thread, copy)
        # The blocking methods of an async saver run the same core, from another thread.
        await asyncio.to_thread(saver.delete_thread, thread)
    assert [shape(e) for e in async_seen] == [shape(e) for e in sync_seen]
    for mine, theirs in zip(async_seen, sync_seen, strict=True):
        size = getattr(mine, "bytes_written", 0)
        assert abs(size - getattr(theirs, "bytes_written", 0)) <= max(8, size // 20)


def run_listing_sequence(saver: Any, thread: str) -> None:
    config = config_of(thread)
    checkpoint, versions = checkpoint_with(saver, 2)
    saver.put(config, checkpoint, {"run_id": f"run-{thread}"}, versions)
    assert len(list(saver.list(config))) == 1
    saver.get_delta_channel_history(config=config, channels=["messages"])
    saver.delete_for_runs([f"run-{thread}"])
    assert list(saver.list(config)) == []


async def arun_listing_sequence(saver: Any, thread: str) -> None:
    config = config_of(thread)
    checkpoint, versions = checkpoint_with(saver, 2)
    await saver.aput(config, checkpoint, {"run_id": f"run-{thread}"}, versions)
    assert len([c async for c in saver.alist(config)]) == 1
    await saver.aget_delta_channel_history(config=config, channels=["messages"])
    await saver.adelete_for_runs([f"run-{thread}"])
    assert [c async for c in saver.alist(config)] == []


async def test_list_history_and_run_deletes_are_reported(
    saver_factory: Any, async_saver_factory: Any
) -> None:
    seen: list[MemoryEvent] = []
    async_seen: list[MemoryEvent] = []
    thread = new_thread()
    with saver_factory(listeners=[seen.append]) as saver:
        run_listing_sequence(saver, thread)
    async with async_saver_factory(listeners=[async_seen.append]) as saver:
        await arun_listing_sequence(saver, thread)
    assert [(e.name, e.result) for e in seen] == [
        ("checkpoint.saved", "ok"),
        ("checkpoint.listed", "ok"),
        ("checkpoint.history_loaded", "ok"),
        ("checkpoint.runs_deleted", "ok"),
        ("checkpoint.listed", "ok"),
    ]
    _, listed, history, runs, emptied = seen
    assert isinstance(listed, CheckpointsListed) and isinstance(emptied, CheckpointsListed)
    assert (listed.thread_id, listed.count, emptied.count) == (thread, 1, 0)
    assert isinstance(history, HistoryLoaded) and history.channels == ("messages",)
    assert history.thread_id == thread and history.checkpoint_id is None
    assert isinstance(runs, RunsDeleted) and runs.run_ids == (f"run-{thread}",)
    assert [shape(e) for e in async_seen] == [shape(e) for e in seen]


def test_a_failing_listener_does_not_fail_a_put(
    saver_factory: Any, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(event: MemoryEvent) -> None:
        raise RuntimeError("listener bug")

    seen: list[MemoryEvent] = []
    config = config_of(new_thread())
    with (
        caplog.at_level(logging.ERROR, "langgraph_memory_plus.observability"),
        saver_factory(listeners=[broken, seen.append]) as saver,
    ):
        checkpoint, versions = checkpoint_with(saver, 2)
        saver.put(config, checkpoint, {}, versions)
        loaded = saver.get_tuple(config)
        assert loaded is not None and len(loaded.checkpoint["channel_values"]["messages"]) == 2
        assert saver.listener_errors == 2
        saver.remove_listener(broken)
        saver.get_tuple(config)
        assert saver.listener_errors == 2
    assert [e.name for e in seen] == ["checkpoint.saved", "checkpoint.loaded", "checkpoint.loaded"]
    assert sum("listener bug" in r.exc_text for r in caplog.records if r.exc_text) == 2


def test_a_failed_plan_reports_its_error_and_still_raises(saver_factory: Any) -> None:
    """The driver throws a failing command into the plan; the wrapper reports and re-raises."""
    seen: list[Any] = []

    def failing() -> Any:
        yield from ()
        raise OSError("connection lost")

    with saver_factory(listeners=[seen.append]) as saver:
        plan = saver._observed(failing(), lambda result, took, error: [(result, error)])
        with pytest.raises(OSError, match="connection lost") as raised:
            saver._run(plan)
    assert seen == [(None, raised.value)]


def test_no_listener_means_the_plan_runs_unwrapped(saver_factory: Any) -> None:
    with saver_factory() as saver:
        plan = saver._plans.delete_thread("t")
        assert saver._observed(plan, lambda *_: []) is plan
        seen: list[MemoryEvent] = []
        saver.add_listener(seen.append)
        saver.get_tuple(config_of(new_thread()))
        assert [e.result for e in seen] == ["miss"]
        with pytest.raises(ValueError):
            saver.remove_listener(print)
        with pytest.raises(TypeError):
            saver.add_listener("not callable")


def test_sweeping_expired_threads_reports_what_it_deleted(saver_factory: Any, backend: str) -> None:
    seen: list[MemoryEvent] = []
    with saver_factory(ttl={"default_ttl": 0.005}, listeners=[seen.append]) as saver:  # 0.3 s
        config = config_of(new_thread())
        checkpoint, versions = checkpoint_with(saver, 1)
        saver.put(config, checkpoint, {}, versions)
        time.sleep(0.6)
        swept = saver.sweep_expired()
    expired = [e for e in seen if e.name == "checkpoint.expired"]
    assert expired and sum(e.deleted for e in expired) == swept  # type: ignore[attr-defined]
    if EVERY[backend].kind in ("postgres", "sqlite"):  # Redis expires keys itself
        assert swept >= 1


# -- stores ------------------------------------------------------------------------------

StoreFactory = Callable[..., AbstractContextManager[Any]]
AsyncStoreFactory = Callable[..., AbstractAsyncContextManager[Any]]


def _store_target(storage: Any) -> tuple[Any, str, dict[str, Any]]:
    """The (sync, async) store classes, URL and options on a backend's storage; a schema,
    file or key prefix of the test's own."""
    from langgraph_memory_plus.store import AsyncPostgresStore, PostgresStore
    from langgraph_memory_plus.store.redis import AsyncRedisStore, RedisStore
    from langgraph_memory_plus.store.sqlite import AsyncSqliteStore, SqliteStore

    name = f"obs_{uuid.uuid4().hex[:10]}"
    options = {k: v for k, v in storage.options.items() if k != "key_prefix"}
    if storage.kind == "postgres":
        return (PostgresStore, AsyncPostgresStore), storage.url, {**options, "schema": name}
    if storage.kind == "sqlite":
        return (SqliteStore, AsyncSqliteStore), f"{storage.url}/{name}.db", options
    prefix = storage.options.get("key_prefix", "lgmp-test")
    return (RedisStore, AsyncRedisStore), storage.url, {**options, "key_prefix": f"{prefix}-{name}"}


@pytest.fixture
def store_factory(storage: Any) -> StoreFactory:
    (cls, _), url, defaults = _store_target(storage)

    @contextmanager
    def open_store(**options: Any) -> Iterator[Any]:
        with cls.from_conn_string(url, **{**defaults, **options}) as store:
            store.setup()
            yield store

    return open_store


@pytest.fixture
def async_store_factory(storage: Any) -> AsyncStoreFactory:
    (_, cls), url, defaults = _store_target(storage)

    @asynccontextmanager
    async def open_store(**options: Any) -> AsyncIterator[Any]:
        async with cls.from_conn_string(url, **{**defaults, **options}) as store:
            await store.setup()
            yield store

    return open_store


def run_store_sequence(store: Any) -> None:
    ns = ("users", "u1", "preferences")
    assert store.get(ns, "color") is None
    store.put(ns, "color", {"value": "blue"})
    assert store.get(ns, "color") is not None
    assert len(store.search(("users", "u1"))) == 1
    assert store.search(("users", "nobody")) == []
    store.delete(ns, "color")


EXPECTED_STORE = [
    ("store.read", "miss"),
    ("store.written", "ok"),
    ("store.read", "hit"),
    ("store.read", "hit"),
    ("store.read", "miss"),
    ("store.deleted", "ok"),
]


def test_store_events_in_order_with_their_fields(store_factory: Any, backend: str) -> None:
    seen: list[MemoryEvent] = []
    with store_factory(listeners=[seen.append]) as store:
        run_store_sequence(store)
    assert [(e.name, e.result) for e in seen] == EXPECTED_STORE
    assert {e.backend for e in seen} == {db_system_of(backend)}
    miss, written, hit, found = seen[:4]
    assert isinstance(miss, StoreRead) and miss.key == "color" and miss.count == 0
    assert miss.namespace == ("users", "u1", "preferences")
    assert isinstance(written, StoreWritten) and written.bytes_written == len('{"value":"blue"}')
    assert isinstance(found, StoreRead) and found.key is None and found.count == 1
    assert found.namespace == ("users", "u1")
    assert isinstance(hit, StoreRead) and hit.count == 1


async def test_async_stores_emit_the_same_events(async_store_factory: Any) -> None:
    seen: list[MemoryEvent] = []
    ns = ("users", "u1", "preferences")
    async with async_store_factory(listeners=[seen.append]) as store:
        assert await store.aget(ns, "color") is None
        await store.aput(ns, "color", {"value": "blue"})
        assert await store.aget(ns, "color") is not None
        assert len(await store.asearch(("users", "u1"))) == 1
        assert await store.asearch(("users", "nobody")) == []
        await store.adelete(ns, "color")
    assert [(e.name, e.result) for e in seen] == EXPECTED_STORE


EXPECTED_NAMESPACE_OPS = [
    ("store.written", "ok"),
    ("store.written", "ok"),
    ("store.namespaces_listed", "ok"),
    ("store.namespaces_listed", "ok"),
    ("store.counted", "ok"),
    ("store.namespace_deleted", "ok"),
    ("store.counted", "ok"),
]


def _namespace_fields(seen: list[MemoryEvent]) -> list[tuple[Any, ...]]:
    return [
        (
            e.name,
            getattr(e, "namespace", None),
            getattr(e, "count", None),
            getattr(e, "deleted", None),
        )
        for e in seen
    ]


async def test_namespace_listing_counting_and_deleting_are_reported(
    store_factory: Any, async_store_factory: Any
) -> None:
    """``list_namespaces`` (on its own and in a batch), ``count`` and ``delete_namespace``
    each report one event with what they found, sync and async alike."""
    from langgraph.store.base import ListNamespacesOp, MatchCondition

    user = f"u-{uuid.uuid4().hex[:8]}"
    wildcard = MatchCondition("prefix", ("users", "*"))
    seen: list[MemoryEvent] = []
    with store_factory(listeners=[seen.append]) as store:
        store.put(("users", user, "a"), "k", {"v": 1})
        store.put(("users", user, "b"), "k", {"v": 2})
        assert len(store.list_namespaces(prefix=("users", user))) == 2
        store.batch([ListNamespacesOp(match_conditions=(wildcard,), max_depth=2)])
        assert store.count(("users", user)) == 2
        assert store.delete_namespace(("users", user)) == 2
        assert store.count(("users", user)) == 0
    async_seen: list[MemoryEvent] = []
    async with async_store_factory(listeners=[async_seen.append]) as store:
        await store.aput(("users", user, "a"), "k", {"v": 1})
        await store.aput(("users", user, "b"), "k", {"v": 2})
        assert len(await store.alist_namespaces(prefix=("users", user))) == 2
        await store.abatch([ListNamespacesOp(match_conditions=(wildcard,), max_depth=2)])
        assert await store.acount(("users", user)) == 2
        assert await store.adelete_namespace(("users", user)) == 2
        assert await store.acount(("users", user)) == 0
    assert [(e.name, e.result) for e in seen] == EXPECTED_NAMESPACE_OPS
    fields = _namespace_fields(seen)
    assert fields[2] == ("store.namespaces_listed", ("users", user), 2, None)
    assert fields[3][:2] == ("store.namespaces_listed", ("users", "*"))
    assert fields[3][2] >= 1  # other tests' users may be listed too
    assert fields[4:] == [
        ("store.counted", ("users", user), 2, None),
        ("store.namespace_deleted", ("users", user), 2, None),
        ("store.counted", ("users", user), 0, None),
    ]
    assert [f for i, f in enumerate(_namespace_fields(async_seen)) if i != 3] == [
        f for i, f in enumerate(fields) if i != 3
    ]


def test_a_conflict_is_a_conflict(store_factory: Any) -> None:
    seen: list[MemoryEvent] = []
    with store_factory(listeners=[seen.append]) as store:
        store.put(("a",), "k", {"v": 1}, expected_version=0)
        with pytest.raises(ConflictError) as raised:
            store.put(("a",), "k", {"v": 2}, expected_version=0)
        assert store.get(("a",), "k").value == {"v": 1}
    assert [(e.name, e.result) for e in seen] == [
        ("store.written", "ok"),
        ("store.written", "conflict"),
        ("store.read", "hit"),
    ]
    assert seen[1].error is raised.value


def test_a_failing_listener_does_not_fail_a_store_put(store_factory: Any) -> None:
    def broken(event: MemoryEvent) -> None:
        raise ValueError("listener bug")

    with store_factory(listeners=[broken]) as store:
        store.put(("a",), "k", {"v": 1})
        assert store.get(("a",), "k").value == {"v": 1}
        assert store.listener_errors == 2


def test_sweeping_expired_items_reports_what_it_deleted(store_factory: Any, backend: str) -> None:
    seen: list[MemoryEvent] = []
    with store_factory(ttl={"default_ttl": 0.005}, listeners=[seen.append]) as store:  # 0.3 s
        store.put(("a",), "k", {"v": 1})
        time.sleep(0.6)
        swept = store.sweep_ttl()
    expired = [e for e in seen if e.name == "store.expired"]
    assert expired and sum(e.deleted for e in expired) == swept  # type: ignore[attr-defined]
    if EVERY[backend].kind in ("postgres", "sqlite"):
        assert swept == 1


# -- Prometheus, scraped over HTTP ---------------------------------------------------------


@pytest.fixture
def exporter() -> Iterator[tuple[CollectorRegistry, Callable[[], dict[tuple[Any, ...], float]]]]:
    """A registry of its own, served by ``prometheus_client``'s HTTP server on a free port."""
    registry = CollectorRegistry()
    server, thread = start_http_server(0, addr="127.0.0.1", registry=registry)
    url = f"http://127.0.0.1:{server.server_port}/metrics"

    def scrape() -> dict[tuple[Any, ...], float]:
        with urllib.request.urlopen(url, timeout=10) as response:
            text = response.read().decode()
        return {
            (sample.name, *sorted(sample.labels.items())): sample.value
            for family in text_string_to_metric_families(text)
            for sample in family.samples
        }

    yield registry, scrape
    server.shutdown()
    server.server_close()
    thread.join(10)


def sample(metrics: dict[tuple[Any, ...], float], name: str, **labels: str) -> float:
    return metrics.get((name, *sorted(labels.items())), 0.0)


def test_prometheus_metrics_move_on_every_backend(
    exporter: Any, saver_factory: Any, store_factory: Any, backend: str
) -> None:
    registry, scrape = exporter
    metrics = PrometheusListener(
        registry=registry, prefix="t_", namespace_templates=["users/*/preferences"]
    )
    db = db_system_of(backend)
    before = scrape()
    assert sample(before, "t_store_lookups_total", backend=db, result="hit", namespace="x") == 0
    with store_factory(listeners=[metrics]) as store:
        run_store_sequence(store)
        store.put(("a",), "k", {"v": 1}, expected_version=0)
        with pytest.raises(ConflictError):
            store.put(("a",), "k", {"v": 2}, expected_version=0)
    with saver_factory(listeners=[metrics]) as saver:
        run_saver_sequence(saver, new_thread(), new_thread())
    after = scrape()
    pref = {"backend": db, "namespace": "users/*/preferences"}
    assert sample(after, "t_store_lookups_total", result="miss", **pref) == 1
    assert sample(after, "t_store_lookups_total", result="hit", **pref) == 1
    # Searches by prefix ("users/u1") match no template: their label is "other".
    assert sample(after, "t_store_lookups_total", backend=db, result="hit", namespace="other") == 1
    assert sample(after, "t_store_lookups_total", backend=db, result="miss", namespace="other") == 1
    assert (
        sample(
            after,
            "t_write_failures_total",
            operation="store.written",
            backend=db,
            result="conflict",
            namespace="other",
        )
        == 1
    )
    assert sample(after, "t_checkpoint_loads_total", backend=db, result="miss") == 1
    assert sample(after, "t_checkpoint_loads_total", backend=db, result="hit") == 1
    assert sample(after, "t_checkpoint_messages_count", backend=db) == 1
    assert sample(after, "t_checkpoint_messages_sum", backend=db) == 3
    assert sample(after, "t_checkpoint_bytes_sum", backend=db) > 0
    duration = {
        "operation": "checkpoint.saved",
        "backend": db,
        "result": "ok",
        "namespace": "",
    }
    assert sample(after, "t_operation_duration_seconds_count", **duration) == 1
    assert sample(after, "t_operation_duration_seconds_sum", **duration) > 0
    # No thread id, user id or raw namespace ever becomes a label value.
    values = {v for key in after for _, v in key[1:]}
    assert "u1" not in " ".join(values) and not any(v.startswith("obs-") for v in values)


def test_prometheus_ttl_sweeps_and_default_labels(
    exporter: Any, store_factory: Any, backend: str
) -> None:
    registry, scrape = exporter
    metrics = PrometheusListener(registry=registry)  # no templates: no namespace label
    with store_factory(ttl={"default_ttl": 0.005}, listeners=[metrics]) as store:
        store.put(("users", "u1"), "k", {"v": 1})
        store.get(("users", "u1"), "k")
        time.sleep(0.6)
        swept = store.sweep_ttl()
    after = scrape()
    db = db_system_of(backend)
    assert sample(after, "lgmp_store_lookups_total", backend=db, result="hit") == 1
    assert sample(after, "lgmp_ttl_sweep_deleted_total", kind="store", backend=db) == swept
    assert not any(dict(key[1:]).get("namespace") for key in after)


def test_prometheus_counts_memory_node_refusals_and_prefetch_hits(exporter: Any) -> None:
    registry, scrape = exporter
    metrics = PrometheusListener(registry=registry).watch_nodes()
    try:
        stats = Stats()
        stats.incr("refused")
        stats.incr("unsafe_results", 2)
        stats.incr("prefetch_used")
        stats.incr("store_timeouts")
        stats.incr("injected")  # not a metric: ignored
    finally:
        metrics.unwatch_nodes()
    stats.incr("refused")  # no longer watched
    after = scrape()
    assert sample(after, "lgmp_injection_scan_refusals_total", stage="write") == 1
    assert sample(after, "lgmp_injection_scan_refusals_total", stage="read") == 2
    assert sample(after, "lgmp_prefetch_hits_total") == 1
    assert sample(after, "lgmp_node_store_timeouts_total") == 1


def test_prefetch_misses_and_timeouts_are_counted_apart_from_hits(exporter: Any) -> None:
    registry, scrape = exporter
    metrics = PrometheusListener(registry=registry).watch_nodes()
    try:
        stats = Stats()
        stats.incr("prefetch_used", 3)
        stats.incr("prefetch_missed", 2)
        stats.incr("prefetch_timeouts")
        stats.incr("store_timeouts")
    finally:
        metrics.unwatch_nodes()
    after = scrape()
    assert sample(after, "lgmp_prefetch_hits_total") == 3
    assert sample(after, "lgmp_prefetch_misses_total") == 2
    assert sample(after, "lgmp_prefetch_timeouts_total") == 1
    assert sample(after, "lgmp_node_store_timeouts_total") == 1


# -- the pending-approvals gauge ------------------------------------------------------------


@pytest.fixture
def approvals_queue(
    saver_factory: Any, store_factory: Any, tmp_path: Any
) -> Iterator[tuple[Any, Callable[[], None]]]:
    """A real queue on the backend, and ``interrupt()``: one more thread waiting for a
    reviewer (a ``create_agent`` run stopped by ``HumanInTheLoopMiddleware``)."""
    from approvals_support import booking_agent

    from langgraph_memory_plus.approvals import Approvals

    with saver_factory() as saver, store_factory() as store:
        agent = booking_agent(saver, tmp_path / "runs.jsonl")

        def interrupt() -> None:
            thread = new_thread()
            config = {"configurable": {"thread_id": thread, "user_id": "u-obs"}}
            result = agent.invoke({"messages": [HumanMessage("book LH1", id="h")]}, config)
            assert result["__interrupt__"]

        yield Approvals(saver, store), interrupt


def test_prometheus_pending_approvals_gauge_asks_the_queue(
    exporter: Any, approvals_queue: Any, saver_factory: Any, store_factory: Any
) -> None:
    from langgraph_memory_plus.approvals import Approvals

    registry, scrape = exporter
    queue, interrupt = approvals_queue
    before = queue.count()
    interrupt()
    interrupt()
    listener = PrometheusListener(registry=registry)
    fresh = listener.watch_approvals(queue, max_age=0)
    assert sample(scrape(), "lgmp_pending_approvals") == before + 2
    # Another replica (its own saver and queue, the same storage) reports the same number.
    other = CollectorRegistry()
    with saver_factory() as saver, store_factory() as store:
        PrometheusListener(registry=other, prefix="b_").watch_approvals(Approvals(saver, store))
        text = generate_latest(other).decode()
    assert f"b_pending_approvals {float(before + 2)}" in text
    # Within max_age the last count is served: a scrape does not count again.
    cached = PrometheusListener(registry=CollectorRegistry(), prefix="c_")
    gauge = cached.watch_approvals(queue, max_age=3600)
    assert gauge.pending() == before + 2
    interrupt()
    assert gauge.pending() == before + 2
    assert fresh.pending() == before + 3


def test_pending_approvals_keeps_the_last_count_when_counting_fails(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from langgraph_memory_plus.observability.approvals import PendingApprovals

    class Queue:
        def __init__(self) -> None:
            self.answers: list[int | Exception] = [4, RuntimeError("index down"), 6]

        def count(self) -> int:
            answer = self.answers.pop(0)
            if isinstance(answer, Exception):
                raise answer
            return answer

    gauge = PendingApprovals(Queue(), max_age=0)
    with caplog.at_level(logging.ERROR, "langgraph_memory_plus.observability"):
        assert [gauge.pending(), gauge.pending(), gauge.pending()] == [4, 4, 6]
    assert "counting pending approvals failed" in caplog.text
    with pytest.raises(TypeError):
        PendingApprovals(object())  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        PendingApprovals(Queue(), max_age=-1)


def test_node_events_reach_global_listeners_only_while_registered() -> None:
    seen: list[MemoryEvent] = []
    add_global_listener(seen.append)
    try:
        Stats().incr("refused")
    finally:
        remove_global_listener(seen.append)
    Stats().incr("refused")
    assert seen == [NodeCounted(backend="", duration=0.0, counter="refused", n=1)]


def test_namespace_templates() -> None:
    match = NamespaceTemplates(["users/*/preferences", "users/*"])
    assert match(("users", "42", "preferences")) == "users/*/preferences"
    assert match(("users", "42")) == "users/*"
    assert match(("users", "42", "facts")) == "other"
    with pytest.raises(TypeError):
        NamespaceTemplates("users/*")  # type: ignore[arg-type]


# -- OpenTelemetry, with the real SDK ---------------------------------------------------------


@pytest.fixture
def otel() -> Iterator[tuple[Any, Any, Any]]:
    """A listener on SDK providers of its own: in-memory span exporter and metric reader."""
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from langgraph_memory_plus.observability.otel import OpenTelemetryListener

    spans = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[reader])
    listener = OpenTelemetryListener(
        tracer_provider=tracer_provider,
        meter_provider=meter_provider,
        store_id="prefs",
        namespace_templates=["users/*/preferences"],
    )
    yield listener, spans, reader
    tracer_provider.shutdown()
    meter_provider.shutdown()


def otel_points(reader: Any) -> dict[str, list[Any]]:
    data = reader.get_metrics_data()
    return {
        metric.name: list(metric.data.data_points)
        for resource in data.resource_metrics
        for scope in resource.scope_metrics
        for metric in scope.metrics
    }


def test_otel_spans_carry_the_conventions(
    otel: Any, saver_factory: Any, store_factory: Any, backend: str
) -> None:
    from opentelemetry.trace import SpanKind, StatusCode

    listener, spans, reader = otel
    thread = new_thread()
    with saver_factory(listeners=[listener]) as saver:
        run_saver_sequence(saver, thread, new_thread())
    with store_factory(listeners=[listener]) as store:
        run_store_sequence(store)
        store.put(("a",), "k", {"v": 1}, expected_version=0)
        with pytest.raises(ConflictError):
            store.put(("a",), "k", {"v": 2}, expected_version=0)
    finished = spans.get_finished_spans()
    db = db_system_of(backend)
    assert [s.name for s in finished[:3]] == [f"get_tuple {db}", f"put {db}", f"get_tuple {db}"]
    assert all(s.kind == SpanKind.CLIENT for s in finished)
    saved = finished[1].attributes
    assert saved["db.system"] == db and saved["db.operation.name"] == "put"
    assert saved["gen_ai.conversation.id"] == thread
    assert saved["gen_ai.memory.scope"] == "session" and saved["lgmp.message_count"] == 3
    assert finished[1].end_time > finished[1].start_time
    reads = [s for s in finished if s.attributes.get("gen_ai.operation.name") == "search_memory"]
    assert [s.attributes["lgmp.result"] for s in reads] == ["miss", "hit", "hit", "miss"]
    assert reads[0].attributes["gen_ai.memory.record.id"] == "color"
    assert reads[0].attributes["gen_ai.memory.store.id"] == "prefs"
    conflict = finished[-1]
    assert conflict.attributes["gen_ai.operation.name"] == "update_memory"
    assert conflict.attributes["lgmp.result"] == "conflict"
    assert conflict.attributes["error.type"] == "ConflictError"
    assert conflict.status.status_code == StatusCode.ERROR
    points = otel_points(reader)
    lookups = {
        (p.attributes["result"], p.attributes["namespace"]): p.value
        for p in points["lgmp.store.lookups"]
        if p.attributes["backend"] == db
    }
    assert lookups == {("miss", "users/*/preferences"): 1, ("hit", "users/*/preferences"): 1,
                       ("hit", "other"): 1, ("miss", "other"): 1}  # fmt: skip
    (messages,) = points["lgmp.checkpoint.messages"]
    assert (messages.count, messages.sum) == (1, 3)
    failures = points["lgmp.write.failures"]
    assert [(p.attributes["result"], p.value) for p in failures] == [("conflict", 1)]
    durations = points["lgmp.operation.duration"]
    assert sum(p.count for p in durations) == len(finished)


def test_otel_records_query_text_only_with_content_capture(
    otel: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from langgraph_memory_plus.observability.otel import CAPTURE_CONTENT, attributes

    listener, spans, _ = otel
    read = StoreRead(backend="sqlite", duration=0.001, namespace=("u",), key=None, query="shoes")
    monkeypatch.delenv(CAPTURE_CONTENT, raising=False)
    assert "gen_ai.memory.query.text" not in attributes(read, None)
    monkeypatch.setenv(CAPTURE_CONTENT, "true")
    listener(read)
    (span,) = spans.get_finished_spans()
    assert span.attributes["gen_ai.memory.query.text"] == "shoes"
    assert span.attributes["db.operation.name"] == "search"


def test_otel_pending_approvals_is_an_observable_gauge(otel: Any, approvals_queue: Any) -> None:
    listener, _, reader = otel
    queue, interrupt = approvals_queue
    interrupt()
    listener.watch_approvals(queue, max_age=0)
    (point,) = otel_points(reader)["lgmp.approvals.pending"]
    assert point.value == queue.count() >= 1 and dict(point.attributes or {}) == {}


def test_otel_metrics_and_traces_switch_off_apart(otel: Any) -> None:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from langgraph_memory_plus.observability.otel import OpenTelemetryListener

    spans, reader = InMemorySpanExporter(), InMemoryMetricReader()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
    meter_provider = MeterProvider(metric_readers=[reader])
    read = StoreRead(backend="redis", duration=0.001, namespace=("u",), key="k", count=1)
    OpenTelemetryListener(
        tracer_provider=tracer_provider, meter_provider=meter_provider, traces=False
    )(read)
    assert spans.get_finished_spans() == () and "lgmp.store.lookups" in otel_points(reader)
    OpenTelemetryListener(
        tracer_provider=tracer_provider, meter_provider=meter_provider, metrics=False
    )(read)
    assert len(spans.get_finished_spans()) == 1
    assert sum(p.value for p in otel_points(reader)["lgmp.store.lookups"]) == 1


def test_otel_unsampled_spans_get_no_attributes() -> None:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from opentelemetry.sdk.trace.sampling import ALWAYS_OFF

    from langgraph_memory_plus.observability.otel import OpenTelemetryListener

    spans = InMemorySpanExporter()
    provider = TracerProvider(sampler=ALWAYS_OFF)
    provider.add_span_processor(SimpleSpanProcessor(spans))
    listener = OpenTelemetryListener(tracer_provider=provider, metrics=False)
    listener(StoreRead(backend="redis", duration=0.001, namespace=("u",), key="k", count=1))
    assert spans.get_finished_spans() == () and listener._static == {}


def test_otel_api_without_sdk_is_a_no_op() -> None:
    from langgraph_memory_plus.observability.otel import OpenTelemetryListener

    listener = OpenTelemetryListener()  # the global providers: the API's no-ops here
    listener(StoreRead(backend="redis", duration=0.001, namespace=("u",), key="k", count=1))


# -- OpenTelemetry: deferred recording (measurements reach the SDK at collection) -----------


def metrics_listener(*readers: Any, **options: Any) -> Any:
    """A metrics-only listener on a meter provider of its own with ``readers``."""
    from opentelemetry.sdk.metrics import MeterProvider

    from langgraph_memory_plus.observability.otel import OpenTelemetryListener

    provider = MeterProvider(metric_readers=list(readers))
    return OpenTelemetryListener(meter_provider=provider, traces=False, **options)


def saved(bytes_written: int = 2048, duration: float = 0.25) -> CheckpointSaved:
    return CheckpointSaved(
        backend="redis",
        duration=duration,
        thread_id="t",
        checkpoint_ns="",
        checkpoint_id="c",
        bytes_written=bytes_written,
        message_count=3,
    )


def loaded(hit: bool = True) -> CheckpointLoaded:
    return CheckpointLoaded(backend="redis", duration=0.5, thread_id="t", checkpoint_ns="",
                            checkpoint_id=None, hit=hit)  # fmt: skip


def histogram(points: dict[str, list[Any]], name: str) -> tuple[int, float]:
    """A histogram's count and sum over all its attribute sets."""
    found = points.get(name, [])
    return sum(p.count for p in found), sum(p.sum for p in found)


def test_otel_deferred_measurements_reach_the_next_collection_once() -> None:
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    reader = InMemoryMetricReader()
    listener = metrics_listener(reader)
    listener(saved(1000))
    listener(loaded())
    assert listener.pending == 2  # queued, not yet in the SDK
    points = otel_points(reader)
    assert listener.pending == 0
    assert histogram(points, "lgmp.checkpoint.size") == (1, 1000)
    assert [p.value for p in points["lgmp.checkpoint.loads"]] == [1]
    assert histogram(points, "lgmp.operation.duration") == (2, 0.75)
    assert not any(name.startswith("lgmp.listener") for name in points)  # observes nothing
    again = otel_points(reader)  # cumulative: the same totals, not drained twice
    assert histogram(again, "lgmp.checkpoint.size") == (1, 1000)
    assert [p.value for p in again["lgmp.checkpoint.loads"]] == [1]
    listener(saved(24))
    assert histogram(otel_points(reader), "lgmp.checkpoint.size") == (2, 1024)


def test_otel_deferred_holds_measurements_until_collection_and_inline_does_not() -> None:
    """White-box: dropping what is pending before collection loses exactly it, so a
    deferring listener handed the SDK nothing during the call; an inline one did."""
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    reader, inline_reader = InMemoryMetricReader(), InMemoryMetricReader()
    deferring = metrics_listener(reader)
    inline = metrics_listener(inline_reader, deferred=False)
    for listener in (deferring, inline):
        listener(saved())
    assert (deferring.pending, inline.pending) == (1, 0)
    deferring._pending.entries.clear()
    assert reader.get_metrics_data() is None  # nothing was ever recorded
    assert histogram(otel_points(inline_reader), "lgmp.checkpoint.size") == (1, 2048)
    deferring(saved(7))
    deferring.flush()  # on demand: handed over now, nothing left to drop
    deferring._pending.entries.clear()
    assert histogram(otel_points(reader), "lgmp.checkpoint.size") == (1, 7)


def test_otel_exemplars_only_with_inline_recording() -> None:
    """The SDK's trace-based exemplar filter needs the operation's span current: deferred
    measurements are recorded at collection, outside any span (even a collection made
    inside one), so they carry no exemplar; ``deferred=False`` keeps them."""
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider

    tracer = TracerProvider().get_tracer("test")
    reader, inline_reader = InMemoryMetricReader(), InMemoryMetricReader()
    deferring = metrics_listener(reader)
    inline = metrics_listener(inline_reader, deferred=False)
    with tracer.start_as_current_span("turn") as span:
        deferring(saved())
        inline(saved())
        deferred_points = otel_points(reader)["lgmp.checkpoint.size"]
    (point,) = otel_points(inline_reader)["lgmp.checkpoint.size"]
    assert [e.trace_id for e in point.exemplars] == [span.get_span_context().trace_id]
    assert [p.exemplars for p in deferred_points] == [[]]


def test_otel_deferred_is_counted_once_per_reader() -> None:
    """A drain during one reader's collection records into every reader's storage; the
    other reader's collection finds nothing left to drain, and reads the same totals."""
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    first, second = InMemoryMetricReader(), InMemoryMetricReader()
    listener = metrics_listener(first, second)
    for n in range(3):
        listener(saved(n + 1))
    assert histogram(otel_points(first), "lgmp.checkpoint.size") == (3, 6)
    assert histogram(otel_points(second), "lgmp.checkpoint.size") == (3, 6)
    assert histogram(otel_points(first), "lgmp.checkpoint.size") == (3, 6)
    listener(saved(10))
    listener(saved(20))
    assert histogram(otel_points(second), "lgmp.checkpoint.size") == (5, 36)
    assert histogram(otel_points(first), "lgmp.checkpoint.size") == (5, 36)


def test_otel_listeners_sharing_a_provider_each_drain() -> None:
    """The SDK keeps one callback per instrument name and meter: each listener's drain
    instrument has a name of its own, or the second listener's would never run."""
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    from langgraph_memory_plus.observability.otel import OpenTelemetryListener

    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    one, two = (OpenTelemetryListener(meter_provider=provider, traces=False) for _ in range(2))
    one(saved(1))
    two(saved(2))
    assert histogram(otel_points(reader), "lgmp.checkpoint.size") == (2, 3)
    assert (one.pending, two.pending) == (0, 0)


def test_otel_full_queue_records_the_oldest_inline_and_loses_nothing() -> None:
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    reader = InMemoryMetricReader()
    listener = metrics_listener(reader, max_pending=2)
    for size in (1, 2, 4, 8, 16):
        listener(saved(size))
        assert listener.pending <= 2
    assert histogram(otel_points(reader), "lgmp.checkpoint.size") == (5, 31)
    for size in (1, 2, 4, 8, 16):
        listener(saved(size))
    listener._pending.entries.clear()  # white-box: only the three oldest reached the SDK
    assert histogram(otel_points(reader), "lgmp.checkpoint.size") == (8, 31 + 7)
    with pytest.raises(ValueError):
        metrics_listener(max_pending=0)


def test_otel_an_error_event_is_recorded_at_once_and_not_kept() -> None:
    """A failed operation's event carries its exception (and through it the traceback's
    frames): it is recorded during the call, so nothing pending keeps it alive."""
    import gc
    import weakref

    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    class Broken(Exception):
        pass

    reader = InMemoryMetricReader()
    listener = metrics_listener(reader)
    error = Broken("lost connection")
    gone = weakref.ref(error)
    listener(StoreWritten(backend="redis", duration=0.5, namespace=("u",), key="k",
                          bytes_written=0, error=error))  # fmt: skip
    listener(StoreWritten(backend="redis", duration=0.25, namespace=("u",), key="k",
                          bytes_written=10))  # fmt: skip
    assert listener.pending == 1  # the success only
    del error
    gc.collect()
    assert gone() is None
    points = otel_points(reader)
    assert [(p.attributes["result"], p.value) for p in points["lgmp.write.failures"]] == [
        ("error", 1)
    ]
    durations = {
        p.attributes["result"]: (p.count, p.sum) for p in points["lgmp.operation.duration"]
    }
    assert durations == {"error": (1, 0.5), "ok": (1, 0.25)}


def test_otel_node_counters_are_deferred_and_summed_exactly() -> None:
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    reader = InMemoryMetricReader()
    listener = metrics_listener(reader).watch_nodes()
    try:
        stats = Stats()
        stats.incr("refused")
        stats.incr("unsafe_results", 2)
        stats.incr("unsafe_fields", 3)
        stats.incr("prefetch_used")
        stats.incr("injected")  # not a metric: nothing to record
    finally:
        listener.unwatch_nodes()
    assert listener.pending == 5
    points = otel_points(reader)
    refusals = {p.attributes["stage"]: p.value for p in points["lgmp.injection.scan.refusals"]}
    assert refusals == {"write": 1, "read": 5}
    assert [p.value for p in points["lgmp.prefetch.hits"]] == [1]


@pytest.mark.parametrize("max_pending", [64, 16_384])
def test_otel_concurrent_recording_and_collection_count_exactly(max_pending: int) -> None:
    """Threads record while another collects over and over (and, with a small bound, the
    recording threads also record the oldest inline): nothing lost, nothing twice."""
    import threading

    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    from langgraph_memory_plus.observability import CheckpointsExpired

    reader = InMemoryMetricReader()
    listener = metrics_listener(reader, max_pending=max_pending)
    threads, rounds = 4, 1500
    done = threading.Event()
    collections = 0

    def record(worker: int) -> None:
        for n in range(rounds):
            listener(saved(bytes_written=worker * 10_000 + n, duration=0.25))
            listener(loaded(hit=n % 3 != 0))
            listener(CheckpointsExpired(backend="redis", duration=0.5, deleted=n % 4))

    def collect() -> None:
        nonlocal collections
        while not done.is_set():
            reader.get_metrics_data()
            collections += 1

    collector = threading.Thread(target=collect)
    collector.start()
    workers = [threading.Thread(target=record, args=(w,)) for w in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    done.set()
    collector.join()
    points = otel_points(reader)
    assert collections > 1 and listener.pending == 0
    sizes = sum(w * 10_000 * rounds + rounds * (rounds - 1) // 2 for w in range(threads))
    assert histogram(points, "lgmp.checkpoint.size") == (threads * rounds, sizes)
    assert histogram(points, "lgmp.checkpoint.messages") == (threads * rounds, 3 * threads * rounds)
    events = 3 * threads * rounds
    assert histogram(points, "lgmp.operation.duration") == (events, 1.25 * threads * rounds)
    loads = {p.attributes["result"]: p.value for p in points["lgmp.checkpoint.loads"]}
    assert loads == {"hit": threads * 1000, "miss": threads * 500}
    (deleted,) = points["lgmp.ttl.sweep.deleted"]
    assert deleted.value == threads * (rounds // 4) * (0 + 1 + 2 + 3)


def test_otel_listener_made_before_the_global_provider_still_drains() -> None:
    """Made on the API's proxy provider (the app sets its provider later): the proxy
    hands the drain instrument's callback to the real meter. In a fresh interpreter, as
    the global provider can be set only once."""
    import subprocess
    import sys

    script = """
from opentelemetry import metrics
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from langgraph_memory_plus.observability import CheckpointSaved
from langgraph_memory_plus.observability.otel import OpenTelemetryListener

def saved(size):
    return CheckpointSaved(backend="redis", duration=0.25, thread_id="t", checkpoint_ns="",
                           checkpoint_id="c", bytes_written=size, message_count=3)

listener = OpenTelemetryListener(traces=False)
listener(saved(1))  # before the provider: held, and handed over at the first collection
reader = InMemoryMetricReader()
metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))
listener(saved(2))
assert listener.pending == 2
points = {m.name: list(m.data.data_points) for r in reader.get_metrics_data().resource_metrics
          for s in r.scope_metrics for m in s.metrics}
(size,) = points["lgmp.checkpoint.size"]
assert (size.count, size.sum, listener.pending) == (2, 3, 0), (size, listener.pending)
print("ok")
"""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


def test_the_example_alerts_and_dashboard_use_metrics_the_listener_exposes() -> None:
    """Every ``lgmp_*`` series the examples query is one ``PrometheusListener`` serves."""
    import json
    import re
    from pathlib import Path

    import yaml
    from prometheus_client import generate_latest

    class NoApprovals:
        def count(self) -> int:
            return 0

    registry = CollectorRegistry()
    PrometheusListener(registry=registry).watch_approvals(NoApprovals())
    served = set()
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        served.add(family.name)
        served.update(family.name + s for s in ("_total", "_bucket", "_sum", "_count"))
    examples = Path(__file__).resolve().parent.parent / "examples"
    rules = yaml.safe_load((examples / "prometheus-alerts.yml").read_text())
    alerts = {r["alert"]: r["expr"] for g in rules["groups"] for r in g["rules"]}
    assert len(alerts) == 4
    dashboard = json.loads((examples / "grafana-dashboard.json").read_text())
    exprs = [*alerts.values()] + [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    used = {name for e in exprs for name in re.findall(r"\blgmp_\w+", e)}
    assert used and used <= served, used - served
