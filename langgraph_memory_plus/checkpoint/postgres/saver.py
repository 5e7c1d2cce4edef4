"""``PostgresSaver`` and ``AsyncPostgresSaver``: thin drivers over the shared plans.

Each runs a plan inside one transaction on one connection: borrowed from a pool (so
concurrent calls run concurrently, one connection each) or, for a single connection,
taken under a lock (a connection runs one transaction at a time). ``conn.transaction()``
becomes a savepoint when the caller's connection is already inside a transaction.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import AsyncExitStack, ExitStack, asynccontextmanager, contextmanager
from typing import Any, TypeVar

from langgraph.checkpoint.serde.base import SerializerProtocol
from psycopg import AsyncConnection, AsyncCursor, Connection, Cursor
from psycopg.rows import TupleRow, tuple_row
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from ..._plan import Plan, adrive, drive
from ...errors import InvalidConfigError
from ..config import TTLConfig
from ..saver import AsyncDriver, SyncDriver
from .plans import PostgresCheckpointPlans, Query

R = TypeVar("R")

DEFAULT_SCHEMA = "public"


def _execute(cur: Cursor[TupleRow], query: Query) -> Any:
    cur.execute(query.sql, query.params)
    return cur.fetchall() if query.fetch else None


async def _aexecute(cur: AsyncCursor[TupleRow], query: Query) -> Any:
    await cur.execute(query.sql, query.params)
    return await cur.fetchall() if query.fetch else None


def _pool_kwargs(prepare_threshold: int | None) -> dict[str, Any]:
    # Autocommit: every plan opens its own explicit transaction.
    return {"autocommit": True, "prepare_threshold": prepare_threshold}


class PostgresSaver(SyncDriver):
    """A LangGraph checkpointer on PostgreSQL (blocking; its async methods use a thread).

    Args:
        conn: a ``psycopg.Connection`` or a ``psycopg_pool.ConnectionPool``. Prefer a
            pool: calls then run concurrently and a broken connection is replaced.
        schema: the PostgreSQL schema holding the tables (created by :meth:`setup`).
        serde: the serializer for checkpoint values; LangGraph's by default.
        ttl: ``{"default_ttl": minutes, "refresh_on_read": bool}``: threads expire that
            long after their last write (or read). Expired threads are never returned;
            :meth:`sweep_expired` reclaims their rows.
        keep_last: keep only the newest N checkpoints per thread and namespace
            (``1`` gives a "shallow" saver).
        pipeline: send each operation's statements in pipeline mode.
    """

    def __init__(
        self,
        conn: Connection[Any] | ConnectionPool[Any],
        *,
        schema: str = DEFAULT_SCHEMA,
        serde: SerializerProtocol | None = None,
        ttl: TTLConfig | None = None,
        keep_last: int | None = None,
        pipeline: bool = False,
    ) -> None:
        if not isinstance(conn, (Connection, ConnectionPool)):
            raise InvalidConfigError(
                f"PostgresSaver needs a psycopg Connection or ConnectionPool, got "
                f"{type(conn).__name__} (use AsyncPostgresSaver for async connections)"
            )
        super().__init__(serde=serde, ttl=ttl, keep_last=keep_last)
        self.conn = conn
        self.pipeline = pipeline
        self._plans = PostgresCheckpointPlans(schema, self.settings)
        self._lock = threading.Lock()

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
        PgBouncer in transaction mode requires.
        """
        with ConnectionPool(
            conn_string,
            min_size=pool_min_size,
            max_size=pool_max_size,
            kwargs=_pool_kwargs(prepare_threshold),
            check=ConnectionPool.check_connection,
            open=False,
        ) as pool:
            pool.wait()
            yield cls(pool, **options)

    def setup(self) -> None:
        """Create or migrate the tables; safe to run repeatedly and concurrently."""
        self._run(self._plans.setup())

    @contextmanager
    def _connection(self) -> Iterator[Connection[Any]]:
        if isinstance(self.conn, ConnectionPool):
            with self.conn.connection() as conn:
                yield conn
        else:
            with self._lock:
                yield self.conn

    def _run(self, plan: Plan[Any, R]) -> R:
        with self._connection() as conn, ExitStack() as stack:
            if self.pipeline:
                stack.enter_context(conn.pipeline())
            stack.enter_context(conn.transaction())
            cur = stack.enter_context(conn.cursor(row_factory=tuple_row, binary=True))
            return drive(plan, lambda q: _execute(cur, q))


class AsyncPostgresSaver(AsyncDriver):
    """The asyncio twin of :class:`PostgresSaver`, on ``AsyncConnection`` / ``AsyncConnectionPool``.

    Its sync methods may be called from other threads while its event loop runs.
    """

    def __init__(
        self,
        conn: AsyncConnection[Any] | AsyncConnectionPool[Any],
        *,
        schema: str = DEFAULT_SCHEMA,
        serde: SerializerProtocol | None = None,
        ttl: TTLConfig | None = None,
        keep_last: int | None = None,
        pipeline: bool = False,
    ) -> None:
        if not isinstance(conn, (AsyncConnection, AsyncConnectionPool)):
            raise InvalidConfigError(
                f"AsyncPostgresSaver needs a psycopg AsyncConnection or AsyncConnectionPool, "
                f"got {type(conn).__name__} (use PostgresSaver for blocking connections)"
            )
        super().__init__(serde=serde, ttl=ttl, keep_last=keep_last)
        self.conn = conn
        self.pipeline = pipeline
        self._plans = PostgresCheckpointPlans(schema, self.settings)
        self._lock = asyncio.Lock()
        self._bind_loop()

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
        async with AsyncConnectionPool(
            conn_string,
            min_size=pool_min_size,
            max_size=pool_max_size,
            kwargs=_pool_kwargs(prepare_threshold),
            check=AsyncConnectionPool.check_connection,
            open=False,
        ) as pool:
            await pool.wait()
            yield cls(pool, **options)

    async def setup(self) -> None:
        """Create or migrate the tables; safe to run repeatedly and concurrently."""
        await self._arun(self._plans.setup())

    @asynccontextmanager
    async def _connection(self) -> AsyncIterator[AsyncConnection[Any]]:
        if isinstance(self.conn, AsyncConnectionPool):
            async with self.conn.connection() as conn:
                yield conn
        else:
            async with self._lock:
                yield self.conn

    async def _arun(self, plan: Plan[Any, R]) -> R:
        async with self._connection() as conn, AsyncExitStack() as stack:
            if self.pipeline:
                await stack.enter_async_context(conn.pipeline())
            await stack.enter_async_context(conn.transaction())
            cur = await stack.enter_async_context(conn.cursor(row_factory=tuple_row, binary=True))
            return await adrive(plan, lambda q: _aexecute(cur, q))
