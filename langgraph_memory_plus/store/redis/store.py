"""``RedisStore`` and ``AsyncRedisStore``: thin drivers over the shared plans.

Plain Redis >= 6.2, Valkey and Redis Cluster; no modules, no ``KEYS``, no ``SCAN``. All
behaviour lives in :mod:`.plans` and :mod:`.lua` and the shared store core
(:mod:`..base`); these classes pair the plans with a runner from
:mod:`langgraph_memory_plus._redis`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any, TypeVar, cast

import redis.asyncio.cluster
import redis.cluster
from langgraph.store.base import IndexConfig, TTLConfig
from typing_extensions import Self

from ..._plan import Plan
from ..._redis import (
    AsyncClient,
    AsyncRedisRunner,
    RedisRunner,
    SyncClient,
    async_client_from_url,
    sync_client_from_url,
)
from ..base import AsyncStore, StoreBase, SyncStore
from .lua import SCRIPTS
from .plans import DEFAULT_SHARD_DEPTH, RedisStorePlans

R = TypeVar("R")

DEFAULT_PREFIX = "lgmp"
CLUSTER_CLIENTS = (redis.cluster.RedisCluster, redis.asyncio.cluster.RedisCluster)


class _RedisOptions(StoreBase):
    """The constructor both Redis stores share.

    Items returned are :class:`~langgraph_memory_plus.store.VersionedItem` (``.version``),
    for ``put(..., expected_version=item.version)``.

    Args:
        client: a ``redis.Redis`` or ``redis.cluster.RedisCluster`` client (their
            ``redis.asyncio`` twins for the async class) made with
            ``decode_responses=False``.
        key_prefix: the first part of every key (``{key_prefix}:store:...``), so several
            apps, and this package's checkpointer, can share one Redis.
        shard_depth: how many leading namespace labels pick an item's shard (one hash
            slot, one atomic script). 2 keeps ``("users", user_id, ...)`` and
            ``("memories", user_id)`` one shard per user. See :mod:`.plans`.
        index: ``{"dims": N, "embed": ..., "fields": [...]}`` for semantic search, scored
            exactly (cosine) over the items that pass the filter.
        ttl: LangGraph's ``TTLConfig`` (``default_ttl`` and ``sweep_interval_minutes`` in
            minutes, ``refresh_on_read``). Expired items are never returned, even before a
            sweep.
        max_value_bytes: refuse values larger than this (as JSON text) before writing;
            at most, and by default, 64 MiB.
    """

    def __init__(
        self,
        client: SyncClient | AsyncClient,
        *,
        key_prefix: str = DEFAULT_PREFIX,
        shard_depth: int = DEFAULT_SHARD_DEPTH,
        index: IndexConfig | None = None,
        ttl: TTLConfig | None = None,
        max_value_bytes: int | None = None,
    ) -> None:
        self._connect(client)
        cluster = isinstance(client, CLUSTER_CLIENTS)
        self._plans = RedisStorePlans(key_prefix, shard_depth, cluster=cluster)
        super().__init__(index=index, ttl=ttl, max_value_bytes=max_value_bytes)
        self.client = client

    def _connect(self, client: object) -> None:
        raise NotImplementedError


class _SyncDriver:
    """Blocking: a ``redis.Redis`` or ``redis.cluster.RedisCluster``."""

    _runner: RedisRunner

    def _connect(self, client: object) -> None:
        self._runner = RedisRunner(client, SCRIPTS, owner=type(self).__name__)

    def _run(self, plan: Plan[Any, R]) -> R:
        return self._runner.run(plan)

    @classmethod
    @contextmanager
    def from_conn_string(cls, url: str, **options: Any) -> Iterator[Self]:
        """Open a client for ``url`` (``redis://``, ``rediss://``, ``redis+cluster://``)
        and a store on it; on exit, stop the TTL sweeper and close the client.

        ``options`` are the constructor's.
        """
        client = sync_client_from_url(url)
        try:
            store = cast(Any, cls)(client, **options)
            try:
                yield store
            finally:
                store._before_close()
        finally:
            client.close()


class _AsyncDriver:
    """Awaited: a ``redis.asyncio.Redis`` or ``redis.asyncio.cluster.RedisCluster``."""

    _runner: AsyncRedisRunner

    def _connect(self, client: object) -> None:
        self._runner = AsyncRedisRunner(client, SCRIPTS, owner=type(self).__name__)

    async def _arun(self, plan: Plan[Any, R]) -> R:
        return await self._runner.run(plan)

    @classmethod
    @asynccontextmanager
    async def from_conn_string(cls, url: str, **options: Any) -> AsyncIterator[Self]:
        """Async :meth:`RedisStore.from_conn_string`."""
        client = async_client_from_url(url)
        try:
            store = cast(Any, cls)(client, **options)
            try:
                yield store
            finally:
                await store._before_close()
        finally:
            await client.aclose()


class RedisStore(_SyncDriver, _RedisOptions, SyncStore):
    """A LangGraph store on Redis (blocking; its async methods use a worker thread).

    Takes a ``redis.Redis`` or ``redis.cluster.RedisCluster`` client; see
    :class:`_RedisOptions` for the options, and ``from_conn_string(url, **options)`` to
    open a client with it.
    """


class AsyncRedisStore(_AsyncDriver, _RedisOptions, AsyncStore):
    """The asyncio twin of :class:`RedisStore`, on ``redis.asyncio`` clients.

    Its sync methods may be called from other threads while its event loop runs (tools
    running in a thread pool do this).
    """
