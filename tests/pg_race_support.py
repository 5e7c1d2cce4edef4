"""Helpers of the PostgreSQL race tests: a schema of the test's own, a bare checkpoint, and
waits for a backend to block on a lock (``pg_locks`` / ``pg_stat_activity``)."""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Iterator
from datetime import datetime, timezone
from typing import Any

import psycopg
from langgraph.checkpoint.base import Checkpoint
from langgraph.checkpoint.base.id import uuid6


@contextlib.contextmanager
def schema(pg_url: str, prefix: str) -> Iterator[tuple[str, psycopg.Connection[Any]]]:
    """A schema name of the test's own and an autocommit connection; the schema is
    dropped after."""
    name = f"{prefix}_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(pg_url, autocommit=True) as other:
        try:
            yield name, other
        finally:
            other.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')


def checkpoint(value: str, version: str) -> Checkpoint:
    """A checkpoint of one channel ``a``."""
    return Checkpoint(
        v=4,
        id=str(uuid6(clock_seq=-1)),
        ts=datetime.now(timezone.utc).isoformat(),
        channel_values={"a": value},
        channel_versions={"a": version},
        versions_seen={},
        updated_channels=None,
    )


def config(thread_id: str, checkpoint_id: str | None = None) -> dict[str, Any]:
    """A root config of ``thread_id`` (and ``checkpoint_id``)."""
    c: dict[str, Any] = {"thread_id": thread_id, "checkpoint_ns": ""}
    if checkpoint_id is not None:
        c["checkpoint_id"] = checkpoint_id
    return {"configurable": c}


def _until(found: Any, what: str) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if found():
            return
        time.sleep(0.02)
    raise AssertionError(what)


def waiting_for_a_lock(other: psycopg.Connection[Any], n: int) -> None:
    """Until ``n`` backends of this database wait for a lock."""

    def found() -> bool:
        row = other.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND wait_event_type = 'Lock'"
        ).fetchone()
        return bool(row and row[0] >= n)

    _until(found, f"fewer than {n} backends ever waited for a lock")


def blocked_by(other: psycopg.Connection[Any], xid: int) -> None:
    """Until a backend waits for transaction ``xid``."""

    def found() -> bool:
        row = other.execute(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'transactionid' "
            "AND NOT granted AND transactionid::text = %s",
            (str(xid),),
        ).fetchone()
        return bool(row and row[0])

    _until(found, f"nothing ever waited for transaction {xid}")


def xid(conn: psycopg.Connection[Any]) -> int:
    """The transaction id of ``conn``'s open transaction."""
    row = conn.execute("SELECT pg_current_xact_id()::text::bigint").fetchone()
    assert row is not None
    return int(row[0])


@contextlib.contextmanager
def saver_in_schema(
    pg_url: str, prefix: str, **options: Any
) -> Iterator[tuple[Any, str, psycopg.Connection[Any]]]:
    """A set-up ``PostgresSaver`` in a schema of the test's own (:func:`schema`), the
    schema's name and the autocommit connection."""
    from langgraph_memory_plus.checkpoint.postgres import PostgresSaver

    with (
        schema(pg_url, prefix) as (name, other),
        PostgresSaver.from_conn_string(pg_url, schema=name, **options) as saver,
    ):
        saver.setup()
        yield saver, name, other
