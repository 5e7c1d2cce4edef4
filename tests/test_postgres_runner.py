"""The PostgreSQL runner shared by savers and stores: statement text and pooled connections."""

from __future__ import annotations

import time

import psycopg
import pytest

from langgraph_memory_plus._postgres import _closed_by_server, compact_sql

pytestmark = pytest.mark.storage


def test_compact_sql_removes_layout_but_keeps_literals_identifiers_and_bodies() -> None:
    sql = """
        SELECT 'two  spaces -- not a comment', "odd  name"  -- it's a comment
        FROM t
        WHERE x = 'it''s' AND body = $fn$ keep
            -- this $fn$ = 1
    """
    assert compact_sql(sql) == (
        "SELECT 'two  spaces -- not a comment', \"odd  name\" FROM t "
        "WHERE x = 'it''s' AND body = $fn$ keep\n            -- this $fn$ = 1"
    )


def test_compact_sql_keeps_every_statement_of_the_package_under_psycopgs_cache_limit(
    pg_url: str,
) -> None:
    """psycopg re-parses statements over 4 KB at every execution."""
    from psycopg._queries import MAX_CACHED_STATEMENT_LENGTH

    from langgraph_memory_plus.checkpoint.config import SaverSettings
    from langgraph_memory_plus.checkpoint.postgres.plans import PostgresCheckpointPlans

    plans = PostgresCheckpointPlans("public", SaverSettings())
    for payload in (plans._put_payload, plans._writes_payload):
        for fast in (True, False):
            sql = f"WITH {plans._thread_ctes(fast)}, {payload} SELECT 1"
            assert len(sql) > len(compact_sql(sql))
            assert len(compact_sql(sql)) <= MAX_CACHED_STATEMENT_LENGTH
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
