"""What any saver could reach on a short chat turn on this machine::

    python -m benchmarks.minimal [--pg URL] [--redis URL] [--turns 1,10] [--turns-sample 300]
        [--rounds 3] [--warmup 30] [--json PATH]

Issue 39 asks for a short turn (fresh threads of T turns of the chat graph of
``workloads.chat_graph()``, T=1, 10, 50) of at most 1.15x a featureless saver of the same
backend, and at most 1.0x the official saver on PostgreSQL and SQLite. What storing costs on
this machine, whatever a saver does on top, is the floor (issue 22 measured that its old
goal, 0.7x the official savers, lay below it). So this module measures,
in one run, the turn p50 of LangGraph's ``InMemorySaver``, the official SQLite and
PostgreSQL savers and ours, beside three deliberately featureless savers defined here:
one statement (or one round trip) per saver call, the checkpoint with its channel values
serialized as one value with ``serde.dumps_typed``, no compression, no TTL, no index
beyond the primary key, no migrations. They store every call before returning, as any
saver must, and do nothing else, so their turn is a lower bound for a real saver on the
same backend; their ratios against the goals' baselines say whether the goals can be met.

Threads are fresh, every turn timed, after ``--warmup`` untimed turns (connections,
prepared statements, the interpreter's caches); the table gives the median over
``--rounds`` rounds (the savers run in an order rotated from round to round) of each
saver's turn p50, and its client CPU per turn (``time.process_time`` over the timed turns:
this process only, not the database server's). LangGraph runs ``put`` and ``put_writes``
on executor threads beside the graph, all under one GIL, so a turn costs about what the
process spends on it: ``cpu ms/turn`` above ``InMemorySaver``'s is the saver's part.
Every unit gets storage of its own and removes it (``targets.py``): a database
``lgmp_bench_<slug>_<run id>``, keys under a prefix of its own, a SQLite file in a
temporary directory.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sqlite3
import statistics
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import redis
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    get_checkpoint_id,
    get_serializable_checkpoint_metadata,
)
from psycopg_pool import ConnectionPool

from langgraph_memory_plus.checkpoint.config import checkpoint_config

from . import targets as tg
from . import workloads as wl

MINIMAL = "minimal"
MIN_SQLITE = tg.Target("minimal SqliteSaver", "min_sqlite", MINIMAL, "sqlite")
MIN_PG = tg.Target("minimal PostgresSaver", "min_pg", MINIMAL, "postgres")
MIN_REDIS = tg.Target("minimal RedisSaver", "min_redis", MINIMAL, "redis")
SAVERS = [
    tg.MEMORY_SAVER,
    tg.OFF_SQLITE,
    MIN_SQLITE,
    tg.OURS_SQLITE,
    tg.OFF_PG,
    MIN_PG,
    tg.OURS_PG,
    MIN_REDIS,
    tg.OURS_REDIS,
]

# (name, numerator, denominator, the bound issue 39 sets): ours against the featureless saver
# of its backend first (the figure that does not move with the official savers), then against
# the official saver (Redis has none without modules). Each is a ratio of turn p50s; the CPU
# ratio beside it is the steadier figure on a shared machine.
RATIOS = [
    ("ours SQLite / minimal SQLite", tg.OURS_SQLITE, MIN_SQLITE, 1.15),
    ("ours PG / minimal PG", tg.OURS_PG, MIN_PG, 1.15),
    ("ours Redis / minimal Redis", tg.OURS_REDIS, MIN_REDIS, 1.15),
    ("ours SQLite / official SQLite", tg.OURS_SQLITE, tg.OFF_SQLITE, 1.0),
    ("ours PG / official PG", tg.OURS_PG, tg.OFF_PG, 1.0),
]

Record = tuple[str, bytes]  # what serde.dumps_typed returns: (type, bytes)


# ---------------------------------------------------------------------------------------------
# what the three savers share


def _where(config: RunnableConfig) -> tuple[str, str, str | None]:
    """(thread_id, checkpoint_ns, checkpoint_id or None for the latest) of a config."""
    configurable = config["configurable"]
    return (
        str(configurable["thread_id"]),
        str(configurable.get("checkpoint_ns", "")),
        get_checkpoint_id(config),
    )


class _Minimal(BaseCheckpointSaver[int]):
    """A checkpoint is one value: ``dumps_typed`` of the checkpoint (channel values included),
    its metadata and its parent's id; a write is one value too. Integer channel versions
    (the base class's ``get_next_version``)."""

    def _encode(
        self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata
    ) -> Record:
        return self.serde.dumps_typed(
            {
                "checkpoint": checkpoint,
                "metadata": get_serializable_checkpoint_metadata(config, metadata),
                "parent": config["configurable"].get("checkpoint_id"),
            }
        )

    def _tuple(
        self,
        thread_id: str,
        ns: str,
        checkpoint_id: str,
        record: Record,
        writes: list[tuple[str, str, str, Record]],
    ) -> CheckpointTuple:
        """The tuple of a stored record; ``writes`` as (task_path, task_id, channel, value),
        already in ``writes_sort_key`` order."""
        stored = self.serde.loads_typed(record)
        parent = stored["parent"]
        return CheckpointTuple(
            config=checkpoint_config(thread_id, ns, checkpoint_id),
            checkpoint=stored["checkpoint"],
            metadata=stored["metadata"],
            parent_config=checkpoint_config(thread_id, ns, parent) if parent else None,
            pending_writes=[
                (task_id, channel, self.serde.loads_typed(value))
                for _, task_id, channel, value in writes
            ],
        )

    @staticmethod
    def _clauses(
        config: RunnableConfig | None, before: RunnableConfig | None, mark: str, table: str = ""
    ) -> tuple[list[str], list[Any]]:
        """``list``'s WHERE clauses and parameters (``mark``: the driver's placeholder)."""
        clauses: list[str] = []
        params: list[Any] = []
        if config is not None:
            thread_id, ns, checkpoint_id = _where(config)
            clauses += [f"{table}thread_id = {mark}", f"{table}checkpoint_ns = {mark}"]
            params += [thread_id, ns]
            if checkpoint_id is not None:
                clauses.append(f"{table}checkpoint_id = {mark}")
                params.append(checkpoint_id)
        if before is not None and (before_id := get_checkpoint_id(before)):
            clauses.append(f"{table}checkpoint_id < {mark}")
            params.append(before_id)
        return clauses, params

    @staticmethod
    def _first(
        tuples: Iterable[CheckpointTuple], filter: dict[str, Any] | None, limit: int | None
    ) -> Iterator[CheckpointTuple]:
        """The first ``limit`` of ``tuples`` whose metadata matches ``filter`` (equality)."""
        count = 0
        for tup in tuples:
            if limit is not None and count >= limit:
                return
            if not filter or all(tup.metadata.get(k) == v for k, v in filter.items()):
                count += 1
                yield tup

    def _write_rows(self, writes: Sequence[tuple[str, Any]]) -> list[tuple[int, str, Record]]:
        """(idx, channel, value) per write; special channels at their fixed negative idx."""
        return [
            (WRITES_IDX_MAP.get(channel, idx), channel, self.serde.dumps_typed(value))
            for idx, (channel, value) in enumerate(writes)
        ]

    def _write_records(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, path: str
    ) -> list[tuple[Any, ...]]:
        """The rows of the SQL savers' ``writes`` table for one ``put_writes``."""
        thread_id, ns, checkpoint_id = _where(config)
        return [
            (thread_id, ns, checkpoint_id, task_id, idx, path, channel, kind, value)
            for idx, channel, (kind, value) in self._write_rows(writes)
        ]

    @staticmethod
    def _next_config(config: RunnableConfig, checkpoint: Checkpoint) -> RunnableConfig:
        thread_id, ns, _ = _where(config)
        return checkpoint_config(thread_id, ns, checkpoint["id"])


# ---------------------------------------------------------------------------------------------
# SQLite


class MinimalSqliteSaver(_Minimal):
    """One sqlite3 connection behind a lock (LangGraph calls ``put`` from its background
    threads), WAL with ``synchronous=NORMAL``; one transaction per call."""

    def __init__(self, path: str) -> None:
        super().__init__()
        self.lock = threading.Lock()
        self.conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute("PRAGMA synchronous=NORMAL")
        self.conn.executescript(
            """
            CREATE TABLE IF NOT EXISTS checkpoints (
                thread_id TEXT, checkpoint_ns TEXT, checkpoint_id TEXT, type TEXT, value BLOB,
                PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id));
            CREATE TABLE IF NOT EXISTS writes (
                thread_id TEXT, checkpoint_ns TEXT, checkpoint_id TEXT, task_id TEXT,
                idx INTEGER, task_path TEXT, channel TEXT, type TEXT, value BLOB,
                PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id, task_id, idx));
            """
        )

    def close(self) -> None:
        with self.lock:
            self.conn.close()

    @contextlib.contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One write transaction, committed before the call returns."""
        with self.lock:
            self.conn.execute("BEGIN IMMEDIATE")
            try:
                yield self.conn
            except BaseException:
                self.conn.execute("ROLLBACK")
                raise
            self.conn.execute("COMMIT")

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        thread_id, ns, _ = _where(config)
        kind, value = self._encode(config, checkpoint, metadata)
        with self._write() as conn:
            conn.execute(
                "INSERT OR REPLACE INTO checkpoints VALUES (?, ?, ?, ?, ?)",
                (thread_id, ns, checkpoint["id"], kind, value),
            )
        return self._next_config(config, checkpoint)

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        rows = self._write_records(config, writes, task_id, task_path)
        with self._write() as conn:
            conn.executemany(
                "INSERT OR REPLACE INTO writes VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", rows
            )

    def _writes(self, thread_id: str, ns: str, checkpoint_id: str) -> list[Any]:
        return self.conn.execute(
            "SELECT task_path, task_id, channel, type, value FROM writes "
            "WHERE thread_id = ? AND checkpoint_ns = ? AND checkpoint_id = ? "
            "ORDER BY task_path, task_id, idx",
            (thread_id, ns, checkpoint_id),
        ).fetchall()

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        thread_id, ns, checkpoint_id = _where(config)
        with self.lock:
            if checkpoint_id is None:
                row = self.conn.execute(
                    "SELECT checkpoint_id, type, value FROM checkpoints "
                    "WHERE thread_id = ? AND checkpoint_ns = ? "
                    "ORDER BY checkpoint_id DESC LIMIT 1",
                    (thread_id, ns),
                ).fetchone()
            else:
                row = self.conn.execute(
                    "SELECT checkpoint_id, type, value FROM checkpoints "
                    "WHERE thread_id = ? AND checkpoint_ns = ? AND checkpoint_id = ?",
                    (thread_id, ns, checkpoint_id),
                ).fetchone()
            if row is None:
                return None
            writes = self._writes(thread_id, ns, row[0])
        return self._tuple(
            thread_id, ns, row[0], (row[1], row[2]), [(p, t, c, (k, v)) for p, t, c, k, v in writes]
        )

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        """Newest first; ``filter`` on metadata is applied here, after decoding."""
        sql = "SELECT thread_id, checkpoint_ns, checkpoint_id, type, value FROM checkpoints"
        clauses, params = self._clauses(config, before, "?")
        if clauses:
            sql += " WHERE " + " AND ".join(clauses)
        sql += " ORDER BY checkpoint_id DESC"
        with self.lock:
            rows = self.conn.execute(sql, params).fetchall()

        def tuples() -> Iterator[CheckpointTuple]:
            for thread_id, ns, checkpoint_id, kind, value in rows:
                with self.lock:
                    writes = self._writes(thread_id, ns, checkpoint_id)
                yield self._tuple(
                    thread_id,
                    ns,
                    checkpoint_id,
                    (kind, value),
                    [(p, t, c, (k, v)) for p, t, c, k, v in writes],
                )

        yield from self._first(tuples(), filter, limit)


# ---------------------------------------------------------------------------------------------
# PostgreSQL

_PG_SCHEMA = """
CREATE TABLE IF NOT EXISTS checkpoints (
    thread_id text, checkpoint_ns text, checkpoint_id text, type text, value bytea,
    PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id));
CREATE TABLE IF NOT EXISTS writes (
    thread_id text, checkpoint_ns text, checkpoint_id text, task_id text, idx integer,
    task_path text, channel text, type text, value bytea,
    PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id, task_id, idx));
"""

_PG_PUT = """
INSERT INTO checkpoints VALUES (%s, %s, %s, %s, %s)
ON CONFLICT (thread_id, checkpoint_ns, checkpoint_id)
DO UPDATE SET type = EXCLUDED.type, value = EXCLUDED.value
"""

_PG_PUT_WRITES = """
INSERT INTO writes VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)
ON CONFLICT (thread_id, checkpoint_ns, checkpoint_id, task_id, idx)
DO UPDATE SET task_path = EXCLUDED.task_path, channel = EXCLUDED.channel,
    type = EXCLUDED.type, value = EXCLUDED.value
"""

# one statement: the checkpoint and its writes as arrays in writes_sort_key order
_PG_SELECT = """
SELECT c.thread_id, c.checkpoint_ns, c.checkpoint_id, c.type, c.value,
       w.paths, w.tasks, w.channels, w.types, w.vals
FROM checkpoints c
LEFT JOIN LATERAL (
    SELECT array_agg(task_path ORDER BY task_path, task_id, idx) AS paths,
           array_agg(task_id ORDER BY task_path, task_id, idx) AS tasks,
           array_agg(channel ORDER BY task_path, task_id, idx) AS channels,
           array_agg(type ORDER BY task_path, task_id, idx) AS types,
           array_agg(value ORDER BY task_path, task_id, idx) AS vals
    FROM writes
    WHERE thread_id = c.thread_id AND checkpoint_ns = c.checkpoint_ns
      AND checkpoint_id = c.checkpoint_id
) w ON true
"""


class MinimalPostgresSaver(_Minimal):
    """A psycopg ``ConnectionPool`` (autocommit; ``prepare_threshold=0``: every statement
    is prepared on first use); one statement per call, ``put_writes`` one ``executemany``
    (psycopg sends it in pipeline mode: one round trip)."""

    def __init__(self, url: str, max_size: int = 4) -> None:
        super().__init__()
        self.pool = ConnectionPool(
            url,
            min_size=2,
            max_size=max_size,
            kwargs={"autocommit": True, "prepare_threshold": 0},
            open=True,
        )
        with self.pool.connection() as conn:
            conn.execute(_PG_SCHEMA, prepare=False)

    def close(self) -> None:
        self.pool.close()

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        thread_id, ns, _ = _where(config)
        kind, value = self._encode(config, checkpoint, metadata)
        with self.pool.connection() as conn:
            conn.execute(_PG_PUT, (thread_id, ns, checkpoint["id"], kind, value))
        return self._next_config(config, checkpoint)

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        rows = self._write_records(config, writes, task_id, task_path)
        with self.pool.connection() as conn, conn.cursor() as cur:
            cur.executemany(_PG_PUT_WRITES, rows)

    def _from_row(self, row: Sequence[Any]) -> CheckpointTuple:
        thread_id, ns, checkpoint_id, kind, value, paths, tasks, channels, types, vals = row
        writes = list(
            zip(
                paths or [],
                tasks or [],
                channels or [],
                [(k, bytes(v)) for k, v in zip(types or [], vals or [], strict=True)],
                strict=True,
            )
        )
        return self._tuple(thread_id, ns, checkpoint_id, (kind, bytes(value)), writes)

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        thread_id, ns, checkpoint_id = _where(config)
        with self.pool.connection() as conn:
            if checkpoint_id is None:
                row = conn.execute(
                    _PG_SELECT + "WHERE c.thread_id = %s AND c.checkpoint_ns = %s "
                    "ORDER BY c.checkpoint_id DESC LIMIT 1",
                    (thread_id, ns),
                ).fetchone()
            else:
                row = conn.execute(
                    _PG_SELECT + "WHERE c.thread_id = %s AND c.checkpoint_ns = %s "
                    "AND c.checkpoint_id = %s",
                    (thread_id, ns, checkpoint_id),
                ).fetchone()
        return None if row is None else self._from_row(row)

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        """Newest first; ``filter`` on metadata is applied here, after decoding."""
        clauses, params = self._clauses(config, before, "%s", "c.")
        sql = _PG_SELECT + (" WHERE " + " AND ".join(clauses) if clauses else "")
        with self.pool.connection() as conn:
            rows = conn.execute(sql + " ORDER BY c.checkpoint_id DESC", params).fetchall()
        yield from self._first(map(self._from_row, rows), filter, limit)


# ---------------------------------------------------------------------------------------------
# Redis

# the latest checkpoint of a thread with its writes, in one round trip
_LATEST = """
local ids = redis.call('ZREVRANGEBYLEX', KEYS[1], '+', '-', 'LIMIT', 0, 1)
if #ids == 0 then return false end
return {ids[1], redis.call('GET', ARGV[1] .. ids[1]), redis.call('HGETALL', ARGV[2] .. ids[1])}
"""


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _pack(record: Record) -> bytes:
    return record[0].encode() + b"|" + record[1]


def _unpack(data: bytes) -> Record:
    kind, _, value = data.partition(b"|")
    return kind.decode(), value


class MinimalRedisSaver(_Minimal):
    """redis-py on one client: a checkpoint is one string key plus its id in the thread's
    sorted set (ids sort by their text, so the latest is the greatest member), written in one
    pipelined round trip; a checkpoint's writes are one hash (one ``HSET``); the latest
    checkpoint with its writes is one script call. Single-node Redis only."""

    def __init__(self, url: str, prefix: str) -> None:
        super().__init__()
        self.client = redis.Redis.from_url(url)
        self.prefix = prefix
        self.latest = self.client.register_script(_LATEST)

    def close(self) -> None:
        self.client.close()

    def _keys(self, thread_id: str, ns: str) -> tuple[str, str, str]:
        """(the thread's sorted set, checkpoint key prefix, writes key prefix)."""
        base = f"{self.prefix}:{thread_id}:{ns}"
        return f"{base}:ids", f"{base}:cp:", f"{base}:w:"

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        thread_id, ns, _ = _where(config)
        ids, cp, _ = self._keys(thread_id, ns)
        pipe = self.client.pipeline(transaction=False)
        pipe.set(cp + checkpoint["id"], _pack(self._encode(config, checkpoint, metadata)))
        pipe.zadd(ids, {checkpoint["id"]: 0})
        pipe.execute()
        return self._next_config(config, checkpoint)

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        thread_id, ns, checkpoint_id = _where(config)
        _, _, w = self._keys(thread_id, ns)
        fields = {
            json.dumps([task_path, task_id, idx, channel]): _pack(record)
            for idx, channel, record in self._write_rows(writes)
        }
        if fields:
            self.client.hset(f"{w}{checkpoint_id}", mapping=fields)  # type: ignore[arg-type]

    def _from_reply(
        self, thread_id: str, ns: str, checkpoint_id: str, data: bytes, fields: Any
    ) -> CheckpointTuple:
        """``fields``: HGETALL's reply, a dict (redis-py) or a flat list (a script's)."""
        items = (
            fields.items()
            if isinstance(fields, dict)
            else zip(fields[::2], fields[1::2], strict=True)
        )
        writes = sorted(
            (json.loads(field), value) for field, value in items
        )  # (task_path, task_id, idx) first: writes_sort_key order
        return self._tuple(
            thread_id,
            ns,
            checkpoint_id,
            _unpack(data),
            [(p, t, c, _unpack(value)) for (p, t, _, c), value in writes],
        )

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        thread_id, ns, checkpoint_id = _where(config)
        ids, cp, w = self._keys(thread_id, ns)
        if checkpoint_id is None:
            reply = self.latest(keys=[ids], args=[cp, w])
            if not reply:
                return None
            found, data, fields = reply
            return self._from_reply(thread_id, ns, _text(found), data, fields)
        pipe = self.client.pipeline(transaction=False)
        pipe.get(cp + checkpoint_id)
        pipe.hgetall(w + checkpoint_id)
        data, fields = pipe.execute()
        if data is None:
            return None
        return self._from_reply(thread_id, ns, checkpoint_id, data, fields)

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        """One thread's checkpoints, newest first (no index across threads: ``config`` is
        required); ``filter`` on metadata is applied here, after decoding."""
        if config is None:
            raise ValueError("the minimal Redis saver lists one thread's checkpoints only")
        thread_id, ns, checkpoint_id = _where(config)
        ids, _, _ = self._keys(thread_id, ns)
        if checkpoint_id is not None:
            found = [checkpoint_id]
        else:
            before_id = get_checkpoint_id(before) if before is not None else None
            top = f"({before_id}" if before_id else "+"
            found = [_text(i) for i in self.client.zrevrangebylex(ids, top, "-")]
        tuples = (self.get_tuple(checkpoint_config(thread_id, ns, one)) for one in found)
        yield from self._first((t for t in tuples if t is not None), filter, limit)


# ---------------------------------------------------------------------------------------------
# opening a saver on storage of its own


@contextlib.contextmanager
def open_saver(target: tg.Target, env: tg.Env) -> Iterator[tuple[BaseCheckpointSaver[Any], str]]:
    """(saver, marker) on fresh storage, removed afterwards. LangGraph's savers through
    ``targets.open_session`` (``from_conn_string`` + ``setup()``); ours here, on the same
    kind of storage. Thread ids should contain the marker."""
    if target.family != MINIMAL:
        with tg.open_session(target, env) as session:
            yield session.obj, session.marker
        return
    storage = tg.make_storage(target, env)
    try:
        assert storage.url is not None
        saver: MinimalSqliteSaver | MinimalPostgresSaver | MinimalRedisSaver
        if target.backend == "sqlite":
            saver = MinimalSqliteSaver(storage.url)
        elif target.backend == "postgres":
            saver = MinimalPostgresSaver(storage.url)
        else:
            saver = MinimalRedisSaver(storage.url, storage.marker)
        try:
            yield saver, storage.marker
        finally:
            saver.close()
    finally:
        storage.close()


# ---------------------------------------------------------------------------------------------
# the measurement


def _turn(graph: Any, thread_id: str, turn: int = 1) -> None:
    graph.invoke({"messages": [wl.user_message(turn)]}, {"configurable": {"thread_id": thread_id}})


def short_threads(
    target: tg.Target,
    env: tg.Env,
    warmup: int,
    turns: int,
    length: int = 1,
    opener: Callable[[tg.Target, tg.Env], AbstractContextManager[tuple[Any, str]]] = open_saver,
) -> dict[str, float]:
    """Turn p50 (ms) and client CPU per turn (ms) @T=``length``: fresh threads of
    ``length`` turns, every turn timed, until ``turns`` turns are timed (at T=1 every
    turn is on a new thread), as the chat section's turn p50 @T.

    Afterwards one of the threads gets one more turn and is read back (its messages,
    kinds and ids), so a saver that loses data cannot post a time. ``opener``: how
    ``target`` is opened (``benchmarks.ladder`` passes its own)."""
    with opener(target, env) as (saver, marker):
        graph = wl.chat_graph().compile(checkpointer=saver)
        for i in range(warmup):
            _turn(graph, f"{marker}-warm{i}")
        latencies: list[float] = []
        cpu = time.process_time()
        thread = 0
        while len(latencies) < turns:
            for turn in range(1, length + 1):
                started = time.perf_counter()
                _turn(graph, f"{marker}-t{thread}", turn)
                latencies.append(time.perf_counter() - started)
            thread += 1
        cpu = time.process_time() - cpu
        _turn(graph, f"{marker}-t0", length + 1)
        config: RunnableConfig = {"configurable": {"thread_id": f"{marker}-t0"}}
        wl._check_conversation(dict(graph.get_state(config).values), length + 1, target.name)
    return {
        "turn p50 ms": statistics.median(latencies) * 1000.0,
        "cpu ms/turn": cpu / len(latencies) * 1000.0,
    }


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.minimal",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--pg", default="postgresql://postgres@127.0.0.1:5432/test")
    p.add_argument("--redis", default="redis://127.0.0.1:6379/0")
    p.add_argument("--turns", default="1", help="thread lengths T, e.g. 1,10")
    p.add_argument("--turns-sample", type=int, default=300, help="timed turns per unit")
    p.add_argument("--warmup", type=int, default=30, help="untimed turns per unit first")
    p.add_argument("--rounds", type=int, default=3, help="medians over this many rounds")
    p.add_argument("--json", type=Path, help="write the numbers here")
    return p.parse_args(argv)


def _table(
    savers: dict[str, dict[str, dict[str, float]]], ratios: dict[str, dict[str, dict[str, Any]]]
) -> str:
    """Markdown: per T, each saver's numbers, then each ratio against its goal."""
    lines = ["| saver | @T | turn p50 ms | cpu ms/turn |", "|---|---:|---:|---:|"]
    lines += [
        f"| {name} | {length} | {m['turn p50 ms']:.3f} | {m['cpu ms/turn']:.3f} |"
        for length, by_saver in savers.items()
        for name, m in by_saver.items()
    ]
    lines += [
        "",
        "| ratio (turn p50) | @T | value | goal | within goal | cpu ratio |",
        "|---|---:|---:|---:|---|---:|",
    ]
    lines += [
        f"| {name} | {length} | {r['ratio']:.3f}x | <= {r['goal']}x | "
        f"{'yes' if r['within goal'] else 'no'} | {r['cpu ratio']:.3f}x |"
        for length, by_ratio in ratios.items()
        for name, r in by_ratio.items()
    ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    tg.check_pg_url(args.pg)
    tg.check_redis_url(args.redis)
    lengths = [int(t) for t in str(args.turns).split(",") if t.strip()]
    env = tg.Env(pg=args.pg, redis=args.redis)
    load_before = os.getloadavg()
    samples: dict[str, dict[str, dict[str, list[float]]]] = {
        str(t): {s.name: {} for s in SAVERS} for t in lengths
    }
    for round_no in range(args.rounds):
        shift = round_no % len(SAVERS)
        for target in SAVERS[shift:] + SAVERS[:shift]:
            for t in lengths:
                measured = short_threads(target, env, args.warmup, args.turns_sample, t)
                for metric, value in measured.items():
                    samples[str(t)][target.name].setdefault(metric, []).append(value)
    savers = {
        length: {
            name: {metric: statistics.median(values) for metric, values in metrics.items()}
            for name, metrics in by_saver.items()
        }
        for length, by_saver in samples.items()
    }
    ratios: dict[str, dict[str, dict[str, Any]]] = {}
    for length, by_saver in savers.items():
        ratios[length] = {}
        for name, numerator, denominator, goal in RATIOS:
            ratio = (
                by_saver[numerator.name]["turn p50 ms"] / by_saver[denominator.name]["turn p50 ms"]
            )
            num, den = by_saver[numerator.name], by_saver[denominator.name]
            cpu = num["cpu ms/turn"] / den["cpu ms/turn"]
            ratios[length][name] = {
                "ratio": ratio,
                "goal": goal,
                "within goal": ratio <= goal,
                "cpu ratio": cpu,
            }
    out: dict[str, Any] = {
        "meta": {
            "run_id": env.run_id,
            "rounds": args.rounds,
            "turns": lengths,
            "turns_sample": args.turns_sample,
            "warmup": args.warmup,
            "load average before": list(load_before),
            "load average after": list(os.getloadavg()),
            "cpus": os.cpu_count(),
        },
        "savers": {
            length: {name: {**m, "samples": samples[length][name]} for name, m in by.items()}
            for length, by in savers.items()
        },
        "ratios": ratios,
    }
    print(
        f"turns @T={','.join(map(str, lengths))} (fresh T-turn threads): {args.turns_sample} "
        f"timed per saver and T after {args.warmup} warm-up turns, median of {args.rounds} "
        f"rounds; load average {' '.join(f'{x:.2f}' for x in load_before)} -> "
        f"{' '.join(f'{x:.2f}' for x in out['meta']['load average after'])}"
    )
    print(_table(savers, ratios))
    if args.json:
        args.json.write_text(json.dumps(out, indent=2) + "\n")
    return out


if __name__ == "__main__":
    main()
