"""``setup()`` at every process start, behind transactions that hold our tables.

An application calls ``setup()`` on every start. Behind one open transaction that read a
table (a report, ``pg_dump``), any DDL on that table queues for its exclusive lock, and
every later read of the table queues behind the DDL: ten replicas starting then make an
outage. So on a current schema ``setup()`` must take no lock beyond ``ACCESS SHARE``
(checked in ``pg_locks`` from the holding side, with ``setup()``'s transaction still
open), and a migration that must lock gives up after ``lock_timeout`` with an error naming
the table and who holds it, while a reader queued meanwhile goes on.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from langgraph_memory_plus import (
    AsyncPostgresSaver,
    AsyncPostgresStore,
    PostgresSaver,
    PostgresStore,
)
from langgraph_memory_plus.checkpoint.postgres.plans import CHECKPOINT_MIGRATIONS
from langgraph_memory_plus.errors import MigrationLockTimeoutError

pytestmark = pytest.mark.storage

INDEX = {"dims": 3, "embed": lambda texts: [[1.0, 0.0, 0.0] for _ in texts], "fields": ["t"]}
BACKSTOP = "-c statement_timeout=20s"  # a setup() that queues fails the test, never hangs it


@pytest.fixture
def schema(pg_url: str) -> Iterator[str]:
    name = f"locks_{uuid.uuid4().hex[:10]}"
    yield name
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')


def _make(kind: str, conn: Any, schema: str, pipeline: bool = False) -> Any:
    cls = {
        "saver": PostgresSaver,
        "store": PostgresStore,
        "async-saver": AsyncPostgresSaver,
        "async-store": AsyncPostgresStore,
    }[kind]
    if kind.endswith("store"):  # with an index: its vectors table is checked too
        return cls(conn, schema=schema, index=INDEX, vector_backend="exact")
    return cls(conn, schema=schema, pipeline=pipeline)


def _set_up(pg_url: str, schema: str) -> None:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        PostgresSaver(conn, schema=schema).setup()
        PostgresStore(conn, schema=schema, index=INDEX, vector_backend="exact").setup()


@pytest.fixture
def holder(pg_url: str, schema: str) -> Iterator[psycopg.Connection[Any]]:
    """A transaction that read every table of the schema and stays open (a long report)."""
    _set_up(pg_url, schema)
    with psycopg.connect(pg_url) as conn:
        tables = [
            r[0]
            for r in conn.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = %s", (schema,)
            ).fetchall()
        ]
        assert {"lgmp_thread_index", "lgmp_store", "lgmp_store_vectors"} <= set(tables)
        for table in tables:
            conn.execute(f'SELECT count(*) FROM "{schema}".{table}')
        yield conn
        conn.rollback()


def _locks_of(holder: psycopg.Connection[Any], pid: int) -> list[tuple[str, str, str]]:
    """What session ``pid`` holds, seen from the holding side."""
    rows = holder.execute(
        "SELECT locktype, coalesce(relation::regclass::text, ''), mode FROM pg_locks "
        "WHERE pid = %s AND locktype NOT IN ('virtualxid', 'transactionid')",
        (pid,),
    ).fetchall()
    return [(str(a), str(b), str(c)) for a, b, c in rows]


@pytest.mark.parametrize("kind", ["saver", "store", "async-saver", "async-store"])
def test_setup_on_a_current_schema_runs_no_ddl_behind_a_held_transaction(
    pg_url: str, schema: str, holder: psycopg.Connection[Any], kind: str
) -> None:
    """setup() returns at once, inside a transaction of the caller's left open: it holds
    only ACCESS SHARE locks, and wrote nothing (no transaction id was assigned)."""

    def check(pid: int, xid: Any, took: float) -> None:
        assert xid is None, "setup() on a current schema wrote (DDL or rows)"
        locks = _locks_of(holder, pid)
        assert locks, "the check reads the bookkeeping table"
        assert {mode for _, _, mode in locks} == {"AccessShareLock"}, locks
        assert not [t for t, _, _ in locks if t == "advisory"], locks
        assert took < 3.0, took  # lock_timeout is 5 s: it did not wait for a lock

    if kind.startswith("async"):

        async def main() -> None:
            conn = await psycopg.AsyncConnection.connect(pg_url, options=BACKSTOP)
            async with conn:
                target = _make(kind, conn, schema)
                async with conn.transaction():
                    start = time.perf_counter()
                    await target.setup()
                    took = time.perf_counter() - start
                    cur = await conn.execute("SELECT pg_current_xact_id_if_assigned()")
                    row = await cur.fetchone()
                    assert row is not None
                    check(conn.info.backend_pid, row[0], took)

        asyncio.run(main())
        return
    with psycopg.connect(pg_url, options=BACKSTOP) as conn:
        target = _make(kind, conn, schema)
        with conn.transaction():
            start = time.perf_counter()
            target.setup()
            took = time.perf_counter() - start
            row = conn.execute("SELECT pg_current_xact_id_if_assigned()").fetchone()
            assert row is not None
            check(conn.info.backend_pid, row[0], took)


@pytest.mark.parametrize(
    ("kind", "pipeline"),
    [("saver", False), ("saver", True), ("async-saver", False), ("store", False)],
)
def test_a_pending_migration_behind_a_held_transaction_fails_after_lock_timeout(
    pg_url: str, schema: str, holder: psycopg.Connection[Any], kind: str, pipeline: bool
) -> None:
    """A migration that needs a lock the holder has waits ``lock_timeout`` (the session's,
    here 1 s), then fails naming the table and the holder's pid; a reader that queued
    behind it meanwhile goes on long before the holder ends; nothing was changed, and
    setup() succeeds once the holder is gone."""
    table = "lgmp_store" if kind == "store" else "lgmp_checkpoint"
    # Migrations to go, the first of which locks a table the holder has: the saver's
    # refused-ids column (lgmp_threads), then the fence and erased-users tables.
    pending = 1 if kind == "store" else 3
    with psycopg.connect(pg_url, autocommit=True) as admin:
        admin.execute(
            f'DELETE FROM "{schema}".{table}_migrations WHERE v > '
            f'(SELECT max(v) FROM "{schema}".{table}_migrations) - %s',
            (pending,),
        )
    # the saver's last migration adds a column to lgmp_threads (a tombstone's refused ids)
    locked = "lgmp_threads" if kind != "store" else "lgmp_store"
    if kind == "store":  # its last migration builds an index: it waits for writers only
        holder.execute(f"""UPDATE "{schema}".lgmp_store SET key = key""")
        holder.execute(
            f"""INSERT INTO "{schema}".lgmp_store (prefix, key, value, version)
            VALUES ('a', 'b', '{{}}', 1)"""
        )

    read: dict[str, float] = {}

    def reader() -> None:  # queues behind the migration's lock request
        time.sleep(0.3)
        with psycopg.connect(pg_url, autocommit=True, options=BACKSTOP) as conn:
            start = time.perf_counter()
            conn.execute(f'SELECT count(*) FROM "{schema}".{locked}')
            read["took"] = time.perf_counter() - start

    options = f"{BACKSTOP} -c lock_timeout=1s"
    thread = threading.Thread(target=reader)
    thread.start()
    start = time.perf_counter()
    with pytest.raises(MigrationLockTimeoutError) as caught:
        if kind.startswith("async"):

            async def main() -> None:
                conn = await psycopg.AsyncConnection.connect(
                    pg_url, autocommit=True, options=options
                )
                async with conn:
                    await _make(kind, conn, schema).setup()

            asyncio.run(main())
        else:
            with psycopg.connect(pg_url, autocommit=True, options=options) as conn:
                _make(kind, conn, schema, pipeline).setup()  # pipeline: fails at the fetch
    took = time.perf_counter() - start
    thread.join(30)
    holder_pid = holder.info.backend_pid
    text = str(caught.value)
    assert locked in text and f"pid {holder_pid}" in text and "lock_timeout=1s" in text, text
    assert 0.9 < took < 10, took
    assert read["took"] < 5, read  # the reader did not wait for the holder to end
    assert holder.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS
    with psycopg.connect(pg_url, autocommit=True) as admin:
        behind = admin.execute(f'SELECT count(*) FROM "{schema}".{table}_migrations').fetchone()
    holder.rollback()
    with psycopg.connect(pg_url, autocommit=True) as conn:
        target = _make(kind.removeprefix("async-"), conn, schema)
        target.setup()
        after = conn.execute(f'SELECT count(*) FROM "{schema}".{table}_migrations').fetchone()
    assert behind is not None and after is not None and after[0] == behind[0] + pending


def test_setup_of_a_new_index_key_adds_only_what_is_missing(pg_url: str, schema: str) -> None:
    """A key added to ``thread_index_keys`` on a current schema: setup() adds its column
    and indexes (a migration, under the lock timeout); the next setup() runs nothing."""
    _set_up(pg_url, schema)
    with psycopg.connect(pg_url, autocommit=True) as conn:
        saver = PostgresSaver(conn, schema=schema, thread_index_keys=["user_id", "org"])
        saver.setup()
        columns = conn.execute(
            "SELECT count(*) FROM information_schema.columns WHERE table_schema = %s "
            "AND table_name = 'lgmp_thread_index' AND column_name LIKE 'k\\_%%'",
            (schema,),
        ).fetchone()
        assert columns == (2,)
        with conn.transaction():
            saver.setup()
            xid = conn.execute("SELECT pg_current_xact_id_if_assigned()").fetchone()
        assert xid == (None,)


@pytest.mark.parametrize("pending", ["migration", "index-key"])
def test_concurrent_setups_with_something_to_do_run_it_once(
    pg_url: str, schema: str, pending: str
) -> None:
    """Six processes' setup() at once on a schema with a pending migration (or a new index
    key): each finds it pending without a lock, then one runs it under the advisory lock
    and the others, finding it done under the lock, run nothing; none fails."""
    _set_up(pg_url, schema)
    keys = ["user_id", "org"] if pending == "index-key" else ["user_id"]
    with psycopg.connect(pg_url, autocommit=True) as admin:
        if pending == "migration":
            admin.execute(
                f'DELETE FROM "{schema}".lgmp_checkpoint_migrations WHERE v = '
                f'(SELECT max(v) FROM "{schema}".lgmp_checkpoint_migrations)'
            )
        before = admin.execute(f'SELECT count(*) FROM "{schema}".lgmp_checkpoint_migrations')
        versions = before.fetchone()
    errors: list[BaseException] = []
    barrier = threading.Barrier(6)

    def one() -> None:
        try:
            with psycopg.connect(pg_url, autocommit=True, options=BACKSTOP) as conn:
                saver = PostgresSaver(conn, schema=schema, thread_index_keys=keys)
                barrier.wait(10)
                saver.setup()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=one) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []
    with psycopg.connect(pg_url, autocommit=True) as admin:
        rows = admin.execute(
            f'SELECT v, count(*) FROM "{schema}".lgmp_checkpoint_migrations GROUP BY v'
        ).fetchall()
        columns = admin.execute(
            "SELECT count(*) FROM information_schema.columns WHERE table_schema = %s "
            "AND table_name = 'lgmp_thread_index' AND column_name LIKE 'k\\_%%'",
            (schema,),
        ).fetchone()
    assert versions is not None
    expected = versions[0] + (1 if pending == "migration" else 0)
    assert len(rows) == expected and all(n == 1 for _, n in rows)
    assert columns == (len(keys),)


def test_the_default_lock_timeout_and_the_sessions_setting_restored(
    pg_url: str, schema: str, holder: psycopg.Connection[Any]
) -> None:
    """With no lock_timeout of the session's, a migration waits 5 s; a migration that ran
    leaves the session's own lock_timeout as it was, inside the caller's transaction."""
    with psycopg.connect(pg_url, autocommit=True) as admin:  # refused ids, fences, erased
        admin.execute(
            f'DELETE FROM "{schema}".lgmp_checkpoint_migrations WHERE v >= '
            f'(SELECT max(v) FROM "{schema}".lgmp_checkpoint_migrations) - 2'
        )
    with psycopg.connect(pg_url, autocommit=True, options=BACKSTOP) as conn:
        start = time.perf_counter()
        with pytest.raises(MigrationLockTimeoutError, match="lock_timeout=5s"):
            PostgresSaver(conn, schema=schema).setup()
        assert 4.5 < time.perf_counter() - start < 15
    holder.rollback()
    with psycopg.connect(pg_url, options=f"{BACKSTOP} -c lock_timeout=7s") as conn:
        with conn.transaction():
            PostgresSaver(conn, schema=schema).setup()
            assert conn.execute("SHOW lock_timeout").fetchone() == ("7s",)
        after = conn.execute(f'SELECT count(*) FROM "{schema}".lgmp_checkpoint_migrations')
        assert after.fetchone() == (len(CHECKPOINT_MIGRATIONS),)
