"""``PostgresStore`` and ``AsyncPostgresStore``: thin drivers over the shared plans.

All behaviour lives in :mod:`.plans` (SQL and decoding) and the shared store core
(:mod:`..base`); these classes only pair the plans with the PostgreSQL driver mixins of
:mod:`langgraph_memory_plus.drivers.pgdriver`.
"""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager, AbstractContextManager
from typing import Any, ClassVar

import psycopg
import psycopg.errors
from psycopg import AsyncConnection, Connection
from psycopg_pool import AsyncConnectionPool, ConnectionPool
from typing_extensions import Self, Unpack

from ...drivers.options import check_options
from ...drivers.pgdriver import PgAsyncDriver, PgSyncDriver, PostgresConnectOptions
from ...drivers.postgres import SchemaCheck
from ..base import AsyncStore, StoreBase, StoreOptions, SyncStore
from .pgvector import VectorBackend
from .plans import PostgresStorePlans
from .schema import MIGRATIONS

DEFAULT_SCHEMA = "public"

AnyConnection = (
    Connection[Any] | ConnectionPool[Any] | AsyncConnection[Any] | AsyncConnectionPool[Any]
)


class PostgresStoreOptions(StoreOptions, total=False):
    """The keyword options of the PostgreSQL stores' constructors."""

    schema: str
    pipeline: bool
    vector_backend: VectorBackend
    hnsw: bool


class PostgresStoreOpenOptions(PostgresStoreOptions, PostgresConnectOptions, total=False):
    """``from_conn_string``'s keyword options: the pool's and the store's."""


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

    _options: ClassVar[type] = PostgresStoreOptions
    schema_version: ClassVar[int] = len(MIGRATIONS) - 1
    """The schema version ``setup()`` brings the tables to (what the CLI reports)."""

    def __init__(self, conn: AnyConnection, **options: Unpack[PostgresStoreOptions]) -> None:
        check_options(type(self).__name__, options, PostgresStoreOptions)
        super().__init__(
            index=options.get("index"),
            ttl=options.get("ttl"),
            max_value_bytes=options.get("max_value_bytes"),
            listeners=options.get("listeners"),
            encryption=options.get("encryption"),
        )
        self._plans = PostgresStorePlans(
            options.get("schema", DEFAULT_SCHEMA),
            dims=None if self.index is None else self.index.dims,
            vector_backend=options.get("vector_backend", "auto"),
            hnsw=options.get("hnsw", False),
        )
        self._connect(conn, options.get("pipeline", False), self._plans.version)
        self.conn = conn

    def _connect(self, conn: object, pipeline: bool, schema: SchemaCheck) -> None:
        raise NotImplementedError


class PostgresStore(PgSyncDriver, _PostgresOptions, SyncStore):
    """A LangGraph store on PostgreSQL (blocking; its async methods use a worker thread).

    Takes a ``psycopg.Connection`` or ``psycopg_pool.ConnectionPool``; see
    :class:`_PostgresOptions` for the options, and ``from_conn_string(url, pool_min_size=1,
    pool_max_size=10, prepare_threshold=0, **options)`` to open a pool with it.
    """

    @classmethod
    def from_conn_string(
        cls, conn_string: str, **options: Unpack[PostgresStoreOpenOptions]
    ) -> AbstractContextManager[Self]:
        """Open a pool for ``conn_string`` and a store on it; close both after.

        A server that cannot be reached, or refuses the login, is a
        ``MemoryConnectionError`` within seconds; an unknown option an
        ``InvalidConfigError``, before anything connects.
        """
        return cls._open(conn_string, options)


class AsyncPostgresStore(PgAsyncDriver, _PostgresOptions, AsyncStore):
    """The asyncio twin of :class:`PostgresStore`, on ``AsyncConnection`` or a pool.

    Its sync methods may be called from other threads while its event loop runs (tools
    running in a thread pool do this).

    Concurrent async calls share transactions (see :mod:`..merging`): at most the pool's
    ``max_size`` run at once, so a burst of calls never waits at the pool.
    """

    _merges_calls = True

    def _merge_slots(self) -> int:
        conn = self._runner.conn
        return conn.max_size if isinstance(conn, AsyncConnectionPool) else 1

    def _shared_error(self, exc: Exception) -> bool:
        # a lost connection or an unreachable server; not a cancelled (timed-out) statement
        lost = isinstance(exc, psycopg.OperationalError) and not isinstance(
            exc, psycopg.errors.QueryCanceled
        )
        return lost or super()._shared_error(exc)

    @classmethod
    def from_conn_string(
        cls, conn_string: str, **options: Unpack[PostgresStoreOpenOptions]
    ) -> AbstractAsyncContextManager[Self]:
        """Async :meth:`PostgresStore.from_conn_string`: the same options, an async pool."""
        return cls._open(conn_string, options)
