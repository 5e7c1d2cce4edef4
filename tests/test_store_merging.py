"""Concurrent async store calls share transactions, and each still behaves as alone.

Issue 39: a burst of 10,000 concurrent ``aget``/``aput``/``asearch`` calls on a pool of 2
borrowed a connection per call; the last callers waited past the pool's timeout
(``PoolTimeoutError``; upstream's ``test_large_batches_async`` after 30 s). The async
PostgreSQL and Redis stores now merge concurrent calls (``store/merging.py``). Here, on
both, with a pool of 2 and a short pool timeout (so that waiting at the pool fails fast):
the burst completes, the server never sees more than the pool's connections, every call
gets its own answer, errors reach their caller only, queue order holds for writes of one
key, cancelled calls are dropped without harm, and closing the store runs every queued call.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import make_conninfo
from psycopg_pool import AsyncConnectionPool

from langgraph_memory_plus.drivers.postgres import pool_kwargs
from langgraph_memory_plus.errors import ConflictError, ValueTooLargeError
from langgraph_memory_plus.store.postgres import AsyncPostgresStore
from langgraph_memory_plus.store.redis import AsyncRedisStore

pytestmark = pytest.mark.storage

POOL = 2
POOL_TIMEOUT = 3.0  # seconds: before merging, the burst's late callers waited far longer
BURST = 10_000


def _embed(texts: list[str]) -> list[list[float]]:
    """A deterministic embedder that refuses any text holding "boom" (a caller's own error)."""
    if any("boom" in text for text in texts):
        raise RuntimeError("the embedder refused a text")
    return [[1.0, float(len(text) % 7)] for text in texts]


@asynccontextmanager
async def _store(
    kind: str,
    request: pytest.FixtureRequest,
    app: str,
    space: str | None = None,
    keep: bool = False,
    **options: Any,
) -> AsyncIterator[Any]:
    """An async store of ``kind`` on a pool of :data:`POOL` connections, set up, in a
    schema (PostgreSQL) or key prefix (Redis) of its own: ``space``, or a new one;
    dropped after unless ``keep``."""
    space = space or f"merge_{uuid.uuid4().hex[:8]}"
    if kind == "postgres":
        url = make_conninfo(request.getfixturevalue("pg_url"), application_name=app)
        schema = space
        with psycopg.connect(url, autocommit=True) as admin:
            admin.execute(f'CREATE SCHEMA IF NOT EXISTS "{schema}"')
        try:
            async with AsyncConnectionPool(
                url,
                min_size=1,
                max_size=POOL,
                timeout=POOL_TIMEOUT,
                kwargs=pool_kwargs(0),
                open=False,
            ) as pool:
                store = AsyncPostgresStore(pool, schema=schema, vector_backend="exact", **options)
                await store.setup()
                yield store
                await store._before_close()
        finally:
            if not keep:
                with psycopg.connect(url, autocommit=True) as admin:
                    admin.execute(f'DROP SCHEMA "{schema}" CASCADE')
    else:
        prefix = f"{request.getfixturevalue('redis_prefix')}-{space}"
        async with AsyncRedisStore.from_conn_string(
            request.getfixturevalue("redis_url"),
            key_prefix=prefix,
            pool_max_size=POOL,
            pool_timeout=POOL_TIMEOUT,
            **options,
        ) as store:
            await store.setup()
            yield store


@contextmanager
def _pg_connections(kind: str, request: pytest.FixtureRequest, app: str) -> Iterator[list[int]]:
    """Samples of the server's connection count for ``app`` (PostgreSQL; none for Redis)."""
    samples: list[int] = []
    if kind != "postgres":
        yield samples
        return
    stop = threading.Event()
    with psycopg.connect(request.getfixturevalue("pg_url"), autocommit=True) as admin:

        def sample() -> None:
            while not stop.is_set():
                row = admin.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", (app,)
                ).fetchone()
                assert row is not None
                samples.append(int(row[0]))
                time.sleep(0.02)

        sampler = threading.Thread(target=sample)
        sampler.start()
        try:
            yield samples
        finally:
            stop.set()
            sampler.join()


BACKENDS = pytest.mark.parametrize("kind", ["postgres", "redis"])


@BACKENDS
async def test_a_burst_of_10000_calls_on_a_pool_of_2(
    kind: str, request: pytest.FixtureRequest
) -> None:
    """Upstream's test_large_batches_async, sized 10,000+: puts, gets, namespace listings,
    searches, puts again and deletes, all gathered at once."""
    app = f"lgmp-merge-{uuid.uuid4().hex[:8]}"
    with _pg_connections(kind, request, app) as samples:
        async with _store(kind, request, app) as store:
            calls: list[Any] = []
            n, m = 834, 2  # keys per namespace, namespaces: 10,008 calls
            for j in range(m):
                ns = ("test", "foo", "bar", "baz", str(j))
                for i in range(n):
                    calls += [
                        store.aput(ns, f"key{i}", {"foo": f"bar{i}"}),
                        store.aget(ns, f"key{i}"),
                        store.alist_namespaces(prefix=("test",), max_depth=j + 2),
                        store.asearch(("test",), limit=3),
                        store.aput(ns, f"key{i}", {"foo": f"again{i}"}),
                        store.adelete(ns, f"other{i}"),
                    ]
            assert len(calls) >= BURST
            results = await asyncio.gather(*calls, return_exceptions=True)
            errors = [r for r in results if isinstance(r, BaseException)]
            assert not errors, {type(e).__name__: str(e) for e in errors[:3]}
            for at in range(0, len(results), 6):
                put, got, listed, found, again, deleted = results[at : at + 6]
                assert put is None and again is None and deleted is None
                i = (at // 6) % n
                # queued after its put, before the second one: one of the two (or merged
                # reads ran first: none)
                assert got is None or got.value in ({"foo": f"bar{i}"}, {"foo": f"again{i}"})
                assert isinstance(listed, list) and isinstance(found, list)
            # Nothing lost: every key ends with its second put (queue order of writes).
            last = await asyncio.gather(
                *(
                    store.aget(("test", "foo", "bar", "baz", str(j)), f"key{i}")
                    for j in range(m)
                    for i in range(n)
                )
            )
            assert [it.value for it in last] == [
                {"foo": f"again{i}"} for _ in range(m) for i in range(n)
            ]
    if kind == "postgres":
        assert samples and max(samples) <= POOL + 1, f"connections seen: {max(samples)}"


@BACKENDS
async def test_errors_reach_their_caller_only(kind: str, request: pytest.FixtureRequest) -> None:
    """A bad call among merged ones fails alone: a validation error, a version conflict,
    and an error inside the shared transaction's work (the embedder refusing one text, in
    a merged put group and in a merged search group)."""
    app = f"lgmp-merge-{uuid.uuid4().hex[:8]}"
    index = {"dims": 2, "embed": _embed, "fields": ["text"]}
    async with _store(kind, request, app, index=index, max_value_bytes=1000) as store:
        ns = ("errors", "u1")
        await store.aput(ns, "held", {"text": "v1"})
        odd = {  # in place of the put of k25, k50, k75 and the get of k75, k76
            50: lambda: store.aput(ns, "big", {"text": "x" * 2000}),  # over max_value_bytes
            100: lambda: store.aput(ns, "held", {"text": "v2"}, expected_version=0),
            150: lambda: store.aput(ns, "boom", {"text": "boom"}),
            151: lambda: store.asearch(ns, query="boom"),
            153: lambda: store.asearch(ns, query="fine"),
        }
        calls: list[Any] = []
        for i in range(200):
            for at in (2 * i, 2 * i + 1):
                if at in odd:
                    calls.append(odd[at]())
                elif at % 2 == 0:
                    calls.append(store.aput(ns, f"k{i}", {"text": f"t{i}"}))
                else:
                    calls.append(store.aget(ns, f"k{i}"))
        results = await asyncio.gather(*calls, return_exceptions=True)
        failed = {i: r for i, r in enumerate(results) if isinstance(r, BaseException)}
        assert set(failed) == {50, 100, 150, 151}, failed
        assert isinstance(failed[50], ValueTooLargeError)
        assert isinstance(failed[100], ConflictError)
        assert isinstance(failed[150], RuntimeError) and isinstance(failed[151], RuntimeError)
        assert isinstance(results[153], list)
        assert await store.aget(ns, "boom") is None
        held = await store.aget(ns, "held")
        assert held is not None and held.value == {"text": "v1"}
        for i in range(200):
            if i not in (25, 50, 75):
                item = await store.aget(ns, f"k{i}")
                assert item is not None and item.value == {"text": f"t{i}"}, i


@BACKENDS
async def test_writes_of_one_key_keep_queue_order(
    kind: str, request: pytest.FixtureRequest
) -> None:
    """Gathered puts of one key apply in call order, each on its own (versions count them)."""
    async with _store(kind, request, f"lgmp-merge-{uuid.uuid4().hex[:8]}") as store:
        ns = ("order",)
        calls = [store.aput(ns, "k", {"n": n}) for n in range(300)]
        calls += [store.aput(ns, f"other{n}", {"n": n}) for n in range(300)]
        await asyncio.gather(*calls)
        item = await store.aget(ns, "k")
        assert item is not None and item.value == {"n": 299}
        assert item.version >= 300  # every put applied, none merged away
        for n in range(300):  # a caller's later read sees its earlier write
            await store.aput(ns, "seq", {"n": n})
            got = await store.aget(ns, "seq")
            assert got is not None and got.value == {"n": n}


@BACKENDS
async def test_cancelled_calls_and_close(kind: str, request: pytest.FixtureRequest) -> None:
    """Cancelled calls are dropped (the others finish); calls queued when the store closes
    all run before its pool closes."""
    app = f"lgmp-merge-{uuid.uuid4().hex[:8]}"
    space = f"merge_{uuid.uuid4().hex[:8]}"
    ns = ("closing",)
    async with _store(kind, request, app, space, keep=True) as store:
        tasks = [asyncio.create_task(store.aput(ns, f"k{i}", {"i": i})) for i in range(2000)]
        await asyncio.sleep(0)  # all queued
        for task in tasks[1000:1500]:
            task.cancel()
        done = await asyncio.gather(*tasks[:1000], return_exceptions=True)
        assert not [d for d in done if isinstance(d, BaseException)]
        cancelled = await asyncio.gather(*tasks[1000:1500], return_exceptions=True)
        assert all(c is None or isinstance(c, asyncio.CancelledError) for c in cancelled)
        applied = sum(c is None for c in cancelled)
        # these are still queued (or running) when the store closes
        late = [asyncio.create_task(store.aput(ns, f"late{i}", {"i": i})) for i in range(1000)]
        await asyncio.sleep(0)
    # The pool is closed now: every call queued before it closed had its turn.
    rest = await asyncio.gather(*tasks[1500:], *late, return_exceptions=True)
    assert not [r for r in rest if r is not None]
    async with _store(kind, request, app, space) as again:
        # a cancelled call's put ran only if its group had started (then it is kept)
        assert await again.acount(ns) >= 1000 + 500 + 1000 + applied
        assert await again.acount(ns) <= 2000 + 1000
        for i in range(1000):
            assert (await again.aget(ns, f"late{i}")) is not None
