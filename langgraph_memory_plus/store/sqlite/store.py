"""``SqliteStore`` and ``AsyncSqliteStore``: thin drivers over the shared plans.

All behaviour lives in :mod:`.plans` and the shared store core (:mod:`..base`); these
classes only pair the plans with the SQLite driver mixins of
:mod:`langgraph_memory_plus._sqlite` (the async class runs each transaction on a worker
thread).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from langgraph.store.base import IndexConfig, TTLConfig

from ..._sqlite import SqliteAsyncDriver, SqlitePool, SqliteSyncDriver
from ...observability.core import Listener
from ..base import AsyncStore, StoreBase, SyncStore
from .plans import SqliteStorePlans


class _SqliteOptions(StoreBase):
    """The constructor both SQLite stores share.

    Items returned are :class:`~langgraph_memory_plus.store.VersionedItem` (``.version``),
    for ``put(..., expected_version=item.version)``.

    Args:
        conn: a :class:`~langgraph_memory_plus._sqlite.SqlitePool` (what
            ``from_conn_string`` opens), or your own ``sqlite3.Connection`` (open it with
            ``check_same_thread=False``), used by one batch at a time.
        index: ``{"dims": N, "embed": ..., "fields": [...]}`` for semantic search, scored
            exactly (cosine) over the items that pass the filter.
        ttl: LangGraph's ``TTLConfig`` (``default_ttl`` and ``sweep_interval_minutes`` in
            minutes, ``refresh_on_read``). Expired items are never returned, even before a
            sweep.
        max_value_bytes: refuse values larger than this (as JSON text) before writing;
            at most, and by default, 64 MiB.
        listeners: callables handed a :mod:`~langgraph_memory_plus.observability` event
            after every operation (``add_listener`` / ``remove_listener`` later).
    """

    def __init__(
        self,
        conn: sqlite3.Connection | SqlitePool,
        *,
        index: IndexConfig | None = None,
        ttl: TTLConfig | None = None,
        max_value_bytes: int | None = None,
        listeners: Sequence[Listener] | None = None,
    ) -> None:
        self._connect(conn)
        self._plans = SqliteStorePlans()
        super().__init__(index=index, ttl=ttl, max_value_bytes=max_value_bytes, listeners=listeners)
        self.conn = conn

    def _connect(self, conn: object) -> None:
        raise NotImplementedError


class SqliteStore(SqliteSyncDriver, _SqliteOptions, SyncStore):
    """A LangGraph store on a SQLite file (blocking; its async methods use a worker thread).

    ``SqliteStore.from_conn_string("memory.db", pool_max_size=4, busy_timeout=30,
    **options)`` opens the file (a path, ``":memory:"`` or a ``sqlite:///`` URL) and closes
    it afterwards; see :class:`_SqliteOptions` for the options.
    """


class AsyncSqliteStore(SqliteAsyncDriver, _SqliteOptions, AsyncStore):
    """The asyncio twin of :class:`SqliteStore`: every transaction runs on a worker thread,
    so the event loop never waits on the disk or on another process's write."""
