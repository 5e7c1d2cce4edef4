"""``RedisStore`` and ``AsyncRedisStore``: thin drivers over the shared plans.

Plain Redis >= 6.2, Valkey and Redis Cluster; no modules, no ``KEYS``, no ``SCAN``. All
behaviour lives in :mod:`.plans` and :mod:`.lua` and the shared store core
(:mod:`..base`); these classes pair the plans with the driver mixins of
:mod:`langgraph_memory_plus.drivers.redisdriver`.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import AbstractAsyncContextManager, AbstractContextManager
from typing import ClassVar

import redis.asyncio.cluster
import redis.cluster
import redis.exceptions
from typing_extensions import Self, Unpack

from ...drivers.options import check_options
from ...drivers.redis import AsyncClient, SyncClient
from ...drivers.redisdriver import RedisAsyncDriver, RedisConnectOptions, RedisSyncDriver
from ..base import AsyncStore, StoreBase, StoreOptions, SyncStore
from .lua import SCRIPTS
from .plans import DEFAULT_SHARD_DEPTH, RedisStorePlans

DEFAULT_PREFIX = "lgmp"
CLUSTER_CLIENTS = (redis.cluster.RedisCluster, redis.asyncio.cluster.RedisCluster)


MAX_MERGE_SLOTS = 16
"""The most merged groups of calls an async Redis store runs at once."""


class RedisStoreOptions(StoreOptions, total=False):
    """The keyword options of the Redis stores' constructors (and ``from_conn_string``)."""

    key_prefix: str
    shard_depth: int


class RedisStoreOpenOptions(RedisStoreOptions, RedisConnectOptions, total=False):
    """``from_conn_string``'s keyword options: the client pool's and the store's."""


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

    _options: ClassVar[type] = RedisStoreOptions
    _scripts: Mapping[str, str] = SCRIPTS

    def __init__(
        self, client: SyncClient | AsyncClient, **options: Unpack[RedisStoreOptions]
    ) -> None:
        check_options(type(self).__name__, options, RedisStoreOptions)
        self._connect(client)
        cluster = isinstance(client, CLUSTER_CLIENTS)
        self._plans = RedisStorePlans(
            options.get("key_prefix", DEFAULT_PREFIX),
            options.get("shard_depth", DEFAULT_SHARD_DEPTH),
            cluster=cluster,
        )
        super().__init__(
            index=options.get("index"),
            ttl=options.get("ttl"),
            max_value_bytes=options.get("max_value_bytes"),
            listeners=options.get("listeners"),
            encryption=options.get("encryption"),
        )
        self.client = client

    def _connect(self, client: object) -> None:
        raise NotImplementedError


class RedisStore(RedisSyncDriver, _RedisOptions, SyncStore):
    """A LangGraph store on Redis (blocking; its async methods use a worker thread).

    Takes a ``redis.Redis`` or ``redis.cluster.RedisCluster`` client; see
    :class:`_RedisOptions` for the options, and ``from_conn_string(url, **options)`` to
    open a client with it.
    """

    @classmethod
    def from_conn_string(
        cls, url: str, **options: Unpack[RedisStoreOpenOptions]
    ) -> AbstractContextManager[Self]:
        """Open a client for ``url`` (checked with a ``PING``: a server that cannot be
        reached or refuses the password is a ``MemoryConnectionError`` at once) and a store
        on it; close both after."""
        return cls._open(url, options)


class AsyncRedisStore(RedisAsyncDriver, _RedisOptions, AsyncStore):
    """The asyncio twin of :class:`RedisStore`, on ``redis.asyncio`` clients.

    Its sync methods may be called from other threads while its event loop runs (tools
    running in a thread pool do this).

    Concurrent async calls share script calls and connections (see :mod:`..merging`): at
    most the pool's size (up to :data:`MAX_MERGE_SLOTS`) run at once.
    """

    _merges_calls = True

    def _merge_slots(self) -> int:
        size = getattr(getattr(self.client, "connection_pool", None), "max_connections", None)
        if isinstance(size, int) and size > 0:
            return min(size, MAX_MERGE_SLOTS)
        return MAX_MERGE_SLOTS  # a cluster: a pool per node

    def _shared_error(self, exc: Exception) -> bool:
        lost = isinstance(exc, (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError))
        return lost or super()._shared_error(exc)

    @classmethod
    def from_conn_string(
        cls, url: str, **options: Unpack[RedisStoreOpenOptions]
    ) -> AbstractAsyncContextManager[Self]:
        """Async :meth:`RedisStore.from_conn_string`: the same URLs and options."""
        return cls._open(url, options)
