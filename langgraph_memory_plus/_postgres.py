"""Running plans on PostgreSQL: shared by the checkpointers and the stores.

A runner takes a plan (see :mod:`._plan`) and runs it on one connection: borrowed from
a pool, so concurrent calls run concurrently, or, for a single connection, taken under a
lock, since a connection runs one transaction at a time. A plan's statements run in one
transaction (``conn.transaction()``, a savepoint when the caller's connection is already
inside one), except a leading statement marked standalone, which an autocommit
connection runs on its own: the common single-statement write then costs one round
trip. Results come back as tuples in binary format whatever row factory
the caller's connection uses.

In pipeline mode each statement runs on a cursor of its own: psycopg hands a result to
the cursor that sent it whenever the result arrives, possibly while a later statement is
being sent on that cursor, and ``fetchall()`` then returns the earlier result instead of
waiting for its own (a plan's ``SELECT`` after an advisory lock read the lock's row).
"""

from __future__ import annotations

import asyncio
import re
import select
import threading
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import AsyncExitStack, ExitStack, asynccontextmanager, contextmanager
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, TypeVar

from psycopg import AsyncConnection, AsyncCursor, Connection, Cursor
from psycopg.rows import TupleRow, tuple_row
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from ._plan import Plan, adrive, drive
from .errors import InvalidConfigError

R = TypeVar("R")

Rows = list[tuple[Any, ...]]


@dataclass(frozen=True)
class Query:
    """One statement for a runner to send; ``fetch`` says whether rows come back.

    ``standalone``: the statement is complete and atomic on its own, so on an
    autocommit connection it runs without ``BEGIN``/``COMMIT`` round trips. The first
    statement of a plan that is not standalone opens a transaction, which every later
    statement of the plan joins.
    """

    sql: str
    params: Sequence[Any] | dict[str, Any] | None = None
    fetch: bool = False
    standalone: bool = False


# Comments, quoted literals and identifiers, dollar-quoted bodies: kept as they are.
_SQL_TOKENS = re.compile(
    r"'(?:[^']|'')*'|\"(?:[^\"]|\"\")*\"|\$(\w*)\$.*?\$\1\$|(?:\s|--[^\n]*)+", re.S
)


@lru_cache(maxsize=512)
def compact_sql(sql: str) -> str:
    """``sql`` with its layout whitespace and comments removed.

    psycopg caches the parsing of a query's placeholders only for queries of up to 4 KB
    and parses longer ones at every execution; our statements are laid out for reading,
    and the whitespace alone pushed the common writes over that limit.
    """

    def keep(token: re.Match[str]) -> str:
        text = token.group(0)
        return text if text[0] in "'\"$" else " "

    return _SQL_TOKENS.sub(keep, sql).strip()


def _execute(cur: Cursor[TupleRow], query: Query) -> Rows | None:
    cur.execute(compact_sql(query.sql), query.params)
    return cur.fetchall() if query.fetch else None


async def _aexecute(cur: AsyncCursor[TupleRow], query: Query) -> Rows | None:
    await cur.execute(compact_sql(query.sql), query.params)
    return await cur.fetchall() if query.fetch else None


DEFAULT_PREPARE_THRESHOLD = 0
"""Pools we open prepare each statement on its first use (psycopg's default waits for
five). The package sends a small fixed set of statements, each planned in about a
millisecond, so a fresh connection otherwise plans every one of them five times over;
per pooled connection, that made a new process's first turns markedly slower."""


def pool_kwargs(prepare_threshold: int | None) -> dict[str, Any]:
    """Connection options of the pools this package opens.

    Autocommit, because every plan opens its own explicit transaction;
    ``prepare_threshold=None`` turns off server-side prepared statements, as PgBouncer in
    transaction mode requires.
    """
    return {"autocommit": True, "prepare_threshold": prepare_threshold}


def _closed_by_server(conn: Connection[Any] | AsyncConnection[Any]) -> bool:
    """Whether an idle connection has heard from the server, without a round trip.

    Checking a connection with a query before lending it costs a round trip, as much as
    the common one-statement write itself. An idle connection never expects a message:
    a server that terminates it (restart, ``pg_terminate_backend``, idle timeout) sends
    its farewell and closes the socket, which makes the socket readable. Only then does
    the pool run its real check (which fails, and the connection is replaced).
    """
    try:
        fd = conn.pgconn.socket
    except Exception:  # closed or broken: let the real check decide
        return True
    if not hasattr(select, "poll"):  # Windows
        return bool(select.select([fd], [], [], 0)[0])
    poller = select.poll()
    poller.register(fd, select.POLLIN | select.POLLERR | select.POLLHUP)
    return bool(poller.poll(0))


@contextmanager
def open_pool(
    conn_string: str, *, min_size: int, max_size: int, prepare_threshold: int | None
) -> Iterator[ConnectionPool[Any]]:
    """A pool that checks connections before lending them, so a dead one is replaced."""

    def check(conn: Connection[Any]) -> None:
        if _closed_by_server(conn):
            ConnectionPool.check_connection(conn)

    with ConnectionPool(
        conn_string,
        min_size=min_size,
        max_size=max_size,
        kwargs=pool_kwargs(prepare_threshold),
        check=check,
        open=False,
    ) as pool:
        pool.wait()
        yield pool


@asynccontextmanager
async def open_async_pool(
    conn_string: str, *, min_size: int, max_size: int, prepare_threshold: int | None
) -> AsyncIterator[AsyncConnectionPool[Any]]:
    """Async :func:`open_pool`."""

    async def check(conn: AsyncConnection[Any]) -> None:
        if _closed_by_server(conn):
            await AsyncConnectionPool.check_connection(conn)

    async with AsyncConnectionPool(
        conn_string,
        min_size=min_size,
        max_size=max_size,
        kwargs=pool_kwargs(prepare_threshold),
        check=check,
        open=False,
    ) as pool:
        await pool.wait()
        yield pool


class PgRunner:
    """Runs plans on a blocking ``Connection`` or ``ConnectionPool``."""

    def __init__(self, conn: object, *, pipeline: bool, owner: str) -> None:
        # ``object``: the type is checked here, with an error that names the right class.
        if not isinstance(conn, (Connection, ConnectionPool)):
            raise InvalidConfigError(
                f"{owner} needs a psycopg Connection or ConnectionPool, got "
                f"{type(conn).__name__} (use the Async class for async connections)"
            )
        self.conn: Connection[Any] | ConnectionPool[Any] = conn
        self.pipeline = pipeline
        self._lock = threading.Lock()

    @contextmanager
    def _connection(self) -> Iterator[Connection[Any]]:
        if isinstance(self.conn, ConnectionPool):
            with self.conn.connection() as conn:
                yield conn
        else:
            with self._lock:
                yield self.conn

    def run(self, plan: Plan[Query, R]) -> R:
        with self._connection() as conn, ExitStack() as stack:
            # In pipeline mode the statements are batched anyway; the whole plan runs in
            # one transaction opened first (psycopg pipelines want BEGIN before cursors).
            in_transaction = self.pipeline
            if self.pipeline:
                stack.enter_context(conn.pipeline())
                stack.enter_context(conn.transaction())
            cur = stack.enter_context(conn.cursor(row_factory=tuple_row, binary=True))

            def execute(query: Query) -> Rows | None:
                nonlocal in_transaction
                if not in_transaction and not (query.standalone and conn.autocommit):
                    stack.enter_context(conn.transaction())
                    in_transaction = True
                if self.pipeline:  # a cursor per statement (see the module docstring)
                    own = stack.enter_context(conn.cursor(row_factory=tuple_row, binary=True))
                    return _execute(own, query)
                return _execute(cur, query)

            return drive(plan, execute)


class AsyncPgRunner:
    """Runs plans on an ``AsyncConnection`` or ``AsyncConnectionPool``."""

    def __init__(self, conn: object, *, pipeline: bool, owner: str) -> None:
        if not isinstance(conn, (AsyncConnection, AsyncConnectionPool)):
            raise InvalidConfigError(
                f"{owner} needs a psycopg AsyncConnection or AsyncConnectionPool, got "
                f"{type(conn).__name__} (use the blocking class for blocking connections)"
            )
        self.conn: AsyncConnection[Any] | AsyncConnectionPool[Any] = conn
        self.pipeline = pipeline
        self._lock = asyncio.Lock()

    @asynccontextmanager
    async def _connection(self) -> AsyncIterator[AsyncConnection[Any]]:
        if isinstance(self.conn, AsyncConnectionPool):
            async with self.conn.connection() as conn:
                yield conn
        else:
            async with self._lock:
                yield self.conn

    async def run(self, plan: Plan[Query, R]) -> R:
        async with self._connection() as conn, AsyncExitStack() as stack:
            in_transaction = self.pipeline
            if self.pipeline:
                await stack.enter_async_context(conn.pipeline())
                await stack.enter_async_context(conn.transaction())
            cur = await stack.enter_async_context(conn.cursor(row_factory=tuple_row, binary=True))

            async def execute(query: Query) -> Rows | None:
                nonlocal in_transaction
                if not in_transaction and not (query.standalone and conn.autocommit):
                    await stack.enter_async_context(conn.transaction())
                    in_transaction = True
                if self.pipeline:  # a cursor per statement (see the module docstring)
                    own = conn.cursor(row_factory=tuple_row, binary=True)
                    return await _aexecute(await stack.enter_async_context(own), query)
                return await _aexecute(cur, query)

            return await adrive(plan, execute)
