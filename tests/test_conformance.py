"""``langgraph-checkpoint-conformance`` against every checkpointer class we ship.

Acceptance: all 8 capabilities detected (none missing) and every conformance test passed, for
each class. The report table prints with ``pytest -s``.

Every backend of ``tests/backends.py`` (the machine's servers and the tested server matrix)
runs it, with the blocking class and the asyncio one. ``OPENERS`` holds, per kind of backend
and flavour, an async context manager that opens a ready-to-use saver on fresh, isolated
storage.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

import psycopg
import pytest
import redis
from backends import ALL_SERVERS
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.capabilities import Capability
from psycopg import sql
from psycopg_pool import AsyncConnectionPool, ConnectionPool
from redis.cluster import RedisCluster

pytestmark = pytest.mark.storage

ALL_CAPABILITIES = frozenset(c.value for c in Capability)


@asynccontextmanager
async def _postgres_schema(pg_url: str) -> AsyncIterator[str]:
    """A fresh schema per capability suite, so suites never see each other's threads."""
    name = f"lgmp_conf_{uuid.uuid4().hex[:12]}"
    try:
        yield name
    finally:
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))


def _connect_kwargs(options: dict[str, Any]) -> dict[str, Any]:
    """The pool's connection settings: autocommit, and what the server needs (PgBouncer)."""
    return {"autocommit": True, **{k: options[k] for k in ("prepare_threshold",) if k in options}}


@asynccontextmanager
async def open_postgres_saver(pg_url: str, options: dict[str, Any]) -> AsyncIterator[Any]:
    """The sync class on a connection pool (the suite drives its async methods)."""
    from langgraph_memory_plus import PostgresSaver

    async with _postgres_schema(pg_url) as schema:
        with ConnectionPool(
            pg_url, min_size=1, max_size=4, kwargs=_connect_kwargs(options), open=True
        ) as pool:
            saver = PostgresSaver(pool, schema=schema)
            saver.setup()
            yield saver


@asynccontextmanager
async def open_async_postgres_saver(pg_url: str, options: dict[str, Any]) -> AsyncIterator[Any]:
    from langgraph_memory_plus import AsyncPostgresSaver

    async with (
        _postgres_schema(pg_url) as schema,
        AsyncConnectionPool(
            pg_url, min_size=1, max_size=4, kwargs=_connect_kwargs(options), open=False
        ) as pool,
    ):
        saver = AsyncPostgresSaver(pool, schema=schema)
        await saver.setup()
        yield saver


@asynccontextmanager
async def _redis_prefix(url: str) -> AsyncIterator[str]:
    """A fresh key prefix per capability suite (its threads are its own); keys dropped after."""
    prefix = f"lgmp-conf-{uuid.uuid4().hex[:12]}"
    try:
        yield prefix
    finally:
        scheme, _, rest = url.partition("://")
        admin: redis.Redis | RedisCluster = (
            RedisCluster.from_url(f"{scheme.removesuffix('+cluster')}://{rest}")
            if scheme.endswith("+cluster")
            else redis.Redis.from_url(url)
        )
        with admin:
            for key in admin.scan_iter(match=f"{prefix}:*", count=1000):
                admin.delete(key)


@asynccontextmanager
async def open_redis_saver(url: str, options: dict[str, Any]) -> AsyncIterator[Any]:
    """The sync class from a URL (single node or ``redis+cluster://``)."""
    from langgraph_memory_plus import RedisSaver

    async with _redis_prefix(url) as prefix:
        with RedisSaver.from_conn_string(url, key_prefix=prefix) as saver:
            saver.setup()
            yield saver


@asynccontextmanager
async def open_async_redis_saver(url: str, options: dict[str, Any]) -> AsyncIterator[Any]:
    from langgraph_memory_plus import AsyncRedisSaver

    async with (
        _redis_prefix(url) as prefix,
        AsyncRedisSaver.from_conn_string(url, key_prefix=prefix) as saver,
    ):
        await saver.setup()
        yield saver


@asynccontextmanager
async def open_sqlite_saver(directory: str, options: dict[str, Any]) -> AsyncIterator[Any]:
    """The sync class on a fresh database file per capability suite."""
    from langgraph_memory_plus.checkpoint.sqlite import SqliteSaver

    path = Path(directory) / f"conf-{uuid.uuid4().hex[:12]}.db"
    with SqliteSaver.from_conn_string(path) as saver:
        saver.setup()
        yield saver


@asynccontextmanager
async def open_async_sqlite_saver(directory: str, options: dict[str, Any]) -> AsyncIterator[Any]:
    from langgraph_memory_plus.checkpoint.sqlite import AsyncSqliteSaver

    path = Path(directory) / f"conf-{uuid.uuid4().hex[:12]}.db"
    async with AsyncSqliteSaver.from_conn_string(path) as saver:
        await saver.setup()
        yield saver


Opener = Callable[[str, dict[str, Any]], AbstractAsyncContextManager[Any]]
OPENERS: dict[tuple[str, str], tuple[str, Opener]] = {
    ("postgres", "sync"): ("PostgresSaver", open_postgres_saver),
    ("postgres", "async"): ("AsyncPostgresSaver", open_async_postgres_saver),
    ("redis", "sync"): ("RedisSaver", open_redis_saver),
    ("redis", "async"): ("AsyncRedisSaver", open_async_redis_saver),
    ("sqlite", "sync"): ("SqliteSaver", open_sqlite_saver),
    ("sqlite", "async"): ("AsyncSqliteSaver", open_async_sqlite_saver),
}


@ALL_SERVERS
@pytest.mark.parametrize("flavour", ["sync", "async"])
async def test_conformance(storage: Any, flavour: str) -> None:
    cls, opener = OPENERS[storage.kind, flavour]

    @checkpointer_test(name=f"{cls}[{storage.name}]")
    async def factory() -> AsyncIterator[Any]:
        async with opener(storage.url, storage.options) as saver:
            yield saver

    report = await validate(factory)
    report.print_report()

    results = report.results
    detected = {name for name, result in results.items() if result.detected}
    assert detected == ALL_CAPABILITIES, f"missing: {sorted(ALL_CAPABILITIES - detected)}"
    failed = {
        name: result.failures
        for name, result in results.items()
        if result.passed is not True or result.tests_failed
    }
    assert not failed, "\n".join(
        f"{name}: " + "\n  ".join(failures or ["(no result)"]) for name, failures in failed.items()
    )
    assert all(result.tests_passed > 0 for result in results.values())
    assert report.conformance_level() == "FULL"
