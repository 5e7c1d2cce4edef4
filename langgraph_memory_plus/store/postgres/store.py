"""``PostgresStore`` and ``AsyncPostgresStore``: thin drivers over the shared plans.

All behaviour lives in :mod:`.plans` (SQL and decoding) and the shared store core
(:mod:`..base`); these classes only pair the plans with the PostgreSQL driver mixins of
:mod:`langgraph_memory_plus._pgdriver`.
"""

from __future__ import annotations

from typing import Any

from langgraph.store.base import IndexConfig, TTLConfig
from psycopg import AsyncConnection, Connection
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from ..._pgdriver import PgAsyncDriver, PgSyncDriver
from ..base import AsyncStore, StoreBase, SyncStore
from .plans import PostgresStorePlans

DEFAULT_SCHEMA = "public"

AnyConnection = (
    Connection[Any] | ConnectionPool[Any] | AsyncConnection[Any] | AsyncConnectionPool[Any]
)


class _PostgresOptions(StoreBase):
    """The constructor both PostgreSQL stores share.

    Items returned are :class:`~langgraph_memory_plus.store.VersionedItem` (``.version``),
    for ``put(..., expected_version=item.version)``.

    Args:
        conn: a connection or a pool (``psycopg`` / ``psycopg_pool``; async ones for the
            async class). Prefer a pool: calls then run concurrently and a broken
            connection is replaced.
        schema: the PostgreSQL schema holding the tables (created by ``setup()``).
        index: ``{"dims": N, "embed": ..., "fields": [...]}`` for semantic search.
        ttl: LangGraph's ``TTLConfig`` (``default_ttl`` and ``sweep_interval_minutes`` in
            minutes, ``refresh_on_read``). Expired items are never returned, even before a
            sweep.
        max_value_bytes: refuse values larger than this (as JSON text) before writing;
            at most, and by default, 64 MiB.
        pipeline: send each batch's statements in pipeline mode.
    """

    def __init__(
        self,
        conn: AnyConnection,
        *,
        schema: str = DEFAULT_SCHEMA,
        index: IndexConfig | None = None,
        ttl: TTLConfig | None = None,
        max_value_bytes: int | None = None,
        pipeline: bool = False,
    ) -> None:
        self._connect(conn, pipeline)
        self._plans = PostgresStorePlans(schema)
        super().__init__(index=index, ttl=ttl, max_value_bytes=max_value_bytes)
        self.conn = conn

    def _connect(self, conn: object, pipeline: bool) -> None:
        raise NotImplementedError


class PostgresStore(PgSyncDriver, _PostgresOptions, SyncStore):
    """A LangGraph store on PostgreSQL (blocking; its async methods use a worker thread).

    Takes a ``psycopg.Connection`` or ``psycopg_pool.ConnectionPool``; see
    :class:`_PostgresOptions` for the options, and ``from_conn_string(url, pool_min_size=1,
    pool_max_size=10, prepare_threshold=5, **options)`` to open a pool with it.
    """


class AsyncPostgresStore(PgAsyncDriver, _PostgresOptions, AsyncStore):
    """The asyncio twin of :class:`PostgresStore`, on ``AsyncConnection`` or a pool.

    Its sync methods may be called from other threads while its event loop runs (tools
    running in a thread pool do this).
    """
