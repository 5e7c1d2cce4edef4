"""Attacks on "a put whose parent went is stored whole" (b32c4fb): the parent removed by
other removers than a revival (``delete_for_runs``, ``copy_thread`` onto an expired
thread, a trim by a second run), the lock order the fix added on PostgreSQL (the thread
index's row, then the parent), and what a whole re-put leaves (index, history)."""

from __future__ import annotations

import threading
import time
import uuid
from datetime import datetime, timezone
from typing import Any

import psycopg
import pytest
from langgraph.checkpoint.base import Checkpoint
from langgraph.checkpoint.base.id import uuid6
from pg_race_support import config as _cfg
from pg_race_support import schema as _schema
from pg_race_support import xid as _xid


def _ck(values: dict[str, Any], versions: dict[str, str]) -> Checkpoint:
    return Checkpoint(
        v=4,
        id=str(uuid6(clock_seq=-1)),
        ts=datetime.now(timezone.utc).isoformat(),
        channel_values=values,
        channel_versions=versions,
        versions_seen={},
        updated_channels=None,
    )


def _waiters_of(other: psycopg.Connection[Any], xid: int, n: int) -> None:
    """Until ``n`` backends wait for transaction ``xid``."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        row = other.execute(
            "SELECT count(*) FROM pg_locks WHERE locktype IN ('transactionid', 'tuple') "
            "AND NOT granted AND pid IN (SELECT pid FROM pg_stat_activity "
            "WHERE wait_event_type = 'Lock' AND datname = current_database())"
        ).fetchone()
        blocked = other.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND wait_event_type = 'Lock'"
        ).fetchone()
        if row and blocked and blocked[0] >= n:
            return
        time.sleep(0.02)
    raise AssertionError(f"fewer than {n} backends ever waited behind {xid}")


@pytest.mark.storage
def test_pg_delete_for_runs_beside_a_put_on_its_run_s_last_checkpoint_never_deadlocks(
    pg_url: str,
) -> None:
    """A new run's put builds on the previous run's last checkpoint (its parent) while
    ``delete_for_runs`` removes that run. The put locks the thread index's row, then its
    parent (``held``, ``parent``); ``delete_for_runs`` deleted the parent first and took
    the index row after (its ``refresh``): crosswise, ``DeadlockDetected``. The test
    holds the index row so that both are inside when it lets go (the put queued first);
    without the hold the same happens when the delete's first statement lands just
    before the put's."""
    from langgraph_memory_plus.checkpoint.config import thread_key
    from langgraph_memory_plus.checkpoint.postgres import PostgresSaver

    thread_id = f"dfr-{uuid.uuid4().hex[:8]}"
    tk = thread_key(thread_id)
    errors: list[BaseException] = []
    with (
        _schema(pg_url, "lgmp_a_parent") as (schema, other),
        PostgresSaver.from_conn_string(pg_url, schema=schema, pool_max_size=3) as saver,
        psycopg.connect(pg_url) as holder,
    ):
        saver.setup()
        s = f'"{schema}"'
        parent = saver.put(
            _cfg(thread_id),
            _ck({"a": "first", "b": "kept " * 10}, {"a": "1", "b": "1"}),
            {"step": 0, "run_id": "r1"},
            {"a": "1", "b": "1"},
        )
        assert holder.execute(
            f"SELECT 1 FROM {s}.lgmp_thread_index WHERE thread_key = %s FOR UPDATE", (tk,)
        ).fetchone()
        hold = _xid(holder)

        def put() -> None:
            try:
                saver.put(
                    parent,
                    _ck({"a": "second", "b": "kept " * 10}, {"a": "2", "b": "1"}),
                    {"step": 1, "run_id": "r2"},
                    {"a": "2"},
                )
            except BaseException as exc:  # reported below
                errors.append(exc)

        def delete() -> None:
            try:
                saver.delete_for_runs(["r1"])
            except BaseException as exc:  # reported below
                errors.append(exc)

        writer = threading.Thread(target=put, daemon=True)
        writer.start()
        _waiters_of(other, hold, 1)
        deleter = threading.Thread(target=delete, daemon=True)
        deleter.start()
        _waiters_of(other, hold, 2)
        time.sleep(0.2)
        holder.rollback()
        writer.join(30)
        deleter.join(30)
        assert not writer.is_alive() and not deleter.is_alive()
        got = saver.get_tuple(_cfg(thread_id))
    assert not errors, repr(errors[0])
    assert got is not None
    assert got.checkpoint["channel_values"] == {"a": "second", "b": "kept " * 10}


@pytest.mark.storage
def test_pg_copy_thread_onto_an_expired_thread_beside_a_put_never_deadlocks(
    pg_url: str,
) -> None:
    """``copy_thread`` onto a thread that expired drops the target's history first (its
    thread row locked), then writes the target's index row (``threads.copy``). A put on
    the target that began just before the expiry (fast path: key share on the thread
    row) locks the index row, then its parent: the parent deleted by the copy, the index
    row wanted by the copy: crosswise, ``DeadlockDetected``. The test holds the index
    row so that both are inside when it lets go, the put queued first."""
    from langgraph_memory_plus.checkpoint.config import thread_key
    from langgraph_memory_plus.checkpoint.postgres import PostgresSaver

    ttl_s = 1.5
    dst, src = f"cpy-dst-{uuid.uuid4().hex[:8]}", f"cpy-src-{uuid.uuid4().hex[:8]}"
    tk = thread_key(dst)
    errors: list[BaseException] = []
    with (
        _schema(pg_url, "lgmp_a_parent") as (schema, other),
        PostgresSaver.from_conn_string(
            pg_url, schema=schema, pool_max_size=3, ttl={"default_ttl": ttl_s / 60}
        ) as saver,
        psycopg.connect(pg_url) as holder,
    ):
        saver.setup()
        s = f'"{schema}"'
        parent = saver.put(
            _cfg(dst),
            _ck({"a": "first", "b": "kept " * 10}, {"a": "1", "b": "1"}),
            {"step": 0},
            {"a": "1", "b": "1"},
        )
        assert holder.execute(
            f"SELECT 1 FROM {s}.lgmp_thread_index WHERE thread_key = %s FOR UPDATE", (tk,)
        ).fetchone()
        hold = _xid(holder)

        def put() -> None:
            try:
                saver.put(
                    parent,
                    _ck({"a": "second", "b": "kept " * 10}, {"a": "2", "b": "1"}),
                    {"step": 1},
                    {"a": "2"},
                )
            except BaseException as exc:  # reported below
                errors.append(exc)

        def copy() -> None:
            try:
                saver.copy_thread(src, dst)
            except BaseException as exc:  # reported below
                errors.append(exc)

        writer = threading.Thread(target=put, daemon=True)
        writer.start()
        _waiters_of(other, hold, 1)
        time.sleep(ttl_s + 0.3)  # the target expires while the put waits
        saver.put(_cfg(src), _ck({"a": "source"}, {"a": "1"}), {"step": 0}, {"a": "1"})
        copier = threading.Thread(target=copy, daemon=True)
        copier.start()
        _waiters_of(other, hold, 2)
        time.sleep(0.2)
        holder.rollback()
        writer.join(30)
        copier.join(30)
        assert not writer.is_alive() and not copier.is_alive()
        assert not errors, repr(errors[0])
        got = saver.get_tuple(_cfg(dst))
        history = list(saver.list(_cfg(dst)))
    # the put landed first (the target's history, then dropped by the copy, whole)
    assert got is not None and got.checkpoint["channel_values"] == {"a": "source"}
    assert len(history) == 1
