"""The Redis half of every driver class: a runner, and ``from_conn_string``.

Savers and stores differ in their plans and scripts, not in how they reach Redis, so the
blocking and the async driver mixins live here once (as :mod:`._pgdriver` does for
PostgreSQL). A class mixes one of them in first among its bases, sets ``_scripts`` to its
Lua scripts, and calls ``_connect`` from its constructor. ``_open`` (what the class's
typed ``from_conn_string`` returns) opens a client for the URL and closes it afterwards,
first calling (or awaiting) the instance's ``_before_close()`` if it has one (a store stops
its TTL sweeper there).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager
from typing import Any, ClassVar, TypeVar, cast

from typing_extensions import Self

from ._closing import aclosing_first, closing_first
from ._options import check_options
from ._plan import Plan
from ._redis import AsyncRedisRunner, RedisRunner, aopen_client, open_client

R = TypeVar("R")


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
        after. The options (the constructor's) are checked before anything connects."""
        check_options(f"{cls.__name__}.from_conn_string", options, cls._options)
        client = open_client(url)
        try:
            with closing_first(cast(Any, cls)(client, **options)) as instance:
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
        """Async :meth:`RedisSyncDriver._open`: the same URLs and options, an async client."""
        check_options(f"{cls.__name__}.from_conn_string", options, cls._options)
        client = await aopen_client(url)
        try:
            async with aclosing_first(cast(Any, cls)(client, **options)) as instance:
                yield instance
        finally:
            await client.aclose()
