"""A write refreshing its thread's expiry takes the thread row before the thread index's
row, as every other PostgreSQL path does.

The write statement's ``touch`` (the expiry's refresh, ``FOR NO KEY UPDATE SKIP LOCKED``)
ran after the payload had taken the index row (``ix``). SKIP LOCKED skips a row another
transaction holds, but not a newer version of it: when the version the statement's
snapshot sees was updated since, PostgreSQL may follow the update chain and wait, SKIP
LOCKED or not, for whoever updates the newest version ("while locking updated version
(1,29) of tuple in relation lgmp_threads"). That one (a revival's upsert, a refresh, the
index refresh after a revival) holds the thread row and waits for the index row: in the
trigger that copies the expiry, in its own ``ix``, or in ``refresh``'s insert:
``DeadlockDetected``; it failed once in CI, in
``test_runs_whose_thread_expires_as_they_write_never_deadlock``. Whether PostgreSQL
walks the chain depends on commits landing during the put's own row lock, which
statements of a test cannot step (a first attempt holding rows to stop a put between two
refreshes did not deadlock), so:

- the order itself is pinned: a put stopped where it takes the index row (a connection
  of the test holds it) already holds the thread row, refreshed;
- and the race is run: two runs at once with a 12 ms TTL (2-4 runs failed in each of 3
  tries before the fix, with no other load on the machine).
"""

from __future__ import annotations

import threading
import time
import uuid

import psycopg
import pytest
from pg_race_support import blocked_by as _blocked_by
from pg_race_support import checkpoint as _checkpoint
from pg_race_support import config as _cfg
from pg_race_support import saver_in_schema as _saver_in_schema
from pg_race_support import schema as _schema
from pg_race_support import xid as _xid

pytestmark = pytest.mark.storage


def test_pg_a_put_refreshing_the_expiry_holds_the_thread_row_before_the_index_row(
    pg_url: str,
) -> None:
    """A put whose thread's expiry is due for a refresh, stopped where it takes the
    thread index's row: the thread row is locked already (by its refresh), so a
    refresh of another caller waits for the put instead of taking the thread row and
    then waiting for the index row behind it (before: the row was free, the put
    would lock it only after the index row)."""
    from langgraph_memory_plus.checkpoint.config import thread_key
    from langgraph_memory_plus.checkpoint.postgres import PostgresSaver

    thread_id = f"ttl-order-{uuid.uuid4().hex[:8]}"
    tk = thread_key(thread_id)
    errors: list[BaseException] = []
    with (
        _schema(pg_url, "lgmp_ttl_order") as (schema, other),
        PostgresSaver.from_conn_string(
            pg_url, schema=schema, pool_max_size=2, ttl={"default_ttl": 60.0}
        ) as saver,
        psycopg.connect(pg_url) as holder,
    ):
        saver.setup()
        s = f'"{schema}"'
        first = saver.put(_cfg(thread_id), _checkpoint("first", "1"), {"step": 0}, {"a": "1"})
        # due for a refresh (it lags the TTL by more than the slack), far from expired
        other.execute(
            f"UPDATE {s}.lgmp_threads SET expires_at = now() + interval '30 minutes' "
            "WHERE thread_key = %s",
            (tk,),
        )
        row = holder.execute(
            f"SELECT 1 FROM {s}.lgmp_thread_index WHERE thread_key = %s FOR UPDATE", (tk,)
        ).fetchone()
        assert row is not None

        def put() -> None:
            try:
                saver.put(first, _checkpoint("second", "2"), {"step": 1}, {"a": "2"})
            except BaseException as exc:  # reported below
                errors.append(exc)

        writer = threading.Thread(target=put, daemon=True)
        writer.start()
        _blocked_by(other, _xid(holder))  # the put waits for the index row
        free = other.execute(
            f"SELECT 1 FROM {s}.lgmp_threads WHERE thread_key = %s FOR NO KEY UPDATE SKIP LOCKED",
            (tk,),
        ).fetchall()
        holder.rollback()
        writer.join(30)
        assert not writer.is_alive()
        expiry = other.execute(
            f"SELECT expires_at > now() + interval '59 minutes' FROM {s}.lgmp_threads "
            "WHERE thread_key = %s",
            (tk,),
        ).fetchone()
    assert not errors, repr(errors[0])
    assert free == [], "the put waited for the index row without the thread row"
    assert expiry == (True,)  # refreshed


def test_pg_runs_whose_thread_expires_every_few_milliseconds_never_deadlock(
    pg_url: str,
) -> None:
    """Two runs at once (a step of two ``Send`` workers and a subgraph with its own
    subgraph), each on thread ids of its own, with a 12 ms TTL: nearly every write
    refreshes or revives the thread while the run's other writes go on. Before the fix
    2 to 4 runs failed with ``DeadlockDetected`` in each of 3 tries (no other load on
    the machine); none in 5 after. About 3.5 s."""
    from tests.test_deletion_final import build, cfg, inputs

    errors: list[BaseException] = []
    done = [0, 0]
    deadline = time.monotonic() + 3.5
    with _saver_in_schema(
        pg_url, "lgmp_ttl_order", pool_max_size=6, ttl={"default_ttl": 0.0002}
    ) as (
        saver,
        _schema_name,
        _other,
    ):
        graph = build(None, is_async=False).compile(checkpointer=saver)

        def runs(worker: int) -> None:
            for k in range(40):
                if time.monotonic() > deadline:
                    return
                thread_id = f"blink-{worker}-{k}-{uuid.uuid4().hex[:6]}"
                try:
                    graph.invoke(inputs("a"), cfg(thread_id))
                    graph.invoke(inputs("b"), cfg(thread_id))
                except Exception as exc:  # every failure is reported
                    errors.append(exc)
                done[worker] += 1

        workers = [threading.Thread(target=runs, args=(w,), daemon=True) for w in range(2)]
        for w in workers:
            w.start()
        for w in workers:
            w.join(60)
            assert not w.is_alive()
    assert not errors, f"{len(errors)} runs failed, first: {errors[0]!r}"
    assert min(done) >= 2  # both ran, side by side (a loaded machine runs few in the time)
