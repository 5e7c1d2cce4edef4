"""What is benchmarked: savers and stores, each on storage of its own, with a footprint probe.

Every measured unit (one saver, one section, one round) gets fresh, isolated storage:

- PostgreSQL: a database ``lgmp_bench_<slug>_<run id>`` created for the unit and dropped
  after it, so ``pg_total_relation_size`` of its tables is that saver's footprint alone;
- our Redis savers: a key prefix of the unit's own (every key is ``<prefix>:...``);
- the official Redis saver (Redis Stack): ``checkpoint_prefix`` / ``checkpoint_write_prefix``
  and thread ids carrying the unit's marker (its ``write_keys_zset:<thread>`` keys are not
  prefixed, but name the thread); its search indexes are dropped after the unit;
- SQLite (ours and ``langgraph-checkpoint-sqlite``): a file in a temporary directory of the
  unit's own, removed after it;
- ``InMemorySaver`` / ``InMemoryStore``: a new instance.

Savers are opened through each library's public API (``from_conn_string`` + ``setup``).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import ipaddress
import itertools
import os
import shutil
import socket
import sqlite3
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import psycopg
import redis

OURS, OFFICIAL, MEMORY = "ours", "official", "memory"


@dataclass(frozen=True)
class Target:
    """One saver or store implementation under test."""

    name: str  # as shown in the tables
    slug: str  # [a-z0-9_]: database names, key prefixes
    family: str  # ours | official | memory
    backend: str  # postgres | redis | redis-stack | sqlite | memory
    is_async: bool = False  # driven through its async API (ainvoke, aget_tuple) on an event loop
    kind: str = "saver"  # saver | store
    # a sync target whose async methods work as well: it joins the concurrent throughput runs
    has_async_api: bool = False

    def on_event_loop(self) -> Target:
        """This target driven through its async API (itself if it is async already)."""
        if self.is_async:
            return self
        if not self.has_async_api:
            raise ValueError(f"{self.name} has no async API")
        return dataclasses.replace(self, is_async=True)


# InMemorySaver's async methods call its sync ones: at concurrency > 1 it shows what the
# LangGraph runtime alone reaches in one process (the ceiling for every saver)
MEMORY_SAVER = Target("InMemorySaver", "memory", MEMORY, "memory", has_async_api=True)
OURS_PG = Target("ours PostgresSaver", "ours_pg", OURS, "postgres")
OURS_PG_ASYNC = Target("ours AsyncPostgresSaver", "ours_pg_async", OURS, "postgres", True)
OURS_REDIS = Target("ours RedisSaver", "ours_redis", OURS, "redis")
OURS_REDIS_ASYNC = Target("ours AsyncRedisSaver", "ours_redis_async", OURS, "redis", True)
OFF_PG = Target("official PostgresSaver", "off_pg", OFFICIAL, "postgres")
OFF_PG_ASYNC = Target("official AsyncPostgresSaver", "off_pg_async", OFFICIAL, "postgres", True)
OFF_REDIS = Target("official RedisSaver", "off_redis", OFFICIAL, "redis-stack")
OFF_REDIS_ASYNC = Target(
    "official AsyncRedisSaver", "off_redis_async", OFFICIAL, "redis-stack", True
)
OURS_SQLITE = Target("ours SqliteSaver", "ours_sqlite", OURS, "sqlite")
OURS_SQLITE_ASYNC = Target("ours AsyncSqliteSaver", "ours_sqlite_async", OURS, "sqlite", True)
OFF_SQLITE = Target("official SqliteSaver", "off_sqlite", OFFICIAL, "sqlite")
OFF_SQLITE_ASYNC = Target("official AsyncSqliteSaver", "off_sqlite_async", OFFICIAL, "sqlite", True)

MEMORY_STORE = Target("InMemoryStore", "memstore", MEMORY, "memory", kind="store")
OURS_PG_STORE = Target("ours PostgresStore", "ours_pgstore", OURS, "postgres", kind="store")
OURS_REDIS_STORE = Target("ours RedisStore", "ours_redisstore", OURS, "redis", kind="store")
OFF_PG_STORE = Target("official PostgresStore", "off_pgstore", OFFICIAL, "postgres", kind="store")
OURS_SQLITE_STORE = Target("ours SqliteStore", "ours_sqlitestore", OURS, "sqlite", kind="store")
OFF_SQLITE_STORE = Target(
    "official SqliteStore", "off_sqlitestore", OFFICIAL, "sqlite", kind="store"
)


def baseline_of(target: Target) -> Target:
    """The official implementation a target's ratios are taken against: the official SQLite
    saver of the same flavour for SQLite savers (the SQLite goals are set against it), the
    official PostgreSQL saver of the same flavour for the others, PostgresStore for stores."""
    if target.kind == "store":
        return OFF_PG_STORE
    if target.backend == "sqlite":
        return OFF_SQLITE_ASYNC if target.is_async else OFF_SQLITE
    return OFF_PG_ASYNC if target.is_async else OFF_PG


def same_backend_baseline(target: Target) -> Target:
    """The official implementation of the target's own backend and kind (``setup()`` timings:
    a fresh SQLite file against a fresh PostgreSQL database says nothing)."""
    if target.backend == "sqlite":
        return OFF_SQLITE_STORE if target.kind == "store" else OFF_SQLITE
    return OFF_PG_STORE if target.kind == "store" else OFF_PG


def memory_reference(target: Target) -> Target | None:
    """Redis rows get a second ratio, against InMemorySaver: the Redis goals are set in
    multiples of it (LangGraph's runtime with no storage)."""
    if target.kind == "saver" and target.backend in ("redis", "redis-stack"):
        return MEMORY_SAVER
    return None


def has_official_sqlite() -> bool:
    """Whether ``langgraph-checkpoint-sqlite`` (savers and store) is installed."""
    try:
        import langgraph.checkpoint.sqlite.aio
        import langgraph.store.sqlite  # noqa: F401
    except ImportError:
        return False
    return True


def saver_targets(with_redis_stack: bool) -> list[Target]:
    targets = [MEMORY_SAVER, OURS_PG, OURS_PG_ASYNC, OURS_REDIS, OURS_REDIS_ASYNC, OFF_PG]
    targets.append(OFF_PG_ASYNC)
    targets += [OURS_SQLITE, OURS_SQLITE_ASYNC]
    if has_official_sqlite():
        targets += [OFF_SQLITE, OFF_SQLITE_ASYNC]
    if with_redis_stack:
        targets += [OFF_REDIS, OFF_REDIS_ASYNC]
    return targets


def store_targets() -> tuple[list[Target], str | None]:
    """The stores to compare, or a note saying why the section is skipped."""
    import langgraph_memory_plus as lgmp

    pairs = (
        (OURS_PG_STORE, "PostgresStore"),
        (OURS_REDIS_STORE, "RedisStore"),
        (OURS_SQLITE_STORE, "SqliteStore"),
    )
    ours = [target for target, attr in pairs if hasattr(lgmp, attr)]
    if not ours:
        return [], (
            "skipped: langgraph_memory_plus exports no PostgresStore, RedisStore or SqliteStore"
        )
    official = [OFF_PG_STORE, *([OFF_SQLITE_STORE] if has_official_sqlite() else [])]
    return [MEMORY_STORE, *ours, *official], None


# ---------------------------------------------------------------------------------------------
# loopback only


def _is_loopback(host: str | None) -> bool:
    if not host:
        return False
    if host.startswith("/"):  # a PostgreSQL unix-socket directory: local by definition
        return True
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_pg_url(url: str) -> None:
    hosts = psycopg.conninfo.conninfo_to_dict(url).get("host") or ""
    for host in str(hosts).split(","):
        if not _is_loopback(host):
            raise SystemExit(f"refusing {url!r}: benchmarks connect to loopback hosts only")


def check_redis_url(url: str) -> None:
    parts = urlsplit(url)
    if parts.scheme not in ("redis", "rediss") or not _is_loopback(parts.hostname):
        raise SystemExit(
            f"refusing {url!r}: benchmarks take a redis:// URL on a loopback host only"
        )


# ---------------------------------------------------------------------------------------------
# run-wide settings


@dataclass
class Env:
    """Server URLs and the run id that keeps this run's databases and keys apart."""

    pg: str
    redis: str
    redis_stack: str | None = None
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex[:6])
    _units: Iterator[int] = field(default_factory=itertools.count)

    def marker(self, target: Target) -> str:
        """A unique token for one unit: key prefixes and thread ids contain it."""
        return f"lgmpb{self.run_id}{target.slug.replace('_', '')}{next(self._units)}"


# ---------------------------------------------------------------------------------------------
# isolated storage per unit, with its footprint


class Storage:
    url: str | None = None

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def footprint(self, obj: Any) -> int:
        raise NotImplementedError

    def close(self) -> None:
        pass


class PgStorage(Storage):
    """A database of the unit's own; footprint = sum of pg_total_relation_size of its tables."""

    _SIZE_SQL = """
        SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0)::bigint
        FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE c.relkind IN ('r', 'p', 'm')
          AND n.nspname NOT IN ('pg_catalog', 'information_schema')
          AND n.nspname NOT LIKE 'pg_toast%'
    """

    def __init__(self, admin_url: str, target: Target, env: Env, marker: str) -> None:
        super().__init__(marker)
        self.admin_url = admin_url
        self.dbname = f"lgmp_bench_{target.slug}_{env.run_id}"
        with psycopg.connect(admin_url, autocommit=True, connect_timeout=10) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{self.dbname}" WITH (FORCE)')
            admin.execute(f'CREATE DATABASE "{self.dbname}"')
        self.url = psycopg.conninfo.make_conninfo(admin_url, dbname=self.dbname)
        self._probe = psycopg.connect(self.url, autocommit=True, connect_timeout=10)

    def footprint(self, obj: Any) -> int:
        row = self._probe.execute(self._SIZE_SQL).fetchone()
        return int(row[0]) if row else 0

    def close(self) -> None:
        with contextlib.suppress(psycopg.Error):
            self._probe.close()
        with psycopg.connect(self.admin_url, autocommit=True, connect_timeout=10) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{self.dbname}" WITH (FORCE)')


class RedisStorage(Storage):
    """Keys matching a pattern; footprint = MEMORY USAGE (exact: SAMPLES 0) summed over them."""

    def __init__(self, url: str, marker: str, pattern: str, drop_indexes: bool = False) -> None:
        super().__init__(marker)
        self.url = url
        self.pattern = pattern
        self.drop_indexes = drop_indexes
        self.client = redis.Redis.from_url(url, socket_timeout=60, socket_connect_timeout=10)
        self.client.ping()

    def _keys(self) -> Iterator[list[bytes]]:
        batch: list[bytes] = []
        for key in self.client.scan_iter(match=self.pattern, count=1000):
            batch.append(key)
            if len(batch) >= 500:
                yield batch
                batch = []
        if batch:
            yield batch

    def footprint(self, obj: Any) -> int:
        total = 0
        for batch in self._keys():
            pipe = self.client.pipeline(transaction=False)
            for key in batch:
                pipe.memory_usage(key, samples=0)
            total += sum(int(n or 0) for n in pipe.execute())
        return total

    def close(self) -> None:
        try:
            for batch in list(self._keys()):
                self.client.unlink(*batch)
            if self.drop_indexes:
                for name in self.client.execute_command("FT._LIST"):
                    text = name.decode() if isinstance(name, bytes) else str(name)
                    if text.startswith(f"{self.marker}_"):  # not those of marker + digits
                        self.client.execute_command("FT.DROPINDEX", text)
        finally:
            self.client.close()


def payload_bytes(obj: Any) -> int:
    """Bytes held in a tree of dicts/tuples of str/bytes (InMemorySaver's serialized dicts)."""
    total = 0
    stack = [obj]
    while stack:
        item = stack.pop()
        if isinstance(item, (bytes, bytearray, memoryview)):
            total += len(item)
        elif isinstance(item, str):
            total += len(item.encode("utf-8", "surrogatepass"))
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
        elif isinstance(item, (int, float)):
            total += 8
    return total


class SqliteStorage(Storage):
    """A database file in a temporary directory of the unit's own (with its -wal and -shm
    files), removed afterwards; footprint = the database's pages in use, WAL included (what
    ``PRAGMA page_count`` sees through a fresh connection, minus the free list)."""

    def __init__(self, marker: str) -> None:
        super().__init__(marker)
        self.directory = tempfile.mkdtemp(prefix=f"{marker}-")
        self.path = self.url = f"{self.directory}/bench.sqlite"

    def footprint(self, obj: Any) -> int:
        probe = sqlite3.connect(self.path)
        try:
            pages = probe.execute("PRAGMA page_count").fetchone()[0]
            free = probe.execute("PRAGMA freelist_count").fetchone()[0]
            size = probe.execute("PRAGMA page_size").fetchone()[0]
        finally:
            probe.close()
        return int((pages - free) * size)

    def close(self) -> None:
        shutil.rmtree(self.directory, ignore_errors=True)


class MemoryStorage(Storage):
    def footprint(self, obj: Any) -> int:
        if hasattr(obj, "blobs"):  # InMemorySaver
            return payload_bytes(obj.storage) + payload_bytes(obj.writes) + payload_bytes(obj.blobs)
        return 0  # InMemoryStore: not measured


def make_storage(target: Target, env: Env) -> Storage:
    marker = env.marker(target)
    if target.backend == "postgres":
        return PgStorage(env.pg, target, env, marker)
    if target.backend == "redis":
        return RedisStorage(env.redis, marker, f"{marker}:*")
    if target.backend == "redis-stack":
        if not env.redis_stack:
            raise RuntimeError(f"{target.name} needs --redis-stack")
        # the saver's keys start with "<marker>_", its thread ids with "<marker>-"
        return RedisStorage(env.redis_stack, marker, f"*{marker}[-_]*", drop_indexes=True)
    if target.backend == "sqlite":
        return SqliteStorage(marker)
    return MemoryStorage(marker)


# ---------------------------------------------------------------------------------------------
# opening savers and stores through their public APIs


def _pool_max(pool_size: int) -> int:
    return max(10, pool_size)


@contextlib.contextmanager
def _open_sync(target: Target, st: Storage, pool_size: int) -> Iterator[Any]:
    slug = target.slug
    if slug == "memory":
        from langgraph.checkpoint.memory import InMemorySaver

        yield InMemorySaver()
    elif slug == "memstore":
        from langgraph.store.memory import InMemoryStore

        yield InMemoryStore()
    elif slug in ("ours_pg", "ours_pgstore"):
        import langgraph_memory_plus as lgmp

        cls = lgmp.PostgresSaver if slug == "ours_pg" else lgmp.PostgresStore
        assert st.url
        with cls.from_conn_string(st.url, pool_max_size=_pool_max(pool_size)) as obj:
            yield obj
    elif slug == "ours_redis":
        from langgraph_memory_plus import RedisSaver

        assert st.url
        with RedisSaver.from_conn_string(st.url, key_prefix=st.marker) as obj:
            yield obj
    elif slug == "ours_redisstore":
        import langgraph_memory_plus as lgmp

        cls = lgmp.RedisStore
        assert st.url
        with cls.from_conn_string(st.url, key_prefix=st.marker) as obj:
            yield obj
    elif slug == "off_pg":
        from langgraph.checkpoint.postgres import PostgresSaver

        assert st.url
        with PostgresSaver.from_conn_string(st.url) as obj:
            yield obj
    elif slug == "off_pgstore":
        from langgraph.store.postgres import PostgresStore

        assert st.url
        with PostgresStore.from_conn_string(st.url) as obj:
            yield obj
    elif slug in ("ours_sqlite", "ours_sqlitestore"):
        import langgraph_memory_plus as lgmp

        opener: Any = lgmp.SqliteSaver if slug == "ours_sqlite" else lgmp.SqliteStore
        assert st.url
        with opener.from_conn_string(st.url, pool_max_size=_pool_max(pool_size)) as obj:
            yield obj
    elif slug == "off_sqlite":
        from langgraph.checkpoint.sqlite import SqliteSaver as OfficialSqliteSaver

        assert st.url
        with OfficialSqliteSaver.from_conn_string(st.url) as obj:
            yield obj
    elif slug == "off_sqlitestore":
        from langgraph.store.sqlite import SqliteStore as OfficialSqliteStore

        assert st.url
        with OfficialSqliteStore.from_conn_string(st.url) as obj:
            yield obj
    elif slug == "off_redis":
        from langgraph.checkpoint.redis import RedisSaver as OfficialRedisSaver

        with OfficialRedisSaver.from_conn_string(
            st.url,
            checkpoint_prefix=f"{st.marker}_checkpoint",
            checkpoint_write_prefix=f"{st.marker}_checkpoint_write",
        ) as obj:
            yield obj
    else:
        raise AssertionError(f"no sync opener for {slug}")


@contextlib.asynccontextmanager
async def _open_async(target: Target, st: Storage, pool_size: int) -> AsyncIterator[Any]:
    slug = target.slug
    if slug == "memory":
        from langgraph.checkpoint.memory import InMemorySaver

        yield InMemorySaver()
    elif slug == "ours_pg_async":
        from langgraph_memory_plus import AsyncPostgresSaver

        assert st.url
        async with AsyncPostgresSaver.from_conn_string(
            st.url, pool_max_size=_pool_max(pool_size)
        ) as obj:
            yield obj
    elif slug == "ours_redis_async":
        from langgraph_memory_plus import AsyncRedisSaver

        assert st.url
        async with AsyncRedisSaver.from_conn_string(st.url, key_prefix=st.marker) as obj:
            yield obj
    elif slug == "off_pg_async":
        from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver as OfficialAsyncPg

        assert st.url
        if pool_size <= 1:  # the documented one-connection form
            async with OfficialAsyncPg.from_conn_string(st.url) as obj:
                yield obj
        else:  # the documented pool form, sized for the concurrency
            from psycopg.rows import dict_row
            from psycopg_pool import AsyncConnectionPool

            async with AsyncConnectionPool(
                st.url,
                min_size=pool_size,
                max_size=pool_size,
                open=False,
                kwargs={"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row},
            ) as pool:
                obj = OfficialAsyncPg(pool)
                yield obj
    elif slug == "ours_sqlite_async":
        from langgraph_memory_plus import AsyncSqliteSaver

        assert st.url
        async with AsyncSqliteSaver.from_conn_string(
            st.url, pool_max_size=_pool_max(pool_size)
        ) as saver:
            yield saver
    elif slug == "off_sqlite_async":
        from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver as OfficialAsyncSqlite

        assert st.url
        async with OfficialAsyncSqlite.from_conn_string(st.url) as official:
            yield official
    elif slug == "off_redis_async":
        from langgraph.checkpoint.redis import AsyncRedisSaver as OfficialAsyncRedis

        async with OfficialAsyncRedis.from_conn_string(
            st.url,
            checkpoint_prefix=f"{st.marker}_checkpoint",
            checkpoint_write_prefix=f"{st.marker}_checkpoint_write",
        ) as obj:
            yield obj
    else:
        raise AssertionError(f"no async opener for {slug}")


def _setup_sync(obj: Any) -> None:
    if hasattr(obj, "setup"):  # InMemorySaver / InMemoryStore have none
        obj.setup()


async def _setup_async(obj: Any) -> None:
    # the official async Redis saver's is asetup (its setup is the sync one)
    setup = getattr(obj, "asetup", None) or getattr(obj, "setup", None)
    if setup is not None:
        await setup()


class Session:
    """An opened saver or store on its own storage; async ones get a private event loop."""

    def __init__(
        self, target: Target, obj: Any, storage: Storage, loop: asyncio.AbstractEventLoop | None
    ) -> None:
        self.target = target
        self.obj = obj
        self.storage = storage
        self.loop = loop
        self.marker = storage.marker

    def run(self, coro: Any) -> Any:
        assert self.loop is not None, "run() is for async targets"
        return self.loop.run_until_complete(coro)

    def footprint(self) -> int:
        return self.storage.footprint(self.obj)


@contextlib.contextmanager
def open_session(
    target: Target, env: Env, *, pool_size: int = 1, setup: bool = True
) -> Iterator[Session]:
    """The target opened through ``from_conn_string`` on fresh storage, then ``setup()``
    (left to the caller with ``setup=False``: :func:`timed_setup`)."""
    storage = make_storage(target, env)
    try:
        if not target.is_async:
            with _open_sync(target, storage, pool_size) as obj:
                if setup:
                    _setup_sync(obj)
                yield Session(target, obj, storage, None)
            return
        loop = asyncio.new_event_loop()
        try:
            cm = _open_async(target, storage, pool_size)
            obj = loop.run_until_complete(cm.__aenter__())
            try:
                if setup:
                    loop.run_until_complete(_setup_async(obj))
                yield Session(target, obj, storage, loop)
            finally:
                loop.run_until_complete(cm.__aexit__(None, None, None))
        finally:
            loop.close()
    finally:
        storage.close()


def timed_setup(target: Target, env: Env) -> tuple[float, float]:
    """Seconds of ``setup()`` on fresh storage (a new database or file), and of
    ``from_conn_string`` + ``setup()`` together (what work a library does on opening
    rather than in ``setup()`` shows in the second). Creating the storage is not timed."""
    storage = make_storage(target, env)
    try:
        if not target.is_async:
            started = time.perf_counter()
            with _open_sync(target, storage, 1) as obj:
                opened = time.perf_counter()
                _setup_sync(obj)
                done = time.perf_counter()
            return done - opened, done - started

        async def timed() -> tuple[float, float]:
            started = time.perf_counter()
            async with _open_async(target, storage, 1) as obj:
                opened = time.perf_counter()
                await _setup_async(obj)
                done = time.perf_counter()
            return done - opened, done - started

        return asyncio.run(timed())
    finally:
        storage.close()


def server_versions(env: Env) -> dict[str, str]:
    """Versions of the servers this run talks to (for the report's header)."""
    out: dict[str, str] = {}
    with psycopg.connect(env.pg, connect_timeout=10) as conn:
        row = conn.execute("SHOW server_version").fetchone()
        out["postgresql"] = str(row[0]) if row else "?"
    for label, url in (("redis", env.redis), ("redis_stack", env.redis_stack)):
        if url:
            client = redis.Redis.from_url(url, socket_connect_timeout=10)
            try:
                out[label] = str(client.info("server").get("redis_version", "?"))
            finally:
                client.close()
    out["host"] = socket.gethostname()
    return out


ServerCpu = Callable[[], "float | None"]
"""Reads the server's CPU seconds so far, or None where they cannot be read."""


@contextlib.contextmanager
def server_cpu(backend: str, env: Env) -> Iterator[ServerCpu]:
    """A reader of the backend server's CPU seconds so far, where it can be read: Redis's
    own count (``INFO cpu``), and for PostgreSQL the user and system time of its client
    backends in ``/proc`` (a server on this machine; 10 ms ticks). None on SQLite, which
    runs in the caller's process, and where ``/proc`` is not readable."""
    if backend == "redis":
        client = redis.Redis.from_url(env.redis)
        try:

            def redis_cpu() -> float | None:
                info = client.info("cpu")
                return float(info["used_cpu_sys"]) + float(info["used_cpu_user"])

            yield redis_cpu
        finally:
            client.close()
    elif backend == "postgres":
        with psycopg.connect(env.pg, autocommit=True) as conn:
            tick = os.sysconf("SC_CLK_TCK")

            def pg_cpu() -> float | None:
                rows = conn.execute(
                    "SELECT pid FROM pg_stat_activity "
                    "WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()"
                ).fetchall()
                ticks = 0
                for (pid,) in rows:
                    try:
                        with open(f"/proc/{pid}/stat") as stat:
                            fields = stat.read().rsplit(")", 1)[1].split()
                    except FileNotFoundError:
                        continue  # gone meanwhile
                    except OSError:
                        return None  # another host's, or not ours to read
                    ticks += int(fields[11]) + int(fields[12])  # utime, stime
                return ticks / tick

            yield pg_cpu
    else:
        yield lambda: None
