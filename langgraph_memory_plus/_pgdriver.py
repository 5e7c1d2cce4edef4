"""The PostgreSQL half of every driver class: a runner, and ``from_conn_string``.

Savers and stores differ in their plans, not in how they reach PostgreSQL, so the blocking
and the async driver mixins live here once. A class mixes one of them in beside its core
(which must call ``_connect`` from its constructor), first among its bases so
these concrete ``_run``/``_arun`` win, and gets a ``from_conn_string`` that opens a checked
pool and closes it afterwards, first calling (or awaiting) the instance's
``_before_close()`` if it has one (a store stops its TTL sweeper there).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any, TypeVar, cast

from typing_extensions import Self

from ._closing import aclosing_first, closing_first
from ._plan import Plan
from ._postgres import (
    DEFAULT_PREPARE_THRESHOLD,
    AsyncPgRunner,
    PgRunner,
    open_async_pool,
    open_pool,
)
from ._urls import check_conninfo

R = TypeVar("R")


class PgSyncDriver:
    """Blocking: a ``Connection`` or ``ConnectionPool``."""

    _runner: PgRunner

    def _connect(self, conn: object, pipeline: bool) -> None:
        self._runner = PgRunner(conn, pipeline=pipeline, owner=type(self).__name__)

    def _run(self, plan: Plan[Any, R]) -> R:
        return self._runner.run(plan)

    @classmethod
    @contextmanager
    def from_conn_string(
        cls,
        conn_string: str,
        *,
        pool_min_size: int = 1,
        pool_max_size: int = 10,
        prepare_threshold: int | None = DEFAULT_PREPARE_THRESHOLD,
        **options: Any,
    ) -> Iterator[Self]:
        """Open a connection pool for ``conn_string`` and an instance on it; close both after.

        ``prepare_threshold=None`` turns off server-side prepared statements, as
        PgBouncer in transaction mode requires. ``options`` are the constructor's.
        """
        check_conninfo(conn_string)  # libpq's parse errors (logged at every retry) quote it
        sizes = {"min_size": pool_min_size, "max_size": pool_max_size}
        with (
            open_pool(conn_string, prepare_threshold=prepare_threshold, **sizes) as pool,
            closing_first(cast(Any, cls)(pool, **options)) as instance,
        ):
            yield instance


class PgAsyncDriver:
    """Awaited: an ``AsyncConnection`` or ``AsyncConnectionPool``."""

    _runner: AsyncPgRunner

    def _connect(self, conn: object, pipeline: bool) -> None:
        self._runner = AsyncPgRunner(conn, pipeline=pipeline, owner=type(self).__name__)

    async def _arun(self, plan: Plan[Any, R]) -> R:
        return await self._runner.run(plan)

    @classmethod
    @asynccontextmanager
    async def from_conn_string(
        cls,
        conn_string: str,
        *,
        pool_min_size: int = 1,
        pool_max_size: int = 10,
        prepare_threshold: int | None = DEFAULT_PREPARE_THRESHOLD,
        **options: Any,
    ) -> AsyncIterator[Self]:
        """Async ``from_conn_string``: the same options, an async pool."""
        check_conninfo(conn_string)  # libpq's parse errors (logged at every retry) quote it
        sizes = {"min_size": pool_min_size, "max_size": pool_max_size}
        async with (
            open_async_pool(conn_string, prepare_threshold=prepare_threshold, **sizes) as pool,
            aclosing_first(cast(Any, cls)(pool, **options)) as instance,
        ):
            yield instance
