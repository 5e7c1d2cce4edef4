"""The PostgreSQL runner shared by savers and stores: statement text and pooled connections."""

from __future__ import annotations

import threading
import time
from typing import Any

import psycopg
import pytest

from langgraph_memory_plus.drivers.postgres import (
    AsyncPgRunner,
    PgRunner,
    Query,
    _closed_by_server,
    compact_sql,
)
from langgraph_memory_plus.errors import SetupRequiredError

pytestmark = pytest.mark.storage


def _wait_for_lock_wait(conn: psycopg.Connection[Any], table: str) -> None:
    """Until another backend waits on a lock in a statement naming ``table``."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
            "AND pid <> pg_backend_pid() AND query LIKE %s",
            (f"%{table}%",),
        ).fetchone()
        if row and row[0]:
            return
        time.sleep(0.02)
    raise AssertionError("the write never waited on the other insert")


@pytest.mark.parametrize("call", ["put", "put_writes"])
def test_a_write_meeting_a_thread_row_inserted_meanwhile_sends_one_statement(
    pg_url: str, monkeypatch: pytest.MonkeyPatch, call: str
) -> None:
    """A new thread's first step writes its checkpoint and its task writes at once. The
    write whose snapshot predates the other's new thread row found no row and declined
    its fast statement; it took the locked path (BEGIN, upsert, COMMIT), later sent the
    statement again: extra round trips on the first turn of every thread. It now waits
    for the other's row within its one statement and writes. The thread index row it
    creates carries the thread's expiry (the statement's snapshot has no thread row to
    read it from)."""
    from langgraph.checkpoint.base import empty_checkpoint

    from langgraph_memory_plus.checkpoint.config import thread_key
    from langgraph_memory_plus.checkpoint.postgres import PostgresSaver
    from langgraph_memory_plus.drivers import postgres as runner_module

    opened: list[bool] = []
    sent: list[str] = []
    transaction = psycopg.Connection.transaction
    execute = runner_module._execute

    def counted(self: psycopg.Connection[Any], *args: Any, **kwargs: Any) -> Any:
        opened.append(True)
        return transaction(self, *args, **kwargs)

    def counting(cur: Any, query: Query) -> Any:
        sent.append(query.sql)
        return execute(cur, query)

    thread_id = f"race-{time.monotonic_ns()}"
    tk = thread_key(thread_id)
    checkpoint = empty_checkpoint()
    config: Any = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
    failed: list[BaseException] = []

    def write() -> None:
        try:
            if call == "put":
                saver.put(config, checkpoint, {"source": "input", "step": -1}, {})
            else:
                at = {"configurable": {**config["configurable"], "checkpoint_id": checkpoint["id"]}}
                saver.put_writes(at, [("ch", 1)], "task-1")
        except BaseException as exc:  # reported below
            failed.append(exc)

    with (
        PostgresSaver.from_conn_string(pg_url, ttl={"default_ttl": 60}) as saver,
        psycopg.connect(pg_url) as other,
    ):
        saver.setup()
        monkeypatch.setattr(psycopg.Connection, "transaction", counted)
        monkeypatch.setattr(runner_module, "_execute", counting)
        # another writer's row, not committed yet: the saver's insert waits for it
        other.execute(
            "INSERT INTO public.lgmp_threads (thread_key, thread_id, expires_at) "
            "VALUES (%s, %s, now() + interval '1 hour')",
            (tk, thread_id.encode()),
        )
        writer = threading.Thread(target=write)
        writer.start()
        with psycopg.connect(pg_url, autocommit=True) as watch:
            _wait_for_lock_wait(watch, "lgmp_threads")
        other.commit()
        writer.join(20)
        monkeypatch.undo()
        assert not failed and not writer.is_alive()
        table = "lgmp_checkpoints" if call == "put" else "lgmp_task_writes"
        stored = other.execute(
            f"SELECT count(*) FROM public.{table} WHERE thread_key = %s", (tk,)
        ).fetchone()
        expiry = other.execute(
            "SELECT i.expires_at = t.expires_at FROM public.lgmp_thread_index i "
            "JOIN public.lgmp_threads t USING (thread_key) WHERE thread_key = %s",
            (tk,),
        ).fetchall()
        other.commit()
        saver.delete_thread(thread_id)
    assert opened == []
    assert len(sent) == 1
    assert stored == (1,)
    assert expiry == ([(True,)] if call == "put" else [])


def test_compact_sql_removes_layout_but_keeps_literals_identifiers_and_bodies() -> None:
    sql = """
        SELECT 'two  spaces -- not a comment', "odd  name"  -- it's a comment
        FROM t
        WHERE x = 'it''s' AND body = $fn$ keep
            -- this $fn$ = 1
    """
    assert compact_sql(sql) == (
        "SELECT 'two  spaces -- not a comment',\"odd  name\" FROM t "
        "WHERE x = 'it''s' AND body = $fn$ keep\n            -- this $fn$ = 1"
    )


def test_compact_sql_drops_spaces_next_to_delimiters_only(pg_url: str) -> None:
    """Next to ``( ) , ;`` a space separates nothing; elsewhere it may (``- -1`` is not
    ``--1``, a comment)."""
    sql = "SELECT ( 1 - -1 ) , f ( 'a , b' ) AS x , 2 < = 3 -- note\n ;"
    assert compact_sql(sql) == "SELECT(1 - -1),f('a , b')AS x,2 < = 3;"
    with psycopg.connect(pg_url) as conn:
        conn.execute("CREATE TEMP TABLE t (a int)")
        one = "INSERT INTO t ( a ) VALUES ( %s ) , ( %s - -1 ) RETURNING a"
        rows = conn.execute(compact_sql(one), (1, 2)).fetchall()
        assert rows == [(1,), (3,)]


def test_the_statements_of_a_chat_turn_stay_in_psycopgs_query_cache(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """psycopg parses a statement over 4 KB (or with over 50 parameters) again at every
    execution. The statements a chat turn sends, as sent (the thread index's checkpoint
    put was 4,120 bytes, parsed twice per turn: about a sixth of a turn's client CPU),
    must be cached. The test above checks a statement built like them; this one checks
    what is executed."""
    import psycopg._queries as queries
    from graphs import chat_graph, human

    from langgraph_memory_plus.checkpoint.postgres import PostgresSaver

    parsed: list[int] = []
    uncached = queries._query2pg_nocache

    def counting(query: bytes, *args: Any, **kwargs: Any) -> Any:
        parsed.append(len(query))
        return uncached(query, *args, **kwargs)

    with PostgresSaver.from_conn_string(pg_url) as saver:
        saver.setup()
        graph = chat_graph().compile(checkpointer=saver)
        thread = {"configurable": {"thread_id": f"cache-{time.monotonic_ns()}"}}
        graph.invoke({"messages": [human("hello", "h1")]}, thread)
        monkeypatch.setattr(queries, "_query2pg_nocache", counting)
        for turn in range(2, 5):
            graph.invoke({"messages": [human("again", f"h{turn}")]}, thread)
            assert graph.get_state(thread).values["messages"]
        monkeypatch.undo()
        saver.delete_thread(thread["configurable"]["thread_id"])
    assert parsed == []


def test_compact_sql_shortens_every_write_and_its_conversion_is_cached_at_any_length(
    pg_url: str,
) -> None:
    """psycopg converts a query over 4 KB again at every execution; ours are converted
    once whatever their length (``_Statements``), which needs two psycopg internals
    that every release the package accepts has (3.2.0, its floor, included: checked
    in its wheel). The checkpoint put is over 4 KB since it locks its parent (4,367
    bytes in schema ``public``); the turn test above counts no conversion per turn."""
    from langgraph_memory_plus.checkpoint.config import SaverSettings
    from langgraph_memory_plus.checkpoint.postgres.plans import PostgresCheckpointPlans
    from langgraph_memory_plus.drivers import postgres as runner

    assert runner._CACHING
    plans = PostgresCheckpointPlans("public", SaverSettings.build(None, None))
    for payload in (plans._put_payload, plans._writes_payload):
        for fast in (True, False):
            sql = f"WITH {plans._thread_ctes(fast)}, {payload} SELECT 1"
            assert len(sql) > len(compact_sql(sql))
            assert type(compact_sql(sql)) is runner._Sql  # what _Statements caches
    with psycopg.connect(pg_url) as conn:  # and the compacted text still runs
        assert conn.execute(compact_sql("SELECT 1 -- one\n  + 1")).fetchone() == (2,)


def test_a_connection_the_server_closed_is_noticed_without_a_round_trip(pg_url: str) -> None:
    with psycopg.connect(pg_url, autocommit=True) as admin, psycopg.connect(pg_url) as conn:
        conn.execute("SELECT 1").fetchall()
        conn.rollback()
        assert not _closed_by_server(conn)
        pid = conn.info.backend_pid
        admin.execute("SELECT pg_terminate_backend(%s)", [pid])
        deadline = time.monotonic() + 10
        while not _closed_by_server(conn) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert _closed_by_server(conn)


def _reads_after_unfetched_results() -> Any:
    """The shape of a migration: a lock whose row nobody fetches, DDL, time for their
    results to arrive, then a read."""
    yield Query("SELECT pg_advisory_xact_lock(%s)", (42_4242,))
    yield Query("CREATE TEMP TABLE IF NOT EXISTS lgmp_runner_probe (a int)")
    time.sleep(0.02)
    rows = yield Query("SELECT 42", fetch=True)
    return rows


def test_pipeline_mode_fetches_each_statements_own_result(pg_url: str) -> None:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        runner = PgRunner(conn, pipeline=True, owner="test")
        for _ in range(5):
            assert runner.run(_reads_after_unfetched_results()) == [(42,)]


async def test_async_pipeline_mode_fetches_each_statements_own_result(pg_url: str) -> None:
    async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as conn:
        runner = AsyncPgRunner(conn, pipeline=True, owner="test")
        for _ in range(5):
            assert await runner.run(_reads_after_unfetched_results()) == [(42,)]


def test_text_and_bytea_arrays_round_trip_like_lists(pg_url: str) -> None:
    """The put's arrays skip psycopg's list adaptation (see ``drivers.pgarrays``): the same
    values come back as from lists, NULLs, empty arrays and non-ASCII text included."""
    from langgraph_memory_plus.drivers.pgarrays import ByteaArray, TextArray, ready

    cases: list[tuple[Any, list[Any]]] = [
        (TextArray([]), []),
        (TextArray(["a", None, "é ✓", ""]), ["a", None, "é ✓", ""]),
        (ByteaArray([]), []),
        (ByteaArray([b"\x00\xff", None, b""]), [b"\x00\xff", None, b""]),
    ]
    with psycopg.connect(pg_url) as conn:
        ready(conn)
        for value, items in cases:
            cast = "text[]" if isinstance(value, TextArray) else "bytea[]"
            got = conn.execute(
                f"SELECT %b::{cast}, cardinality(%b::{cast}), %s::{cast} = %b::{cast}",
                (value, value, items, value),
            ).fetchone()
            assert got == (items, len(items), True)


async def test_async_pool_runner_rolls_back_failed_and_cancelled_plans(pg_url: str) -> None:
    """A pooled async plan's transaction opens at its first statement that needs one and
    ends with the plan: rolled back when a statement fails or the call is cancelled, and
    the connection goes back to the pool idle, ready for the next plan (one connection:
    every plan below gets the same one)."""
    import asyncio

    from langgraph_memory_plus.drivers.postgres import open_async_pool

    async with open_async_pool(pg_url, min_size=1, max_size=1, prepare_threshold=0) as pool:
        runner = AsyncPgRunner(pool, pipeline=False, owner="test")

        def setup() -> Any:
            yield Query("CREATE TEMP TABLE IF NOT EXISTS lgmp_rt (x int)", standalone=True)

        def write_then(last: str) -> Any:
            yield Query("INSERT INTO lgmp_rt VALUES (1)")
            yield Query(last, fetch=True)

        def standalone_then_fail() -> Any:
            yield Query("INSERT INTO lgmp_rt VALUES (2)", standalone=True)
            raise ValueError("the plan fails after its only statement")

        def count() -> Any:
            rows = yield Query("SELECT count(*), min(x) FROM lgmp_rt", fetch=True)
            return rows[0]

        await runner.run(setup())
        with pytest.raises(psycopg.errors.DivisionByZero):
            await runner.run(write_then("SELECT 1 / 0"))
        assert await runner.run(count()) == (0, None)
        call = asyncio.ensure_future(runner.run(write_then("SELECT pg_sleep(30)")))
        await asyncio.sleep(0.5)
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        assert await runner.run(count()) == (0, None)
        with pytest.raises(ValueError):
            await runner.run(standalone_then_fail())  # autocommit: that row stays
        assert await runner.run(count()) == (1, 2)
        await runner.run(write_then("SELECT 1"))
        assert await runner.run(count()) == (2, 1)
        async with pool.connection() as conn:
            assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE


def _plans() -> tuple[Any, Any, Any]:
    def write_then(last: str) -> Any:
        yield Query("INSERT INTO lgmp_nac (x) VALUES (1)", standalone=True)
        return (yield Query(last, fetch=True))

    def count() -> Any:
        rows = yield Query("SELECT count(*) FROM lgmp_nac", fetch=True, standalone=True)
        return rows[0][0]

    def missing() -> Any:
        yield Query("SELECT * FROM lgmp_no_such_table", fetch=True, standalone=True)

    return write_then, count, missing


@pytest.mark.parametrize("autocommit", [True, False])
def test_pool_runner_commits_or_rolls_back_by_the_connections_mode(
    pg_url: str, autocommit: bool
) -> None:
    """The runner leaves ``with conn`` out on an autocommit connection (a plan commits its
    own transaction); a pool of connections without autocommit still gets each plan
    committed, or rolled back when it fails, and its connections back idle."""
    from psycopg_pool import ConnectionPool

    write_then, count, missing = _plans()
    with psycopg.connect(pg_url, autocommit=True) as admin:
        admin.execute("DROP TABLE IF EXISTS lgmp_nac")
        admin.execute("CREATE TABLE lgmp_nac (x int)")
        try:
            with ConnectionPool(
                pg_url, min_size=1, max_size=1, kwargs={"autocommit": autocommit}
            ) as pool:
                runner = PgRunner(pool, pipeline=False, owner="T")
                assert runner.run(write_then("SELECT 1")) == [(1,)]
                assert admin.execute("SELECT count(*) FROM lgmp_nac").fetchone() == (1,)
                with pytest.raises(psycopg.errors.DivisionByZero):
                    runner.run(write_then("SELECT 1 / 0"))
                # autocommit: the standalone insert stood alone; otherwise one transaction
                assert runner.run(count()) == (2 if autocommit else 1)
                with pytest.raises(SetupRequiredError, match=r"T\.setup\(\)") as raised:
                    runner.run(missing())
                assert isinstance(raised.value.__cause__, psycopg.errors.UndefinedTable)
                with pool.connection() as conn:
                    assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        finally:
            admin.execute("DROP TABLE IF EXISTS lgmp_nac")


@pytest.mark.parametrize("autocommit", [True, False])
async def test_async_pool_runner_commits_or_rolls_back_by_the_connections_mode(
    pg_url: str, autocommit: bool
) -> None:
    """Async :func:`test_pool_runner_commits_or_rolls_back_by_the_connections_mode`."""
    from psycopg_pool import AsyncConnectionPool

    write_then, count, missing = _plans()
    with psycopg.connect(pg_url, autocommit=True) as admin:
        admin.execute("DROP TABLE IF EXISTS lgmp_nac")
        admin.execute("CREATE TABLE lgmp_nac (x int)")
        try:
            async with AsyncConnectionPool(
                pg_url, min_size=1, max_size=1, kwargs={"autocommit": autocommit}, open=False
            ) as pool:
                runner = AsyncPgRunner(pool, pipeline=False, owner="T")
                assert await runner.run(write_then("SELECT 1")) == [(1,)]
                assert admin.execute("SELECT count(*) FROM lgmp_nac").fetchone() == (1,)
                with pytest.raises(psycopg.errors.DivisionByZero):
                    await runner.run(write_then("SELECT 1 / 0"))
                assert await runner.run(count()) == (2 if autocommit else 1)
                with pytest.raises(SetupRequiredError, match=r"T\.setup\(\)") as raised:
                    await runner.run(missing())
                assert isinstance(raised.value.__cause__, psycopg.errors.UndefinedTable)
                async with pool.connection() as conn:
                    assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        finally:
            admin.execute("DROP TABLE IF EXISTS lgmp_nac")
