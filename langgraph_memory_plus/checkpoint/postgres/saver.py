"""``PostgresSaver`` and ``AsyncPostgresSaver``: thin drivers over the shared plans.

All behaviour lives in :mod:`.plans` (SQL and decoding) and the shared saver core; these
classes only pair the plans with the PostgreSQL driver mixins of
:mod:`langgraph_memory_plus.drivers.pgdriver`.
"""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager, AbstractContextManager
from typing import Any, ClassVar

from psycopg import AsyncConnection, Connection
from psycopg_pool import AsyncConnectionPool, ConnectionPool
from typing_extensions import Self, Unpack

from ...drivers.options import check_options, split_options
from ...drivers.pgdriver import PgAsyncDriver, PgSyncDriver, PostgresConnectOptions
from ...drivers.postgres import SchemaCheck
from ..config import SaverOptions
from ..context import ContextKeysSaver
from ..saver import AsyncDriver, SyncDriver
from .plans import CHECKPOINT_MIGRATIONS, PostgresCheckpointPlans

DEFAULT_SCHEMA = "public"

AnyConnection = (
    Connection[Any] | ConnectionPool[Any] | AsyncConnection[Any] | AsyncConnectionPool[Any]
)


class PostgresSaverOptions(SaverOptions, total=False):
    """The keyword options of the PostgreSQL savers' constructors."""

    schema: str
    pipeline: bool


class PostgresSaverOpenOptions(PostgresSaverOptions, PostgresConnectOptions, total=False):
    """``from_conn_string``'s keyword options: the pool's and the saver's."""


class _PostgresOptions(ContextKeysSaver):
    """The constructor both PostgreSQL savers share.

    Args:
        conn: a connection or a pool (``psycopg`` / ``psycopg_pool``; async ones for the
            async class). Prefer a pool: calls then run concurrently and a broken
            connection is replaced.
        schema: the PostgreSQL schema holding the tables (created by ``setup()``).
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
        pipeline: send each operation's statements in pipeline mode.
    """

    _options: ClassVar[type] = PostgresSaverOptions
    schema_version: ClassVar[int] = len(CHECKPOINT_MIGRATIONS) - 1
    """The schema version ``setup()`` brings the tables to (what the CLI reports)."""

    def __init__(self, conn: AnyConnection, **options: Unpack[PostgresSaverOptions]) -> None:
        check_options(type(self).__name__, options, PostgresSaverOptions)
        super().__init__(**split_options(options, SaverOptions)[0])
        self._plans = PostgresCheckpointPlans(options.get("schema", DEFAULT_SCHEMA), self.settings)
        self._connect(conn, options.get("pipeline", False), self._plans.version)
        self.conn = conn

    def _connect(self, conn: object, pipeline: bool, schema: SchemaCheck) -> None:
        raise NotImplementedError


class PostgresSaver(PgSyncDriver, _PostgresOptions, SyncDriver):
    """A LangGraph checkpointer on PostgreSQL (blocking; its async methods use a thread).

    Takes a ``psycopg.Connection`` or ``psycopg_pool.ConnectionPool``; see
    :class:`_PostgresOptions` for the options. ``from_conn_string(url, pool_min_size=1,
    pool_max_size=10, prepare_threshold=0, **options)`` opens and closes a pool
    (``prepare_threshold=None`` for PgBouncer in transaction mode).
    """

    @classmethod
    def from_conn_string(
        cls, conn_string: str, **options: Unpack[PostgresSaverOpenOptions]
    ) -> AbstractContextManager[Self]:
        """Open a pool for ``conn_string`` and a saver on it; close both after.

        A server that cannot be reached, or refuses the login, is a
        ``MemoryConnectionError`` within seconds; an unknown option an
        ``InvalidConfigError``, before anything connects.
        """
        return cls._open(conn_string, options)

    def setup(self) -> None:
        """Create or migrate the tables; safe to run repeatedly and concurrently."""
        self._run(self._plans.setup())


class AsyncPostgresSaver(PgAsyncDriver, _PostgresOptions, AsyncDriver):
    """The asyncio twin of :class:`PostgresSaver`, on ``AsyncConnection`` or a pool.

    Its sync methods may be called from other threads while its event loop runs.
    """

    @classmethod
    def from_conn_string(
        cls, conn_string: str, **options: Unpack[PostgresSaverOpenOptions]
    ) -> AbstractAsyncContextManager[Self]:
        """Async :meth:`PostgresSaver.from_conn_string`: the same options, an async pool."""
        return cls._open(conn_string, options)

    async def setup(self) -> None:
        """Create or migrate the tables; safe to run repeatedly and concurrently."""
        await self._arun(self._plans.setup())
