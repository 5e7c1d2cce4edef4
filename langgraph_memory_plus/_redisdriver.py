"""The Redis half of every driver class: a runner, and ``from_conn_string``.

Savers and stores differ in their plans and scripts, not in how they reach Redis, so the
blocking and the async driver mixins live here once (as :mod:`._pgdriver` does for
PostgreSQL). A class mixes one of them in first among its bases, sets ``_scripts`` to its
Lua scripts, and calls ``_connect`` from its constructor. ``from_conn_string`` opens a
client for the URL and closes it afterwards, first calling (or awaiting) the instance's
``_before_close()`` if it has one (a store stops its TTL sweeper there).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager
from typing import Any, TypeVar, cast

from typing_extensions import Self

from ._closing import aclosing_first, closing_first
from ._plan import Plan
from ._redis import (
    AsyncRedisRunner,
    RedisRunner,
    async_client_from_url,
    initialize,
    sync_client_from_url,
)

R = TypeVar("R")


class RedisSyncDriver:
    """Blocking: a ``redis.Redis`` or ``redis.cluster.RedisCluster``."""

    _scripts: Mapping[str, str]
    _runner: RedisRunner

    def _connect(self, client: object) -> None:
        self._runner = RedisRunner(client, self._scripts, owner=type(self).__name__)

    def _run(self, plan: Plan[Any, R]) -> R:
        return self._runner.run(plan)

    @classmethod
    @contextmanager
    def from_conn_string(
        cls,
        url: str,
        *,
        pool_max_size: int | None = None,
        pool_timeout: float | None = None,
        **options: Any,
    ) -> Iterator[Self]:
        """Open a client for ``url`` (``redis://``, ``rediss://``, ``redis+cluster://``)
        and an instance on it; close both after. ``options`` are the constructor's.

        ``pool_max_size`` connections at most (per node on a cluster; default 100); a
        call that finds them all busy waits up to ``pool_timeout`` seconds (default 30),
        then raises ``PoolTimeoutError``."""
        client = sync_client_from_url(url, pool_max_size=pool_max_size, pool_timeout=pool_timeout)
        try:
            with closing_first(cast(Any, cls)(client, **options)) as instance:
                yield instance
        finally:
            client.close()


class RedisAsyncDriver:
    """Awaited: a ``redis.asyncio.Redis`` or ``redis.asyncio.cluster.RedisCluster``."""

    _scripts: Mapping[str, str]
    _runner: AsyncRedisRunner

    def _connect(self, client: object) -> None:
        self._runner = AsyncRedisRunner(client, self._scripts, owner=type(self).__name__)

    async def _arun(self, plan: Plan[Any, R]) -> R:
        return await self._runner.run(plan)

    @classmethod
    @asynccontextmanager
    async def from_conn_string(
        cls,
        url: str,
        *,
        pool_max_size: int | None = None,
        pool_timeout: float | None = None,
        **options: Any,
    ) -> AsyncIterator[Self]:
        """Async ``from_conn_string``: the same URLs and options, an async client."""
        client = async_client_from_url(url, pool_max_size=pool_max_size, pool_timeout=pool_timeout)
        try:
            await initialize(client)
            async with aclosing_first(cast(Any, cls)(client, **options)) as instance:
                yield instance
        finally:
            await client.aclose()
