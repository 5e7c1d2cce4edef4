"""Attacks on the fenced write's undo savepoint (``Query.undoable``, ``UNDO``), by
someone who did not write it: what the savepoint leaves behind in a caller's own
transaction."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import psycopg
import pytest

pytestmark = pytest.mark.storage


def _no_undo_savepoint(conn: psycopg.Connection[Any]) -> bool:
    """Whether no ``lgmp_undo`` savepoint is open in ``conn``'s transaction (probed in a
    savepoint of its own, rolled back whatever happens)."""
    conn.execute("SAVEPOINT probe")
    try:
        conn.execute("ROLLBACK TO SAVEPOINT lgmp_undo")
    except psycopg.errors.InvalidSavepointSpecification:
        conn.execute("ROLLBACK TO SAVEPOINT probe")
        return True
    return False


async def _ano_undo_savepoint(conn: psycopg.AsyncConnection[Any]) -> bool:
    """Async :func:`_no_undo_savepoint`."""
    await conn.execute("SAVEPOINT probe")
    try:
        await conn.execute("ROLLBACK TO SAVEPOINT lgmp_undo")
    except psycopg.errors.InvalidSavepointSpecification:
        await conn.execute("ROLLBACK TO SAVEPOINT probe")
        return True
    return False


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_pg_fenced_put_in_a_callers_transaction_leaves_no_savepoint_open(
    pg_url: str, mode: str
) -> None:
    """A fenced ``put`` of a new thread (one standalone statement) on an autocommit connection
    inside the caller's own transaction: the runner opens no transaction of its own, so
    the undo savepoint set before the statement was never released and stayed open in
    the caller's transaction (a subtransaction per write; a caller's ``ROLLBACK TO
    SAVEPOINT lgmp_undo`` silently undid the write). Failed before the fix."""
    from langgraph.checkpoint.base import empty_checkpoint

    from langgraph_memory_plus.checkpoint.postgres import AsyncPostgresSaver, PostgresSaver

    thread_id = f"fence-undo-{uuid.uuid4().hex}"
    with psycopg.connect(pg_url, autocommit=True) as conn:
        saver = PostgresSaver(conn)
        saver.setup()  # its schema check done: put is one standalone statement
        lease = saver.fence.acquire(thread_id, owner="w1")
        config = lease.config({"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}})
        checkpoint = empty_checkpoint()
        metadata: Any = {"source": "loop", "step": 0}
        try:
            if mode == "sync":
                with conn.transaction():
                    saver.put(config, checkpoint, metadata, {})
                    assert _no_undo_savepoint(conn)
            else:

                async def awrite() -> bool:
                    async with await psycopg.AsyncConnection.connect(
                        pg_url, autocommit=True
                    ) as aconn:
                        asaver = AsyncPostgresSaver(aconn)
                        await asaver.setup()  # its schema check done: put is one statement
                        async with aconn.transaction():
                            await asaver.aput(config, checkpoint, metadata, {})
                            return await _ano_undo_savepoint(aconn)

                assert asyncio.run(awrite())
        finally:
            saver.delete_thread(thread_id)


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_pg_runner_undo_then_retry_in_a_callers_transaction_leaves_no_savepoint_open(
    pg_url: str, mode: str
) -> None:
    """The raced fenced write's plan in the caller's own transaction (autocommit
    connection, standalone statements): undoable statement, ``UNDO``, the same statement
    again. ``ROLLBACK TO SAVEPOINT`` keeps the savepoint it rolls back to, and the retry
    sets another of the same name: releasing only the newest left the first open."""
    from langgraph_memory_plus.drivers.postgres import UNDO, AsyncPgRunner, PgRunner, Query

    def plan() -> Any:
        again = Query("SELECT 1", fetch=True, standalone=True, undoable=True)
        yield again
        yield UNDO
        rows = yield again
        return rows

    if mode == "sync":
        with psycopg.connect(pg_url, autocommit=True) as conn, conn.transaction():
            assert PgRunner(conn, pipeline=False, owner="test").run(plan()) == [(1,)]
            assert _no_undo_savepoint(conn)
        return

    async def arun() -> bool:
        async with (
            await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as aconn,
            aconn.transaction(),
        ):
            assert await AsyncPgRunner(aconn, pipeline=False, owner="test").run(plan()) == [(1,)]
            return await _ano_undo_savepoint(aconn)

    assert asyncio.run(arun())


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_pg_refused_fenced_put_in_a_callers_transaction_leaves_no_savepoint_open(
    pg_url: str, mode: str
) -> None:
    """A fenced ``put`` refused (the lease superseded) in the caller's own transaction on
    an autocommit connection: the caller catches ``FencedWriteError`` and goes on. The
    refusal's locked statement opens the runner's savepoint after ours, and closing it
    released only its own: ours stayed open in the caller's transaction."""
    from langgraph.checkpoint.base import empty_checkpoint

    from langgraph_memory_plus.checkpoint.postgres import AsyncPostgresSaver, PostgresSaver
    from langgraph_memory_plus.errors import FencedWriteError

    thread_id = f"fence-undo-{uuid.uuid4().hex}"
    checkpoint = empty_checkpoint()
    metadata: Any = {"source": "loop", "step": 0}
    with psycopg.connect(pg_url, autocommit=True) as conn:
        saver = PostgresSaver(conn)
        saver.setup()  # its schema check done: put is one standalone statement
        lease = saver.fence.acquire(thread_id, owner="w1")
        config = lease.config({"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}})
        saver.fence.acquire(thread_id, owner="w2", force=True)
        try:
            if mode == "sync":
                with conn.transaction():
                    with pytest.raises(FencedWriteError):
                        saver.put(config, checkpoint, metadata, {})
                    assert _no_undo_savepoint(conn)
            else:

                async def awrite() -> bool:
                    async with await psycopg.AsyncConnection.connect(
                        pg_url, autocommit=True
                    ) as aconn:
                        asaver = AsyncPostgresSaver(aconn)
                        await asaver.setup()
                        async with aconn.transaction():
                            with pytest.raises(FencedWriteError):
                                await asaver.aput(config, checkpoint, metadata, {})
                            return await _ano_undo_savepoint(aconn)

                assert asyncio.run(awrite())
        finally:
            saver.delete_thread(thread_id)
