"""PostgreSQL: our statements' placeholder conversion is done once, whatever their length.

psycopg caches the conversion of a query's placeholders only for queries of up to 4 KB;
the checkpoint put is just under that in schema ``public`` and over it with a schema name
of 9 characters or more, or with transcripts on: converted again at every put (~90 us).
"""

from __future__ import annotations

import uuid
from typing import Any

import psycopg
import pytest
from psycopg import _queries as pg_queries

pytestmark = pytest.mark.storage


@pytest.mark.parametrize("mode", ["sync", "async", "sync pipeline", "async pipeline"])
def test_a_long_put_statement_is_converted_once_not_every_put(
    pg_url: str, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    import asyncio

    from langgraph.checkpoint.base import empty_checkpoint

    from langgraph_memory_plus.checkpoint.postgres import AsyncPostgresSaver, PostgresSaver
    from langgraph_memory_plus.drivers import postgres as driver

    schema = f"lgmp_statement_cache_{uuid.uuid4().hex[:8]}"  # 29 characters
    lengths: list[int] = []
    convert = pg_queries._query2pg_nocache

    def counting(query: bytes, encoding: str) -> Any:
        lengths.append(len(query))
        return convert(query, encoding)

    driver._converted.cache_clear()
    monkeypatch.setattr(pg_queries, "_query2pg_nocache", counting)

    def configs(n: int) -> list[tuple[Any, Any]]:
        out = []
        for i in range(n):
            checkpoint = empty_checkpoint()
            config = {"configurable": {"thread_id": f"t{i}", "checkpoint_ns": ""}}
            out.append((config, checkpoint))
        return out

    options: dict[str, Any] = {"schema": schema, "pipeline": mode.endswith("pipeline")}
    try:
        if mode.startswith("async"):

            async def run() -> int:
                async with AsyncPostgresSaver.from_conn_string(pg_url, **options) as saver:
                    await saver.setup()
                    lengths.clear()
                    for config, checkpoint in configs(20):
                        await saver.aput(config, checkpoint, {"source": "input", "step": -1}, {})
                    return len([t async for t in saver.alist(None)])

            assert asyncio.run(run()) == 20
        else:
            with PostgresSaver.from_conn_string(pg_url, **options) as saver:
                saver.setup()
                lengths.clear()
                for config, checkpoint in configs(20):
                    saver.put(config, checkpoint, {"source": "input", "step": -1}, {})
                assert len(list(saver.list(None))) == 20
    finally:
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    long = [n for n in lengths if n > pg_queries.MAX_CACHED_STATEMENT_LENGTH]
    # the put statement is over psycopg's limit, and converted once for 20 puts
    assert len(long) == 1, lengths


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_pipeline_mode_after_setup_migrated_a_fresh_schema_keeps_its_statements(
    pg_url: str, mode: str
) -> None:
    """``setup()`` of a new schema in pipeline mode runs ``ALTER``/``DROP`` statements,
    whose results make psycopg forget its prepared statements and queue a ``DEALLOCATE
    ALL``; psycopg read them late and sent it after the next put's prepare, so the
    second put failed (``InvalidSqlStatementName: prepared statement "_pg3_32" does not
    exist``, 1 of 1 runs). Also with setup run twice, and a store beside it."""
    import asyncio

    from langgraph.checkpoint.base import empty_checkpoint

    from langgraph_memory_plus.checkpoint.postgres import AsyncPostgresSaver, PostgresSaver

    schema = f"lgmp_pipe_{uuid.uuid4().hex[:8]}"
    options: dict[str, Any] = {"schema": schema, "pipeline": True, "pool_max_size": 1}

    def config(i: int) -> Any:
        return {"configurable": {"thread_id": f"t{i}", "checkpoint_ns": ""}}

    meta: Any = {"source": "input", "step": -1}
    try:
        if mode == "async":

            async def run() -> int:
                async with AsyncPostgresSaver.from_conn_string(pg_url, **options) as saver:
                    await saver.setup()
                    for i in range(5):
                        await saver.aput(config(i), empty_checkpoint(), meta, {})
                    await saver.setup()
                    for i in range(5, 10):
                        await saver.aput(config(i), empty_checkpoint(), meta, {})
                    return len([t async for t in saver.alist(None)])

            assert asyncio.run(run()) == 10
        else:
            with PostgresSaver.from_conn_string(pg_url, **options) as saver:
                saver.setup()
                for i in range(5):
                    saver.put(config(i), empty_checkpoint(), meta, {})
                saver.setup()
                for i in range(5, 10):
                    saver.put(config(i), empty_checkpoint(), meta, {})
                assert len(list(saver.list(None))) == 10
    finally:
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


@pytest.mark.parametrize("pipeline", [False, True], ids=["plain", "pipeline"])
def test_the_connections_cursor_class_still_sees_every_statement(
    pg_url: str, pipeline: bool
) -> None:
    """The cached conversion comes from a subclass of the connection's own cursor class:
    an application's cursor factory (tracing, logging) still runs for every statement."""
    from langgraph.checkpoint.base import empty_checkpoint

    from langgraph_memory_plus.checkpoint.postgres import PostgresSaver

    seen: list[str] = []

    class Logging(psycopg.Cursor[Any]):
        def execute(self, query: Any, params: Any = None, **kwargs: Any) -> Any:
            seen.append(str(query)[:20])
            return super().execute(query, params, **kwargs)

    with psycopg.connect(pg_url, autocommit=True, cursor_factory=Logging) as conn:
        saver = PostgresSaver(conn, pipeline=pipeline)
        saver.setup()
        config: Any = {"configurable": {"thread_id": uuid.uuid4().hex, "checkpoint_ns": ""}}
        saved = saver.put(config, empty_checkpoint(), {"source": "input", "step": -1}, {})
        got = saver.get_tuple(saved)
        assert got is not None and got.config == saved
        saver.delete_thread(config["configurable"]["thread_id"])
    assert any(s.startswith("WITH cur AS") for s in seen), seen
