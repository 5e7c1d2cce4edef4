"""Behaviour, bad-input and fault tests for ``PostgresSaver`` / ``AsyncPostgresSaver``.

Every test runs against a real PostgreSQL (the ``pg_url`` fixture) in a schema of its own, so
tests can count rows to prove that deletes, prunes and sweeps leave nothing behind (beyond the
one small deletion tombstone per deleted thread that makes deletion final; see
:func:`assert_leftovers`).

Most tests are written once against :class:`Ops`, a small adapter that drives either class
through one ``await``-able interface, and run for both (the ``flavour`` parameter). Where
behaviour is "the same as LangGraph's ``InMemorySaver``", the test applies the same calls to an
``InMemorySaver`` and compares the answers instead of hard-coding them.

No assertion depends on how fast anything runs: waits are bounded polls for a condition (a
backend blocked on a lock) and TTL tests only sleep *longer* than a TTL, except the refresh
test, which leaves more than a second of slack on the side where slowness could matter.
"""

from __future__ import annotations

import asyncio
import copy
import operator
import os
import random
import secrets
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import asynccontextmanager, suppress
from datetime import datetime, timezone
from typing import Annotated, Any, TypedDict

import psycopg
import pytest
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langchain_core.runnables import RunnableConfig
from langgraph.channels import DeltaChannel
from langgraph.checkpoint.base import Checkpoint, CheckpointTuple
from langgraph.checkpoint.base.id import uuid6
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.serde.encrypted import EncryptedSerializer
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.checkpoint.serde.types import ERROR, INTERRUPT
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from psycopg import sql
from psycopg_pool import AsyncConnectionPool, ConnectionPool
from typing_extensions import NotRequired

from langgraph_memory_plus import AsyncPostgresSaver, PostgresSaver
from langgraph_memory_plus.checkpoint import task_writes
from langgraph_memory_plus.checkpoint.lists import PAGE_SIZE
from langgraph_memory_plus.checkpoint.postgres import plans as pg_plans
from langgraph_memory_plus.checkpoint.postgres.schema import MIGRATIONS
from langgraph_memory_plus.errors import InvalidConfigError, ValueTooLargeError

pytestmark = pytest.mark.storage

WAIT_SECONDS = 20.0  # upper bound of every poll; a healthy run never gets near it


# --------------------------------------------------------------------------------------------
# Adapter: one async interface over the sync and the async saver
# --------------------------------------------------------------------------------------------


class Ops:
    """Drives a sync saver through its sync methods, an async saver through its ``a*`` twins."""

    def __init__(self, saver: Any, is_async: bool) -> None:
        self.saver = saver
        self.is_async = is_async

    async def _call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        if self.is_async:
            return await getattr(self.saver, "a" + name)(*args, **kwargs)
        return getattr(self.saver, name)(*args, **kwargs)

    async def setup(self) -> None:
        if self.is_async:  # the async class's setup() is itself a coroutine
            await self.saver.setup()
        else:
            self.saver.setup()

    async def put(
        self, config: RunnableConfig, checkpoint: Checkpoint, metadata: Any, versions: Any
    ) -> RunnableConfig:
        return await self._call("put", config, checkpoint, metadata, versions)

    async def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        await self._call("put_writes", config, writes, task_id, task_path)

    async def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return await self._call("get_tuple", config)

    async def list(self, config: RunnableConfig | None, **kwargs: Any) -> list[CheckpointTuple]:
        if self.is_async:
            return [t async for t in self.saver.alist(config, **kwargs)]
        return list(self.saver.list(config, **kwargs))

    async def delete_thread(self, thread_id: str) -> None:
        await self._call("delete_thread", thread_id)

    async def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        await self._call("delete_for_runs", run_ids)

    async def copy_thread(self, source: str, target: str) -> None:
        await self._call("copy_thread", source, target)

    async def prune(self, thread_ids: Sequence[str], strategy: str = "keep_latest") -> None:
        await self._call("prune", thread_ids, strategy=strategy)

    async def delta_history(self, config: RunnableConfig, channels: Sequence[str]) -> Any:
        return await self._call("get_delta_channel_history", config=config, channels=channels)

    async def sweep_expired(self, **kwargs: Any) -> int:
        return await self._call("sweep_expired", **kwargs)

    def background(self, name: str, *args: Any) -> asyncio.Task[Any]:
        """Start a call without waiting for it (sync savers run in a worker thread)."""
        if self.is_async:
            return asyncio.ensure_future(getattr(self.saver, "a" + name)(*args))
        return asyncio.ensure_future(asyncio.to_thread(getattr(self.saver, name), *args))

    async def invoke(self, graph: Any, graph_input: Any, config: RunnableConfig) -> Any:
        if self.is_async:
            return await graph.ainvoke(graph_input, config)
        return graph.invoke(graph_input, config)

    async def state(self, graph: Any, config: RunnableConfig) -> Any:
        if self.is_async:
            return await graph.aget_state(config)
        return graph.get_state(config)


def reference() -> Ops:
    """LangGraph's own in-memory saver, the behaviour we must match."""
    return Ops(InMemorySaver(), is_async=False)


@asynccontextmanager
async def open_mode(
    mode: str,
    conninfo: str,
    schema: str,
    *,
    pool_size: int = 4,
    check: bool = False,
    **options: Any,
) -> AsyncIterator[Ops]:
    """Open a saver on ``schema`` and run ``setup()``.

    ``mode`` is ``{sync|async}-{pool|conn}[-pipeline]``: which class, whether it gets a
    connection pool or a single connection, and whether pipeline mode is on.
    """
    is_async = mode.startswith("async")
    kind = mode.split("-")[1]
    if mode.endswith("-pipeline"):
        options["pipeline"] = True
    kwargs = {"autocommit": True}
    if not is_async:
        resource: Any
        if kind == "pool":
            resource = ConnectionPool(
                conninfo,
                min_size=1,
                max_size=pool_size,
                kwargs=kwargs,
                open=True,
                check=ConnectionPool.check_connection if check else None,
            )
        else:
            resource = psycopg.connect(conninfo, **kwargs)
        try:
            ops = Ops(PostgresSaver(resource, schema=schema, **options), is_async=False)
            await ops.setup()
            yield ops
        finally:
            resource.close()
    else:
        if kind == "pool":
            resource = AsyncConnectionPool(
                conninfo,
                min_size=1,
                max_size=pool_size,
                kwargs=kwargs,
                open=False,
                check=AsyncConnectionPool.check_connection if check else None,
            )
            await resource.open()
        else:
            resource = await psycopg.AsyncConnection.connect(conninfo, **kwargs)
        try:
            ops = Ops(AsyncPostgresSaver(resource, schema=schema, **options), is_async=True)
            await ops.setup()
            yield ops
        finally:
            await resource.close()


@asynccontextmanager
async def open_from_conn_string(flavour: str, conninfo: str, **options: Any) -> AsyncIterator[Ops]:
    if flavour == "sync":
        with PostgresSaver.from_conn_string(conninfo, **options) as saver:
            ops = Ops(saver, is_async=False)
            await ops.setup()
            yield ops
    else:
        async with AsyncPostgresSaver.from_conn_string(conninfo, **options) as asaver:
            ops = Ops(asaver, is_async=True)
            await ops.setup()
            yield ops


# --------------------------------------------------------------------------------------------
# Fixtures
# --------------------------------------------------------------------------------------------


def _new_schema_name() -> str:
    return f"lgmp_t_{uuid.uuid4().hex[:12]}"


def _drop_schemas(conninfo: str, *names: str) -> None:
    with psycopg.connect(conninfo, autocommit=True) as conn:
        for name in names:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))


@pytest.fixture
def schema(pg_url: str) -> Iterator[str]:
    """A fresh, empty schema for one test; dropped afterwards."""
    name = _new_schema_name()
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(name)))
    yield name
    _drop_schemas(pg_url, name)


@pytest.fixture
def new_schema_name(pg_url: str) -> Iterator[str]:
    """A schema name that does not exist yet (the saver must create it)."""
    name = _new_schema_name()
    yield name
    _drop_schemas(pg_url, name)


@pytest.fixture
def admin(pg_url: str) -> Iterator[psycopg.Connection[Any]]:
    """An autocommit connection for looking at the tables behind the saver's back."""
    with psycopg.connect(pg_url, autocommit=True) as conn:
        yield conn


@pytest.fixture(params=["sync", "async"])
def flavour(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def open_saver(flavour: str, pg_url: str) -> Callable[..., Any]:
    """``open_saver(schema, **options)``: a pool-based saver of this test's flavour."""

    def _open(schema: str, **options: Any) -> Any:
        conninfo = options.pop("conninfo", pg_url)
        return open_mode(f"{flavour}-pool", conninfo, schema, **options)

    return _open


# --------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------


def cfg(thread_id: str, ns: str = "", checkpoint_id: str | None = None) -> RunnableConfig:
    configurable: dict[str, Any] = {"thread_id": thread_id, "checkpoint_ns": ns}
    if checkpoint_id is not None:
        configurable["checkpoint_id"] = checkpoint_id
    return {"configurable": configurable}


def make_checkpoint(
    values: dict[str, Any] | None = None, versions: dict[str, Any] | None = None
) -> Checkpoint:
    values = dict(values or {})
    return Checkpoint(
        v=4,
        id=str(uuid6(clock_seq=-1)),
        ts=datetime.now(timezone.utc).isoformat(),
        channel_values=values,
        channel_versions=dict(versions if versions is not None else dict.fromkeys(values, 1)),
        versions_seen={},
        updated_channels=None,
    )


def checkpoint_id(config: RunnableConfig) -> str:
    return str(config["configurable"]["checkpoint_id"])


def ids(tuples: Sequence[CheckpointTuple]) -> list[str]:
    return [checkpoint_id(t.config) for t in tuples]


def key_of(t: CheckpointTuple) -> tuple[str, str, str]:
    c = t.config["configurable"]
    return (c["thread_id"], c.get("checkpoint_ns", ""), c["checkpoint_id"])


def _pick(config: RunnableConfig | None) -> dict[str, Any] | None:
    if config is None:
        return None
    c = config["configurable"]
    return {k: c.get(k) for k in ("thread_id", "checkpoint_ns", "checkpoint_id")}


def norm(t: CheckpointTuple | None) -> dict[str, Any] | None:
    """A tuple as plain data, comparable across savers."""
    if t is None:
        return None
    return {
        "config": _pick(t.config),
        "checkpoint": t.checkpoint,
        "metadata": t.metadata,
        "parent_config": _pick(t.parent_config),
        "pending_writes": [tuple(w) for w in (t.pending_writes or [])],
    }


def norm_set(tuples: Sequence[CheckpointTuple]) -> list[dict[str, Any] | None]:
    return [norm(t) for t in sorted(tuples, key=key_of)]


async def put_chain(
    ops: Ops,
    thread_id: str,
    n: int,
    *,
    ns: str = "",
    run_id: str = "run-1",
    parent: str | None = None,
    writes: bool = True,
    tag: str = "",
) -> list[RunnableConfig]:
    """Put ``n`` checkpoints in a parent chain; channel ``const`` is written only once.

    Every value names its thread, namespace and step, so cross-talk is visible.
    """
    stored: list[RunnableConfig] = []
    for i in range(n):
        values = {"a": f"{thread_id}/{ns}/a{i}{tag}", "const": f"{thread_id}/{ns}/const{tag}"}
        new_versions: dict[str, Any] = {"a": i + 1}
        if i == 0:
            new_versions["const"] = 1
        metadata = {"source": "loop", "step": i, "parents": {}, "run_id": run_id}
        config = await ops.put(
            cfg(thread_id, ns, parent),
            make_checkpoint(values, {"a": i + 1, "const": 1}),
            metadata,
            new_versions,
        )
        if writes:
            await ops.put_writes(config, [("a", f"w{i}{tag}"), ("b", i)], f"task-{i}", "")
        parent = checkpoint_id(config)
        stored.append(config)
    return stored


def base_tables(conn: psycopg.Connection[Any], schema: str) -> list[str]:
    rows = conn.execute(
        "SELECT table_name FROM information_schema.tables"
        " WHERE table_schema = %s AND table_type = 'BASE TABLE' ORDER BY table_name",
        [schema],
    ).fetchall()
    return [r[0] for r in rows]


def table_counts(conn: psycopg.Connection[Any], schema: str) -> dict[str, int]:
    counts = {}
    for table in base_tables(conn, schema):
        row = conn.execute(
            sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(schema, table))
        ).fetchone()
        assert row is not None
        counts[table] = int(row[0])
    return counts


def raw_text(conn: psycopg.Connection[Any], schema: str) -> str:
    """Every stored row of the schema as text (bytea shows as hex)."""
    parts = []
    for table in base_tables(conn, schema):
        rows = conn.execute(
            sql.SQL("SELECT t::text FROM {} AS t").format(sql.Identifier(schema, table))
        ).fetchall()
        parts.extend(r[0] for r in rows)
    return "\n".join(parts)


def assert_leftovers(
    conn: psycopg.Connection[Any],
    schema: str,
    expected: dict[str, int],
    *,
    markers: int,
    absent: Sequence[str],
) -> None:
    """Nothing of a deleted thread is left but at most ``markers`` small rows.

    The saver keeps a deletion tombstone per deleted thread (thread-id hash + last checkpoint
    id, swept later) so that late writes of a deleted run are refused; such a row may stay,
    but no stored id, value or write of the thread may.
    """
    counts = table_counts(conn, schema)
    extra = {t: counts[t] - expected.get(t, 0) for t in counts if counts[t] != expected.get(t, 0)}
    assert all(n > 0 for n in extra.values()) and sum(extra.values()) <= markers, (
        f"rows left behind (beyond {markers} tombstone(s)): {extra}"
    )
    text = raw_text(conn, schema)
    for needle in absent:
        assert needle not in text, f"{needle[:60]!r} is still stored"
        assert needle.encode().hex() not in text, f"{needle[:60]!r} is still stored (bytea)"


def blocked_by(conn: psycopg.Connection[Any], locker_pid: int) -> list[int]:
    rows = conn.execute(
        "SELECT pid FROM pg_stat_activity WHERE %s = ANY(pg_blocking_pids(pid))", [locker_pid]
    ).fetchall()
    return [r[0] for r in rows]


async def wait_for_blocked(
    conn: psycopg.Connection[Any], locker_pid: int, tasks: Sequence[asyncio.Task[Any]], count: int
) -> list[int] | None:
    """Wait until ``count`` backends wait on ``locker_pid``'s locks; None if a task ended first."""
    deadline = time.monotonic() + WAIT_SECONDS
    while time.monotonic() < deadline:
        pids = blocked_by(conn, locker_pid)
        if len(pids) >= count:
            return pids
        if any(t.done() for t in tasks):
            return None
        await asyncio.sleep(0.02)
    raise AssertionError(
        f"only {len(blocked_by(conn, locker_pid))} of {count} calls were waiting on the lock "
        f"after {WAIT_SECONDS}s (with count > 1: calls are not running concurrently)"
    )


async def outcome(task: asyncio.Task[Any]) -> BaseException | None:
    try:
        await asyncio.wait_for(task, WAIT_SECONDS)
    except Exception as exc:
        return exc
    return None


def lock_tables(conn: psycopg.Connection[Any], schema: str, tables: Sequence[str]) -> None:
    """In ``conn``'s open transaction, block every write to ``tables`` (reads still work)."""
    conn.execute(
        sql.SQL("LOCK TABLE {} IN EXCLUSIVE MODE").format(
            sql.SQL(", ").join(sql.Identifier(schema, t) for t in tables)
        )
    )


def terminate(conn: psycopg.Connection[Any], pids: Sequence[int]) -> None:
    for pid in pids:
        conn.execute("SELECT pg_terminate_backend(%s)", [pid])
    deadline = time.monotonic() + WAIT_SECONDS
    while time.monotonic() < deadline:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE pid = ANY(%s)", [list(pids)]
        ).fetchone()
        if row is not None and row[0] == 0:
            return
        time.sleep(0.02)
    raise AssertionError(f"backends {pids} did not exit")


# --------------------------------------------------------------------------------------------
# Bad input: configs and options
# --------------------------------------------------------------------------------------------

NO_THREAD_CONFIGS = [
    pytest.param({"configurable": {}}, id="empty-configurable"),
    pytest.param({"configurable": {"checkpoint_ns": ""}}, id="ns-only"),
    pytest.param({"configurable": {"thread_id": None}}, id="thread-none"),
    pytest.param({}, id="no-configurable"),
]


@pytest.mark.parametrize("bad", NO_THREAD_CONFIGS)
async def test_config_without_thread_id_is_rejected_by_name(
    open_saver: Any, schema: str, admin: Any, bad: RunnableConfig
) -> None:
    async with open_saver(schema) as ops:
        baseline = table_counts(admin, schema)
        calls = {
            "get_tuple": lambda: ops.get_tuple(bad),
            "put": lambda: ops.put(bad, make_checkpoint({"a": 1}), {"step": 0}, {"a": 1}),
            "put_writes": lambda: ops.put_writes(bad, [("a", 1)], "task"),
            "get_delta_channel_history": lambda: ops.delta_history(bad, ["a"]),
        }
        for name, call in calls.items():
            with pytest.raises(InvalidConfigError, match="thread_id") as info:
                await call()
            assert isinstance(info.value, ValueError), name
        assert table_counts(admin, schema) == baseline, "a rejected call wrote rows"


async def test_put_writes_without_checkpoint_id_names_the_key(
    open_saver: Any, schema: str, admin: Any
) -> None:
    async with open_saver(schema) as ops:
        await put_chain(ops, "t", 1, writes=False)
        before = table_counts(admin, schema)
        with pytest.raises(InvalidConfigError, match="checkpoint_id"):
            await ops.put_writes(cfg("t"), [("a", 1)], "task")
        assert table_counts(admin, schema) == before


@pytest.mark.parametrize(
    "options",
    [
        pytest.param({"ttl": {"default_ttl": -1}}, id="negative-ttl"),
        pytest.param({"ttl": {"default_ttl": "soon"}}, id="ttl-not-a-number"),
        pytest.param({"keep_last": 0}, id="keep-last-zero"),
    ],
)
def test_bad_options_are_rejected_at_construction(
    pg_url: str, schema: str, options: dict[str, Any]
) -> None:
    with psycopg.connect(pg_url, autocommit=True) as conn, pytest.raises(ValueError):
        PostgresSaver(conn, schema=schema, **options)


# --------------------------------------------------------------------------------------------
# Drop-in behaviour: the same calls on InMemorySaver and on ours give the same answers
# --------------------------------------------------------------------------------------------

DIFF_THREADS = ["diff-a", "diff-b 'quoted' \"x\"", "diff-c 日本 🦜"]
DIFF_NAMESPACES = ["", "child:1", "child:2|grand:3"]
DIFF_FILTERS: list[dict[str, Any]] = [
    {"source": "loop"},
    {"step": 0},
    {"run_id": "run-2"},
    {"source": "update", "run_id": "run-1"},
    {"score": 1.5},
    {"flag": True},
    {"unicode": "日本 🦜"},
    {"na\x00me": "value"},
    {"user_id": "user-1"},
    {"origin": "diff"},
    {"nested": {"k": 1, "deep": {"x\x00": "y\x00"}}},
    {"run_id": "no-such-run"},
    # InMemorySaver's equality across number types: 0 == 0.0 == False, 1 == True.
    {"step": 0.0},
    {"step": False},
    {"flag": 1},
    {"score": 1.5, "source": "loop"},
    {"step": 2**70},
    {"step": None},
]


def _version(channel: str, n: int) -> Any:
    # "a"/"b" use int versions (BaseCheckpointSaver default), "c"/"d" InMemorySaver-style strings
    return n if channel in ("a", "b") else f"{n:032}.{0.25:016}"


def _value(label: str) -> Any:
    kind = sum(label.encode()) % 6
    return [
        label,
        f"{label} with \x00 nul",
        b"bytes:" + label.encode(),
        None,
        {"label": label, "n": [1, 2.5, True], "when": datetime(2024, 1, 2, tzinfo=timezone.utc)},
        HumanMessage(content=f"msg {label}", id=f"id-{label}"),
    ][kind]


async def run_workload(targets: Sequence[Ops], seed: int = 7) -> list[RunnableConfig]:
    """Apply one pseudo-random history to every target; return the stored configs."""
    rng = random.Random(seed)
    stored_all: list[RunnableConfig] = []

    async def on_all(name: str, *args: Any) -> list[Any]:
        return [await getattr(t, name)(*copy.deepcopy(args)) for t in targets]

    for tid in DIFF_THREADS:
        for ns in DIFF_NAMESPACES:
            counters: dict[str, int] = {}
            chain: list[str] = []
            parent: str | None = None
            for step in range(rng.randint(1, 4) + (1 if ns == "" else 0)):
                updated = rng.sample(["a", "b", "c", "d"], rng.randint(1, 3))
                for ch in updated:
                    counters[ch] = counters.get(ch, 0) + 1
                values = {}
                for ch, n in counters.items():
                    if ch == "d" and n % 3 != 1:
                        continue  # like a DeltaChannel: a stored value only every 3rd version
                    values[ch] = _value(f"{tid}/{ns}/{ch}/{n}")
                checkpoint = make_checkpoint(
                    values, {ch: _version(ch, n) for ch, n in counters.items()}
                )
                checkpoint["versions_seen"] = {"node": {"a": _version("a", counters.get("a", 0))}}
                checkpoint["updated_channels"] = sorted(updated)
                metadata = {
                    "source": rng.choice(["input", "loop", "update"]),
                    "step": step - 1,
                    "parents": {"": parent} if ns and parent else {},
                    "run_id": f"run-{rng.randint(1, 3)}",
                    "tags": rng.sample(["x", "y", "z"], rng.randint(0, 2)),
                    "nested": {"k": rng.randint(0, 2), "deep": {"x\x00": "y\x00"}},
                    "na\x00me": "val\x00ue",
                    "score": rng.choice([1.5, 2.5]),
                    "flag": rng.random() < 0.5,
                    "unicode": "日本 🦜",
                }
                config: RunnableConfig = {
                    "configurable": {
                        "thread_id": tid,
                        "checkpoint_ns": ns,
                        # (a NUL in a user id is refused: the other keys keep testing it)
                        "user_id": "user-1",
                        "__private": "not metadata",
                        "langgraph_step": 3,
                    },
                    "metadata": {"origin": "diff"},
                }
                if parent is not None:
                    config["configurable"]["checkpoint_id"] = parent
                new_versions = {ch: _version(ch, counters[ch]) for ch in updated}
                results = await on_all("put", config, checkpoint, metadata, new_versions)
                assert all(_pick(r) == _pick(results[0]) for r in results), results
                stored = results[0]
                stored_all.append(stored)
                chain.append(checkpoint_id(stored))
                parent = checkpoint_id(stored)

                tasks = [
                    ("task-b", "~__pregel_pull, b"),
                    ("task-a", "~__pregel_pull, a"),
                    ("t0", ""),
                ]
                if rng.random() < 0.8:
                    for task_id, path in rng.sample(tasks, rng.randint(1, 3)):
                        writes: list[tuple[str, Any]] = [
                            (ch, _value(f"w/{tid}/{ns}/{step}/{task_id}/{ch}"))
                            for ch in rng.sample(["a", "b", "d"], 2)
                        ]
                        if rng.random() < 0.4:
                            writes.append((ERROR, f"boom {step}"))
                        if rng.random() < 0.3:
                            writes.append((INTERRUPT, {"question": "why?\x00"}))
                        await on_all("put_writes", stored, writes, task_id, path)
                        if rng.random() < 0.4:
                            # a retried task: regular writes keep the first value,
                            # special writes (error, interrupt) take the latest
                            again = [(c, ("retry", v)) for c, v in writes]
                            await on_all("put_writes", stored, again, task_id, path)
            if len(chain) >= 2:  # fork from the first checkpoint
                checkpoint = make_checkpoint(
                    {"a": _value(f"fork/{tid}/{ns}")}, {"a": _version("a", 99)}
                )
                fork_md = {"source": "fork", "step": 99, "parents": {}, "run_id": "run-fork"}
                results = await on_all(
                    "put", cfg(tid, ns, chain[0]), checkpoint, fork_md, {"a": _version("a", 99)}
                )
                stored_all.append(results[0])
    return stored_all


async def compare_with_reference(
    ours: Ops, ref: Ops, stored: Sequence[RunnableConfig]
) -> list[str]:
    """Ask both savers the same questions; return the questions they answer differently."""
    mismatches: list[str] = []

    def check(what: str, mine: Any, theirs: Any) -> None:
        if mine != theirs:
            mismatches.append(f"{what}:\n    ours: {mine!r}\n    InMemorySaver: {theirs!r}")

    async def same_list(what: str, config: RunnableConfig | None, ordered: bool, **kw: Any) -> None:
        mine, theirs = await ours.list(config, **kw), await ref.list(config, **kw)
        if ordered:
            check(what, [norm(t) for t in mine], [norm(t) for t in theirs])
        else:
            check(what, norm_set(mine), norm_set(theirs))

    for config in stored:
        check(
            f"get_tuple {_pick(config)}",
            norm(await ours.get_tuple(config)),
            norm(await ref.get_tuple(config)),
        )
        check(
            f"get_delta_channel_history {_pick(config)}",
            dict(await ours.delta_history(config, ["a", "d", "c", "nope"])),
            dict(await ref.delta_history(config, ["a", "d", "c", "nope"])),
        )
    for tid in [*DIFF_THREADS, "no-such-thread"]:
        await same_list(
            f"list thread={tid!r} (all namespaces)",
            {"configurable": {"thread_id": tid}},
            ordered=False,
        )
        for ns in DIFF_NAMESPACES:
            here = cfg(tid, ns)
            check(
                f"get_tuple latest {tid!r}/{ns!r}",
                norm(await ours.get_tuple(here)),
                norm(await ref.get_tuple(here)),
            )
            check(
                f"delta history latest {tid!r}/{ns!r}",
                dict(await ours.delta_history(here, ["a", "d"])),
                dict(await ref.delta_history(here, ["a", "d"])),
            )
            await same_list(f"list {tid!r}/{ns!r}", here, ordered=True)
            for limit in (0, 1, 2):
                await same_list(f"list {tid!r}/{ns!r} limit={limit}", here, True, limit=limit)
            for t in await ref.list(here):
                await same_list(
                    f"list {tid!r}/{ns!r} before={key_of(t)}", here, True, before=t.config
                )
                await same_list(
                    f"list {tid!r}/{ns!r} before={key_of(t)} limit=1",
                    here,
                    True,
                    before=t.config,
                    limit=1,
                )
                await same_list(
                    f"list by id {key_of(t)}", cfg(tid, ns, checkpoint_id(t.config)), ordered=True
                )
            for flt in DIFF_FILTERS:
                await same_list(f"list {tid!r}/{ns!r} filter={flt!r}", here, True, filter=flt)
    await same_list("list(None)", None, ordered=False)
    for config in stored[::4]:
        c = config["configurable"]
        await same_list(f"list(None, before={_pick(config)})", None, ordered=False, before=config)
        await same_list(
            f"list by id without ns {_pick(config)}",
            {"configurable": {"thread_id": c["thread_id"], "checkpoint_id": c["checkpoint_id"]}},
            ordered=False,
        )
        no_ns: RunnableConfig = {"configurable": {"thread_id": c["thread_id"]}}
        check(
            f"get_tuple without checkpoint_ns {c['thread_id']!r}",
            norm(await ours.get_tuple(no_ns)),
            norm(await ref.get_tuple(no_ns)),
        )
    for flt in DIFF_FILTERS:
        await same_list(f"list(None, filter={flt!r})", None, ordered=False, filter=flt)
    for limit in (1, 5):
        mine = await ours.list(None, limit=limit)
        check(f"len(list(None, limit={limit}))", len(mine), len(await ref.list(None, limit=limit)))
    check(
        "delta history, empty channel list",
        dict(await ours.delta_history(cfg("diff-a"), [])),
        dict(await ref.delta_history(cfg("diff-a"), [])),
    )
    return mismatches


MODES = [
    "sync-pool",
    "sync-pool-pipeline",
    "sync-conn",
    "sync-conn-pipeline",
    "async-pool",
    "async-pool-pipeline",
    "async-conn",
    "async-conn-pipeline",
]


@pytest.mark.parametrize("mode", MODES)
async def test_same_answers_as_inmemory_saver(mode: str, pg_url: str, schema: str) -> None:
    """Puts, writes (incl. retried and special writes), forks, namespaces, metadata with NULs:
    get_tuple, list (filter/before/limit), get_delta_channel_history agree with InMemorySaver,
    over a pool, a single connection, and pipeline mode."""
    ref = reference()
    async with open_mode(mode, pg_url, schema) as ours:
        stored = await run_workload([ours, ref])
        mismatches = await compare_with_reference(ours, ref, stored)
    assert not mismatches, f"{len(mismatches)} differences:\n" + "\n".join(mismatches[:15])


async def test_a_fresh_saver_instance_reads_the_same_history(
    flavour: str, pg_url: str, schema: str
) -> None:
    """The process-restart case at the API level: nothing lives only in the saver object."""
    ref = reference()
    async with open_mode(f"{flavour}-pool", pg_url, schema) as first:
        stored = await run_workload([first, ref], seed=11)
    async with open_mode(f"{flavour}-pool", pg_url, schema) as second:
        mismatches = await compare_with_reference(second, ref, stored)
    assert not mismatches, "\n".join(mismatches[:10])


EDGE_FILTERS = [
    pytest.param({"nested": {"k": 1}}, id="nested-dict-subset"),
    pytest.param({"nested": {"k": True}}, id="nested-true-equals-one"),
    pytest.param({"tags": ["x"]}, id="list-subset"),
    pytest.param({"tags": [True]}, id="list-true-equals-one"),
    pytest.param({"missing_key": None}, id="none-matches-absent-key"),
    pytest.param({"step": 0.0}, id="float-equals-int"),
    pytest.param({"step": True}, id="true-equals-one"),
    pytest.param({"flag": 1}, id="one-equals-true"),
    pytest.param({"score": 2}, id="int-equals-float"),
    pytest.param({"score": 2.5, "step": 1}, id="float-and-int"),
    pytest.param({"big": 2**64 - 1}, id="int-beyond-signed-64-bits"),
    pytest.param({"big": 2**63 - 1}, id="largest-64-bit-int"),
    pytest.param({"score": float("inf")}, id="infinite-float"),
    pytest.param({"step": "1"}, id="text-is-not-a-number"),
]
"""``list(filter=...)`` cases where JSON containment and Python equality part ways."""

EDGE_METADATA: list[dict[str, Any]] = [
    {"step": 0, "nested": {"k": 1, "j": 2}, "tags": ["x", "y"]},
    {"step": 0, "nested": {"k": 1}, "tags": ["x"], "missing_key": "set"},
    {"step": 1, "nested": {"k": 2}, "tags": [1]},
    {"step": 1, "flag": True, "score": 2.0, "big": 2**64 - 1},
    {"step": True, "flag": 1.0, "score": 2.5, "big": 2**63 - 1},
    {"step": "1", "flag": False, "score": float("inf"), "big": 2**63},
]


async def filter_edge_case(ours: Ops, flt: dict[str, Any]) -> tuple[list[Any], list[Any]]:
    """Store :data:`EDGE_METADATA` on ``ours`` and on InMemorySaver; both answers."""
    ref = reference()
    for i, md in enumerate(EDGE_METADATA):
        checkpoint = make_checkpoint()
        for t in (ours, ref):
            await t.put(cfg(f"flt-{i}"), checkpoint, {"source": "loop", **md}, {})
    mine = norm_set(await ours.list(None, filter=flt))
    theirs = norm_set(await ref.list(None, filter=flt))
    return [m["config"] for m in mine if m], [t["config"] for t in theirs if t]


@pytest.mark.parametrize("flt", EDGE_FILTERS)
async def test_list_filter_edge_cases_match_inmemory(
    open_saver: Any, schema: str, flt: dict[str, Any]
) -> None:
    """InMemorySaver filters by equality of each top-level key (``True == 1 == 1.0``), not
    JSON containment."""
    async with open_saver(schema) as ours:
        mine, theirs = await filter_edge_case(ours, flt)
    assert mine == theirs and theirs, (mine, theirs)


# --------------------------------------------------------------------------------------------
# NUL characters, huge values, odd thread ids
# --------------------------------------------------------------------------------------------


async def test_nul_characters_round_trip_like_inmemory(open_saver: Any, schema: str) -> None:
    """PostgreSQL text and JSONB reject \\u0000; the saver must still store it losslessly."""
    values = {
        "text": "before\x00after",
        "nested": {"k\x00ey": ["x\x00", {"y": "\x00"}]},
        "message": HumanMessage(content="hi\x00there", id="m\x001"),
    }
    metadata = {
        "source": "loop",
        "step": 1,
        "parents": {},
        "top\x00key": "top\x00value",  # top-level string values lose NULs in LangGraph itself
        "nested": {"in\x00ner": "v\x00", "list": ["a\x00b"]},
    }
    writes = [("text", "write\x00value"), ("nested", {"k\x00": "v\x00"})]
    ref = reference()
    async with open_saver(schema) as ours:
        results = {}
        checkpoint = make_checkpoint(values)
        for name, t in (("ours", ours), ("ref", ref)):
            stored = await t.put(
                cfg("nul-thread"), copy.deepcopy(checkpoint), metadata, dict.fromkeys(values, 1)
            )
            await t.put_writes(stored, writes, "task-1", "path")
            tup = await t.get_tuple(cfg("nul-thread"))
            results[name] = {
                "get_tuple": norm(tup),
                "list": [norm(x) for x in await t.list(cfg("nul-thread"))],
                "filter-nested": ids(await t.list(None, filter={"nested": metadata["nested"]})),
                "filter-key": ids(await t.list(None, filter={"top\x00key": "topvalue"})),
            }
        assert results["ours"] == results["ref"]
        assert results["ours"]["get_tuple"]["checkpoint"]["channel_values"] == values
        assert results["ours"]["filter-nested"]  # the filter did match something


async def test_metadata_of_any_serializable_type_round_trips_like_inmemory(
    open_saver: Any, schema: str
) -> None:
    """Metadata is LangGraph's to fill: values JSON has no type for must survive too."""
    metadata = {
        "source": "update",
        "step": 3,
        "parents": {"": "p", "child:1": "q"},
        "when": datetime(2024, 5, 6, 7, 8, 9, tzinfo=timezone.utc),
        "raw": b"\x00\xffbytes",
        "pair": (1, "two"),
        "infinite": float("inf"),
        "big": 2**62,
        "none": None,
        "deep": {"list": [1, [2, {"x": None}]], "empty": {}},
    }
    ref = reference()
    async with open_saver(schema) as ours:
        checkpoint = make_checkpoint({"a": 1})
        got = {}
        for name, t in (("ours", ours), ("ref", ref)):
            await t.put(
                cfg("md-types"), copy.deepcopy(checkpoint), copy.deepcopy(metadata), {"a": 1}
            )
            tup = await t.get_tuple(cfg("md-types"))
            assert tup is not None
            got[name] = (
                tup.metadata,
                ids(await t.list(None, filter={"big": 2**62, "none": None})),
                ids(await t.list(None, filter={"parents": {"": "p", "child:1": "q"}})),
            )
        assert got["ours"] == got["ref"]


async def test_small_scalar_values_live_in_the_checkpoint_row(
    open_saver: Any, schema: str, admin: Any
) -> None:
    """None, numbers and short strings cost no blob row; they read back like InMemorySaver,
    also once carried into later checkpoints and after the first checkpoint is pruned."""
    values = {"n": 5, "none": None, "s": "short", "f": 2.5, "big": "x" * 200}
    ref = reference()
    async with open_saver(schema) as ours:
        one = make_checkpoint(values)
        two = make_checkpoint({**values, "n": 6}, {**dict.fromkeys(values, 1), "n": 2})
        for t in (ours, ref):
            first = await t.put(cfg("inl"), copy.deepcopy(one), {}, dict.fromkeys(values, 1))
            await t.put(first, copy.deepcopy(two), {}, {"n": 2})
        blobs = admin.execute(
            sql.SQL("SELECT channel FROM {}.lgmp_blobs").format(sql.Identifier(schema))
        ).fetchall()
        assert blobs == [("big",)]
        for config in (cfg("inl"), first):
            mine, theirs = await ours.get_tuple(config), await ref.get_tuple(config)
            assert norm(mine) == norm(theirs)
            assert mine is not None and typed(mine.checkpoint) == typed(theirs.checkpoint)
        await ours.prune(["inl"])  # InMemorySaver has no prune
        assert len(await ours.list(cfg("inl"))) == 1
        kept, theirs = await ours.get_tuple(cfg("inl")), await ref.get_tuple(cfg("inl"))
        assert kept is not None and theirs is not None  # (prune drops the parent link)
        assert typed(kept.checkpoint) == typed(theirs.checkpoint)
        assert admin.execute(
            sql.SQL("SELECT channel FROM {}.lgmp_blobs").format(sql.Identifier(schema))
        ).fetchall() == [("big",)]


def typed(value: Any) -> Any:
    """``value`` with every leaf's type beside it: ``==`` alone takes 1 == 1.0 == True."""
    if isinstance(value, dict):
        return {k: typed(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, [typed(v) for v in value])
    return (type(value).__name__, value)


EXACT_JSON_METADATA = {
    "source": "loop",
    "step": 1,
    "parents": {"": "p"},
    "float": 1.0,
    "tenth": 0.1,
    "flag": True,
    "none": None,
    "nested": [1, "x", {"k": False, "e": []}],
    "huge": 2**62,
    "text": "日本 🦜",
}
INEXACT_JSON_METADATA = [
    {"exponent": 1e20},
    {"tiny": 1e-7},
    {"negative_zero": -0.0},
    {"tuple": (1, "two")},
    {"int_keys": {1: "a"}},
    {"nul": ["a\x00b"]},  # LangGraph strips NUL from top-level strings itself
    {"when": datetime(2024, 5, 6, tzinfo=timezone.utc)},
    {"deep": [{"x": (1,)}]},
]


async def test_metadata_kept_as_json_only_when_json_gives_it_back_exactly(
    open_saver: Any, schema: str, admin: Any
) -> None:
    """Metadata is stored once, as JSON, when JSON returns the same values of the same
    types; otherwise serialized as well. Reads match InMemorySaver either way, types too."""
    cases = [EXACT_JSON_METADATA, *INEXACT_JSON_METADATA]
    ref = reference()
    async with open_saver(schema) as ours:
        for i, metadata in enumerate(cases):
            for t in (ours, ref):
                await t.put(cfg(f"md-{i}"), make_checkpoint({"a": 1}), dict(metadata), {"a": 1})
            mine, theirs = await ours.get_tuple(cfg(f"md-{i}")), await ref.get_tuple(cfg(f"md-{i}"))
            assert mine is not None and theirs is not None
            assert typed(mine.metadata) == typed(theirs.metadata), metadata
            listed = await ours.list(cfg(f"md-{i}"))
            assert typed(listed[0].metadata) == typed(theirs.metadata)
    types = admin.execute(
        sql.SQL(
            "SELECT metadata_type, count(*) FROM {}.lgmp_checkpoints GROUP BY 1 ORDER BY 1"
        ).format(sql.Identifier(schema))
    ).fetchall()
    assert dict(types) == {
        "json": 1,
        "msgpack": len(INEXACT_JSON_METADATA) - 1,
        "msgpack+lgz1": 1,  # the datetime's serialized form is long enough to deflate
    }


async def test_refused_late_writes_leave_a_pipelined_connection_usable(
    pg_url: str, schema: str
) -> None:
    """In pipeline mode an error inside a batch must not poison the connection."""
    for mode in ("sync-conn-pipeline", "async-conn-pipeline"):
        async with open_mode(mode, pg_url, schema) as ops:
            tid = f"pipe-{mode}"
            configs = await put_chain(ops, tid, 2)
            await ops.delete_thread(tid)
            with suppress(Exception):
                await ops.put_writes(configs[-1], [("a", "late")], "late-task")
            with suppress(Exception):
                await ops.put(
                    cfg(tid, "", checkpoint_id(configs[-1])),
                    make_checkpoint({"a": "late"}),
                    {"step": 5},
                    {"a": 1},
                )
            with pytest.raises(InvalidConfigError):
                await ops.get_tuple({"configurable": {}})
            fresh = await put_chain(ops, tid, 2, tag="-fresh")
            assert ids(await ops.list(cfg(tid))) == [checkpoint_id(c) for c in reversed(fresh)]
            tup = await ops.get_tuple(cfg(tid))
            assert tup is not None and tup.pending_writes == [
                ("task-1", "a", "w1-fresh"),
                ("task-1", "b", 1),
            ]


async def test_very_large_values_round_trip(open_saver: Any, schema: str) -> None:
    big_text = os.urandom(15_000_000).hex()  # 30 MB, incompressible
    big_bytes = os.urandom(8_000_000)
    async with open_saver(schema) as ops:
        stored = await ops.put(
            cfg("big"),
            make_checkpoint({"text": big_text, "small": "s"}),
            {"source": "loop", "step": 0, "parents": {}},
            {"text": 1, "small": 1},
        )
        await ops.put_writes(stored, [("bytes", big_bytes)], "task")
        tup = await ops.get_tuple(cfg("big"))
        assert tup is not None
        assert tup.checkpoint["channel_values"]["text"] == big_text
        assert tup.pending_writes == [("task", "bytes", big_bytes)]
        [listed] = await ops.list(cfg("big"))
        assert listed.checkpoint["channel_values"]["text"] == big_text


THREAD_IDS = [
    pytest.param("single'quote", id="single-quote"),
    pytest.param('double"quote', id="double-quote"),
    pytest.param("back\\slash", id="backslash"),
    pytest.param("percent %s %(name)s {0}", id="format-codes"),
    pytest.param("x'); DROP TABLE checkpoints; --", id="sql-injection"),
    pytest.param("new\nline\ttab\r", id="whitespace"),
    pytest.param("日本語 🦜 👩\u200d👩\u200d👧 \u202eRTL", id="unicode"),
    pytest.param("ctrl \x01\x1f\x7f", id="control-chars"),
    pytest.param("%_*?[]", id="like-wildcards"),
    pytest.param(secrets.token_hex(5000), id="10k-hex"),
    pytest.param(
        "".join(chr(0x4E00 + random.Random(5).randrange(20000)) for _ in range(10_000)),
        id="10k-cjk",
    ),
]


@pytest.mark.parametrize("thread_id", THREAD_IDS)
async def test_thread_ids_of_any_length_and_characters(
    open_saver: Any, schema: str, admin: Any, thread_id: str
) -> None:
    async with open_saver(schema) as ops:
        baseline = table_counts(admin, schema)
        await put_chain(ops, "neighbour", 1)
        configs = await put_chain(ops, thread_id, 2, ns="sub'graph:日本")
        await put_chain(ops, thread_id, 1)

        tup = await ops.get_tuple(cfg(thread_id, "sub'graph:日本"))
        assert tup is not None
        assert tup.config["configurable"]["thread_id"] == thread_id
        assert checkpoint_id(tup.config) == checkpoint_id(configs[-1])
        assert tup.checkpoint["channel_values"]["a"] == f"{thread_id}/sub'graph:日本/a1"
        assert tup.parent_config is not None
        assert tup.parent_config["configurable"]["thread_id"] == thread_id
        assert len(await ops.list({"configurable": {"thread_id": thread_id}})) == 3
        everything = await ops.list(None)
        assert sorted(t.config["configurable"]["thread_id"] for t in everything) == sorted(
            [thread_id] * 3 + ["neighbour"]
        )

        await ops.copy_thread(thread_id, thread_id + "'copy")
        copied = await ops.get_tuple(cfg(thread_id + "'copy", "sub'graph:日本"))
        assert copied is not None
        assert copied.checkpoint["channel_values"] == tup.checkpoint["channel_values"]

        await ops.delete_thread(thread_id)
        assert await ops.get_tuple(cfg(thread_id)) is None
        assert await ops.list({"configurable": {"thread_id": thread_id}}) == []
        assert len(await ops.list({"configurable": {"thread_id": thread_id + "'copy"}})) == 3
        assert await ops.get_tuple(cfg("neighbour")) is not None
        await ops.delete_thread(thread_id + "'copy")
        await ops.delete_thread("neighbour")
        assert_leftovers(admin, schema, baseline, markers=3, absent=[thread_id])


async def test_long_thread_ids_sharing_a_prefix_stay_distinct(open_saver: Any, schema: str) -> None:
    prefix = secrets.token_hex(5000)
    first, second = prefix + "a", prefix + "b"
    async with open_saver(schema) as ops:
        await put_chain(ops, first, 2)
        await put_chain(ops, second, 1)
        assert len(await ops.list({"configurable": {"thread_id": first}})) == 2
        assert len(await ops.list({"configurable": {"thread_id": second}})) == 1
        await ops.delete_thread(first)
        assert await ops.get_tuple(cfg(first)) is None
        tup = await ops.get_tuple(cfg(second))
        assert tup is not None
        assert tup.config["configurable"]["thread_id"] == second


async def test_nul_in_thread_id_is_a_distinct_thread(open_saver: Any, schema: str) -> None:
    """``"t\\x00"`` and ``"t"`` are different ids; neither may be mangled into the other."""
    plain, with_nul = "nul-thread", "nul-thread\x00"
    async with open_saver(schema) as ops:
        await put_chain(ops, plain, 1)
        await put_chain(ops, with_nul, 2)
        tup = await ops.get_tuple(cfg(with_nul))
        assert tup is not None
        assert tup.config["configurable"]["thread_id"] == with_nul
        assert tup.checkpoint["channel_values"]["a"] == f"{with_nul}//a1"
        assert len(await ops.list({"configurable": {"thread_id": plain}})) == 1
        assert sorted(t.config["configurable"]["thread_id"] for t in await ops.list(None)) == [
            plain,
            with_nul,
            with_nul,
        ]
        await ops.delete_thread(with_nul)
        assert await ops.get_tuple(cfg(with_nul)) is None
        assert await ops.get_tuple(cfg(plain)) is not None


# --------------------------------------------------------------------------------------------
# Serialization: any serde the user passes
# --------------------------------------------------------------------------------------------


class XorTestCipher:
    """A toy cipher for the test (not for real use): enough to see ciphertext is stored."""

    def __init__(self, key: bytes) -> None:
        self.key = key

    def _xor(self, data: bytes) -> bytes:
        return bytes(b ^ self.key[i % len(self.key)] for i, b in enumerate(data))

    def encrypt(self, plaintext: bytes) -> tuple[str, bytes]:
        return "xortest", self._xor(plaintext)

    def decrypt(self, ciphername: str, ciphertext: bytes) -> bytes:
        assert ciphername == "xortest"
        return self._xor(ciphertext)


async def test_encrypted_serializer_round_trips_and_stores_no_plaintext(
    open_saver: Any, schema: str, admin: Any
) -> None:
    marker = f"TOP-SECRET-{uuid.uuid4().hex}"
    serde = EncryptedSerializer(XorTestCipher(b"k3y-for-tests"), JsonPlusSerializer())
    async with open_saver(schema, serde=serde) as ops:
        stored = await ops.put(
            cfg("secret"),
            make_checkpoint({"secret": marker, "msg": HumanMessage(content=marker, id="m1")}),
            {"source": "loop", "step": 0, "parents": {}},
            {"secret": 1, "msg": 1},
        )
        await ops.put_writes(stored, [("secret", marker + "-write")], "task")
        tup = await ops.get_tuple(cfg("secret"))
        assert tup is not None
        assert tup.checkpoint["channel_values"]["secret"] == marker
        assert tup.checkpoint["channel_values"]["msg"].content == marker
        assert tup.pending_writes == [("task", "secret", marker + "-write")]
    text = raw_text(admin, schema)
    assert marker not in text
    assert marker.encode().hex() not in text
    # the stored values really are ciphertext: a saver without the key cannot read them back
    async with open_saver(schema) as plain:
        try:
            unreadable = await plain.get_tuple(cfg("secret"))
        except Exception:
            unreadable = None
        assert unreadable is None or unreadable.checkpoint["channel_values"].get("secret") != marker


# --------------------------------------------------------------------------------------------
# Deletion: complete, and final
# --------------------------------------------------------------------------------------------


async def test_delete_thread_removes_every_row_of_that_thread_only(
    open_saver: Any, schema: str, admin: Any
) -> None:
    gone, kept = "gone-thread-7f3a", "kept-thread-91c2"
    async with open_saver(schema) as ops:
        baseline = table_counts(admin, schema)
        await put_chain(ops, kept, 3)
        await put_chain(ops, kept, 2, ns="child:1")
        only_kept = table_counts(admin, schema)
        await put_chain(ops, gone, 3)
        await put_chain(ops, gone, 2, ns="child:1")
        await ops.delete_thread(gone)
        assert await ops.list({"configurable": {"thread_id": gone}}) == []
        assert len(await ops.list({"configurable": {"thread_id": kept}})) == 5
        still = await ops.get_tuple(cfg(kept))
        assert still is not None and still.pending_writes
        assert still.checkpoint["channel_values"] == {"a": f"{kept}//a2", "const": f"{kept}//const"}
        assert_leftovers(admin, schema, only_kept, markers=1, absent=[gone])
        await ops.delete_thread(kept)
        assert_leftovers(admin, schema, baseline, markers=2, absent=[gone, kept])
        await ops.delete_thread("never-existed")  # no error


async def test_late_put_and_put_writes_do_not_resurrect_a_deleted_thread(
    open_saver: Any, schema: str, admin: Any
) -> None:
    """A run still in flight when its thread is deleted must not bring the thread back."""
    victim = "victim-thread-5b1e"
    async with open_saver(schema) as ops:
        baseline = table_counts(admin, schema)
        configs = await put_chain(ops, victim, 3)
        child = await put_chain(ops, victim, 2, ns="child:1")
        await ops.delete_thread(victim)

        late_parent = configs[-1]
        for late in (
            ops.put_writes(late_parent, [("a", "late-write-value")], "late-task"),
            ops.put(
                cfg(victim, "", checkpoint_id(late_parent)),
                make_checkpoint({"a": "late-put-value"}, {"a": 9}),
                {"source": "loop", "step": 9, "parents": {}, "run_id": "run-1"},
                {"a": 9},
            ),
            ops.put(
                cfg(victim, "child:1", checkpoint_id(child[-1])),
                make_checkpoint({"a": "late-child-value"}, {"a": 9}),
                {"source": "loop", "step": 9, "parents": {}},
                {"a": 9},
            ),
        ):
            with suppress(Exception):  # refusing the late write loudly is fine too
                await late
        assert await ops.get_tuple(cfg(victim)) is None
        assert await ops.get_tuple(cfg(victim, "child:1")) is None
        assert await ops.get_tuple(late_parent) is None
        assert await ops.list({"configurable": {"thread_id": victim}}) == []
        assert await ops.list(None) == []
        absent = [victim, "late-write-value", "late-put-value", "late-child-value"]
        assert_leftovers(admin, schema, baseline, markers=1, absent=absent)


async def test_a_run_that_keeps_going_after_delete_stays_deleted(
    open_saver: Any, schema: str, admin: Any
) -> None:
    """LangGraph chains each put on the config the previous put returned: a late run's second
    checkpoint has the late first one as parent, so refusing only parents from the deleted
    history is not enough."""
    tid = "runaway-thread-3c9d"
    async with open_saver(schema) as ops:
        baseline = table_counts(admin, schema)
        [first] = await put_chain(ops, tid, 1)
        await ops.delete_thread(tid)
        parent = first
        for step in range(1, 4):
            try:
                parent = await ops.put(
                    cfg(tid, "", checkpoint_id(parent)),
                    make_checkpoint({"a": f"runaway-value-{step}"}, {"a": step + 1}),
                    {"source": "loop", "step": step, "parents": {}},
                    {"a": step + 1},
                )
                await ops.put_writes(parent, [("a", f"runaway-write-{step}")], f"task-{step}")
            except Exception:
                break  # refusing loudly ends the run: fine
        assert await ops.get_tuple(cfg(tid)) is None
        assert await ops.list(cfg(tid)) == []
        assert_leftovers(admin, schema, baseline, markers=1, absent=[tid, "runaway-"])


class StepsState(TypedDict):
    log: Annotated[list[str], operator.add]


async def test_thread_deleted_while_its_graph_runs_stays_deleted(
    open_saver: Any, schema: str
) -> None:
    """The real case: a user deletes a conversation while a multi-step run is still going."""
    config: RunnableConfig = {"configurable": {"thread_id": "deleted-mid-run"}}
    async with open_saver(schema) as ops:

        def step(name: str) -> Callable[[StepsState], dict[str, Any]]:
            def node(state: StepsState) -> dict[str, Any]:
                return {"log": [name]}

            return node

        # The first turn only builds the thread; the second deletes it half-way.
        async def adelete(state: StepsState) -> dict[str, Any]:
            if "turn-2" not in state["log"]:
                return {"log": ["kept"]}
            await ops.saver.adelete_thread("deleted-mid-run")
            return {"log": ["deleted"]}

        def delete(state: StepsState) -> dict[str, Any]:
            if "turn-2" not in state["log"]:
                return {"log": ["kept"]}
            ops.saver.delete_thread("deleted-mid-run")
            return {"log": ["deleted"]}

        builder = StateGraph(StepsState)
        builder.add_node("first", step("first"))
        builder.add_node("delete", adelete if ops.is_async else delete)
        builder.add_node("second", step("second"))
        builder.add_node("third", step("third"))
        builder.add_edge(START, "first")
        builder.add_edge("first", "delete")
        builder.add_edge("delete", "second")
        builder.add_edge("second", "third")
        builder.add_edge("third", END)
        graph = builder.compile(checkpointer=ops.saver)
        await ops.invoke(graph, {"log": ["turn-1"]}, config)  # the thread exists before the run
        assert (await ops.state(graph, config)).values["log"] == [
            "turn-1",
            "first",
            "kept",
            "second",
            "third",
        ]
        # second turn: deletes its own thread half-way, then keeps going for two more steps
        await ops.invoke(graph, {"log": ["turn-2"]}, config)
        assert await ops.list(cfg("deleted-mid-run")) == []
        assert (await ops.state(graph, config)).values == {}


async def test_delete_racing_a_running_history_is_final(open_saver: Any, schema: str) -> None:
    """A run keeps writing while its thread is deleted: whatever it writes from then on stays
    invisible, and puts that were in flight during the delete are either deleted or refused."""
    tid = "racing-thread"
    async with open_saver(schema, pool_size=4) as ops:
        [first] = await put_chain(ops, tid, 1)
        state: dict[str, Any] = {"parent": checkpoint_id(first), "deleted": False}

        async def writer() -> int:
            attempts_after_delete = 0
            for i in range(1, 500):
                deleted_before = state["deleted"]
                with suppress(Exception):
                    stored = await ops.background(
                        "put",
                        cfg(tid, "", state["parent"]),
                        make_checkpoint({"a": i}, {"a": i + 1}),
                        {"source": "loop", "step": i, "parents": {}},
                        {"a": i + 1},
                    )
                    state["parent"] = checkpoint_id(stored)
                    await ops.background("put_writes", stored, [("a", i)], f"task-{i}", "")
                if deleted_before:
                    attempts_after_delete += 1
                    if attempts_after_delete >= 5:
                        return i
            raise AssertionError("the delete never happened")

        task = asyncio.ensure_future(writer())
        while not task.done() and len(await ops.list(cfg(tid))) < 5:
            await asyncio.sleep(0.01)
        await ops.background("delete_thread", tid)
        state["deleted"] = True
        await asyncio.wait_for(task, WAIT_SECONDS * 3)
        assert await ops.get_tuple(cfg(tid)) is None
        assert await ops.list(cfg(tid)) == []
        fresh = await put_chain(ops, tid, 1, tag="-fresh")
        assert ids(await ops.list(cfg(tid))) == [checkpoint_id(fresh[0])]


async def test_fresh_run_on_a_deleted_thread_id_starts_clean(open_saver: Any, schema: str) -> None:
    async with open_saver(schema) as ops:
        old = await put_chain(ops, "reused", 3, tag="-old")
        await ops.delete_thread("reused")
        # the new run reuses channel versions 1.. with different values: no stale blob may show
        fresh = await put_chain(ops, "reused", 1, writes=False, tag="-new")
        # and a late write from the deleted run arrives after the fresh run started
        with suppress(Exception):
            await ops.put(
                cfg("reused", "", checkpoint_id(old[-1])),
                make_checkpoint({"a": "late-old"}, {"a": 7}),
                {"source": "loop", "step": 7, "parents": {}},
                {"a": 7},
            )
        listed = await ops.list({"configurable": {"thread_id": "reused"}})
        assert ids(listed) == [checkpoint_id(fresh[0])]
        tup = await ops.get_tuple(cfg("reused"))
        assert tup is not None
        assert checkpoint_id(tup.config) == checkpoint_id(fresh[0])
        assert tup.checkpoint["channel_values"] == {
            "a": "reused//a0-new",
            "const": "reused//const-new",
        }
        assert tup.pending_writes == []
        assert tup.parent_config is None


async def test_delete_for_runs_keeps_other_runs_intact(
    open_saver: Any, schema: str, admin: Any
) -> None:
    async with open_saver(schema) as ops:
        baseline = table_counts(admin, schema)
        first = await put_chain(ops, "runs", 2, run_id="run-A", tag="-run-A-value")
        # run B continues the thread; its checkpoints still use "const" written by run A
        second = []
        parent = checkpoint_id(first[-1])
        for i in range(2):
            stored = await ops.put(
                cfg("runs", "", parent),
                make_checkpoint(
                    {"a": f"run-B-value-{i}", "const": "runs//const-run-A-value"},
                    {"a": 10 + i, "const": 1},
                ),
                {"source": "loop", "step": 10 + i, "parents": {}, "run_id": "run-B"},
                {"a": 10 + i},
            )
            await ops.put_writes(stored, [("a", f"run-B-write-{i}")], f"task-B{i}")
            parent = checkpoint_id(stored)
            second.append(stored)
        before = {checkpoint_id(c): norm(await ops.get_tuple(c)) for c in second}

        await ops.delete_for_runs(["run-A"])
        assert sorted(ids(await ops.list(cfg("runs")))) == sorted(before)
        for c in first:
            assert await ops.get_tuple(c) is None
        for c in second:
            after = norm(await ops.get_tuple(c))
            assert after is not None
            before_c = before[checkpoint_id(c)]
            assert before_c is not None
            assert after["checkpoint"] == before_c["checkpoint"]  # incl. "const" from run A
            assert after["pending_writes"] == before_c["pending_writes"]

        await ops.delete_for_runs(["run-B"])
        assert await ops.list(None) == []
        # the (now empty) thread may keep its own row; no checkpoint, value or write may stay
        assert_leftovers(admin, schema, baseline, markers=1, absent=["-run-A-value", "run-B-"])


async def test_copy_thread_survives_deleting_the_source(open_saver: Any, schema: str) -> None:
    async with open_saver(schema) as ops:
        await put_chain(ops, "source", 3)
        await put_chain(ops, "source", 2, ns="child:1")
        before = {
            ns: [norm(t) for t in await ops.list(cfg("source", ns))] for ns in ("", "child:1")
        }
        history_before = dict(await ops.delta_history(cfg("source"), ["a", "const"]))
        await ops.copy_thread("source", "target")
        await ops.delete_thread("source")
        for ns, expected in before.items():
            got = [norm(t) for t in await ops.list(cfg("target", ns))]
            for g, e in zip(got, expected, strict=True):
                assert g is not None and e is not None
                assert g["config"] == {**e["config"], "thread_id": "target"}
                assert g["checkpoint"] == e["checkpoint"]
                assert g["metadata"] == e["metadata"]
                assert g["pending_writes"] == e["pending_writes"]
        assert dict(await ops.delta_history(cfg("target"), ["a", "const"])) == history_before


# --------------------------------------------------------------------------------------------
# Prune and retention
# --------------------------------------------------------------------------------------------


async def test_prune_keep_latest_keeps_values_written_long_ago(
    open_saver: Any, schema: str, admin: Any, pg_url: str
) -> None:
    async with open_saver(schema) as ops:
        await put_chain(ops, "pruned", 5)
        await put_chain(ops, "pruned", 3, ns="child:1")
        await put_chain(ops, "untouched", 3)
        latest = {ns: norm(await ops.get_tuple(cfg("pruned", ns))) for ns in ("", "child:1")}

        await ops.prune(["pruned"], "keep_latest")
        for ns, expected in latest.items():
            assert expected is not None
            [got] = [norm(t) for t in await ops.list(cfg("pruned", ns))]
            assert got is not None
            # parent_config may be dropped (the parent is gone); everything else is kept,
            # including "const", whose value was written by the first, pruned, checkpoint
            for key in ("config", "checkpoint", "metadata", "pending_writes"):
                assert got[key] == expected[key], key
        assert len(await ops.list(cfg("untouched"))) == 3
        pruned_rows = table_counts(admin, schema)

    # what is left is exactly what a thread that only ever had those checkpoints stores
    twin_schema = _new_schema_name()
    try:
        async with open_saver(twin_schema) as twin:
            await _put_snapshots(twin, latest)
            await put_chain(twin, "untouched", 3)
            twin_rows = table_counts(admin, twin_schema)
    finally:
        _drop_schemas(pg_url, twin_schema)
    assert pruned_rows == twin_rows, "prune left unreachable rows behind"


async def _put_snapshots(ops: Ops, latest: dict[str, Any]) -> None:
    """Store each normalized tuple as the only checkpoint of its namespace."""
    for ns, expected in latest.items():
        assert expected is not None
        config = await ops.put(
            cfg(expected["config"]["thread_id"], ns),
            copy.deepcopy(expected["checkpoint"]),
            expected["metadata"],
            dict(expected["checkpoint"]["channel_versions"]),
        )
        by_task: dict[str, list[tuple[str, Any]]] = {}
        for task_id, channel, value in expected["pending_writes"]:
            by_task.setdefault(task_id, []).append((channel, value))
        for task_id, writes in by_task.items():
            await ops.put_writes(config, writes, task_id)


async def test_prune_delete_removes_all_namespaces(
    open_saver: Any, schema: str, admin: Any
) -> None:
    async with open_saver(schema) as ops:
        baseline = table_counts(admin, schema)
        await put_chain(ops, "other-thread-4d2c", 1)
        only_other = table_counts(admin, schema)
        for tid in ("pruned-thread-1a", "pruned-thread-2b"):
            await put_chain(ops, tid, 3)
            await put_chain(ops, tid, 2, ns="child:1")
        await ops.prune(["pruned-thread-1a", "pruned-thread-2b"], "delete")
        assert [t.config["configurable"]["thread_id"] for t in await ops.list(None)] == [
            "other-thread-4d2c"
        ]
        assert_leftovers(admin, schema, only_other, markers=2, absent=["pruned-thread-"])
        await ops.delete_thread("other-thread-4d2c")
        assert_leftovers(admin, schema, baseline, markers=3, absent=["thread-"])


async def test_keep_last_keeps_the_newest_checkpoints_per_namespace(
    open_saver: Any, schema: str
) -> None:
    async with open_saver(schema, keep_last=2) as ops:
        root = await put_chain(ops, "retained", 5)
        child = await put_chain(ops, "retained", 4, ns="child:1")
        other = await put_chain(ops, "other", 3)
        assert ids(await ops.list(cfg("retained"))) == [checkpoint_id(c) for c in root[:-3:-1]]
        assert ids(await ops.list(cfg("retained", "child:1"))) == [
            checkpoint_id(c) for c in child[:-3:-1]
        ]
        assert ids(await ops.list(cfg("other"))) == [checkpoint_id(c) for c in other[:-3:-1]]
        for c in root[:3]:
            assert await ops.get_tuple(c) is None
        for i, c in ((3, root[3]), (4, root[4])):
            tup = await ops.get_tuple(c)
            assert tup is not None
            assert tup.checkpoint["channel_values"] == {
                "a": f"retained//a{i}",
                "const": "retained//const",  # written by a checkpoint that was dropped
            }
            assert tup.pending_writes == [(f"task-{i}", "a", f"w{i}"), (f"task-{i}", "b", i)]


async def test_keep_last_trim_fails_with_its_put(
    open_saver: Any, schema: str, admin: psycopg.Connection[Any]
) -> None:
    """The put and its retention trim commit together or not at all.

    A trigger makes the trim's DELETE fail (as a crash between the two would stop it):
    the put raises and its checkpoint is not stored, so keep_last still holds.
    """
    async with open_saver(schema, keep_last=1) as ops:
        first = await put_chain(ops, "atomic", 1)
        admin.execute(
            sql.SQL(
                "CREATE FUNCTION {s}.lgmp_t_refuse() RETURNS trigger LANGUAGE plpgsql AS "
                "$$BEGIN RAISE EXCEPTION 'trim refused'; END$$; "
                "CREATE TRIGGER lgmp_t_refuse BEFORE DELETE ON {s}.lgmp_checkpoints "
                "FOR EACH ROW EXECUTE FUNCTION {s}.lgmp_t_refuse()"
            ).format(s=sql.Identifier(schema))
        )
        with pytest.raises(psycopg.errors.RaiseException, match="trim refused"):
            await put_chain(ops, "atomic", 1, parent=checkpoint_id(first[0]), writes=False)
        admin.execute(
            sql.SQL("DROP TRIGGER lgmp_t_refuse ON {}.lgmp_checkpoints").format(
                sql.Identifier(schema)
            )
        )
        assert ids(await ops.list(cfg("atomic"))) == [checkpoint_id(first[0])]
        latest = await ops.get_tuple(cfg("atomic"))
        assert latest is not None and latest.checkpoint["channel_values"]["a"] == "atomic//a0"


class ChatState(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]
    profile: NotRequired[str]


def chat_graph() -> StateGraph[Any]:
    def reply(state: ChatState) -> dict[str, Any]:
        last = state["messages"][-1]
        return {"messages": [AIMessage(content=f"echo {last.content}", id=f"ai-{last.id}")]}

    builder = StateGraph(ChatState)
    builder.add_node("reply", reply)
    builder.add_edge(START, "reply")
    builder.add_edge("reply", END)
    return builder


async def test_keep_last_one_keeps_a_working_multi_turn_conversation(
    open_saver: Any, schema: str
) -> None:
    """keep_last=1 (the "shallow" saver): history pruned, state intact, across a restart."""
    config: RunnableConfig = {"configurable": {"thread_id": "chat"}}
    expected = chat_graph().compile(checkpointer=InMemorySaver())
    turns = [{"messages": [HumanMessage(content=f"turn {i}", id=f"h{i}")]} for i in range(4)]
    turns[0]["profile"] = "written once, on the first turn"
    for turn in turns:
        expected.invoke(turn, config)
    async with open_saver(schema, keep_last=1) as ops:
        graph = chat_graph().compile(checkpointer=ops.saver)
        for turn in turns[:2]:
            await ops.invoke(graph, turn, config)
    async with open_saver(schema, keep_last=1) as ops:  # restart
        graph = chat_graph().compile(checkpointer=ops.saver)
        for turn in turns[2:]:
            await ops.invoke(graph, turn, config)
        state = await ops.state(graph, config)
        assert state.values == expected.get_state(config).values
        assert len(await ops.list(cfg("chat"))) == 1


def concat(state: list[str], writes: Sequence[list[str]]) -> list[str]:
    out = list(state)
    for w in writes:
        out.extend(w)
    return out


class DeltaState(TypedDict):
    log: Annotated[list[str], DeltaChannel(concat, snapshot_frequency=3)]
    turn: int


def delta_graph() -> StateGraph[Any]:
    def node(state: DeltaState) -> dict[str, Any]:
        return {"log": [f"node-{state['turn']}"]}

    builder = StateGraph(DeltaState)
    builder.add_node("node", node)
    builder.add_edge(START, "node")
    builder.add_edge("node", END)
    return builder


async def test_keep_last_does_not_break_delta_channel_reconstruction(
    open_saver: Any, schema: str
) -> None:
    config: RunnableConfig = {"configurable": {"thread_id": "delta"}}
    turns = [{"turn": i, "log": [f"in-{i}"]} for i in range(8)]
    reference_saver = InMemorySaver()
    expected = delta_graph().compile(checkpointer=reference_saver)
    for turn in turns:
        expected.invoke(turn, config)
    unpruned = len(list(reference_saver.list(config)))
    async with open_saver(schema, keep_last=1) as ops:
        graph = delta_graph().compile(checkpointer=ops.saver)
        for turn in turns:
            await ops.invoke(graph, turn, config)
            state = await ops.state(graph, config)
            assert state.values["log"] == concat(
                [], [t["log"] + [f"node-{t['turn']}"] for t in turns[: turn["turn"] + 1]]
            )
        assert state.values == expected.get_state(config).values
        kept = len(await ops.list(cfg("delta")))
        assert kept <= unpruned // 2, f"keep_last=1 kept {kept} of {unpruned} checkpoints"


async def test_prune_keep_latest_does_not_break_delta_channel_reconstruction(
    open_saver: Any, schema: str
) -> None:
    config: RunnableConfig = {"configurable": {"thread_id": "delta-prune"}}
    turns = [{"turn": i, "log": [f"in-{i}"]} for i in range(6)]
    expected = delta_graph().compile(checkpointer=InMemorySaver())
    for turn in turns:
        expected.invoke(turn, config)
    async with open_saver(schema) as ops:
        graph = delta_graph().compile(checkpointer=ops.saver)
        for turn in turns[:5]:
            await ops.invoke(graph, turn, config)
        before = (await ops.state(graph, config)).values
        await ops.prune(["delta-prune"], "keep_latest")
        assert (await ops.state(graph, config)).values == before
        await ops.invoke(graph, turns[5], config)
        assert (await ops.state(graph, config)).values == expected.get_state(config).values


class FanState(TypedDict):
    results: Annotated[list[str], operator.add]


def fan_graph(
    calls: dict[str, int], fail: dict[str, bool], ok_saved: Callable[[], bool]
) -> StateGraph[Any]:
    def ok(state: FanState) -> dict[str, Any]:
        calls["ok"] += 1
        return {"results": ["ok"]}

    def flaky(state: FanState) -> dict[str, Any]:
        calls["flaky"] += 1
        if fail["now"]:
            # fail only once the sibling's writes are stored: otherwise LangGraph's sync runner
            # may shut down before it saves them, and re-runs the sibling with any saver
            deadline = time.monotonic() + WAIT_SECONDS
            while not ok_saved() and time.monotonic() < deadline:
                time.sleep(0.01)
            raise RuntimeError("flaky node failed")
        return {"results": ["flaky"]}

    builder = StateGraph(FanState)
    builder.add_node("ok", ok)
    builder.add_node("flaky", flaky)
    builder.add_edge(START, "ok")
    builder.add_edge(START, "flaky")
    builder.add_edge("ok", END)
    builder.add_edge("flaky", END)
    return builder


async def test_keep_last_keeps_pending_writes_of_a_failed_step(
    open_saver: Any, schema: str, pg_url: str
) -> None:
    """A node failed while its sibling succeeded: on resume the sibling is not re-run."""
    config: RunnableConfig = {"configurable": {"thread_id": "fan"}}

    async def run(runner: Ops, reader: Any) -> tuple[dict[str, int], list[str]]:
        def ok_saved() -> bool:
            tup = reader.get_tuple(config)
            return tup is not None and ("results", ["ok"]) in [
                (w[1], w[2]) for w in tup.pending_writes or []
            ]

        calls, fail = {"ok": 0, "flaky": 0}, {"now": True}
        graph = fan_graph(calls, fail, ok_saved).compile(checkpointer=runner.saver)
        with pytest.raises(RuntimeError, match="flaky node failed"):
            await runner.invoke(graph, {"results": []}, config)
        fail["now"] = False
        result = await runner.invoke(graph, None, config)
        return calls, sorted(result["results"])

    in_memory = reference()
    expected = await run(in_memory, in_memory.saver)
    async with open_saver(schema, keep_last=1) as ops:
        with psycopg.connect(pg_url, autocommit=True) as conn:
            got = await run(ops, PostgresSaver(conn, schema=schema))
    assert got == expected
    assert got == ({"ok": 1, "flaky": 2}, ["flaky", "ok"])


# --------------------------------------------------------------------------------------------
# TTL
# --------------------------------------------------------------------------------------------

SHORT_TTL = 0.02  # minutes: 1.2 s
LONG_TTL = 60.0


async def test_expired_threads_are_invisible_before_the_sweep_and_swept_per_thread(
    flavour: str, pg_url: str, schema: str, admin: Any
) -> None:
    mode = f"{flavour}-pool"
    async with (
        open_mode(mode, pg_url, schema, ttl={"default_ttl": SHORT_TTL}) as short,
        open_mode(mode, pg_url, schema, ttl={"default_ttl": LONG_TTL}) as long,
        open_mode(mode, pg_url, schema) as no_ttl,
    ):
        await put_chain(long, "long-lived", 2)
        await put_chain(no_ttl, "immortal", 2)
        survivors_only = table_counts(admin, schema)
        doomed = {}
        for tid in ("exp-1", "exp-2", "exp-3"):
            doomed[tid] = await put_chain(short, tid, 2) + await put_chain(short, tid, 2, ns="c:1")
        await asyncio.sleep(SHORT_TTL * 60 + 0.8)

        for reader in (short, long, no_ttl):
            for tid, configs in doomed.items():
                assert await reader.get_tuple(cfg(tid)) is None
                assert await reader.get_tuple(cfg(tid, "c:1")) is None
                for c in configs:
                    assert await reader.get_tuple(c) is None
                assert await reader.list({"configurable": {"thread_id": tid}}) == []
                history = await reader.delta_history(configs[1], ["a"])
                assert history["a"]["writes"] == [] and "seed" not in history["a"]
            alive = {t.config["configurable"]["thread_id"] for t in await reader.list(None)}
            assert alive == {"long-lived", "immortal"}
            assert len(await reader.list(None, filter={"run_id": "run-1"})) == 4

        swept, rounds = 0, 0
        while rounds < 10:
            rounds += 1
            n = await short.sweep_expired(batch_size=1)
            assert isinstance(n, int) and n >= 0
            if n == 0:
                break
            swept += n
        assert swept == 3, "sweep_expired must count threads, not rows"
        assert await short.sweep_expired(batch_size=100) == 0
        assert len(await long.list(cfg("long-lived"))) == 2
        assert len(await no_ttl.list(cfg("immortal"))) == 2
        assert table_counts(admin, schema) == survivors_only, "the sweep left rows behind"


async def test_ttl_is_refreshed_by_writes_and_optionally_by_reads(
    flavour: str, pg_url: str, schema: str
) -> None:
    """TTL 3 s; touch at ~1.8 s; look at ~3.6 s. Slack is > 1 s on both sides."""
    ttl = 0.05
    mode = f"{flavour}-pool"
    async with (
        open_mode(mode, pg_url, schema, ttl={"default_ttl": ttl}) as plain,
        open_mode(mode, pg_url, schema, ttl={"default_ttl": ttl, "refresh_on_read": True}) as rr,
    ):
        await put_chain(plain, "untouched", 1)
        await put_chain(plain, "written", 1)
        await put_chain(plain, "read-refreshing", 1)
        await put_chain(plain, "read-plain", 1)
        await asyncio.sleep(ttl * 60 * 0.6)
        await put_chain(plain, "written", 1, ns="child:1")  # a write in another namespace
        assert await rr.get_tuple(cfg("read-refreshing")) is not None
        assert await plain.get_tuple(cfg("read-plain")) is not None
        await asyncio.sleep(ttl * 60 * 0.6)
        assert await plain.get_tuple(cfg("untouched")) is None
        assert await plain.get_tuple(cfg("read-plain")) is None, "a read refreshed the TTL"
        assert await plain.get_tuple(cfg("read-refreshing")) is not None
        assert await plain.get_tuple(cfg("written")) is not None, "TTL is per thread"
        assert await plain.get_tuple(cfg("written", "child:1")) is not None


async def test_expired_thread_written_again_does_not_bring_back_old_checkpoints(
    open_saver: Any, schema: str
) -> None:
    async with open_saver(schema, ttl={"default_ttl": SHORT_TTL}) as ops:
        old = await put_chain(ops, "comeback", 2, tag="-old")
        await asyncio.sleep(SHORT_TTL * 60 + 0.8)
        fresh = await put_chain(ops, "comeback", 1, tag="-new")
        assert ids(await ops.list(cfg("comeback"))) == [checkpoint_id(fresh[0])]
        for c in old:
            assert await ops.get_tuple(c) is None
        tup = await ops.get_tuple(cfg("comeback"))
        assert tup is not None
        assert tup.checkpoint["channel_values"]["a"] == "comeback//a0-new"
        assert tup.pending_writes == [("task-0", "a", "w0-new"), ("task-0", "b", 0)]


# --------------------------------------------------------------------------------------------
# Schema option and migrations
# --------------------------------------------------------------------------------------------


def public_objects(conn: psycopg.Connection[Any]) -> set[str]:
    rows = conn.execute(
        """
        SELECT 'rel:' || c.relkind::text || ':' || c.relname FROM pg_class c
          JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'public'
        UNION ALL
        SELECT 'type:' || t.typname FROM pg_type t
          JOIN pg_namespace n ON n.oid = t.typnamespace WHERE n.nspname = 'public'
        UNION ALL
        SELECT 'proc:' || p.proname FROM pg_proc p
          JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = 'public'
        """
    ).fetchall()
    return {r[0] for r in rows}


async def exercise(ops: Ops) -> None:
    """Touch every method once."""
    await put_chain(ops, "s1", 3)
    await put_chain(ops, "s1", 1, ns="child:1")
    await ops.list(None, filter={"source": "loop"}, limit=2)
    await ops.delta_history(cfg("s1"), ["a"])
    await ops.copy_thread("s1", "s2")
    await ops.prune(["s2"], "keep_latest")
    await ops.delete_for_runs(["no-such-run"])
    await ops.sweep_expired(batch_size=10)
    await ops.delete_thread("s2")


async def test_schema_option_keeps_everything_out_of_public(
    open_saver: Any, new_schema_name: str, admin: Any
) -> None:
    before = public_objects(admin)
    async with open_saver(new_schema_name, ttl={"default_ttl": LONG_TTL}, keep_last=5) as ops:
        await exercise(ops)
        tables = base_tables(admin, new_schema_name)
        assert tables, "setup() created no tables in the schema"
        counts = table_counts(admin, new_schema_name)
        assert sum(counts.values()) > 0
    assert public_objects(admin) == before


async def test_tables_are_schema_qualified_whatever_the_search_path(
    open_saver: Any, pg_url: str, schema: str, admin: Any
) -> None:
    before = public_objects(admin)
    conninfo = psycopg.conninfo.make_conninfo(pg_url, options="-c search_path=lgmp_nowhere")
    async with open_saver(schema, conninfo=conninfo) as ops:
        await exercise(ops)
        assert (await ops.get_tuple(cfg("s1"))) is not None
    assert public_objects(admin) == before
    assert base_tables(admin, schema)


async def test_two_schemas_are_independent(open_saver: Any, schema: str, pg_url: str) -> None:
    other = _new_schema_name()
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(other)))
    try:
        async with open_saver(schema) as first, open_saver(other) as second:
            await put_chain(first, "same-id", 2)
            await put_chain(second, "same-id", 1, tag="-other")
            assert len(await first.list(cfg("same-id"))) == 2
            tup = await second.get_tuple(cfg("same-id"))
            assert tup is not None and tup.checkpoint["channel_values"]["a"] == "same-id//a0-other"
            await second.delete_thread("same-id")
            assert len(await first.list(cfg("same-id"))) == 2
    finally:
        _drop_schemas(pg_url, other)


async def test_setup_is_idempotent_and_keeps_data(open_saver: Any, schema: str, admin: Any) -> None:
    async with open_saver(schema) as ops:
        await put_chain(ops, "kept", 2)
        tables = base_tables(admin, schema)
        counts = table_counts(admin, schema)
        for _ in range(3):
            await ops.setup()
        assert base_tables(admin, schema) == tables
        assert table_counts(admin, schema) == counts
        assert len(await ops.list(cfg("kept"))) == 2
    async with open_saver(schema) as again:  # a new instance runs setup() on an existing schema
        assert len(await again.list(cfg("kept"))) == 2
        assert table_counts(admin, schema) == counts


async def test_a_tasks_writes_are_one_row(open_saver: Any, schema: str, admin: Any) -> None:
    """Three writes of one task take one row; a second call merges into it."""
    async with open_saver(schema) as ops:
        [stored] = await put_chain(ops, "t", 1, writes=False)
        await ops.put_writes(stored, [("a", 1), ("b", 2), ("c", 3)], "task", "path")
        assert table_counts(admin, schema)["lgmp_task_writes"] == 1
        await ops.put_writes(stored, [("a", "ignored"), (ERROR, "boom")], "task", "path")
        await ops.put_writes(stored, [(ERROR, "boom again")], "task", "path")
        assert table_counts(admin, schema)["lgmp_task_writes"] == 1
        tup = await ops.get_tuple(cfg("t"))
        assert tup is not None
        assert tup.pending_writes == [
            ("task", ERROR, "boom again"),
            ("task", "a", 1),
            ("task", "b", 2),
            ("task", "c", 3),
        ]


async def test_writes_merged_over_the_limit_are_refused_and_the_stored_ones_kept(
    open_saver: Any, schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A task's record merged with a later call's writes is checked against the limit
    again (each call alone fits), and a refused merge leaves the stored record as it was.
    The limit is lowered to 64 KiB instead of allocating a gigabyte; the check is the
    same."""
    limit = 64 * 1024
    monkeypatch.setattr(pg_plans, "MAX_STATEMENT_BYTES", limit)
    # incompressible, each alone under the limit, together over it
    first, second = os.urandom(limit * 3 // 5), os.urandom(limit * 3 // 5)
    async with open_saver(schema) as ops:
        [stored] = await put_chain(ops, "t", 1, writes=False)
        await ops.put_writes(stored, [("first", first)], "task")
        with pytest.raises(ValueTooLargeError, match=f"at most {limit} bytes") as info:
            await ops.put_writes(stored, [("first", b"retried"), ("second", second)], "task")
        assert "task 'task'" in str(info.value) and info.value.size > limit
        await ops.put_writes(stored, [("first", b"retried"), ("third", 3)], "task")
        tup = await ops.get_tuple(cfg("t"))
        assert tup is not None
        assert tup.pending_writes == [("task", "first", first), ("task", "third", 3)]


async def test_migrations_from_the_first_layout_keep_what_was_stored(
    open_saver: Any, schema: str, admin: Any
) -> None:
    """Data in the layout of migrations 0-1 (a row per pending write, list pages and spines
    in ``lgmp_nodes``) reads back the same after migration 2 packs the writes per task and
    migration 3 moves the pages and spines into ``lgmp_items``."""
    messages = [HumanMessage(f"m{i}", id=f"m{i}") for i in range(2 * PAGE_SIZE + 3)]
    async with open_saver(schema) as ops:
        chain = await put_chain(ops, "old", 3)
        await ops.put_writes(chain[1], [("ünï\u00e9", b"\x00bytes"), (INTERRUPT, {"q": 1})], "t2")
        await ops.put_writes(chain[2], [(ERROR, "boom")], "task-2", "~path")
        await ops.put(cfg("list"), make_checkpoint({"msgs": messages}), {}, {"msgs": 1})
        before = [norm(t) for t in await ops.list(cfg("old"))]
        history = await ops.delta_history(cfg("old"), ["a"])
    # Rewind the schema to migration 1, filling its tables from the current ones.
    q = sql.Identifier(schema)

    def run(statement: str, params: Any = None) -> list[Any]:
        cur = admin.execute(sql.SQL(statement).format(q), params)
        return cur.fetchall() if cur.description else []

    run(MIGRATIONS[0][-1].format(s="{}"))  # lgmp_writes
    run(MIGRATIONS[1][-1].format(s="{}"))  # lgmp_nodes
    rows = run(
        "SELECT thread_key, checkpoint_ns, checkpoint_id, task_id, task_path, writes "
        "FROM {}.lgmp_task_writes"
    )
    assert rows
    for tk, ns, cid, task_id, path, record in rows:
        for idx, channel, typ, data, own in task_writes.unpack(record, path):
            run(
                "INSERT INTO {}.lgmp_writes VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)",
                (tk, ns, cid, task_id, idx, own, channel, typ, data),
            )
    nodes = run(
        "INSERT INTO {}.lgmp_nodes SELECT thread_key, checkpoint_ns, item_id, data "
        "FROM {}.lgmp_items WHERE type = 'lgmp:node' RETURNING 1".replace("{}", "{0}")
    )
    assert len(nodes) >= 3  # two pages and a spine
    run("DELETE FROM {}.lgmp_items WHERE type = 'lgmp:node'")
    run("DROP TABLE {}.lgmp_task_writes")
    run("DELETE FROM {}.lgmp_checkpoint_migrations WHERE v >= 2")
    async with open_saver(schema) as ops:  # setup() applies migrations 2 and 3
        assert [norm(t) for t in await ops.list(cfg("old"))] == before
        assert await ops.delta_history(cfg("old"), ["a"]) == history
        tup = await ops.get_tuple(cfg("list"))
        assert tup is not None and tup.checkpoint["channel_values"]["msgs"] == messages
    tables = base_tables(admin, schema)
    assert "lgmp_writes" not in tables and "lgmp_nodes" not in tables
    assert table_counts(admin, schema)["lgmp_task_writes"] == len(rows)


def _layout(
    conn: psycopg.Connection[Any], schema: str, versions: str = "lgmp_checkpoint_migrations"
) -> dict[str, list[tuple[Any, ...]]]:
    """Every catalog entry of the schema that setup() makes, with the schema's name out;
    ``versions``: the bookkeeping table whose versions are listed too."""
    queries = {
        "columns": """SELECT table_name, ordinal_position, column_name, data_type,
                is_nullable, column_default, is_generated, generation_expression
            FROM information_schema.columns WHERE table_schema = %(s)s""",
        "indexes": "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = %(s)s",
        "constraints": """SELECT conrelid::regclass::text, conname, pg_get_constraintdef(oid)
            FROM pg_constraint WHERE connamespace = %(s)s::regnamespace""",
        "triggers": """SELECT tgname, pg_get_triggerdef(t.oid) FROM pg_trigger t
            JOIN pg_class c ON c.oid = t.tgrelid
            WHERE c.relnamespace = %(s)s::regnamespace AND NOT t.tgisinternal""",
        "functions": """SELECT proname, prosrc FROM pg_proc
            WHERE pronamespace = %(s)s::regnamespace""",
        "versions": f"SELECT v FROM {{}}.{versions}",
    }
    quoted = sql.Identifier(schema).as_string(conn)
    out = {}
    for name, query in queries.items():
        rows = conn.execute(query.replace("{}", quoted), {"s": schema}).fetchall()
        out[name] = sorted(
            tuple(str(v).replace(quoted, "S").replace(schema, "S") for v in row) for row in rows
        )
    return out


async def test_a_fresh_database_gets_the_layout_the_migrations_build(
    open_saver: Any, pg_url: str, admin: Any
) -> None:
    """setup() on a database with no tables creates the last version's layout directly
    (schema.FRESH and the thread index's fresh()); a database at version 0 replays every
    migration. Both must end the same, catalog entry by catalog entry, or FRESH drifted
    from the migrations."""
    fresh, replayed = _new_schema_name(), _new_schema_name()
    try:
        async with open_saver(fresh) as ops:
            await put_chain(ops, "t", 1)  # the layout works, not only exists
        q = sql.Identifier(replayed)
        admin.execute(sql.SQL("CREATE SCHEMA {}").format(q))
        for statement in MIGRATIONS[0]:
            admin.execute(sql.SQL(statement.format(s="{}")).format(q))
        admin.execute(
            sql.SQL(
                "CREATE TABLE {}.lgmp_checkpoint_migrations (v integer PRIMARY KEY,"
                " applied_at timestamptz NOT NULL DEFAULT now()); "
                "INSERT INTO {}.lgmp_checkpoint_migrations (v) VALUES (0)"
            ).format(q, q)
        )
        async with open_saver(replayed) as ops:
            await put_chain(ops, "t", 1)
        assert _layout(admin, fresh) == _layout(admin, replayed)
        versions = _layout(admin, fresh)["versions"]
        latest = len(pg_plans.CHECKPOINT_MIGRATIONS)
        assert sorted(int(v) for (v,) in versions) == list(range(latest))
    finally:
        _drop_schemas(pg_url, fresh, replayed)


async def test_a_schema_whose_versions_were_deleted_replays_the_migrations(
    open_saver: Any, pg_url: str, admin: Any
) -> None:
    """The fresh layout is for a bookkeeping table this setup creates. One that exists with
    its rows deleted (by hand) means the tables may hold data: setup() replays every
    migration (all idempotent) and the threads written before stay readable."""
    from langgraph_memory_plus.drivers.migrations import migrate
    from langgraph_memory_plus.drivers.postgres import PgRunner

    schema, fresh = _new_schema_name(), _new_schema_name()
    q = sql.Identifier(schema)
    try:
        async with open_saver(schema) as ops:
            await put_chain(ops, "kept", 3)
        admin.execute(sql.SQL("DELETE FROM {}.lgmp_checkpoint_migrations").format(q))
        with psycopg.connect(pg_url, autocommit=True) as conn:
            runner = PgRunner(conn, pipeline=False, owner="test")
            args = (f'"{schema}"', "lgmp_checkpoint_migrations", 1, MIGRATIONS, ("SELECT 1",))
            assert runner.run(migrate(*args)) is False  # replayed, not fresh
            versions = admin.execute(
                sql.SQL("SELECT v FROM {}.lgmp_checkpoint_migrations ORDER BY v").format(q)
            ).fetchall()
            assert [v for (v,) in versions] == list(range(len(MIGRATIONS)))
            assert runner.run(migrate(*args)) is False  # nothing pending now
        async with open_saver(schema) as ops:
            assert len(await ops.list(cfg("kept"))) == 3
        with psycopg.connect(pg_url, autocommit=True) as conn:
            runner = PgRunner(conn, pipeline=False, owner="test")
            created = runner.run(migrate(f'"{fresh}"', "lgmp_checkpoint_migrations", 1,
                                         MIGRATIONS, ("SELECT 1",)))  # fmt: skip
            assert created is True  # the control: a new bookkeeping table is fresh
    finally:
        _drop_schemas(pg_url, schema, fresh)


def test_setup_inside_the_callers_transaction(
    pg_url: str, new_schema_name: str, admin: Any
) -> None:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        saver = PostgresSaver(conn, schema=new_schema_name)
        with conn.transaction():
            conn.execute("SELECT 1")
            saver.setup()
        assert base_tables(admin, new_schema_name), "tables not visible after the commit"
        saver.put(cfg("tx"), make_checkpoint({"a": 1}), {"step": 0}, {"a": 1})
        assert saver.get_tuple(cfg("tx")) is not None


def test_setup_on_a_connection_with_an_open_implicit_transaction(
    pg_url: str, new_schema_name: str, admin: Any
) -> None:
    with psycopg.connect(pg_url) as conn:  # autocommit off: the first statement opens one
        conn.execute("SELECT 1")
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS
        saver = PostgresSaver(conn, schema=new_schema_name)
        saver.setup()
        conn.commit()
        assert base_tables(admin, new_schema_name)


async def test_setup_inside_the_callers_async_transaction(
    pg_url: str, new_schema_name: str, admin: Any
) -> None:
    async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as conn:
        saver = AsyncPostgresSaver(conn, schema=new_schema_name)
        async with conn.transaction():
            await conn.execute("SELECT 1")
            await saver.setup()
        assert base_tables(admin, new_schema_name)
        await saver.aput(cfg("tx"), make_checkpoint({"a": 1}), {"step": 0}, {"a": 1})
        assert await saver.aget_tuple(cfg("tx")) is not None


def test_non_autocommit_connection_does_not_lose_writes(
    pg_url: str, schema: str, admin: Any
) -> None:
    """A saver given a plain ``psycopg.connect()`` either refuses it clearly or commits."""
    with psycopg.connect(pg_url) as conn:
        try:
            saver = PostgresSaver(conn, schema=schema)
        except ValueError as exc:
            assert "autocommit" in str(exc)
            return
        saver.setup()
        first = saver.put(cfg("durable"), make_checkpoint({"a": 1}), {"step": 0}, {"a": 1})
        assert saver.get_tuple(cfg("durable")) is not None  # a read between two writes
        saver.put(
            cfg("durable", "", checkpoint_id(first)),
            make_checkpoint({"a": 2}),
            {"step": 1},
            {"a": 2},
        )
        saver.put_writes(first, [("a", "w")], "task")
        with psycopg.connect(pg_url, autocommit=True) as other:
            seen = PostgresSaver(other, schema=schema)
            assert len(list(seen.list(cfg("durable")))) == 2, "writes not committed"


def test_concurrent_setup_from_many_connections(pg_url: str) -> None:
    """Several processes start at once on an empty database and all run setup()."""
    names = [_new_schema_name() for _ in range(3)]
    try:
        for name in names:
            n = 6
            barrier = threading.Barrier(n)
            errors: list[BaseException] = []

            def run(
                schema_name: str = name,
                barrier: threading.Barrier = barrier,
                errors: list[BaseException] = errors,
            ) -> None:
                try:
                    with psycopg.connect(pg_url, autocommit=True) as conn:
                        saver = PostgresSaver(conn, schema=schema_name)
                        barrier.wait(timeout=WAIT_SECONDS)
                        saver.setup()
                except BaseException as exc:
                    errors.append(exc)

            threads = [threading.Thread(target=run) for _ in range(n)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(timeout=60)
            assert not any(t.is_alive() for t in threads), "setup() deadlocked"
            assert not errors, f"concurrent setup failed: {errors!r}"
            with psycopg.connect(pg_url, autocommit=True) as conn:
                saver = PostgresSaver(conn, schema=name)
                saver.setup()
                saver.put(cfg("after"), make_checkpoint({"a": 1}), {"step": 0}, {"a": 1})
                assert saver.get_tuple(cfg("after")) is not None
    finally:
        _drop_schemas(pg_url, *names)


async def test_concurrent_async_setup(pg_url: str, new_schema_name: str) -> None:
    conns = [await psycopg.AsyncConnection.connect(pg_url, autocommit=True) for _ in range(5)]
    try:
        savers = [AsyncPostgresSaver(c, schema=new_schema_name) for c in conns]
        await asyncio.gather(*(s.setup() for s in savers))
        await savers[0].aput(cfg("after"), make_checkpoint({"a": 1}), {"step": 0}, {"a": 1})
        assert await savers[-1].aget_tuple(cfg("after")) is not None
    finally:
        for c in conns:
            await c.close()


# --------------------------------------------------------------------------------------------
# Connections: conninfo, prepared statements, concurrency
# --------------------------------------------------------------------------------------------


async def test_from_conn_string_with_pool_and_no_prepared_statements(
    flavour: str, pg_url: str, schema: str
) -> None:
    async with open_from_conn_string(
        flavour, pg_url, schema=schema, pool_max_size=3, prepare_threshold=None
    ) as ops:
        for i in range(8):  # past psycopg's default prepare threshold of 5
            await put_chain(ops, f"conn-{i}", 2)
            assert await ops.get_tuple(cfg(f"conn-{i}")) is not None
            assert len(await ops.list(cfg(f"conn-{i}"))) == 2


async def test_prepare_threshold_none_prepares_nothing(
    flavour: str, pg_url: str, schema: str
) -> None:
    """With PgBouncer in transaction mode a prepared statement may land on another server
    connection; a pool configured with ``prepare_threshold=None`` must never prepare."""
    kwargs = {"autocommit": True, "prepare_threshold": None}
    query = "SELECT count(*) FROM pg_prepared_statements"
    if flavour == "sync":
        with ConnectionPool(pg_url, min_size=1, max_size=1, kwargs=kwargs, open=True) as pool:
            ops = Ops(PostgresSaver(pool, schema=schema), is_async=False)
            await ops.setup()
            for i in range(8):
                await put_chain(ops, f"prep-{i}", 2)
                await ops.get_tuple(cfg(f"prep-{i}"))
                await ops.list(cfg(f"prep-{i}"))
            with pool.connection() as conn:
                row = conn.execute(query).fetchone()
    else:
        async with AsyncConnectionPool(
            pg_url, min_size=1, max_size=1, kwargs=kwargs, open=False
        ) as apool:
            ops = Ops(AsyncPostgresSaver(apool, schema=schema), is_async=True)
            await ops.setup()
            for i in range(8):
                await put_chain(ops, f"prep-{i}", 2)
                await ops.get_tuple(cfg(f"prep-{i}"))
                await ops.list(cfg(f"prep-{i}"))
            async with apool.connection() as aconn:
                row = await (await aconn.execute(query)).fetchone()
    assert row is not None and row[0] == 0


async def test_pool_calls_run_concurrently(
    open_saver: Any, schema: str, admin: Any, pg_url: str
) -> None:
    """Three writes wait on a lock at the same time while a fourth call still gets through.

    A saver that serializes calls with one instance lock never has more than one call in the
    database at once, so this fails on it instead of only being slower.
    """
    async with open_saver(schema, pool_size=4) as ops:
        await put_chain(ops, "reader", 2)
        writers: list[asyncio.Task[Any]] = []
        with psycopg.connect(pg_url) as locker:
            lock_tables(locker, schema, base_tables(admin, schema))
            try:
                for i in range(3):
                    writers.append(
                        ops.background(
                            "put",
                            cfg(f"writer-{i}"),
                            make_checkpoint({"a": i}),
                            {"source": "loop", "step": 0, "parents": {}},
                            {"a": 1},
                        )
                    )
                blocked = await wait_for_blocked(admin, locker.info.backend_pid, writers, 3)
                assert blocked is not None, [w.exception() for w in writers if w.done()]
                for _ in range(3):
                    tup = await asyncio.wait_for(ops.get_tuple(cfg("reader")), WAIT_SECONDS)
                    assert tup is not None
                assert not any(w.done() for w in writers)
            finally:
                locker.rollback()
        await asyncio.wait_for(asyncio.gather(*writers), WAIT_SECONDS)
        for i in range(3):
            tup = await ops.get_tuple(cfg(f"writer-{i}"))
            assert tup is not None and tup.checkpoint["channel_values"] == {"a": i}


@pytest.mark.parametrize(
    "mode", ["sync-conn", "sync-conn-pipeline", "async-conn", "async-conn-pipeline"]
)
async def test_concurrent_async_calls_on_a_single_connection(
    mode: str, pg_url: str, schema: str
) -> None:
    """LangGraph calls a saver from several tasks at once; one connection must cope."""
    async with open_mode(mode, pg_url, schema) as ops:
        saver = ops.saver
        configs = await put_chain(ops, "shared", 1)

        async def one(i: int) -> Any:
            tid = f"task-thread-{i}"
            stored = await saver.aput(
                cfg(tid), make_checkpoint({"a": i}), {"source": "loop", "step": i}, {"a": 1}
            )
            await saver.aput_writes(stored, [("a", i)], f"task-{i}")
            got = await saver.aget_tuple(cfg(tid))
            listed = [t async for t in saver.alist(cfg("shared"))]
            return got, listed

        results = await asyncio.wait_for(
            asyncio.gather(*(one(i) for i in range(10))), WAIT_SECONDS * 2
        )
        for i, (got, listed) in enumerate(results):
            assert got is not None and got.checkpoint["channel_values"] == {"a": i}
            assert got.pending_writes == [(f"task-{i}", "a", i)]
            assert ids(listed) == [checkpoint_id(configs[0])]


# --------------------------------------------------------------------------------------------
# Faults: connections killed mid-put and between calls
# --------------------------------------------------------------------------------------------


async def test_connection_killed_mid_put_leaves_nothing_and_the_pool_recovers(
    open_saver: Any, schema: str, admin: Any, pg_url: str
) -> None:
    """Kill the backend while put() waits on each table in turn, i.e. at every stage of a put.

    The caller gets an exception, readers never see a half-written checkpoint, not one row of
    it stays behind, and the next call on the same pool succeeds.
    """
    async with open_saver(schema, pool_size=3) as ops:
        stages: list[str] = []
        for table in base_tables(admin, schema):
            tid = f"kill-{table}"
            [first] = await put_chain(ops, tid, 1)
            before = norm(await ops.get_tuple(cfg(tid)))
            rows_before = table_counts(admin, schema)
            big = os.urandom(500_000).hex()
            checkpoint = make_checkpoint({"a": big, "const": f"{tid}//const"}, {"a": 2, "const": 1})
            args = (
                cfg(tid, "", checkpoint_id(first)),
                checkpoint,
                {"source": "loop", "step": 1, "parents": {}},
                {"a": 2},
            )
            with psycopg.connect(pg_url) as locker:
                lock_tables(locker, schema, [table])
                task = ops.background("put", *args)
                try:
                    victims = await wait_for_blocked(admin, locker.info.backend_pid, [task], 1)
                    if victims is not None:
                        assert norm(await ops.get_tuple(cfg(tid))) == before  # not half-visible
                        terminate(admin, victims)
                finally:
                    locker.rollback()
            error = await outcome(task)
            if victims is None:  # put() never writes to this table
                assert error is None
                continue
            stages.append(table)
            assert error is not None, f"put() killed while writing {table} did not raise"
            assert norm(await ops.get_tuple(cfg(tid))) == before
            assert await ops.get_tuple(cfg(tid, "", checkpoint["id"])) is None
            assert [norm(t) for t in await ops.list(cfg(tid))] == [before]
            assert table_counts(admin, schema) == rows_before, f"half a put stayed ({table})"
            # the next call on the same pool succeeds
            await ops.put(*copy.deepcopy(args))
            tup = await ops.get_tuple(cfg(tid))
            assert tup is not None and tup.checkpoint["channel_values"]["a"] == big
        print(f"killed put() while it waited on each of: {stages}")
        assert stages, "put() never waited on a lock: the test did not kill anything"


async def test_connection_killed_while_a_large_blob_is_in_flight(
    open_saver: Any, schema: str, admin: Any, pg_url: str
) -> None:
    """Kill whatever the backend is doing as soon as the put shows up; the put either fails
    with nothing written or (if the kill came too late) is complete."""
    app = f"lgmp-kill-{uuid.uuid4().hex[:8]}"
    conninfo = psycopg.conninfo.make_conninfo(pg_url, application_name=app)
    # check=: the kill may land just after put() returned its connection to the pool; the pool
    # then has to notice that connection is dead (that is psycopg_pool's job, not the saver's)
    async with open_saver(schema, conninfo=conninfo, pool_size=2, check=True) as ops:
        [first] = await put_chain(ops, "blob-kill", 1)
        before = norm(await ops.get_tuple(cfg("blob-kill")))
        big = os.urandom(15_000_000).hex()
        checkpoint = make_checkpoint({"a": big, "const": "blob-kill//const"}, {"a": 2, "const": 1})
        task = ops.background(
            "put",
            cfg("blob-kill", "", checkpoint_id(first)),
            checkpoint,
            {"source": "loop", "step": 1, "parents": {}},
            {"a": 2},
        )
        deadline = time.monotonic() + WAIT_SECONDS
        while not task.done() and time.monotonic() < deadline:
            rows = admin.execute(
                "SELECT pid FROM pg_stat_activity WHERE application_name = %s"
                " AND state IS DISTINCT FROM 'idle'",
                [app],
            ).fetchall()
            if rows:
                terminate(admin, [r[0] for r in rows])
                break
            await asyncio.sleep(0.001)
        error = await outcome(task)
        print(f"put() of a 30 MB value, killed in flight: {error!r}")
        after = await ops.get_tuple(cfg("blob-kill"))  # the next call succeeds either way
        if error is None:
            assert after is not None and checkpoint_id(after.config) == checkpoint["id"]
            assert after.checkpoint["channel_values"]["a"] == big
        else:
            assert norm(after) == before
            assert await ops.get_tuple(cfg("blob-kill", "", checkpoint["id"])) is None


async def test_pool_from_conn_string_recovers_after_its_connections_are_killed(
    flavour: str, pg_url: str, schema: str, admin: Any
) -> None:
    app = f"lgmp-idle-{uuid.uuid4().hex[:8]}"
    conninfo = psycopg.conninfo.make_conninfo(pg_url, application_name=app)
    async with open_from_conn_string(flavour, conninfo, schema=schema, pool_max_size=2) as ops:
        await put_chain(ops, "survivor", 2)
        expected = norm(await ops.get_tuple(cfg("survivor")))
        rows = admin.execute(
            "SELECT pid FROM pg_stat_activity WHERE application_name = %s", [app]
        ).fetchall()
        assert rows, "the saver holds no connection to kill"
        terminate(admin, [r[0] for r in rows])
        assert norm(await ops.get_tuple(cfg("survivor"))) == expected
        await put_chain(ops, "survivor-2", 1)
        assert await ops.get_tuple(cfg("survivor-2")) is not None
