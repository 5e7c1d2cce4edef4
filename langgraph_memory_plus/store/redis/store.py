"""``RedisStore`` and ``AsyncRedisStore``: thin drivers over the shared plans.

Plain Redis >= 6.2, Valkey and Redis Cluster; no modules, no ``KEYS``, no ``SCAN``. All
behaviour lives in :mod:`.plans` and :mod:`.lua` and the shared store core
(:mod:`..base`); these classes pair the plans with the driver mixins of
:mod:`langgraph_memory_plus._redisdriver`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import redis.asyncio.cluster
import redis.cluster
from langgraph.store.base import IndexConfig, TTLConfig

from ..._redis import AsyncClient, SyncClient
from ..._redisdriver import RedisAsyncDriver, RedisSyncDriver
from ...observability.core import Listener
from ..base import AsyncStore, StoreBase, SyncStore
from .lua import SCRIPTS
from .plans import DEFAULT_SHARD_DEPTH, RedisStorePlans

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
        listeners: callables handed a :mod:`~langgraph_memory_plus.observability` event
            after every operation (``add_listener`` / ``remove_listener`` later).
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
        listeners: Sequence[Listener] | None = None,
    ) -> None:
        self._connect(client)
        cluster = isinstance(client, CLUSTER_CLIENTS)
        self._plans = RedisStorePlans(key_prefix, shard_depth, cluster=cluster)
        super().__init__(index=index, ttl=ttl, max_value_bytes=max_value_bytes, listeners=listeners)
        self.client = client

    _scripts: Mapping[str, str] = SCRIPTS

    def _connect(self, client: object) -> None:
        raise NotImplementedError


class RedisStore(RedisSyncDriver, _RedisOptions, SyncStore):
    """A LangGraph store on Redis (blocking; its async methods use a worker thread).

    Takes a ``redis.Redis`` or ``redis.cluster.RedisCluster`` client; see
    :class:`_RedisOptions` for the options, and ``from_conn_string(url, **options)`` to
    open a client with it.
    """


class AsyncRedisStore(RedisAsyncDriver, _RedisOptions, AsyncStore):
    """The asyncio twin of :class:`RedisStore`, on ``redis.asyncio`` clients.

    Its sync methods may be called from other threads while its event loop runs (tools
    running in a thread pool do this).
    """
