"""The PostgreSQL half of every driver class: a runner, and ``from_conn_string``.

Savers and stores differ in their plans, not in how they reach PostgreSQL, so the blocking
and the async driver mixins live here once. A class mixes one of them in beside its core
(which must call ``_connect`` from its constructor, with its plans' schema version check),
first among its bases so these concrete ``_run``/``_arun`` win, and gets an ``_open`` that its typed
``from_conn_string`` returns: it opens a checked pool and closes it afterwards, first
calling (or awaiting) the instance's ``_before_close()`` if it has one (a store stops its
TTL sweeper there).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager
from typing import Any, ClassVar, TypedDict, TypeVar, cast

from typing_extensions import Self

from .closing import aclosing_first, closing_first
from .options import check_options, split_options
from .plan import Plan
from .postgres import (
    DEFAULT_PREPARE_THRESHOLD,
    AsyncPgRunner,
    PgRunner,
    SchemaCheck,
    open_async_pool,
    open_pool,
)
from .urls import check_conninfo

R = TypeVar("R")


class PostgresConnectOptions(TypedDict, total=False):
    """How ``from_conn_string`` opens its pool.

    ``pool_min_size`` (default 1) connections are kept open, at most ``pool_max_size``
    (default 10) at once; ``prepare_threshold`` (default 0: prepare on first use) is
    psycopg's, ``None`` turns server-side prepared statements off, as PgBouncer in
    transaction mode requires.
    """

    pool_min_size: int
    pool_max_size: int
    prepare_threshold: int | None


def _pool_options(given: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "min_size": given.get("pool_min_size", 1),
        "max_size": given.get("pool_max_size", 10),
        "prepare_threshold": given.get("prepare_threshold", DEFAULT_PREPARE_THRESHOLD),
    }


class PgSyncDriver:
    """Blocking: a ``Connection`` or ``ConnectionPool``."""

    _runner: PgRunner
    _options: ClassVar[type]  # the constructor's options (a TypedDict)

    def _connect(self, conn: object, pipeline: bool, schema: SchemaCheck) -> None:
        self._runner = PgRunner(conn, pipeline=pipeline, owner=type(self).__name__)
        self._runner.schema = schema

    def _run(self, plan: Plan[Any, R]) -> R:
        return self._runner.run(plan)

    @classmethod
    @contextmanager
    def _open(cls, conn_string: str, options: Mapping[str, Any]) -> Iterator[Self]:
        """``from_conn_string``: open a checked pool and an instance on it; close both after.

        Every option is checked before anything connects, and the pool connects once
        first, so a typo and an unreachable server are each a clear error at once.
        """
        owner = f"{cls.__name__}.from_conn_string"
        check_options(owner, options, PostgresConnectOptions, cls._options)
        check_conninfo(conn_string)  # libpq's parse errors (logged at every retry) quote it
        connect, rest = split_options(options, PostgresConnectOptions)
        with (
            open_pool(conn_string, **_pool_options(connect)) as pool,
            closing_first(cast(Any, cls)(pool, **rest)) as instance,
        ):
            yield instance


class PgAsyncDriver:
    """Awaited: an ``AsyncConnection`` or ``AsyncConnectionPool``."""

    _runner: AsyncPgRunner
    _options: ClassVar[type]

    def _connect(self, conn: object, pipeline: bool, schema: SchemaCheck) -> None:
        self._runner = AsyncPgRunner(conn, pipeline=pipeline, owner=type(self).__name__)
        self._runner.schema = schema

    async def _arun(self, plan: Plan[Any, R]) -> R:
        return await self._runner.run(plan)

    @classmethod
    @asynccontextmanager
    async def _open(cls, conn_string: str, options: Mapping[str, Any]) -> AsyncIterator[Self]:
        """Async :meth:`PgSyncDriver._open`: the same options, an async pool."""
        owner = f"{cls.__name__}.from_conn_string"
        check_options(owner, options, PostgresConnectOptions, cls._options)
        check_conninfo(conn_string)  # libpq's parse errors (logged at every retry) quote it
        connect, rest = split_options(options, PostgresConnectOptions)
        async with (
            open_async_pool(conn_string, **_pool_options(connect)) as pool,
            aclosing_first(cast(Any, cls)(pool, **rest)) as instance,
        ):
            yield instance
