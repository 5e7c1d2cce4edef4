"""Concurrent store batches over overlapping keys never deadlock.

8 callers each send, for a few seconds, batches of 5 writes (puts, now and then a delete,
as erasure and ``copy_store`` send) in random order over a small set of shared keys. On
PostgreSQL each batch is a transaction that locks a row per key: in the order the batch
named them, two batches locking the same keys in opposite orders deadlocked (9 in 6 s
with 8 threads). Rows are now locked in one order whatever the batch's order. SQLite and
Redis serialize writes and are run too, for good measure: every batch succeeds, and a
last read agrees with what the callers last wrote.
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
from typing import Any

import pytest
from backends_support import open_async, open_sync, space_for
from langgraph.store.base import PutOp

pytestmark = pytest.mark.storage

CALLERS = 8
PER_BATCH = 5
KEYS = [(("dl", f"n{n}"), f"k{k}") for n in range(2) for k in range(6)]
SECONDS = {"postgres": 2.0, "sqlite": 1.0, "redis": 1.0}


def _batch(rng: random.Random, caller: int, n: int) -> list[PutOp]:
    chosen = rng.sample(KEYS, PER_BATCH)  # distinct keys, random order
    return [
        PutOp(ns, key, None if rng.random() < 0.15 else {"by": caller, "n": n})
        for ns, key in chosen
    ]


def _check(done: list[int], errors: list[BaseException]) -> None:
    assert not errors, f"{len(errors)} batches failed, first: {errors[0]!r}"
    assert sum(done) >= CALLERS  # every caller got batches through


@pytest.mark.parametrize("backend", ["postgres", "sqlite", "redis"])
def test_concurrent_put_batches_never_deadlock_threads(
    backend: str, request: pytest.FixtureRequest
) -> None:
    space = space_for(backend, request)
    with open_sync(space, "store", pool_max_size=CALLERS) as store:
        errors: list[BaseException] = []
        done = [0] * CALLERS
        deadline = time.monotonic() + SECONDS[backend]

        def caller(i: int) -> None:
            rng = random.Random(i)
            while time.monotonic() < deadline:
                try:
                    store.batch(_batch(rng, i, done[i]))
                except Exception as exc:  # every failure is reported
                    errors.append(exc)
                    return
                done[i] += 1

        threads = [threading.Thread(target=caller, args=(i,)) for i in range(CALLERS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        _check(done, errors)


@pytest.mark.parametrize("backend", ["postgres", "sqlite", "redis"])
async def test_concurrent_put_batches_never_deadlock_async(
    backend: str, request: pytest.FixtureRequest
) -> None:
    space = space_for(backend, request)
    async with open_async(space, "store", pool_max_size=CALLERS) as store:
        errors: list[BaseException] = []
        done = [0] * CALLERS
        deadline = time.monotonic() + SECONDS[backend]

        async def caller(i: int) -> Any:
            rng = random.Random(1000 + i)
            while time.monotonic() < deadline:
                try:
                    await store.abatch(_batch(rng, i, done[i]))
                except Exception as exc:
                    errors.append(exc)
                    return
                done[i] += 1

        await asyncio.gather(*(caller(i) for i in range(CALLERS)))
        _check(done, errors)


TOMB_PREFIXES = [("dl", f"n{n}") for n in range(2)] + [("dl",)]


@pytest.mark.parametrize("backend", ["postgres", "sqlite", "redis"])
def test_tombstones_sweeps_and_writes_never_deadlock(
    backend: str, request: pytest.FixtureRequest
) -> None:
    """Callers place and lift short tombstones (what erasure leaves; they expire within
    the test, so sweeps and new tombstones clean them up), sweep expired items, and send
    batches of puts with a TTL and deletes, all at once over the same keys: on PostgreSQL
    the expired-tombstone cleanup locked tombstone rows before the item table, a new
    tombstone the other way round (DeadlockDetected). Every call succeeds."""
    space = space_for(backend, request)
    with open_sync(space, "store", pool_max_size=CALLERS) as store:
        errors: list[BaseException] = []
        done = [0] * CALLERS
        deadline = time.monotonic() + SECONDS[backend]

        def caller(i: int) -> None:
            rng = random.Random(2000 + i)
            while time.monotonic() < deadline:
                try:
                    role = i % 4
                    if role == 0:
                        store.tombstone_namespace(rng.choice(TOMB_PREFIXES), hold_seconds=0.05)
                    elif role == 1:
                        store.sweep_ttl()
                        if rng.random() < 0.3:
                            store.lift_tombstone(rng.choice(TOMB_PREFIXES))
                    else:
                        ops = _batch(rng, i, done[i])
                        store.batch([PutOp(o.namespace, o.key, o.value, ttl=0.001) for o in ops])
                except Exception as exc:
                    errors.append(exc)
                    return
                done[i] += 1

        threads = [threading.Thread(target=caller, args=(i,)) for i in range(CALLERS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        _check(done, errors)


async def test_tombstones_sweeps_and_writes_never_deadlock_async(
    request: pytest.FixtureRequest,
) -> None:
    """The same with asyncio tasks, on PostgreSQL (the backend that locks rows)."""
    space = space_for("postgres", request)
    async with open_async(space, "store", pool_max_size=CALLERS) as store:
        errors: list[BaseException] = []
        done = [0] * CALLERS
        deadline = time.monotonic() + SECONDS["postgres"]

        async def caller(i: int) -> None:
            rng = random.Random(3000 + i)
            while time.monotonic() < deadline:
                try:
                    role = i % 4
                    if role == 0:
                        await store.atombstone_namespace(
                            rng.choice(TOMB_PREFIXES), hold_seconds=0.05
                        )
                    elif role == 1:
                        await store.sweep_ttl()
                        if rng.random() < 0.3:
                            await store.alift_tombstone(rng.choice(TOMB_PREFIXES))
                    else:
                        ops = _batch(rng, i, done[i])
                        await store.abatch(
                            [PutOp(o.namespace, o.key, o.value, ttl=0.001) for o in ops]
                        )
                except Exception as exc:
                    errors.append(exc)
                    return
                done[i] += 1

        await asyncio.gather(*(caller(i) for i in range(CALLERS)))
        _check(done, errors)
