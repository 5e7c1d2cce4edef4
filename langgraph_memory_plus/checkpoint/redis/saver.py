"""``RedisSaver`` and ``AsyncRedisSaver``: thin drivers over the shared plans.

Plain Redis >= 6.2, Valkey and Redis Cluster; no modules. All behaviour lives in
:mod:`.plans` and :mod:`.lua`; these classes pair the plans with a runner from
:mod:`langgraph_memory_plus._redis`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any, TypeVar

from langgraph.checkpoint.serde.base import SerializerProtocol

from ..._plan import Plan
from ..._redis import (
    AsyncClient,
    AsyncRedisRunner,
    RedisRunner,
    SyncClient,
    async_client_from_url,
    sync_client_from_url,
)
from ..config import TTLConfig
from ..saver import AsyncDriver, CheckpointSaverBase, SyncDriver
from .lua import SCRIPTS
from .plans import RedisCheckpointPlans

R = TypeVar("R")

DEFAULT_PREFIX = "lgmp"


class _RedisOptions(CheckpointSaverBase):
    """The constructor both Redis savers share.

    Args:
        client: a ``redis.Redis`` or ``redis.cluster.RedisCluster`` client (their
            ``redis.asyncio`` twins for the async class) made with
            ``decode_responses=False``.
        key_prefix: the first part of every key, so several apps can share one Redis.
        serde: the serializer for checkpoint values; LangGraph's by default.
        ttl: ``{"default_ttl": minutes, "refresh_on_read": bool}``, applied with Redis's
            own expiry to every key of a thread at once.
        keep_last: keep only the newest N checkpoints per thread and namespace.
    """

    def __init__(
        self,
        client: SyncClient | AsyncClient,
        *,
        key_prefix: str = DEFAULT_PREFIX,
        serde: SerializerProtocol | None = None,
        ttl: TTLConfig | None = None,
        keep_last: int | None = None,
    ) -> None:
        self._connect(client)
        super().__init__(serde=serde, ttl=ttl, keep_last=keep_last)
        self.client = client
        self._plans = RedisCheckpointPlans(key_prefix, self.settings)

    def _connect(self, client: SyncClient | AsyncClient) -> None:
        raise NotImplementedError


class RedisSaver(_RedisOptions, SyncDriver):
    """A LangGraph checkpointer on Redis (blocking; its async methods use a thread)."""

    def _connect(self, client: SyncClient | AsyncClient) -> None:
        self._runner = RedisRunner(client, SCRIPTS, owner=type(self).__name__)

    @classmethod
    @contextmanager
    def from_conn_string(cls, url: str, **options: Any) -> Iterator[RedisSaver]:
        """Open a client for ``url`` (``redis://``, ``rediss://``, ``redis+cluster://``).

        ``options`` are the constructor's; the client is closed on exit.
        """
        client = sync_client_from_url(url)
        try:
            yield cls(client, **options)
        finally:
            client.close()

    def setup(self) -> None:
        """Nothing to create on Redis; present so code can treat every saver alike."""
        self._run(self._plans.setup())

    def _run(self, plan: Plan[Any, R]) -> R:
        return self._runner.run(plan)


class AsyncRedisSaver(_RedisOptions, AsyncDriver):
    """The asyncio twin of :class:`RedisSaver`, on ``redis.asyncio`` clients."""

    def _connect(self, client: SyncClient | AsyncClient) -> None:
        self._runner = AsyncRedisRunner(client, SCRIPTS, owner=type(self).__name__)

    @classmethod
    @asynccontextmanager
    async def from_conn_string(cls, url: str, **options: Any) -> AsyncIterator[AsyncRedisSaver]:
        """Async :meth:`RedisSaver.from_conn_string`."""
        client = async_client_from_url(url)
        try:
            yield cls(client, **options)
        finally:
            await client.aclose()

    async def setup(self) -> None:
        """Nothing to create on Redis; present so code can treat every saver alike."""
        await self._arun(self._plans.setup())

    async def _arun(self, plan: Plan[Any, R]) -> R:
        return await self._runner.run(plan)
