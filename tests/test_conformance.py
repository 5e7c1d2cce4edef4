"""``langgraph-checkpoint-conformance`` against every checkpointer class we ship.

Acceptance: all 8 capabilities detected (none missing) and every conformance test passed, for
each class. The report table prints with ``pytest -s``.

Adding a backend is one line in ``TARGETS``: its name, the fixture giving its server URL (for
SQLite: a temporary directory), and an async context manager that opens a ready-to-use saver
on fresh, isolated storage.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest
import redis
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


@asynccontextmanager
async def open_postgres_saver(pg_url: str) -> AsyncIterator[Any]:
    """The sync class on a connection pool (the suite drives its async methods)."""
    from langgraph_memory_plus import PostgresSaver

    async with _postgres_schema(pg_url) as schema:
        with ConnectionPool(
            pg_url, min_size=1, max_size=4, kwargs={"autocommit": True}, open=True
        ) as pool:
            saver = PostgresSaver(pool, schema=schema)
            saver.setup()
            yield saver


@asynccontextmanager
async def open_async_postgres_saver(pg_url: str) -> AsyncIterator[Any]:
    from langgraph_memory_plus import AsyncPostgresSaver

    async with (
        _postgres_schema(pg_url) as schema,
        AsyncConnectionPool(
            pg_url, min_size=1, max_size=4, kwargs={"autocommit": True}, open=False
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
async def open_redis_saver(url: str) -> AsyncIterator[Any]:
    """The sync class from a URL (single node or ``redis+cluster://``)."""
    from langgraph_memory_plus import RedisSaver

    async with _redis_prefix(url) as prefix:
        with RedisSaver.from_conn_string(url, key_prefix=prefix) as saver:
            saver.setup()
            yield saver


@asynccontextmanager
async def open_async_redis_saver(url: str) -> AsyncIterator[Any]:
    from langgraph_memory_plus import AsyncRedisSaver

    async with (
        _redis_prefix(url) as prefix,
        AsyncRedisSaver.from_conn_string(url, key_prefix=prefix) as saver,
    ):
        await saver.setup()
        yield saver


@asynccontextmanager
async def open_sqlite_saver(directory: Any) -> AsyncIterator[Any]:
    """The sync class on a fresh database file per capability suite."""
    from langgraph_memory_plus.checkpoint.sqlite import SqliteSaver

    path = directory / f"conf-{uuid.uuid4().hex[:12]}.db"
    with SqliteSaver.from_conn_string(path) as saver:
        saver.setup()
        yield saver


@asynccontextmanager
async def open_async_sqlite_saver(directory: Any) -> AsyncIterator[Any]:
    from langgraph_memory_plus.checkpoint.sqlite import AsyncSqliteSaver

    path = directory / f"conf-{uuid.uuid4().hex[:12]}.db"
    async with AsyncSqliteSaver.from_conn_string(path) as saver:
        await saver.setup()
        yield saver


@dataclass(frozen=True)
class Target:
    name: str
    url_fixture: str
    open: Callable[[str], AbstractAsyncContextManager[Any]]


TARGETS = [
    Target("PostgresSaver", "pg_url", open_postgres_saver),
    Target("AsyncPostgresSaver", "pg_url", open_async_postgres_saver),
    Target("RedisSaver", "redis_url", open_redis_saver),
    Target("AsyncRedisSaver", "redis_url", open_async_redis_saver),
    Target("RedisSaver[cluster]", "redis_cluster_url", open_redis_saver),
    Target("AsyncRedisSaver[cluster]", "redis_cluster_url", open_async_redis_saver),
    Target("SqliteSaver", "tmp_path", open_sqlite_saver),
    Target("AsyncSqliteSaver", "tmp_path", open_async_sqlite_saver),
]


@pytest.mark.parametrize("target", TARGETS, ids=lambda t: t.name)
async def test_conformance(target: Target, request: pytest.FixtureRequest) -> None:
    url = request.getfixturevalue(target.url_fixture)

    @checkpointer_test(name=target.name)
    async def factory() -> AsyncIterator[Any]:
        async with target.open(url) as saver:
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
