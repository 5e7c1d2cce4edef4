"""``SqliteStore`` and ``AsyncSqliteStore``: thin drivers over the shared plans.

All behaviour lives in :mod:`.plans` and the shared store core (:mod:`..base`); these
classes only pair the plans with the SQLite driver mixins of
:mod:`langgraph_memory_plus.drivers.sqlite` (the async class runs each transaction on a worker
thread).
"""

from __future__ import annotations

import os
import sqlite3
from contextlib import AbstractAsyncContextManager, AbstractContextManager
from typing import ClassVar

from typing_extensions import Self, Unpack

from ...drivers.options import check_options
from ...drivers.sqlite import SqliteAsyncDriver, SqliteConnectOptions, SqlitePool, SqliteSyncDriver
from ..base import AsyncStore, StoreBase, StoreOptions, SyncStore
from .plans import SqliteStorePlans
from .schema import MIGRATIONS


class SqliteStoreOpenOptions(StoreOptions, SqliteConnectOptions, total=False):
    """``from_conn_string``'s keyword options: the file's and the store's."""


class _SqliteOptions(StoreBase):
    """The constructor both SQLite stores share.

    Items returned are :class:`~langgraph_memory_plus.store.VersionedItem` (``.version``),
    for ``put(..., expected_version=item.version)``.

    Args:
        conn: a :class:`~langgraph_memory_plus.drivers.sqlite.SqlitePool` (what
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

    _options: ClassVar[type] = StoreOptions
    schema_version: ClassVar[int] = len(MIGRATIONS) - 1
    """The schema version ``setup()`` brings the tables to (what the CLI reports)."""

    def __init__(
        self, conn: sqlite3.Connection | SqlitePool, **options: Unpack[StoreOptions]
    ) -> None:
        check_options(type(self).__name__, options, StoreOptions)
        self._connect(conn)
        self._plans = SqliteStorePlans()
        super().__init__(
            index=options.get("index"),
            ttl=options.get("ttl"),
            max_value_bytes=options.get("max_value_bytes"),
            listeners=options.get("listeners"),
            encryption=options.get("encryption"),
        )
        self.conn = conn

    def _connect(self, conn: object) -> None:
        raise NotImplementedError


class SqliteStore(SqliteSyncDriver, _SqliteOptions, SyncStore):
    """A LangGraph store on a SQLite file (blocking; its async methods use a worker thread).

    ``SqliteStore.from_conn_string("memory.db", pool_max_size=4, busy_timeout=30,
    **options)`` opens the file (a path, ``":memory:"`` or a ``sqlite:///`` URL) and closes
    it afterwards; see :class:`_SqliteOptions` for the options.
    """

    @classmethod
    def from_conn_string(
        cls, conn_string: str | os.PathLike[str], **options: Unpack[SqliteStoreOpenOptions]
    ) -> AbstractContextManager[Self]:
        """Open the file (a path, ``":memory:"`` or a ``sqlite:///`` URL) and a store on it;
        close both after. An unknown option is an ``InvalidConfigError``."""
        return cls._open(conn_string, options)


class AsyncSqliteStore(SqliteAsyncDriver, _SqliteOptions, AsyncStore):
    """The asyncio twin of :class:`SqliteStore`: every transaction runs on a worker thread,
    so the event loop never waits on the disk or on another process's write."""

    @classmethod
    def from_conn_string(
        cls, conn_string: str | os.PathLike[str], **options: Unpack[SqliteStoreOpenOptions]
    ) -> AbstractAsyncContextManager[Self]:
        """Async :meth:`SqliteStore.from_conn_string`: the same arguments."""
        return cls._open(conn_string, options)
