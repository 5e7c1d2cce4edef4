"""``RedisSaver`` and ``AsyncRedisSaver``: thin drivers over the shared plans.

Plain Redis >= 6.2, Valkey and Redis Cluster; no modules. All behaviour lives in
:mod:`.plans` and :mod:`.lua`; these classes pair the plans with the driver mixins of
:mod:`langgraph_memory_plus.drivers.redisdriver`.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import AbstractAsyncContextManager, AbstractContextManager
from typing import ClassVar

from typing_extensions import Self, Unpack

from ...drivers.options import check_options, split_options
from ...drivers.redis import CLUSTER_CLIENTS, AsyncClient, SyncClient
from ...drivers.redisdriver import RedisAsyncDriver, RedisConnectOptions, RedisSyncDriver
from ..config import SaverOptions
from ..context import ContextKeysSaver
from ..saver import AsyncDriver, SyncDriver
from .lua import SCRIPTS
from .plans import RedisCheckpointPlans

DEFAULT_PREFIX = "lgmp"


class RedisSaverOptions(SaverOptions, total=False):
    """The keyword options of the Redis savers' constructors (and ``from_conn_string``)."""

    key_prefix: str


class RedisSaverOpenOptions(RedisSaverOptions, RedisConnectOptions, total=False):
    """``from_conn_string``'s keyword options: the client pool's and the saver's."""


class _RedisOptions(ContextKeysSaver):
    """The constructor both Redis savers share.

    Args:
        client: a ``redis.Redis`` or ``redis.cluster.RedisCluster`` client (their
            ``redis.asyncio`` twins for the async class) made with
            ``decode_responses=False``.
        key_prefix: the first part of every key, so several apps can share one Redis.
        serde: the serializer for checkpoint values; LangGraph's by default.
        ttl: ``{"default_ttl": minutes, "refresh_on_read": bool}``, applied with Redis's
            own expiry to every key of a thread at once.
        thread_index_keys: metadata keys the thread index indexes (``["user_id"]`` by
            default); ``saver.threads.search(metadata={key: ...})`` reads their index.
        transcripts: keep each thread's clean chat history (``saver.threads.transcript``),
            apart from its checkpoints; ``transcript_ttl`` minutes (``None``: forever).
        keep_last: keep only the newest N checkpoints per thread and namespace.
        listeners: callables handed a :mod:`~langgraph_memory_plus.observability` event
            after every operation (``add_listener`` / ``remove_listener`` later).
    """

    _options: ClassVar[type] = RedisSaverOptions
    _scripts: Mapping[str, str] = SCRIPTS

    def __init__(
        self, client: SyncClient | AsyncClient, **options: Unpack[RedisSaverOptions]
    ) -> None:
        check_options(type(self).__name__, options, RedisSaverOptions)
        self._connect(client)
        super().__init__(**split_options(options, SaverOptions)[0])
        self.client = client
        self._plans = RedisCheckpointPlans(options.get("key_prefix", DEFAULT_PREFIX), self.settings)
        self._plans.threads.one_node = not isinstance(client, CLUSTER_CLIENTS)

    def _connect(self, client: object) -> None:
        raise NotImplementedError


class RedisSaver(RedisSyncDriver, _RedisOptions, SyncDriver):
    """A LangGraph checkpointer on Redis (blocking; its async methods use a thread).

    ``from_conn_string(url, **options)`` opens a client for ``redis://``, ``rediss://``
    or ``redis+cluster://`` and closes it on exit.
    """

    @classmethod
    def from_conn_string(
        cls, url: str, **options: Unpack[RedisSaverOpenOptions]
    ) -> AbstractContextManager[Self]:
        """Open a client for ``url`` (checked with a ``PING``: a server that cannot be
        reached or refuses the password is a ``MemoryConnectionError`` at once) and a saver
        on it; close both after."""
        return cls._open(url, options)

    def setup(self) -> None:
        """Nothing to create on Redis; present so code can treat every saver alike."""
        self._run(self._plans.setup())


class AsyncRedisSaver(RedisAsyncDriver, _RedisOptions, AsyncDriver):
    """The asyncio twin of :class:`RedisSaver`, on ``redis.asyncio`` clients."""

    @classmethod
    def from_conn_string(
        cls, url: str, **options: Unpack[RedisSaverOpenOptions]
    ) -> AbstractAsyncContextManager[Self]:
        """Async :meth:`RedisSaver.from_conn_string`: the same URLs and options."""
        return cls._open(url, options)

    async def setup(self) -> None:
        """Nothing to create on Redis; present so code can treat every saver alike."""
        await self._arun(self._plans.setup())
