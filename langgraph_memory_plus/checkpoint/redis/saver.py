"""``RedisSaver`` and ``AsyncRedisSaver``: thin drivers over the shared plans.

Plain Redis >= 6.2, Valkey and Redis Cluster; no modules. All behaviour lives in
:mod:`.plans` and :mod:`.lua`; these classes pair the plans with the driver mixins of
:mod:`langgraph_memory_plus._redisdriver`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from langgraph.checkpoint.serde.base import SerializerProtocol

from ..._redis import AsyncClient, SyncClient
from ..._redisdriver import RedisAsyncDriver, RedisSyncDriver
from ...observability.core import Listener
from ..config import TTLConfig
from ..saver import AsyncDriver, CheckpointSaverBase, SyncDriver
from .lua import SCRIPTS
from .plans import RedisCheckpointPlans

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
        thread_index_keys: metadata keys the thread index indexes (``["user_id"]`` by
            default); ``saver.threads.search(metadata={key: ...})`` reads their index.
        transcripts: keep each thread's clean chat history (``saver.threads.transcript``),
            apart from its checkpoints; ``transcript_ttl`` minutes (``None``: forever).
        keep_last: keep only the newest N checkpoints per thread and namespace.
        listeners: callables handed a :mod:`~langgraph_memory_plus.observability` event
            after every operation (``add_listener`` / ``remove_listener`` later).
    """

    def __init__(
        self,
        client: SyncClient | AsyncClient,
        *,
        key_prefix: str = DEFAULT_PREFIX,
        serde: SerializerProtocol | None = None,
        ttl: TTLConfig | None = None,
        keep_last: int | None = None,
        thread_index_keys: Sequence[str] | None = None,
        transcripts: bool = False,
        transcript_ttl: float | None = None,
        listeners: Sequence[Listener] | None = None,
    ) -> None:
        self._connect(client)
        super().__init__(
            serde=serde,
            ttl=ttl,
            keep_last=keep_last,
            thread_index_keys=thread_index_keys,
            transcripts=transcripts,
            transcript_ttl=transcript_ttl,
            listeners=listeners,
        )
        self.client = client
        self._plans = RedisCheckpointPlans(key_prefix, self.settings)

    _scripts: Mapping[str, str] = SCRIPTS

    def _connect(self, client: object) -> None:
        raise NotImplementedError


class RedisSaver(RedisSyncDriver, _RedisOptions, SyncDriver):
    """A LangGraph checkpointer on Redis (blocking; its async methods use a thread).

    ``from_conn_string(url, **options)`` opens a client for ``redis://``, ``rediss://``
    or ``redis+cluster://`` and closes it on exit.
    """

    def setup(self) -> None:
        """Nothing to create on Redis; present so code can treat every saver alike."""
        self._run(self._plans.setup())


class AsyncRedisSaver(RedisAsyncDriver, _RedisOptions, AsyncDriver):
    """The asyncio twin of :class:`RedisSaver`, on ``redis.asyncio`` clients."""

    async def setup(self) -> None:
        """Nothing to create on Redis; present so code can treat every saver alike."""
        await self._arun(self._plans.setup())
