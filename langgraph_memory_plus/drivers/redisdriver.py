"""The Redis half of every driver class: a runner, and ``from_conn_string``.

Savers and stores differ in their plans and scripts, not in how they reach Redis, so the
blocking and the async driver mixins live here once (as :mod:`.pgdriver` does for
PostgreSQL). A class mixes one of them in first among its bases, sets ``_scripts`` to its
Lua scripts, and calls ``_connect`` from its constructor. ``_open`` (what the class's
typed ``from_conn_string`` returns) opens a client for the URL and closes it afterwards,
first calling (or awaiting) the instance's ``_before_close()`` if it has one (a store stops
its TTL sweeper there).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager
from typing import Any, ClassVar, TypedDict, TypeVar, cast

from typing_extensions import Self

from .closing import aclosing_first, closing_first
from .options import check_options, split_options
from .plan import Plan
from .redis import AsyncRedisRunner, RedisRunner, aopen_client, open_client

R = TypeVar("R")


class RedisConnectOptions(TypedDict, total=False):
    """How ``from_conn_string`` opens its client.

    At most ``pool_max_size`` connections (per node on a cluster; default 100); a call
    that finds them all busy waits up to ``pool_timeout`` seconds (default 30), then raises
    ``PoolTimeoutError``.
    """

    pool_max_size: int
    pool_timeout: float


class RedisSyncDriver:
    """Blocking: a ``redis.Redis`` or ``redis.cluster.RedisCluster``."""

    _scripts: Mapping[str, str]
    _options: ClassVar[type]  # the constructor's options (a TypedDict)
    _runner: RedisRunner

    def _connect(self, client: object) -> None:
        self._runner = RedisRunner(client, self._scripts, owner=type(self).__name__)

    def _run(self, plan: Plan[Any, R]) -> R:
        return self._runner.run(plan)

    @classmethod
    @contextmanager
    def _open(cls, url: str, options: Mapping[str, Any]) -> Iterator[Self]:
        """``from_conn_string``: open a client for ``url`` (``redis://``, ``rediss://``,
        ``redis+cluster://``), checked with a ``PING``, and an instance on it; close both
        after. The options (the pool's and the constructor's) are checked before anything
        connects."""
        check_options(
            f"{cls.__name__}.from_conn_string", options, RedisConnectOptions, cls._options
        )
        connect, rest = split_options(options, RedisConnectOptions)
        client = open_client(url, **connect)
        try:
            with closing_first(cast(Any, cls)(client, **rest)) as instance:
                yield instance
        finally:
            client.close()


class RedisAsyncDriver:
    """Awaited: a ``redis.asyncio.Redis`` or ``redis.asyncio.cluster.RedisCluster``."""

    _scripts: Mapping[str, str]
    _options: ClassVar[type]  # the constructor's options (a TypedDict)
    _runner: AsyncRedisRunner

    def _connect(self, client: object) -> None:
        self._runner = AsyncRedisRunner(client, self._scripts, owner=type(self).__name__)

    async def _arun(self, plan: Plan[Any, R]) -> R:
        return await self._runner.run(plan)

    @classmethod
    @asynccontextmanager
    async def _open(cls, url: str, options: Mapping[str, Any]) -> AsyncIterator[Self]:
        """Async :meth:`RedisSyncDriver._open`: the same URLs and options, an async client
        (a cluster's nodes discovered before it is shared)."""
        check_options(
            f"{cls.__name__}.from_conn_string", options, RedisConnectOptions, cls._options
        )
        connect, rest = split_options(options, RedisConnectOptions)
        client = await aopen_client(url, **connect)
        try:
            async with aclosing_first(cast(Any, cls)(client, **rest)) as instance:
                yield instance
        finally:
            await client.aclose()
