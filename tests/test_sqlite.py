"""Behaviour, bad-input and multi-process tests for the SQLite savers and stores.

SQLite needs no server: every test gets database files of its own in ``tmp_path``. The real
graph tests (``test_graphs.py``), the list-storage tests and the conformance suite already
run on SQLite through the conftest backends; this module adds

- the backend-neutral behaviour tests written for PostgreSQL (``test_postgres_saver``,
  ``test_store_postgres``), imported and collected here again with this module's
  ``open_saver`` / ``open_store`` fixtures, so SQLite passes the very same assertions;
- what is SQLite's own: WAL mode, several processes writing one file, TTL as data and the
  sweep, retention and deletion down to the rows, a caller's own connection and
  transaction, and bad input.

Tests look at the rows behind the saver's back with a ``sqlite3`` connection of their own,
following the layout documented in :mod:`langgraph_memory_plus.checkpoint.sqlite.schema`.
No assertion depends on speed: TTL tests sleep longer than a TTL, waits are bounded polls.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import subprocess
import sys
import textwrap
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, closing, suppress
from pathlib import Path
from typing import Any

import pytest
from langgraph.store.base import GetOp, PutOp

# Backend-neutral saver tests, run here against SQLite (see the module docstring).
from test_postgres_saver import (  # noqa: F401
    SHORT_TTL,
    Ops,
    cfg,
    checkpoint_id,
    compare_with_reference,
    ids,
    make_checkpoint,
    put_chain,
    reference,
    run_workload,
    test_copy_thread_survives_deleting_the_source,
    test_delete_racing_a_running_history_is_final,
    test_expired_thread_written_again_does_not_bring_back_old_checkpoints,
    test_fresh_run_on_a_deleted_thread_id_starts_clean,
    test_keep_last_does_not_break_delta_channel_reconstruction,
    test_keep_last_keeps_the_newest_checkpoints_per_namespace,
    test_keep_last_one_keeps_a_working_multi_turn_conversation,
    test_list_filter_edge_cases_match_inmemory,
    test_long_thread_ids_sharing_a_prefix_stay_distinct,
    test_metadata_of_any_serializable_type_round_trips_like_inmemory,
    test_nul_characters_round_trip_like_inmemory,
    test_nul_in_thread_id_is_a_distinct_thread,
    test_prune_keep_latest_does_not_break_delta_channel_reconstruction,
    test_thread_deleted_while_its_graph_runs_stays_deleted,
)

# Backend-neutral store tests, likewise.
from test_store_postgres import (  # noqa: F401
    INDEX,
    OpenStore,
    keys,
    test_bad_filters_raise_clear_errors,
    test_bad_index_options,
    test_bad_ttl_options,
    test_bad_values_are_refused_and_nothing_is_written,
    test_batch_reads_see_the_store_before_the_batch_writes,
    test_concurrent_increments_lose_no_update,
    test_conditional_put_and_delete,
    test_filtered_search_across_namespaces_like_in_memory_store,
    test_filters_agree_with_in_memory_store,
    test_large_values_are_refused_before_writing,
    test_list_namespaces_matches_in_memory_store,
    test_namespace_validation_matches_langgraph,
    test_numbers_keep_their_type_and_value,
    test_numeric_filter_compares_numbers_as_numbers,
    test_numeric_filter_skips_values_that_are_not_numbers,
    test_pagination_has_no_silent_caps,
    test_put_get_update_delete_like_in_memory,
    test_search_prefix_boundaries_and_recency_order,
    test_semantic_search_ranks_like_in_memory_store,
    test_undecided_rows_page_exactly,
    test_versions_change_on_every_write_and_never_repeat,
)
from test_store_postgres import Ops as StoreOps

from langgraph_memory_plus.checkpoint.config import thread_key
from langgraph_memory_plus.checkpoint.sqlite import AsyncSqliteSaver, SqlitePool, SqliteSaver
from langgraph_memory_plus.errors import ConflictError, InvalidConfigError
from langgraph_memory_plus.store.sqlite import AsyncSqliteStore, SqliteStore
from langgraph_memory_plus.store.values import escape_text
from langgraph_memory_plus.threads.sqlite import key_column

WAIT_SECONDS = 60.0  # upper bound of every wait; a healthy run never gets near it
SAVER_TABLES = ("threads", "checkpoints", "blobs", "writes", "items", "nodes")


# --------------------------------------------------------------------------------------------
# Fixtures: savers and stores on this test's files, and a look behind their back
# --------------------------------------------------------------------------------------------


@pytest.fixture(params=["sync", "async"])
def flavour(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def schema(tmp_path: Path) -> str:
    """The imported tests' "schema": here, the database file every saver of a test opens."""
    return str(tmp_path / "saver.db")


@pytest.fixture
def open_saver(flavour: str) -> Any:
    """``open_saver(path, **options)``: a saver of this test's flavour on that file."""

    @asynccontextmanager
    async def factory(path: str, **options: Any) -> AsyncIterator[Ops]:
        options.setdefault("pool_max_size", options.pop("pool_size", 4))
        if flavour == "sync":
            with SqliteSaver.from_conn_string(path, **options) as saver:
                ops = Ops(saver, is_async=False)
                await ops.setup()
                yield ops
        else:
            async with AsyncSqliteSaver.from_conn_string(path, **options) as asaver:
                ops = Ops(asaver, is_async=True)
                await ops.setup()
                yield ops

    return factory


@pytest.fixture
def open_store(tmp_path: Path, flavour: str) -> OpenStore:
    """``open_store(**options)`` opens a new store of this test's flavour on its file."""
    path = tmp_path / "store.db"

    @asynccontextmanager
    async def factory(**options: Any) -> AsyncIterator[StoreOps]:
        if flavour == "sync":
            with SqliteStore.from_conn_string(path, **options) as store:
                store.setup()
                yield StoreOps(store, False)
        else:
            async with AsyncSqliteStore.from_conn_string(path, **options) as astore:
                await astore.setup()
                yield StoreOps(astore, True)

    return factory


def query(path: str | Path, sql: str, *params: Any) -> list[tuple[Any, ...]]:
    """Rows from the file, read with a connection of the test's own."""
    with closing(sqlite3.connect(path)) as conn:
        return conn.execute(sql, params).fetchall()


def counts(path: str | Path) -> dict[str, int]:
    return {t: query(path, f"SELECT count(*) FROM lgmp_{t}")[0][0] for t in SAVER_TABLES}


def thread_rows(path: str | Path, thread_id: str) -> dict[str, int]:
    tk = thread_key(thread_id)
    return {
        t: query(path, f"SELECT count(*) FROM lgmp_{t} WHERE thread_key = ?", tk)[0][0]
        for t in SAVER_TABLES
    }


# --------------------------------------------------------------------------------------------
# Drop-in behaviour: the same calls on InMemorySaver and on ours give the same answers
# --------------------------------------------------------------------------------------------


async def test_same_answers_as_inmemory_saver_across_a_restart(
    open_saver: Any, schema: str
) -> None:
    """Puts, writes, forks, namespaces, NULs, int and str versions: get_tuple, list
    (filter/before/limit) and delta history agree with InMemorySaver, also when a new saver
    instance (a new process) reads what the first one wrote."""
    ref = reference()
    async with open_saver(schema) as ours:
        stored = await run_workload([ours, ref])
        mismatches = await compare_with_reference(ours, ref, stored)
    assert not mismatches, f"{len(mismatches)} differences:\n" + "\n".join(mismatches[:15])
    async with open_saver(schema) as reopened:
        mismatches = await compare_with_reference(reopened, ref, stored)
    assert not mismatches, "\n".join(mismatches[:10])


# --------------------------------------------------------------------------------------------
# The file: WAL mode, setup, several processes
# --------------------------------------------------------------------------------------------


def test_setup_puts_the_file_in_wal_mode_and_is_idempotent(tmp_path: Path) -> None:
    path = tmp_path / "wal.db"
    sqlite3.connect(path).close()  # an existing file in the default rollback-journal mode
    assert query(path, "PRAGMA journal_mode") == [("delete",)]
    with SqliteSaver.from_conn_string(path) as saver, SqliteStore.from_conn_string(path) as store:
        saver.setup()
        store.setup()
        asyncio.run(put_chain(Ops(saver, False), "t", 2))
        store.put(("u",), "k", {"v": 1})
        saver.setup()  # again: nothing to do, nothing lost
        store.setup()
        assert len(list(saver.list(cfg("t")))) == 2
    assert query(path, "PRAGMA journal_mode") == [("wal",)]
    # checkpoint 1: the thread index, 2: its status index, 3: the ids a tombstone refused,
    # 4: the fences, 5: erased users, 6: owners in waiting; store 1: tombstones, 2: fields
    assert query(path, "SELECT v FROM lgmp_checkpoint_migrations") == [
        (0,),
        (1,),
        (2,),
        (3,),
        (4,),
        (5,),
        (6,),
    ]
    assert query(path, "SELECT v FROM lgmp_store_migrations") == [(0,), (1,), (2,)]
    assert query(path, "SELECT count(*) FROM lgmp_store") == [(1,)]


def _layout(path: Path) -> dict[str, Any]:
    """Every schema entry of the file as SQLite describes it: each table's columns, rowid
    kind and indexes (with their columns), the SQL of indexes and triggers (whitespace
    aside), triggers in creation order (which is the order they fire in), the versions."""
    with closing(sqlite3.connect(path)) as conn:
        out: dict[str, Any] = {"triggers": []}
        entries = conn.execute("SELECT type, name, sql FROM sqlite_master ORDER BY rowid")
        for kind, name, sql in entries.fetchall():
            text = " ".join((sql or "").split())
            if kind == "trigger":
                out["triggers"].append((name, text))
            elif kind == "index":
                out[f"index {name}"] = text
            elif kind == "table":
                indexes = conn.execute(f"PRAGMA index_list('{name}')").fetchall()
                out[f"table {name}"] = {
                    "columns": conn.execute(f"PRAGMA table_xinfo('{name}')").fetchall(),
                    "without rowid": text.upper().endswith("WITHOUT ROWID"),
                    "indexes": sorted(
                        (idx[1:], conn.execute(f"PRAGMA index_xinfo('{idx[1]}')").fetchall())
                        for idx in indexes
                    ),
                }
        for table in ("lgmp_checkpoint_migrations", "lgmp_store_migrations"):
            out[table] = conn.execute(f"SELECT v FROM {table} ORDER BY v").fetchall()
        return out


def test_a_new_file_gets_the_layout_the_migrations_build(tmp_path: Path) -> None:
    """setup() on a new file creates the last version's layout directly (the checkpoint
    tables, the thread index's ``fresh()`` with its key columns, the store's ``FRESH``);
    a file whose bookkeeping tables hold no version replays every migration from
    version 0, and the thread index's setup after them. Both must end the same, entry by
    entry, or the fresh layout drifted from the migrations."""
    options = {"thread_index_keys": ["user_id", "team"]}
    fresh, replayed = tmp_path / "fresh.db", tmp_path / "replayed.db"
    with closing(sqlite3.connect(replayed)) as conn, conn:
        for table in ("lgmp_checkpoint_migrations", "lgmp_store_migrations"):
            conn.execute(f"CREATE TABLE {table} (v INTEGER PRIMARY KEY, applied_at REAL NOT NULL)")
    for path in (fresh, replayed):
        with (
            SqliteSaver.from_conn_string(path, **options) as saver,
            SqliteStore.from_conn_string(path) as store,
        ):
            saver.setup()
            store.setup()
            asyncio.run(put_chain(Ops(saver, False), "t", 2))  # the layout works, not only exists
            store.put(("u",), "k", {"kind": "fact"})
            assert [item.key for item in store.search(("u",), filter={"kind": "fact"})] == ["k"]
    assert _layout(fresh) == _layout(replayed)
    layout = _layout(fresh)
    assert layout["lgmp_checkpoint_migrations"] == [(0,), (1,), (2,), (3,), (4,), (5,), (6,)]
    assert layout["lgmp_store_migrations"] == [(0,), (1,), (2,)]
    columns = [c[1] for c in layout["table lgmp_thread_index"]["columns"]]
    assert columns[-2:] == [key_column("user_id"), key_column("team")]


def test_a_first_setup_migrates_once_and_the_first_call_checks_nothing(tmp_path: Path) -> None:
    """setup() before any other call is the setup the saver runs by itself before its
    first call, not one more (it used to migrate, then read the versions again in a
    second transaction); a later setup() checks again; calls after it check nothing."""
    seen: list[str] = []
    conn = sqlite3.connect(tmp_path / "once.db", check_same_thread=False)
    conn.set_trace_callback(seen.append)

    def checks() -> int:
        found = sum("FROM sqlite_master WHERE type = 'table'" in s for s in seen)
        seen.clear()
        return found

    try:
        saver, store = SqliteSaver(conn), SqliteStore(conn)
        saver.setup()
        store.setup()
        assert checks() == 2
        assert saver.get_tuple(cfg("t")) is None and store.get(("u",), "k") is None
        assert checks() == 0
        saver.setup()
        assert checks() == 1
    finally:
        conn.close()


def test_a_read_looks_up_each_blob_by_its_key(tmp_path: Path) -> None:
    """A checkpoint's blobs are found by primary key, one lookup per channel version: the
    planner, left to itself, walked every blob of the thread for each version, so a read
    grew with the thread (2.6 ms at 1,000 checkpoints)."""
    path = tmp_path / "plan.db"
    conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
    seen: list[str] = []
    conn.set_trace_callback(seen.append)
    saver = SqliteSaver(conn)
    saver.setup()
    asyncio.run(put_chain(Ops(saver, False), "t", 3))
    seen.clear()
    assert saver.get_tuple(cfg("t")) is not None
    [blob_query] = [q for q in seen if "lgmp_blobs b" in q]
    plan = " | ".join(row[3] for row in conn.execute("EXPLAIN QUERY PLAN " + blob_query))
    assert (
        "SEARCH b USING PRIMARY KEY (thread_key=? AND checkpoint_ns=? AND channel=? AND version=?)"
        in plan
    ), plan
    conn.close()


def test_a_turn_sends_one_read_per_write_and_one_statement_per_read(tmp_path: Path) -> None:
    """A put is one transaction: one read (its thread's row, whether the checkpoint is
    known, its parent's delta seeds, whether interrupt or error writes came first), then
    one ``INSERT`` per table whatever the number of rows. A ``put_writes`` to a named thread
    without expiry or tombstone is one ``INSERT`` that reads the thread's row itself, outside
    ``BEGIN``/``COMMIT``; ``get_tuple`` one statement with no transaction around it. A put used
    to read four times, a row was a statement, and a read was five statements."""
    conn = sqlite3.connect(tmp_path / "n.db", check_same_thread=False, isolation_level=None)
    seen: list[str] = []
    conn.set_trace_callback(seen.append)
    saver = SqliteSaver(conn)
    saver.setup()

    def sent(prefix: str) -> int:
        # the trace repeats a statement for each trigger program it runs: count texts
        return len({s for s in seen if s.lstrip().upper().startswith(prefix)})

    first = saver.put(cfg("t"), make_checkpoint({"a": 1}), {"step": 0}, {"a": 1})
    values = {"a": 2, "b": "x" * 300, "c": [1, 2]}
    second = make_checkpoint(values, dict.fromkeys(values, 2))
    seen.clear()
    config = saver.put(first, second, {"step": 1}, dict.fromkeys(values, 2))
    assert sent("SELECT") == 1 and sent("INSERT INTO LGMP_BLOBS") == 1, seen
    assert sent("BEGIN IMMEDIATE") == 1 and sent("COMMIT") == 1, seen
    seen.clear()
    saver.put_writes(config, [("a", 3), ("b", "y"), ("c", [3])], "task-1")
    # the thread's row needs no decision: one INSERT ... SELECT, atomic without BEGIN
    assert len(set(seen)) == 1 and sent("INSERT INTO LGMP_WRITES") == 1, seen
    seen.clear()
    found = saver.get_tuple(cfg("t"))
    assert len(seen) == 1 and not sent("BEGIN"), seen
    assert found is not None and found.checkpoint["channel_values"] == values
    assert [(w[1], w[2]) for w in found.pending_writes or []] == [("a", 3), ("b", "y"), ("c", [3])]
    assert found.parent_config == first
    # the same checkpoint again is not one more checkpoint of the thread
    saver.put(first, second, {"step": 1}, dict.fromkeys(values, 2))
    record = saver.threads.get("t")
    assert record is not None and record["size"]["checkpoints"] == 2
    conn.close()


def test_writes_the_one_statement_path_does_not_admit_take_the_full_path(tmp_path: Path) -> None:
    """``put_writes`` stores in one ``INSERT ... SELECT`` only when the thread's row needs
    no decision. Writes to a thread without a row (they create it), writes sent again
    (nothing new stored), and writes of a run that outlived its thread's deletion (refused)
    take the full path, with the same outcome as before that statement existed."""
    with SqliteSaver.from_conn_string(tmp_path / "w.db") as saver:
        first = make_checkpoint({"a": 1})
        early = cfg("t", "", first["id"])
        saver.put_writes(early, [("a", 5)], "task-1")  # no thread row yet
        saver.put_writes(early, [("a", 5)], "task-1")  # the same write again
        config = saver.put(cfg("t"), first, {"step": 0}, {"a": 1})
        found = saver.get_tuple(config)
        assert found is not None and [(w[1], w[2]) for w in found.pending_writes or []] == [
            ("a", 5)
        ]
        saver.delete_thread("t")
        saver.put_writes(config, [("a", 6)], "task-2")  # the deleted run's: refused
        assert saver.get_tuple(cfg("t")) is None and saver.threads.get("t") is None
        assert not list(saver.list(None))


def test_writes_on_a_callers_connection_in_legacy_transaction_mode_are_committed(
    tmp_path: Path,
) -> None:
    """A caller's connection opened with ``sqlite3``'s default ``isolation_level`` begins
    a transaction of its own before a write sent outside ``BEGIN``: the one-statement
    ``put_writes`` is for connections in autocommit mode only, so these writes are
    committed and the connection is left outside any transaction, as before."""
    path = tmp_path / "legacy.db"
    conn = sqlite3.connect(path, check_same_thread=False)
    try:
        saver = SqliteSaver(conn)
        config = saver.put(cfg("t"), make_checkpoint({"a": 1}), {"step": 0}, {"a": 1})
        saver.put_writes(config, [("a", 5)], "task-1")
        assert not conn.in_transaction
        with closing(sqlite3.connect(path)) as other:
            assert other.execute("SELECT count(*) FROM lgmp_writes").fetchone() == (1,)
    finally:
        conn.close()


def test_interrupt_writes_stored_before_their_checkpoint_give_its_status(tmp_path: Path) -> None:
    """LangGraph may store a step's writes before its checkpoint: the put, which reads
    them only when its first read says there are some, still takes the status from them;
    the next checkpoint, without any, makes the thread idle again."""
    from langgraph.types import Interrupt

    with SqliteSaver.from_conn_string(tmp_path / "i.db") as saver:
        first = saver.put(cfg("t"), make_checkpoint({"a": 1}), {"step": 0}, {"a": 1})
        second = make_checkpoint({"a": 2}, {"a": 2})
        early = cfg("t", "", second["id"])
        saver.put_writes(early, [("__interrupt__", (Interrupt(value="ask"),))], "task-1")
        saver.put_writes(early, [("a", 5)], "task-2")
        config = saver.put(first, second, {"step": 1}, {"a": 2})
        record = saver.threads.get("t")
        assert record is not None and record["status"] == "interrupted", record
        assert list(record["interrupts"]) == ["task-1"]
        saver.put(config, make_checkpoint({"a": 3}, {"a": 3}), {"step": 2}, {"a": 3})
        record = saver.threads.get("t")
        assert record is not None and record["status"] == "idle" and not record["interrupts"]


def test_a_full_pool_lends_each_returned_connection_once(tmp_path: Path) -> None:
    """Borrowers beyond ``max_size`` wait for a returned connection; closing the pool
    turns them away at once."""
    import threading

    pool = SqlitePool(tmp_path / "p.db", max_size=1)
    held = pool.acquire()
    got: list[Any] = []
    waiter = threading.Thread(target=lambda: got.append(pool.acquire()))
    waiter.start()
    waiter.join(0.2)
    assert waiter.is_alive() and not got
    pool.release(held)
    waiter.join(WAIT_SECONDS)
    assert got == [held]
    refused: list[BaseException] = []

    def borrow() -> None:
        try:
            pool.acquire()
        except InvalidConfigError as exc:
            refused.append(exc)

    late = threading.Thread(target=borrow)
    late.start()
    late.join(0.2)
    pool.close()
    late.join(WAIT_SECONDS)
    assert not late.is_alive() and refused and "closed" in str(refused[0])
    pool.release(got[0])  # closed now: the connection is closed, not kept
    assert pool._open_count == 0


def test_a_pool_that_cannot_lend_fails_with_a_clear_timeout(tmp_path: Path) -> None:
    """Every connection out and none coming back (a plan that hangs, a caller holding
    one): a sync or async call waits ``pool_timeout`` seconds, then gets
    ``PoolTimeoutError`` naming both options, and the saver works again once one is back
    (it waited forever before). ``from_url`` takes the option too."""
    from langgraph.checkpoint.base import empty_checkpoint

    from langgraph_memory_plus import PoolTimeoutError, from_url

    pool = SqlitePool(tmp_path / "t.db", max_size=1, pool_timeout=0.3)
    saver, asaver = SqliteSaver(pool), AsyncSqliteSaver(pool)
    saver.setup()
    config: Any = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    held = pool.acquire()
    started = time.monotonic()
    with pytest.raises(PoolTimeoutError, match=r"SQLite.*pool_timeout=0\.3.*pool_max_size=1"):
        saver.put(config, empty_checkpoint(), {}, {})
    with pytest.raises(PoolTimeoutError):
        asyncio.run(asaver.aget_tuple(config))
    assert 0.5 <= time.monotonic() - started < WAIT_SECONDS
    pool.release(held)
    saver.put(config, empty_checkpoint(), {}, {})
    assert asyncio.run(asaver.aget_tuple(config)) is not None
    pool.close()
    with pytest.raises(InvalidConfigError, match="pool_timeout"):
        SqlitePool(tmp_path / "t.db", pool_timeout=-1)
    with from_url(f"sqlite:///{tmp_path / 'u.db'}?pool_timeout=0.2&pool_max_size=1") as memory:
        sqlite_pool = memory.checkpointer._runner.conn
        assert isinstance(sqlite_pool, SqlitePool) and sqlite_pool.pool_timeout == 0.2


def test_a_filtered_list_reads_full_pages_and_blobs_only_of_matches(tmp_path: Path) -> None:
    """``list(filter=..., limit=1)`` on a long thread: a number is narrowed in SQL (one
    page holds the match), a filter SQL cannot narrow (``None``) reads pages of many rows
    (pages of one row were a statement a checkpoint), and blobs are read for the matches
    only; the answers are the same as without the shortcuts."""
    conn = sqlite3.connect(tmp_path / "f.db", check_same_thread=False, isolation_level=None)
    seen: list[str] = []
    saver = SqliteSaver(conn)
    saver.setup()
    asyncio.run(put_chain(Ops(saver, False), "t", 250))
    conn.set_trace_callback(seen.append)
    [first] = saver.list(cfg("t"), filter={"step": 0}, limit=1)
    assert first.metadata["step"] == 0 and first.checkpoint["channel_values"]["a"] == "t//a0"
    pages = [q for q in seen if "ORDER BY c.checkpoint_id DESC" in q]
    assert len(pages) == 1, len(pages)  # only step 0 passes the SQL
    assert len([q for q in seen if "lgmp_blobs b" in q]) == 1
    seen.clear()
    two = saver.list(cfg("t"), filter={"source": "loop", "run_id": "run-1"}, limit=2)
    assert [t.metadata["step"] for t in two] == [249, 248]
    assert len([q for q in seen if "lgmp_blobs b" in q]) == 1
    assert [t.metadata["step"] for t in saver.list(cfg("t"), filter={"step": 7})] == [7]
    assert len(list(saver.list(cfg("t"), filter={"missing": None}, limit=300))) == 250
    [oldest] = saver.list(cfg("t"), filter={"missing": None, "step": 0}, limit=1)
    assert oldest.metadata["step"] == 0
    seen.clear()
    [newest] = saver.list(cfg("t"), filter={"missing": None}, limit=1)
    assert newest.metadata["step"] == 249
    assert len([q for q in seen if "ORDER BY c.checkpoint_id DESC" in q]) == 1
    conn.close()


def test_a_filtered_search_reads_the_field_index_only_under_a_wide_prefix(
    tmp_path: Path,
) -> None:
    """Under one user's namespace the few items are read as they are; across namespaces the
    field index narrows them first. Both give the same, exact answer."""
    conn = sqlite3.connect(tmp_path / "s.db", check_same_thread=False, isolation_level=None)
    store = SqliteStore(conn)
    store.setup()
    for i in range(600):
        store.put(("users", f"u{i % 60}", "m"), f"k{i}", {"kind": ["fact", "pref"][i % 2]})
    seen: list[str] = []
    conn.set_trace_callback(seen.append)
    narrow = store.search(("users", "u3"), filter={"kind": "pref"}, limit=20)
    assert sorted(item.key for item in narrow) == sorted(f"k{i}" for i in range(3, 600, 60))
    assert not [q for q in seen if "lgmp_store_fields" in q]
    seen.clear()
    wide = store.search(("users",), filter={"kind": "fact"}, limit=1000)
    assert len(wide) == 300 and {item.value["kind"] for item in wide} == {"fact"}
    assert [q for q in seen if "lgmp_store_fields" in q]
    conn.close()


def _synchronous(pool: Any) -> int:
    with pool.connection() as conn:
        return int(conn.execute("PRAGMA synchronous").fetchone()[0])


def test_synchronous_is_normal_by_default_and_full_on_request(tmp_path: Path) -> None:
    """WAL with ``synchronous=NORMAL`` (1) unless ``"full"`` (2) is asked for, by keyword or
    URL; anything else is refused before a file is opened."""
    from langgraph_memory_plus import from_url
    from langgraph_memory_plus.drivers.sqlite import SqlitePool
    from langgraph_memory_plus.errors import InvalidConfigError

    with SqlitePool(tmp_path / "a.db") as pool:
        assert _synchronous(pool) == 1
    with SqlitePool(tmp_path / "b.db", synchronous="full") as pool:
        assert _synchronous(pool) == 2
    with SqliteSaver.from_conn_string(tmp_path / "c.db", synchronous="full") as saver:
        assert _synchronous(saver._runner.conn) == 2
    with SqliteStore.from_conn_string(tmp_path / "d.db") as store:
        assert _synchronous(store._runner.conn) == 1
    with from_url(f"sqlite:///{tmp_path / 'e.db'}?synchronous=full") as memory:
        assert _synchronous(memory.checkpointer._runner.conn) == 2
        assert _synchronous(memory.store._runner.conn) == 2
    for bad in ("off", "FULL ", 2):
        with pytest.raises(InvalidConfigError, match="synchronous"):
            SqlitePool(tmp_path / "f.db", synchronous=bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidConfigError, match="synchronous"):
        from_url(f"sqlite:///{tmp_path / 'g.db'}?synchronous=off")
    assert not (tmp_path / "f.db").exists() and not (tmp_path / "g.db").exists()


CHILD = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from langchain_core.messages import AIMessage
    from langgraph.graph import START, MessagesState, StateGraph
    from langgraph_memory_plus.checkpoint.sqlite import SqliteSaver
    from langgraph_memory_plus.store.sqlite import SqliteStore

    path, name, turns, go = sys.argv[1], sys.argv[2], int(sys.argv[3]), Path(sys.argv[4])

    def model(state):
        return {"messages": [AIMessage(f"{name} answer {len(state['messages'])}")]}

    builder = StateGraph(MessagesState)
    builder.add_node("model", model)
    builder.add_edge(START, "model")
    with SqliteSaver.from_conn_string(path) as saver, SqliteStore.from_conn_string(path) as store:
        saver.setup()  # both processes run it, concurrently
        store.setup()
        graph = builder.compile(checkpointer=saver, store=store)
        Path(go.parent / f"ready-{name}").touch()
        deadline = time.monotonic() + 60
        while not go.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        config = {"configurable": {"thread_id": f"thread-{name}"}}
        for turn in range(turns):
            graph.invoke({"messages": [("user", f"{name} says {turn}")]}, config)
            store.put(("writers", name), f"turn-{turn}", {"turn": turn})
            while True:  # a read-modify-write both processes race on
                item = store.get(("shared",), "counter")
                value = {"n": (item.value["n"] if item else 0) + 1}
                try:
                    store.put(("shared",), "counter", value,
                              expected_version=item.version if item else 0)
                    break
                except Exception as exc:
                    if type(exc).__name__ != "ConflictError":
                        raise
    """
)


def _open_pool(path: Path) -> str:
    with SqlitePool(path, busy_timeout=10) as pool, pool.connection() as conn:
        return str(conn.execute("PRAGMA journal_mode").fetchone()[0])


def _set_up_own_connection(path: Path) -> str:
    """A caller's connection: ``setup()``'s migration plan switches the file to WAL."""
    with closing(
        sqlite3.connect(path, timeout=10, check_same_thread=False, isolation_level=None)
    ) as conn:
        SqliteSaver(conn).setup()
        return str(conn.execute("PRAGMA journal_mode").fetchone()[0])


@pytest.mark.parametrize("opener", [_open_pool, _set_up_own_connection], ids=["pool", "own"])
def test_connections_opening_one_new_file_at_once_all_get_wal(tmp_path: Path, opener: Any) -> None:
    """Pools opening the same new file at the same moment (processes starting together),
    or callers' connections setting it up: SQLite answers all but one "database is
    locked" to the switch to WAL without waiting; each gets through anyway, in WAL mode
    (it failed in about one round in fifteen for pools, one in thirty for setup())."""
    import threading

    def open_one(
        path: Path, start: threading.Barrier, modes: list[str], errors: list[BaseException]
    ) -> None:
        start.wait()
        try:
            modes.append(opener(path))
        except BaseException as exc:
            errors.append(exc)

    for n in range(40):
        start = threading.Barrier(6)
        errors: list[BaseException] = []
        modes: list[str] = []
        args = (tmp_path / f"new-{n}.db", start, modes, errors)
        workers = [threading.Thread(target=open_one, args=args) for _ in range(6)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        assert not errors, errors
        assert modes == ["wal"] * 6


def test_two_processes_write_one_file_at_once_and_lose_nothing(tmp_path: Path) -> None:
    """Two processes set up the same new file and then write different threads and store
    items at the same time (released together): every write of both is there after."""
    path, go, turns = str(tmp_path / "shared.db"), tmp_path / "go", 12
    children = [
        subprocess.Popen(
            [sys.executable, "-c", CHILD, path, name, str(turns), str(go)],
            stderr=subprocess.PIPE,
            text=True,
        )
        for name in ("a", "b")
    ]
    try:
        deadline = time.monotonic() + WAIT_SECONDS
        while time.monotonic() < deadline and not all(
            (tmp_path / f"ready-{n}").exists() or child.poll() is not None
            for n, child in zip("ab", children, strict=True)
        ):
            time.sleep(0.01)
        go.touch()
        for child in children:
            _, err = child.communicate(timeout=WAIT_SECONDS)
            assert child.returncode == 0, err
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
    with SqliteSaver.from_conn_string(path) as saver, SqliteStore.from_conn_string(path) as store:
        for name in ("a", "b"):
            [latest] = list(saver.list(cfg(f"thread-{name}"), limit=1))
            messages = latest.checkpoint["channel_values"]["messages"]
            assert [m.content for m in messages[::2]] == [f"{name} says {t}" for t in range(turns)]
            assert len(list(saver.list(cfg(f"thread-{name}")))) == 3 * turns
            assert store.count(("writers", name)) == turns
        counter = store.get(("shared",), "counter")
        assert counter is not None and counter.value == {"n": 2 * turns}, "a lost update"
    assert query(path, "SELECT v FROM lgmp_checkpoint_migrations") == [
        (0,),
        (1,),
        (2,),
        (3,),
        (4,),
        (5,),
        (6,),
    ]


async def test_concurrent_calls_of_one_async_saver_and_store(tmp_path: Path) -> None:
    """Many coroutines at once on one async saver/store: reads run in parallel threads,
    writers take turns; nothing is lost and the event loop keeps running meanwhile."""
    path = tmp_path / "busy.db"
    async with (
        AsyncSqliteSaver.from_conn_string(path, pool_max_size=3) as saver,
        AsyncSqliteStore.from_conn_string(path, pool_max_size=3) as store,
    ):
        await saver.setup()
        await store.setup()
        ops = Ops(saver, is_async=True)
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0)

        beat = asyncio.ensure_future(ticker())
        await asyncio.gather(
            *(put_chain(ops, f"t{i}", 5) for i in range(6)),
            *(store.aput(("n", str(i)), "k", {"i": i}) for i in range(30)),
        )
        beat.cancel()
        assert ticks > 0
        for i in range(6):
            assert len(await ops.list(cfg(f"t{i}"))) == 5
        assert await store.acount(("n",)) == 30


async def test_plans_waiting_for_the_file_leave_the_event_loops_executor_free(
    tmp_path: Path,
) -> None:
    """Async calls waiting for a connection or for the write lock (another process is
    writing) wait on the runner's own threads: the event loop's default executor, which
    LangGraph's sync nodes and every ``asyncio.to_thread`` use, stays free. Plans ran there
    once, and more waiting calls than it has threads stalled the whole process."""
    path = tmp_path / "held.db"
    async with AsyncSqliteStore.from_conn_string(path, pool_max_size=1) as store:
        await store.setup()
        default_threads = min(32, (os.cpu_count() or 1) + 4)  # asyncio's default executor
        with closing(sqlite3.connect(path, isolation_level=None)) as other:
            other.execute("BEGIN IMMEDIATE")  # another writer holds the file
            writes = [
                asyncio.ensure_future(store.aput(("n",), f"k{i}", {"i": i}))
                for i in range(default_threads + 2)
            ]
            await asyncio.sleep(0.2)  # every write is waiting now
            try:
                assert await asyncio.wait_for(asyncio.to_thread(lambda: "free"), 5) == "free"
            finally:
                other.execute("ROLLBACK")
        await asyncio.wait_for(asyncio.gather(*writes), 60)
        assert await store.acount(("n",)) == default_threads + 2


# --------------------------------------------------------------------------------------------
# TTL as data, and the sweep
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("flavour", ["sync"])  # the plans are the same for both flavours
async def test_expired_threads_are_invisible_then_swept_to_the_last_row(
    open_saver: Any, schema: str
) -> None:
    async with (
        open_saver(schema, ttl={"default_ttl": SHORT_TTL}) as short,
        open_saver(schema) as forever,
    ):
        await put_chain(forever, "immortal", 2)
        survivors = counts(schema)
        doomed = {t: await put_chain(short, t, 2) for t in ("exp-1", "exp-2", "exp-3")}
        await put_chain(short, "exp-1", 2, ns="child:1")
        await asyncio.sleep(SHORT_TTL * 60 + 0.8)
        for tid, configs in doomed.items():
            assert await forever.get_tuple(cfg(tid)) is None
            assert await forever.get_tuple(configs[0]) is None
            assert await forever.list(cfg(tid)) == []
            assert (await forever.delta_history(configs[1], ["a"]))["a"] == {"writes": []}
        assert {t.config["configurable"]["thread_id"] for t in await forever.list(None)} == {
            "immortal"
        }
        assert counts(schema) != survivors  # invisible, but still stored...
        swept = [await short.sweep_expired(batch_size=2) for _ in range(3)]
        assert sum(swept) == 3, "sweep_expired counts threads, not rows"
        assert counts(schema) == survivors  # ...until swept, to the last row


async def test_ttl_is_refreshed_by_writes_and_optionally_by_reads(
    open_saver: Any, schema: str
) -> None:
    """Compare stored expiry times: a write or a refreshing read moves them, a plain read
    does not."""

    def expiry(thread_id: str) -> float:
        sql = "SELECT expires_at FROM lgmp_threads WHERE thread_key = ?"
        return float(query(schema, sql, thread_key(thread_id))[0][0])

    ttl = {"default_ttl": 10}
    async with (
        open_saver(schema, ttl=ttl) as plain,
        open_saver(schema, ttl={**ttl, "refresh_on_read": True}) as refreshing,
    ):
        for tid in ("written", "read-plain", "read-refreshing", "listed"):
            await put_chain(plain, tid, 1)
        before = {tid: expiry(tid) for tid in ("written", "read-plain", "read-refreshing")}
        before["listed"] = expiry("listed")
        await asyncio.sleep(0.05)
        await put_chain(plain, "written", 1, ns="child:1")  # another namespace, same thread
        assert await plain.get_tuple(cfg("read-plain")) is not None
        assert await refreshing.get_tuple(cfg("read-refreshing")) is not None
        assert len(await refreshing.list(cfg("listed"))) == 1
        assert expiry("written") > before["written"]
        assert expiry("read-plain") == before["read-plain"]
        assert expiry("read-refreshing") > before["read-refreshing"]
        assert expiry("listed") > before["listed"]


async def test_store_ttl_is_data_and_the_sweep_reclaims_items_and_vectors(
    open_store: OpenStore, tmp_path: Path
) -> None:
    path = tmp_path / "store.db"
    async with open_store(ttl={"default_ttl": 0.01}, index=INDEX) as ops:  # 0.6 seconds
        await ops.call("put", ("t", "short"), "k", {"text": "abc"})
        await ops.call("put", ("t", "again"), "k", {"v": 1})
        await ops.call("put", ("t", "keep"), "k", {"text": "abc"}, ttl=None)
        await asyncio.sleep(1.0)
        # Written over its expired row an item starts anew; over a live one it keeps created_at.
        await ops.call("put", ("t", "again"), "k", {"v": 2}, ttl=None)
        await ops.call("put", ("t", "keep"), "k", {"text": "abc"}, ttl=None)
        again, kept = await ops.call(
            "batch", [GetOp(("t", "again"), "k"), GetOp(("t", "keep"), "k")]
        )
        assert again.created_at == again.updated_at and kept.created_at < kept.updated_at
        assert await ops.call("get", ("t", "short"), "k") is None
        found = await ops.call("search", ("t",), query="abc")
        assert [item.namespace for item in found] == [("t", "keep"), ("t", "again")]
        assert await ops.call("list_namespaces") == [("t", "again"), ("t", "keep")]
        assert query(path, "SELECT count(*) FROM lgmp_store_vectors") == [(2,)]
        assert await ops.admin("sweep_ttl") == 1
        assert query(path, "SELECT prefix FROM lgmp_store ORDER BY prefix") == [
            ("t.again",),
            ("t.keep",),
        ]
        assert query(path, "SELECT count(*) FROM lgmp_store_vectors") == [(1,)]


# --------------------------------------------------------------------------------------------
# Retention and deletion, down to the rows
# --------------------------------------------------------------------------------------------


async def test_keep_last_leaves_only_the_kept_rows(open_saver: Any, schema: str) -> None:
    async with open_saver(schema, keep_last=2) as ops:
        configs = await put_chain(ops, "kept", 6)
        assert ids(await ops.list(cfg("kept"))) == [checkpoint_id(c) for c in configs[:-3:-1]]
        rows = thread_rows(schema, "kept")
        assert rows["checkpoints"] == 2
        assert rows["writes"] == 4  # two per kept checkpoint
        assert rows["blobs"] == 3  # "a" of each kept checkpoint, and "const" they share


async def test_deletion_is_final_and_its_tombstone_is_swept_later(
    open_saver: Any, schema: str
) -> None:
    async with open_saver(schema) as ops:
        configs = await put_chain(ops, "victim", 3)
        await put_chain(ops, "neighbour", 1)
        await ops.delete_thread("victim")
        late = await ops.put(
            cfg("victim", "", checkpoint_id(configs[-1])),
            make_checkpoint({"a": "late-value"}, {"a": 9}),
            {"source": "loop", "step": 9, "parents": {}},
            {"a": 9},
        )
        await ops.put_writes(late, [("a", "late-write")], "late-task")
        await ops.put_writes(configs[-1], [("a", "late-write-2")], "late-task")
        assert await ops.get_tuple(cfg("victim")) is None
        assert await ops.list(cfg("victim")) == []
        rows = thread_rows(schema, "victim")
        assert rows == {**dict.fromkeys(SAVER_TABLES, 0), "threads": 1}, "only the tombstone"
        stored = b"".join(bytes(r[0]) for r in query(schema, "SELECT blob FROM lgmp_blobs"))
        assert b"late-value" not in stored and b"victim" not in stored
        # A day later the sweep takes the tombstone too.
        assert await ops.sweep_expired() == 0
        with closing(sqlite3.connect(schema)) as conn, conn:
            conn.execute("UPDATE lgmp_threads SET deleted_at = ?", (time.time() - 25 * 3600,))
        assert await ops.sweep_expired() == 0  # tombstones are not threads: not counted
        assert thread_rows(schema, "victim")["threads"] == 0
        assert await ops.get_tuple(cfg("neighbour")) is not None


async def test_delete_for_runs_and_prune_leave_no_orphan_rows(open_saver: Any, schema: str) -> None:
    async with open_saver(schema) as ops:
        await put_chain(ops, "runs", 3, run_id="run-A")
        baseline = counts(schema)
        await put_chain(ops, "other", 3, run_id="run-B")
        await ops.delete_for_runs(["run-B"])
        after = counts(schema)
        assert {t: after[t] for t in ("checkpoints", "blobs", "writes")} == {
            t: baseline[t] for t in ("checkpoints", "blobs", "writes")
        }
        assert len(await ops.list(cfg("runs"))) == 3
        await ops.prune(["runs"], "keep_latest")
        assert thread_rows(schema, "runs")["checkpoints"] == 1
        tup = await ops.get_tuple(cfg("runs"))
        assert tup is not None and tup.checkpoint["channel_values"]["const"] == "runs//const"
        await ops.prune(["runs", "other"], "delete")
        assert {t: n for t, n in counts(schema).items() if t != "threads"} == dict.fromkeys(
            SAVER_TABLES[1:], 0
        )


# --------------------------------------------------------------------------------------------
# Connections: a caller's own, in-memory databases, the event loop
# --------------------------------------------------------------------------------------------


def test_a_callers_connection_and_its_open_transaction(tmp_path: Path) -> None:
    """Inside the caller's transaction a call runs in a savepoint: the caller's rollback
    undoes it, the caller's commit keeps it."""
    path = tmp_path / "mine.db"
    with closing(sqlite3.connect(path, check_same_thread=False, isolation_level=None)) as conn:
        saver = SqliteSaver(conn)
        saver.setup()
        ops = Ops(saver, False)
        conn.execute("BEGIN")
        asyncio.run(put_chain(ops, "rolled-back", 1))
        conn.execute("ROLLBACK")
        conn.execute("BEGIN")
        asyncio.run(put_chain(ops, "committed", 1))
        conn.execute("COMMIT")
        asyncio.run(put_chain(ops, "autocommitted", 1))
    assert query(path, "SELECT count(*) FROM lgmp_checkpoints") == [(2,)]
    with SqliteSaver.from_conn_string(path) as reader:
        assert reader.get_tuple(cfg("rolled-back")) is None
        assert reader.get_tuple(cfg("committed")) is not None


async def test_a_connection_bound_to_its_thread_gets_a_clear_error(tmp_path: Path) -> None:
    with closing(sqlite3.connect(tmp_path / "bound.db")) as conn:
        saver = SqliteSaver(conn)
        saver.setup()  # the creating thread: fine
        with pytest.raises(InvalidConfigError, match="check_same_thread=False"):
            await saver.aget_tuple(cfg("t"))  # a worker thread


async def test_in_memory_database_is_shared_by_every_call(flavour: str) -> None:
    async with (
        AsyncSqliteSaver.from_conn_string(":memory:")
        if flavour == "async"
        else _sync_cm(SqliteSaver.from_conn_string("sqlite://"))
    ) as saver:
        ops = Ops(saver, flavour == "async")
        await ops.setup()
        await asyncio.gather(*(put_chain(ops, f"m{i}", 3) for i in range(4)))
        assert len(await ops.list(None)) == 12


@asynccontextmanager
async def _sync_cm(cm: Any) -> AsyncIterator[Any]:
    with cm as value:
        yield value


async def test_async_classes_refuse_blocking_calls_on_the_event_loop(tmp_path: Path) -> None:
    async with (
        AsyncSqliteSaver.from_conn_string(tmp_path / "a.db") as saver,
        AsyncSqliteStore.from_conn_string(tmp_path / "a.db") as store,
    ):
        await saver.setup()
        await store.setup()
        with pytest.raises(asyncio.InvalidStateError, match="block the event loop"):
            saver.get_tuple(cfg("t"))
        with pytest.raises(asyncio.InvalidStateError, match="block the event loop"):
            store.get(("x",), "k")
        # From a worker thread (a sync tool, a sync node) the blocking calls work.
        await asyncio.to_thread(store.put, ("x",), "k", {"v": 1})
        item = await asyncio.to_thread(store.get, ("x",), "k")
        assert item is not None and item.value == {"v": 1}
        assert await asyncio.to_thread(saver.get_tuple, cfg("t")) is None
    # And a sync class serves its async methods from a worker thread.
    with SqliteStore.from_conn_string(tmp_path / "a.db") as sync_store:
        assert (await sync_store.aget(("x",), "k")).value == {"v": 1}  # type: ignore[union-attr]


def test_store_conditional_writes_from_two_connections(tmp_path: Path) -> None:
    """Optimistic concurrency across connections (as across processes): the second writer
    of a version loses with ConflictError, and the winner's value stays."""
    path = tmp_path / "race.db"
    with SqliteStore.from_conn_string(path) as one, SqliteStore.from_conn_string(path) as two:
        one.setup()
        one.put(("race",), "profile", {"who": "nobody"})
        seen = one.get(("race",), "profile")
        assert seen is not None
        one.put(("race",), "profile", {"who": "one"}, expected_version=seen.version)
        with pytest.raises(ConflictError, match="is at version"):
            two.put(("race",), "profile", {"who": "two"}, expected_version=seen.version)
        one.batch([PutOp(("race",), "new", {"who": "one"})])
        with pytest.raises(ConflictError, match="already exists"):
            two.put(("race",), "new", {"who": "two"}, expected_version=0)
        assert two.get(("race",), "profile").value == {"who": "one"}  # type: ignore[union-attr]


# --------------------------------------------------------------------------------------------
# Bad input
# --------------------------------------------------------------------------------------------


async def test_bad_configs_are_refused_by_name_and_write_nothing(
    open_saver: Any, schema: str
) -> None:
    async with open_saver(schema) as ops:
        await put_chain(ops, "t", 1)
        before = counts(schema)
        for bad in ({"configurable": {}}, {}, {"configurable": {"thread_id": None}}):
            with pytest.raises(InvalidConfigError, match="thread_id"):
                await ops.put(bad, make_checkpoint({"a": 1}), {}, {"a": 1})  # type: ignore[arg-type]
            with pytest.raises(InvalidConfigError, match="thread_id"):
                await ops.get_tuple(bad)  # type: ignore[arg-type]
        with pytest.raises(InvalidConfigError, match="checkpoint_id"):
            await ops.put_writes(cfg("t"), [("a", 1)], "task")
        with pytest.raises(InvalidConfigError, match="checkpoint_ns must not contain NUL"):
            await ops.put(cfg("t", "bad\x00ns"), make_checkpoint({"a": 1}), {}, {"a": 1})
        with pytest.raises(InvalidConfigError, match="channel name must not contain NUL"):
            await ops.put(cfg("t"), make_checkpoint({"a\x00b": 1}), {}, {"a\x00b": 1})
        assert counts(schema) == before


def test_bad_connections_paths_and_options_are_refused(tmp_path: Path) -> None:
    with pytest.raises(InvalidConfigError, match=r"sqlite3\.Connection or a SqlitePool"):
        SqliteSaver("memory.db")  # type: ignore[arg-type]
    with pytest.raises(InvalidConfigError, match=r"sqlite3\.Connection or a SqlitePool"):
        AsyncSqliteStore(object())  # type: ignore[arg-type]
    for options in ({"pool_max_size": 0}, {"busy_timeout": -1}, {"keep_last": 0}):
        with (
            pytest.raises(InvalidConfigError),
            SqliteSaver.from_conn_string(tmp_path / "x.db", **options),
        ):
            pass
    for url in ("sqlite://host/x.db", "sqlite:///x.db?ttl=5"):
        with pytest.raises(InvalidConfigError), SqliteSaver.from_conn_string(url):
            pass
    with (
        pytest.raises(sqlite3.OperationalError, match="unable to open"),
        SqliteSaver.from_conn_string(tmp_path / "no" / "such" / "dir.db") as saver,
    ):
        saver.setup()
    not_a_database = tmp_path / "notes.txt"
    not_a_database.write_text("hello, this is not SQLite" * 100)
    with (
        pytest.raises(sqlite3.DatabaseError),
        SqliteSaver.from_conn_string(not_a_database) as saver,
    ):
        saver.setup()


def test_urls_and_paths_name_the_same_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with SqliteSaver.from_conn_string("sqlite:///rel%20ative.db") as saver:
        saver.setup()
        assert Path(saver.conn.path) == Path("rel ative.db")  # type: ignore[union-attr]
    with SqliteSaver.from_conn_string(f"sqlite:///{tmp_path}/abs.db") as saver:
        saver.setup()
    assert (tmp_path / "rel ative.db").exists() and (tmp_path / "abs.db").exists()
    for memory in (":memory:", "sqlite://", "sqlite:///:memory:"):
        with SqliteSaver.from_conn_string(memory) as saver:
            assert isinstance(saver.conn, SqlitePool) and saver.conn.max_size == 1


async def test_a_closed_pool_says_so(tmp_path: Path) -> None:
    with SqliteSaver.from_conn_string(tmp_path / "c.db") as saver:
        saver.setup()
    with pytest.raises(InvalidConfigError, match="closed"):
        saver.get_tuple(cfg("t"))
    with suppress(Exception):
        saver.conn.close()  # type: ignore[union-attr]


def test_the_field_index_holds_each_items_tokens_and_the_migration_builds_the_same(
    tmp_path: Path,
) -> None:
    """Puts, updates and deletes keep ``lgmp_store_fields`` equal to the items' tokens,
    and migration 2, run on a file written before it, builds exactly those rows with
    ``json_tree``: odd keys, lists, long and escaped strings included."""
    path = str(tmp_path / "store.db")
    odd = {
        "kind": "fact",
        "a_b": "no",
        "1a": "no",
        "é": "no",
        "a.b": "no",
        "": "no",
        "m": {"src": "doc", "l": [{"k": "no"}], "Deep2": {"x": "\x00nul\x01"}},
        "long": "z" * 65,
        "edge": "y" * 64,
        "n": 1,
        "t": True,
        "none": None,
    }
    expected = {
        ("kind", "fact", "users.u1", "a"),
        ("m.src", "doc", "users.u1", "a"),
        ("m.Deep2.x", escape_text("\x00nul\x01"), "users.u1", "a"),
        ("edge", "y" * 64, "users.u1", "a"),
        ("kind", "fact", "users.u2", "b"),
    }

    def rows() -> set[tuple[str, ...]]:
        with closing(sqlite3.connect(path)) as conn:
            return set(conn.execute("SELECT path, atom, prefix, key FROM lgmp_store_fields"))

    with SqliteStore.from_conn_string(path) as store:
        store.setup()
        store.put(("users", "u1"), "a", odd)
        store.put(("users", "u2"), "b", {"kind": "note", "x": "y"})
        store.put(("users", "u2"), "c", {"kind": "gone"})
        store.delete(("users", "u2"), "c")
        store.put(("users", "u2"), "b", {"kind": "fact"})  # an update replaces its tokens
        assert rows() == expected
        nul = store.search(("users",), filter={"m": {"Deep2": {"x": "\x00nul\x01"}}})
        assert [h.key for h in nul] == ["a"]
        assert [h.key for h in store.search(("users",), filter={"a_b": "no"})] == ["a"]
        assert [h.key for h in store.search(("users",), filter={"kind": "fact"})] == ["b", "a"]
    with closing(sqlite3.connect(path)) as conn, conn:  # as a release before the index
        conn.execute("DROP TABLE lgmp_store_fields")
        conn.execute("DELETE FROM lgmp_store_migrations WHERE v = 2")
    with SqliteStore.from_conn_string(path) as store:
        store.setup()
        assert rows() == expected
        store.delete_namespace(("users", "u1"))
        assert rows() == {("kind", "fact", "users.u2", "b")}


def test_a_put_stores_native_versions_only_when_they_differ_from_their_text(
    tmp_path: Path,
) -> None:
    """Issue 39's put compares the version maps before dumping the second one: text
    versions store no second copy (the column stays NULL), integer versions still do, and
    both read back exactly as written."""
    from langgraph.checkpoint.base import empty_checkpoint

    path = tmp_path / "v.db"
    with SqliteSaver.from_conn_string(str(path)) as saver:
        saver.setup()
        for tid, version in (("text", "00000000000000000000000000000001.0"), ("int", 1)):
            checkpoint = empty_checkpoint()
            checkpoint["channel_values"] = {"a": "x"}
            checkpoint["channel_versions"] = {"a": version}
            config: Any = {"configurable": {"thread_id": tid, "checkpoint_ns": ""}}
            saver.put(config, checkpoint, {}, {"a": version})
            got = saver.get_tuple(config)
            assert got is not None and got.checkpoint["channel_versions"] == {"a": version}
    with closing(sqlite3.connect(path)) as conn:
        stored = dict(
            conn.execute(
                "SELECT t.thread_id, c.versions_json FROM lgmp_checkpoints c "
                "JOIN lgmp_threads t ON t.thread_key = c.thread_key"
            ).fetchall()
        )
    assert stored == {b"text": None, b"int": '{"a": 1}'}


def test_delta_seeds_are_skipped_only_with_nothing_to_inherit_or_seed() -> None:
    """The put's shortcut (issue 39): no parent seeds and no ``DeltaChannel`` give no
    seeds; a parent's seeds are still carried to a child that marks no delta channel."""
    from langgraph_memory_plus.checkpoint.codec import EncodedCheckpoint
    from langgraph_memory_plus.checkpoint.sqlite.plans import SqliteCheckpointPlans

    plain = EncodedCheckpoint(
        checkpoint_id="2",
        parent_id="1",
        checkpoint=("msgpack", b""),
        metadata=("msgpack", b""),
        metadata_json={},
        run_id=None,
        channel_versions={"d": "2", "b": "2"},
        versions_json={"d": "2", "b": "2"},
        blobs=[],
        valued_channels=["b"],
    )
    assert SqliteCheckpointPlans._delta_seeds(plain, None) is None
    assert SqliteCheckpointPlans._delta_seeds(plain, '{"d": "1"}') == '{"d": "1"}'
