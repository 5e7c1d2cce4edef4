"""A busy PostgreSQL pool must not turn into a connection storm.

Every borrow that timed out used to open a direct probe connection to the server, with no
limit: a pool of 2 under a burst opened hundreds and filled the server's
``max_connections``. Here both of a pool's connections are held while many callers
(threads, then asyncio tasks) try to borrow with a short pool timeout; an admin connection
counts the server's connections of this pool (by its ``application_name``) throughout.
The count stays at ``max_size + 1`` at most (one probe at a time, rate-limited), and
every caller fails quickly with ``PoolTimeoutError``.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import make_conninfo
from psycopg_pool import AsyncConnectionPool, ConnectionPool, PoolTimeout

from langgraph_memory_plus import PoolTimeoutError
from langgraph_memory_plus.drivers.postgres import pool_kwargs
from langgraph_memory_plus.store.postgres import AsyncPostgresStore, PostgresStore

pytestmark = pytest.mark.storage

MAX_SIZE = 2
CALLERS = 200
BORROW_TIMEOUT = 0.3
HOLD_SECONDS = 2.0


def _named(url: str, name: str) -> str:
    return make_conninfo(url, application_name=name)


@contextmanager
def _counting(pg_url: str, name: str) -> Iterator[list[int]]:
    """Samples of the server's connection count for ``name``, every 10 ms, from one
    admin connection."""
    samples: list[int] = []
    stop = threading.Event()
    with psycopg.connect(pg_url, autocommit=True) as admin:

        def sample() -> None:
            while not stop.is_set():
                row = admin.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s",
                    (name,),
                ).fetchone()
                assert row is not None
                samples.append(int(row[0]))
                time.sleep(0.01)

        sampler = threading.Thread(target=sample)
        sampler.start()
        try:
            yield samples
        finally:
            stop.set()
            sampler.join()


def _check(samples: list[int], errors: list[BaseException], took: float) -> None:
    assert samples, "no sample of the server's connections was taken"
    assert max(samples) <= MAX_SIZE + 1, f"connections of the pool seen: {max(samples)}"
    assert len(errors) == CALLERS
    for error in errors:
        assert isinstance(error, PoolTimeoutError), repr(error)
        assert isinstance(error, PoolTimeout)  # what callers of earlier versions catch
        assert "max_size=2" in str(error)
    assert took < HOLD_SECONDS + 10  # nobody hung


def test_timed_out_borrows_open_at_most_one_probe_threads(pg_url: str) -> None:
    name = f"lgmp-storm-{uuid.uuid4().hex[:8]}"
    url = _named(pg_url, name)
    with ConnectionPool(
        url, min_size=MAX_SIZE, max_size=MAX_SIZE, timeout=BORROW_TIMEOUT,
        kwargs=pool_kwargs(0), open=True,
    ) as pool:  # fmt: skip
        store = PostgresStore(pool, schema="lgmp_storm")
        store.setup()  # the store has borrowed once: a timeout now means a busy pool
        errors: list[BaseException] = []

        def call(i: int) -> None:
            try:
                store.get(("storm",), f"k{i}")
            except BaseException as exc:  # every outcome is checked
                errors.append(exc)

        held = threading.Event()
        release = threading.Event()

        def hold() -> None:
            with pool.connection(), pool.connection():
                held.set()
                release.wait(HOLD_SECONDS + 10)

        holder = threading.Thread(target=hold)
        holder.start()
        assert held.wait(5)
        with _counting(pg_url, name) as samples:
            started = time.monotonic()
            with ThreadPoolExecutor(max_workers=50) as executor:
                list(executor.map(call, range(CALLERS)))
            took = time.monotonic() - started
            release.set()
            holder.join()
        _check(samples, errors, took)


async def test_timed_out_borrows_open_at_most_one_probe_async(pg_url: str) -> None:
    name = f"lgmp-storm-{uuid.uuid4().hex[:8]}"
    url = _named(pg_url, name)
    async with AsyncConnectionPool(
        url, min_size=MAX_SIZE, max_size=MAX_SIZE, timeout=BORROW_TIMEOUT,
        kwargs=pool_kwargs(0), open=False,
    ) as pool:  # fmt: skip
        store = AsyncPostgresStore(pool, schema="lgmp_storm")
        await store.setup()
        release = asyncio.Event()
        held = asyncio.Event()

        async def hold() -> None:
            async with pool.connection(), pool.connection():
                held.set()
                await release.wait()

        holder = asyncio.create_task(hold())
        await asyncio.wait_for(held.wait(), 5)

        async def call(i: int) -> Any:
            return await store.aget(("storm",), f"k{i}")

        with _counting(pg_url, name) as samples:
            started = time.monotonic()
            outcomes = await asyncio.gather(
                *(call(i) for i in range(CALLERS)), return_exceptions=True
            )
            took = time.monotonic() - started
            release.set()
            await holder
        _check(samples, [o for o in outcomes if isinstance(o, BaseException)], took)
