"""``SqliteSaver`` and ``AsyncSqliteSaver``: thin drivers over the shared plans.

All behaviour lives in :mod:`.plans` (SQL and decoding) and the shared saver core; these
classes only pair the plans with the SQLite driver mixins of
:mod:`langgraph_memory_plus.drivers.sqlite`. The async class runs each plan on a worker thread, as
``sqlite3`` only blocks; see that module for why this is the whole of "async" here.
"""

from __future__ import annotations

import os
import sqlite3
from contextlib import AbstractAsyncContextManager, AbstractContextManager
from typing import ClassVar

from typing_extensions import Self, Unpack

from ...drivers.options import check_options, split_options
from ...drivers.sqlite import SqliteAsyncDriver, SqliteConnectOptions, SqlitePool, SqliteSyncDriver
from ..config import SaverOptions
from ..context import ContextKeysSaver
from ..saver import AsyncDriver, SyncDriver
from .plans import CHECKPOINT_MIGRATIONS, SqliteCheckpointPlans


class SqliteSaverOpenOptions(SaverOptions, SqliteConnectOptions, total=False):
    """``from_conn_string``'s keyword options: the file's and the saver's."""


class _SqliteOptions(ContextKeysSaver):
    """The constructor both SQLite savers share.

    Args:
        conn: a :class:`~langgraph_memory_plus.drivers.sqlite.SqlitePool` (what
            ``from_conn_string`` opens: several connections, WAL mode, a busy timeout), or
            your own ``sqlite3.Connection``, used by one call at a time (open it with
            ``check_same_thread=False``: async methods run on worker threads). Inside your
            connection's open transaction a call runs in a savepoint and you commit.
        serde: the serializer for checkpoint values; LangGraph's by default.
        ttl: ``{"default_ttl": minutes, "refresh_on_read": bool}``: threads expire that
            long after their last write (or read). Expired threads are never returned;
            ``sweep_expired()`` reclaims their rows.
        thread_index_keys: metadata keys the thread index indexes (``["user_id"]`` by
            default); ``saver.threads.search(metadata={key: ...})`` reads their index.
        transcripts: keep each thread's clean chat history (``saver.threads.transcript``),
            apart from its checkpoints; ``transcript_ttl`` minutes (``None``: forever).
        keep_last: keep only the newest N checkpoints per thread and namespace
            (``1`` gives a "shallow" saver).
        listeners: callables handed a :mod:`~langgraph_memory_plus.observability` event
            after every operation (``add_listener`` / ``remove_listener`` later).
    """

    _options: ClassVar[type] = SaverOptions
    schema_version: ClassVar[int] = len(CHECKPOINT_MIGRATIONS) - 1
    """The schema version ``setup()`` brings the tables to (what the CLI reports)."""

    def __init__(
        self, conn: sqlite3.Connection | SqlitePool, **options: Unpack[SaverOptions]
    ) -> None:
        check_options(type(self).__name__, options, SaverOptions)
        self._connect(conn)
        super().__init__(**split_options(options, SaverOptions)[0])
        self.conn = conn
        self._plans = SqliteCheckpointPlans(self.settings)

    def _connect(self, conn: object) -> None:
        raise NotImplementedError


class SqliteSaver(SqliteSyncDriver, _SqliteOptions, SyncDriver):
    """A LangGraph checkpointer on a SQLite file (blocking; async methods use a thread).

    ``SqliteSaver.from_conn_string("memory.db", pool_max_size=4, busy_timeout=30,
    **options)`` opens the file (a path, ``":memory:"`` or a ``sqlite:///`` URL) and
    closes it afterwards; see :class:`_SqliteOptions` for the options. Several processes
    may use one file at once.
    """

    @classmethod
    def from_conn_string(
        cls, conn_string: str | os.PathLike[str], **options: Unpack[SqliteSaverOpenOptions]
    ) -> AbstractContextManager[Self]:
        """Open the file (a path, ``":memory:"`` or a ``sqlite:///`` URL) and a saver on it;
        close both after. An unknown option is an ``InvalidConfigError``."""
        return cls._open(conn_string, options)


class AsyncSqliteSaver(SqliteAsyncDriver, _SqliteOptions, AsyncDriver):
    """The asyncio twin of :class:`SqliteSaver`: every call runs on a worker thread, so
    the event loop never waits on the disk or on another process's write."""

    @classmethod
    def from_conn_string(
        cls, conn_string: str | os.PathLike[str], **options: Unpack[SqliteSaverOpenOptions]
    ) -> AbstractAsyncContextManager[Self]:
        """Async :meth:`SqliteSaver.from_conn_string`: the same arguments."""
        return cls._open(conn_string, options)
