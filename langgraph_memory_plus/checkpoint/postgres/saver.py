"""``PostgresSaver`` and ``AsyncPostgresSaver``: thin drivers over the shared plans.

All behaviour lives in :mod:`.plans` (SQL and decoding) and the shared saver core; these
classes only pair the plans with the PostgreSQL driver mixins of
:mod:`langgraph_memory_plus._pgdriver`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langgraph.checkpoint.serde.base import SerializerProtocol
from psycopg import AsyncConnection, Connection
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from ..._pgdriver import PgAsyncDriver, PgSyncDriver
from ...observability.core import Listener
from ..config import TTLConfig
from ..saver import AsyncDriver, CheckpointSaverBase, SyncDriver
from .plans import PostgresCheckpointPlans

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

    def __init__(
        self,
        conn: AnyConnection,
        *,
        schema: str = DEFAULT_SCHEMA,
        serde: SerializerProtocol | None = None,
        ttl: TTLConfig | None = None,
        keep_last: int | None = None,
        thread_index_keys: Sequence[str] | None = None,
        transcripts: bool = False,
        transcript_ttl: float | None = None,
        listeners: Sequence[Listener] | None = None,
        pipeline: bool = False,
    ) -> None:
        self._connect(conn, pipeline)
        super().__init__(
            serde=serde,
            ttl=ttl,
            keep_last=keep_last,
            thread_index_keys=thread_index_keys,
            transcripts=transcripts,
            transcript_ttl=transcript_ttl,
            listeners=listeners,
        )
        self.conn = conn
        self._plans = PostgresCheckpointPlans(schema, self.settings)

    def _connect(self, conn: object, pipeline: bool) -> None:
        raise NotImplementedError


class PostgresSaver(PgSyncDriver, _PostgresOptions, SyncDriver):
    """A LangGraph checkpointer on PostgreSQL (blocking; its async methods use a thread).

    Takes a ``psycopg.Connection`` or ``psycopg_pool.ConnectionPool``; see
    :class:`_PostgresOptions` for the options. ``from_conn_string(url, pool_min_size=1,
    pool_max_size=10, prepare_threshold=0, **options)`` opens and closes a pool
    (``prepare_threshold=None`` for PgBouncer in transaction mode).
    """

    def setup(self) -> None:
        """Create or migrate the tables; safe to run repeatedly and concurrently."""
        self._run(self._plans.setup())


class AsyncPostgresSaver(PgAsyncDriver, _PostgresOptions, AsyncDriver):
    """The asyncio twin of :class:`PostgresSaver`, on ``AsyncConnection`` or a pool.

    Its sync methods may be called from other threads while its event loop runs.
    """

    async def setup(self) -> None:
        """Create or migrate the tables; safe to run repeatedly and concurrently."""
        await self._arun(self._plans.setup())
