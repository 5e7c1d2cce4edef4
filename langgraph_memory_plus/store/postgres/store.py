"""``PostgresStore`` and ``AsyncPostgresStore``: thin drivers over the shared plans.

All behaviour lives in :mod:`.plans` (SQL and decoding) and the shared store core
(:mod:`..base`); these classes only pair the plans with the PostgreSQL driver mixins of
:mod:`langgraph_memory_plus._pgdriver`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langgraph.store.base import IndexConfig, TTLConfig
from psycopg import AsyncConnection, Connection
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from ..._pgdriver import PgAsyncDriver, PgSyncDriver
from ...observability.core import Listener
from ..base import AsyncStore, StoreBase, SyncStore
from .pgvector import VectorBackend
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
        listeners: callables handed a :mod:`~langgraph_memory_plus.observability` event
            after every operation (``add_listener`` / ``remove_listener`` later).
        pipeline: send each batch's statements in pipeline mode.
        vector_backend: how ``search(query=...)`` scores. ``"auto"``: ``setup()``
            installs pgvector where the server has it and allows it (a superuser; or an
            administrator ran ``CREATE EXTENSION vector``), and searches use it where the
            schema is set up for it, else score exactly in SQL. ``"pgvector"``: the same,
            but ``setup()`` and searches raise ``InvalidConfigError`` where pgvector
            cannot be used. ``"exact"``: never pgvector. Both score every candidate
            exactly and rank alike; pgvector is several times faster (in C) and
            computes in single precision (scores agree to about 1e-7).
        hnsw: with pgvector, ``setup()`` also builds an HNSW index (for at most 2000
            ``dims``; on existing rows this takes a while and holds writes back), and a
            search with a query and neither a namespace prefix nor a filter takes its
            page from it: approximate (it may miss items), falling back to the exact
            search where the index cannot fill the page with positive scores. Every
            other search stays exact. Off by default: the index makes every put slower.
    """

    def __init__(
        self,
        conn: AnyConnection,
        *,
        schema: str = DEFAULT_SCHEMA,
        index: IndexConfig | None = None,
        ttl: TTLConfig | None = None,
        max_value_bytes: int | None = None,
        listeners: Sequence[Listener] | None = None,
        pipeline: bool = False,
        vector_backend: VectorBackend = "auto",
        hnsw: bool = False,
    ) -> None:
        self._connect(conn, pipeline)
        super().__init__(index=index, ttl=ttl, max_value_bytes=max_value_bytes, listeners=listeners)
        self._plans = PostgresStorePlans(
            schema,
            dims=None if self.index is None else self.index.dims,
            vector_backend=vector_backend,
            hnsw=hnsw,
        )
        self.conn = conn

    def _connect(self, conn: object, pipeline: bool) -> None:
        raise NotImplementedError


class PostgresStore(PgSyncDriver, _PostgresOptions, SyncStore):
    """A LangGraph store on PostgreSQL (blocking; its async methods use a worker thread).

    Takes a ``psycopg.Connection`` or ``psycopg_pool.ConnectionPool``; see
    :class:`_PostgresOptions` for the options, and ``from_conn_string(url, pool_min_size=1,
    pool_max_size=10, prepare_threshold=0, **options)`` to open a pool with it.
    """


class AsyncPostgresStore(PgAsyncDriver, _PostgresOptions, AsyncStore):
    """The asyncio twin of :class:`PostgresStore`, on ``AsyncConnection`` or a pool.

    Its sync methods may be called from other threads while its event loop runs (tools
    running in a thread pool do this).
    """
