"""``PostgresSaver`` and ``AsyncPostgresSaver``: thin drivers over the shared plans.

All behaviour lives in :mod:`.plans` (SQL and decoding) and the shared saver core; these
classes only pair the plans with a runner from :mod:`langgraph_memory_plus._postgres`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any, TypeVar

from langgraph.checkpoint.serde.base import SerializerProtocol
from psycopg import AsyncConnection, Connection
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from ..._plan import Plan
from ..._postgres import AsyncPgRunner, PgRunner, open_async_pool, open_pool
from ..config import TTLConfig
from ..saver import AsyncDriver, CheckpointSaverBase, SyncDriver
from .plans import PostgresCheckpointPlans

R = TypeVar("R")

DEFAULT_SCHEMA = "public"

AnyConnection = (
    Connection[Any] | ConnectionPool[Any] | AsyncConnection[Any] | AsyncConnectionPool[Any]
)


class _PostgresOptions(CheckpointSaverBase):
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
        keep_last: keep only the newest N checkpoints per thread and namespace
            (``1`` gives a "shallow" saver).
        pipeline: send each operation's statements in pipeline mode.
    """

    def __init__(
        self,
        conn: AnyConnection,
        *,
        schema: str = DEFAULT_SCHEMA,
        serde: SerializerProtocol | None = None,
        ttl: TTLConfig | None = None,
        keep_last: int | None = None,
        pipeline: bool = False,
    ) -> None:
        self._connect(conn, pipeline)
        super().__init__(serde=serde, ttl=ttl, keep_last=keep_last)
        self.conn = conn
        self._plans = PostgresCheckpointPlans(schema, self.settings)

    def _connect(self, conn: AnyConnection, pipeline: bool) -> None:
        raise NotImplementedError


class PostgresSaver(_PostgresOptions, SyncDriver):
    """A LangGraph checkpointer on PostgreSQL (blocking; its async methods use a thread).

    Takes a ``psycopg.Connection`` or ``psycopg_pool.ConnectionPool``; see
    :class:`_PostgresOptions` for the options.
    """

    def _connect(self, conn: AnyConnection, pipeline: bool) -> None:
        self._runner = PgRunner(conn, pipeline=pipeline, owner=type(self).__name__)

    @classmethod
    @contextmanager
    def from_conn_string(
        cls,
        conn_string: str,
        *,
        pool_min_size: int = 1,
        pool_max_size: int = 10,
        prepare_threshold: int | None = 5,
        **options: Any,
    ) -> Iterator[PostgresSaver]:
        """Open a connection pool for ``conn_string`` and a saver on it; close both after.

        ``prepare_threshold=None`` turns off server-side prepared statements, as
        PgBouncer in transaction mode requires. ``options`` are the constructor's.
        """
        with open_pool(
            conn_string,
            min_size=pool_min_size,
            max_size=pool_max_size,
            prepare_threshold=prepare_threshold,
        ) as pool:
            yield cls(pool, **options)

    def setup(self) -> None:
        """Create or migrate the tables; safe to run repeatedly and concurrently."""
        self._run(self._plans.setup())

    def _run(self, plan: Plan[Any, R]) -> R:
        return self._runner.run(plan)


class AsyncPostgresSaver(_PostgresOptions, AsyncDriver):
    """The asyncio twin of :class:`PostgresSaver`, on ``AsyncConnection`` or a pool.

    Its sync methods may be called from other threads while its event loop runs.
    """

    def _connect(self, conn: AnyConnection, pipeline: bool) -> None:
        self._runner = AsyncPgRunner(conn, pipeline=pipeline, owner=type(self).__name__)

    @classmethod
    @asynccontextmanager
    async def from_conn_string(
        cls,
        conn_string: str,
        *,
        pool_min_size: int = 1,
        pool_max_size: int = 10,
        prepare_threshold: int | None = 5,
        **options: Any,
    ) -> AsyncIterator[AsyncPostgresSaver]:
        """Async :meth:`PostgresSaver.from_conn_string`."""
        async with open_async_pool(
            conn_string,
            min_size=pool_min_size,
            max_size=pool_max_size,
            prepare_threshold=prepare_threshold,
        ) as pool:
            yield cls(pool, **options)

    async def setup(self) -> None:
        """Create or migrate the tables; safe to run repeatedly and concurrently."""
        await self._arun(self._plans.setup())

    async def _arun(self, plan: Plan[Any, R]) -> R:
        return await self._runner.run(plan)
