"""Running plans on PostgreSQL: shared by the checkpointers and the stores.

A runner takes a plan (see :mod:`.plan`) and runs it on one connection: borrowed from
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
import sys
import threading
import time
import weakref
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from contextlib import AsyncExitStack, ExitStack, asynccontextmanager, contextmanager
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Protocol, TypeVar

from psycopg import AsyncConnection, AsyncCursor, Connection, Cursor, OperationalError
from psycopg import ProgrammingError as _ProgrammingError
from psycopg import _queries as pg_queries
from psycopg import errors as pg_errors
from psycopg.conninfo import conninfo_to_dict
from psycopg.pq import Conninfo, Format, TransactionStatus
from psycopg.rows import TupleRow, tuple_row
from psycopg_pool import AsyncConnectionPool, ConnectionPool, PoolTimeout

from ..errors import (
    InvalidConfigError,
    MemoryConnectionError,
    PoolTimeoutError,
    SetupRequiredError,
)
from . import pgarrays
from .connect import CONNECT_TIMEOUT, reason
from .plan import Plan, adrive, before_first_command, drive

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
    script: tuple[str, ...] = ()
    """The statements of a :func:`script` (``sql`` is them joined)."""


def script(statements: Sequence[str], *, fetch: bool = False) -> Query:
    """Parameterless statements sent as one command, in one round trip (the simple query
    protocol, never prepared), instead of one round trip each: ``setup()`` on a fresh
    database sends dozens of DDL statements, and their round trips were most of its time.
    ``fetch``: the last statement's rows come back. Pipeline mode has no simple protocol;
    there they are pipelined one by one."""
    return Query(";\n".join(statements), fetch=fetch, script=tuple(statements))


# Comments, quoted literals and identifiers, dollar-quoted bodies: kept as they are.
_SQL_TOKENS = re.compile(
    r"'(?:[^']|'')*'|\"(?:[^\"]|\"\")*\"|\$(\w*)\$.*?\$\1\$|(?:\s|--[^\n]*)+", re.S
)


_DELIMITERS = frozenset("(),;")


class _Sql(str):
    """The text of one of our statements (what :func:`compact_sql` returns): only these
    have their conversion cached (see :class:`_Statements`). A cursor class of the
    application's that rewrites what it is given (a tracer appending a comment with the
    span's id) passes on plain ``str``, different at every execution, which psycopg's
    own bounded caching serves instead."""

    __slots__ = ()


@lru_cache(maxsize=512)
def compact_sql(sql: str) -> str:
    """``sql`` with its layout whitespace and comments removed.

    psycopg caches the parsing of a query's placeholders only for queries of up to 4 KB
    and parses longer ones at every execution; our statements are laid out for reading,
    and the whitespace alone pushed the common writes over that limit.
    """

    def keep(token: re.Match[str]) -> str:
        text = token.group(0)
        if text[0] in "'\"$":
            return text
        # No space at all next to a delimiter that never joins a neighbour into another
        # token: that alone took the thread index's checkpoint put back under 4 KB.
        before = sql[token.start() - 1] if token.start() else ""
        after = sql[token.end()] if token.end() < len(sql) else ""
        return "" if before in _DELIMITERS or after in _DELIMITERS else " "

    return _Sql(_SQL_TOKENS.sub(keep, sql).strip())


@lru_cache(maxsize=1024)
def _converted(sql: str, encoding: str) -> Any:
    """psycopg's conversion of ``sql``'s placeholders (``%(name)s`` to ``$1``...)."""
    return pg_queries._query2pg_nocache(sql.encode(encoding), encoding)


class _Statements(pg_queries.PostgresQuery):
    """psycopg's query conversion, cached for every statement of ours whatever its length.

    psycopg caches it only for queries of up to 4 KB and converts a longer one again at
    every execution (its cache is meant for application queries of unbounded variety):
    the checkpoint put is over 4 KB (4,367 bytes in schema ``public``), which cost ~90 us
    a put (a tenth of its client CPU). Ours are a fixed set per saver, so all are
    cached, in a cache of their own; only ours (:class:`_Sql`): text a cursor class of
    the application's made of them (OpenTelemetry's sqlcommenter appends the span's id
    to every statement) is unique at every execution, and cached here it held 1,024 of
    them, ~25 MB, for no hit.
    """

    def convert(self, query: Any, vars: Any) -> None:
        if vars is None or type(query) is not _Sql:
            super().convert(query, vars)
            return
        self.query, self._want_formats, self._order, self._parts = _converted(
            query, self._tx.encoding
        )
        self.dump(vars)


# psycopg's hook for a cursor's query class (psycopg's RawCursor uses it too); where a
# psycopg release lacks it, the connection's own cursors (psycopg's own caching) serve.
_CACHING = hasattr(Cursor, "_query_cls") and hasattr(pg_queries, "_query2pg_nocache")


@lru_cache(maxsize=64)
def _caching(factory: type[Any]) -> type[Any] | None:
    """The connection's cursor class with our statements' conversion cached: a subclass,
    so a factory of the application's (a tracing or logging cursor) still sees every
    statement. ``None`` for a cursor that converts queries its own way (client-side
    binding, raw ``$1`` queries)."""
    if not _CACHING or getattr(factory, "_query_cls", None) is not pg_queries.PostgresQuery:
        return None
    return type(factory.__name__, (factory,), {"_query_cls": _Statements, "__slots__": ()})


# Cursor classes whose queries our statements cannot be: client-side binding has no binary
# results, a raw cursor takes $1 placeholders. Where psycopg lacks them, nothing is refused.
_OWN_CONVERSION = tuple(
    (cls, how)
    for cls, how in (
        (getattr(pg_queries, "PostgresClientQuery", None), "binds parameters client-side"),
        (getattr(pg_queries, "PostgresRawQuery", None), "takes raw $1 placeholders"),
    )
    if isinstance(cls, type)
)


def _refuse(factory: Any) -> None:
    """:class:`InvalidConfigError` for a connection whose cursor class converts queries in a
    way our statements cannot run with (psycopg's ``ClientCursor``, ``RawCursor``): every
    call failed with psycopg's own error instead ("client-side cursors don't support
    binary results", or a syntax error at ``%s``), which named neither the cursor class
    nor the remedy."""
    query_cls = getattr(factory, "_query_cls", None)
    for cls, how in _OWN_CONVERSION:
        if isinstance(query_cls, type) and issubclass(query_cls, cls):
            raise InvalidConfigError(
                f"the connection's cursor_factory {factory.__name__} {how}; "
                "langgraph-memory-plus sends %s-style statements bound server-side with "
                "binary results: make the connection's (or the pool's kwargs') "
                "cursor_factory psycopg.Cursor (psycopg.AsyncCursor for async) or a "
                "subclass of it"
            )


def _cursor(conn: Connection[Any]) -> Cursor[TupleRow]:
    """A binary, tuple-row cursor of the connection's class that converts our statements
    once (see _Statements)."""
    factory: Any = conn.cursor_factory
    caching = _caching(factory) if isinstance(factory, type) else None
    if caching is None:
        _refuse(factory)
        return conn.cursor(row_factory=tuple_row, binary=True)
    cur: Cursor[TupleRow] = caching(conn, row_factory=tuple_row)
    cur.format = Format.BINARY
    return cur


def _acursor(conn: AsyncConnection[Any]) -> AsyncCursor[TupleRow]:
    """Async :func:`_cursor`."""
    factory: Any = conn.cursor_factory
    caching = _caching(factory) if isinstance(factory, type) else None
    if caching is None:
        _refuse(factory)
        return conn.cursor(row_factory=tuple_row, binary=True)
    cur: AsyncCursor[TupleRow] = caching(conn, row_factory=tuple_row)
    cur.format = Format.BINARY
    return cur


def _execute(cur: Cursor[TupleRow], query: Query, prepare: bool | None = None) -> Rows | None:
    if query.script:  # a text cursor: binary results need the extended protocol
        with cur.connection.cursor(row_factory=tuple_row) as text:
            text.execute(query.sql, prepare=False)
            while text.nextset():  # the last statement's rows
                pass
            return text.fetchall() if query.fetch else None
    cur.execute(compact_sql(query.sql), query.params, prepare=prepare)
    return cur.fetchall() if query.fetch else None


async def _aexecute(
    cur: AsyncCursor[TupleRow], query: Query, prepare: bool | None = None
) -> Rows | None:
    if query.script:
        async with cur.connection.cursor(row_factory=tuple_row) as text:
            await text.execute(query.sql, prepare=False)
            while text.nextset():
                pass
            return await text.fetchall() if query.fetch else None
    await cur.execute(compact_sql(query.sql), query.params, prepare=prepare)
    return await cur.fetchall() if query.fetch else None


_DISCARDING = re.compile(r"\s*(?:ALTER|DROP)\b", re.IGNORECASE)


def _discards(sql: str) -> bool:
    """Whether ``sql`` (a migration's ``ALTER``/``DROP``) makes psycopg forget its prepared
    statements and deallocate them all on the server.

    In pipeline mode psycopg reads that from the result, possibly only when a later
    statement is fetched or the pipeline syncs, and sends its ``DEALLOCATE ALL`` with
    the next statement, after that statement's own prepare: the statement is then gone
    on the server while psycopg still uses it (``InvalidSqlStatementName`` at its next
    execution: the second put after ``setup()`` migrated a schema, with
    ``pipeline=True``). So after such a statement a pipelined plan prepares nothing, and
    before it commits syncs and sends one unprepared statement, which carries the
    deallocation while nothing new is prepared."""
    return _DISCARDING.match(sql) is not None


def _flush_pending(conn: Connection[Any] | AsyncConnection[Any]) -> bool:
    """Whether psycopg read a discarding result (see :func:`_discards`) in a fetch or a sync
    and holds its ``DEALLOCATE ALL`` for the end of the next ``execute``, after that
    statement's own prepare: the next statement must then not be prepared.

    :func:`_discards` reads our SQL, which cannot tell every such statement (an ``ALTER``
    after a comment, which psycopg knows by its result's ``ALTER TABLE`` tag): this reads
    psycopg's own bookkeeping, where it has it."""
    return bool(getattr(getattr(conn, "_prepared", None), "_to_flush", None))


def _pipelined(query: Query) -> Sequence[Query]:
    """What pipeline mode sends for ``query``: a script's statements one by one."""
    if not query.script:
        return (query,)
    *first, last = query.script
    return [*(Query(one) for one in first), Query(last, fetch=query.fetch)]


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


# -- reaching the server ----------------------------------------------------------------


@lru_cache(maxsize=1)
def conninfo_keywords() -> tuple[str, ...]:
    """The connection parameters this libpq knows (``sslmode``, ``connect_timeout``, ...)."""
    return tuple(sorted(option.keyword.decode() for option in Conninfo.get_defaults()))


def conninfo_params(conninfo: str) -> dict[str, Any]:
    """``conninfo`` (a URL or ``key=value`` text) as parameters; an unknown parameter is an
    ``InvalidConfigError`` naming it and the known ones, before anything connects."""
    try:
        return conninfo_to_dict(conninfo)
    except _ProgrammingError as exc:  # libpq's message names the parameter, not the value
        raise InvalidConfigError(
            f"{reason(exc)}; PostgreSQL connection parameters are {', '.join(conninfo_keywords())}"
        ) from None


def describe(conninfo: str) -> str:
    """Where ``conninfo`` points, without its password: for messages and logs."""
    if "://" in conninfo:
        from .urls import redact

        return redact(conninfo)
    params = conninfo_params(conninfo)
    return " ".join(f"{k}={'***' if k == 'password' else v}" for k, v in params.items())


def unreachable(
    conninfo: str, exc: BaseException, kwargs: Mapping[str, Any] | None = None
) -> MemoryConnectionError:
    """One line: where (password masked) and the server's own reason (it refused the login,
    nothing listens on the port, ...)."""
    secrets = [conninfo_params(conninfo).get("password"), (kwargs or {}).get("password")]
    return MemoryConnectionError(
        f"cannot reach PostgreSQL at {describe(conninfo)}: {reason(exc, secrets)}"
    )


def _probe_kwargs(conninfo: str, kwargs: Mapping[str, Any] | None) -> dict[str, Any]:
    """One connection attempt's options: a short ``connect_timeout`` unless one is given."""
    given = {**conninfo_params(conninfo), **(kwargs or {})}
    return {**(kwargs or {}), "connect_timeout": given.get("connect_timeout", CONNECT_TIMEOUT)}


def probe(conninfo: str, kwargs: Mapping[str, Any] | None = None) -> None:
    """Connect once and close: :func:`unreachable` if the server cannot be had.

    A pool would retry in the background until its timeout and report only
    ``PoolTimeout``, with the server's reason in log warnings; one direct attempt fails
    within seconds and says why.
    """
    try:
        Connection.connect(conninfo, **_probe_kwargs(conninfo, kwargs)).close()
    except OperationalError as exc:
        raise unreachable(conninfo, exc, kwargs) from None


async def aprobe(conninfo: str, kwargs: Mapping[str, Any] | None = None) -> None:
    """Async :func:`probe`."""
    try:
        conn = await AsyncConnection.connect(conninfo, **_probe_kwargs(conninfo, kwargs))
    except OperationalError as exc:
        raise unreachable(conninfo, exc, kwargs) from None
    await conn.close()


@contextmanager
def open_pool(
    conn_string: str, *, min_size: int, max_size: int, prepare_threshold: int | None
) -> Iterator[ConnectionPool[Any]]:
    """A pool that checks connections before lending them, so a dead one is replaced.

    One direct connection first: a server that cannot be reached, or refuses the login,
    is a :class:`MemoryConnectionError` within seconds (see :func:`probe`).
    """
    probe(conninfo=conn_string, kwargs=pool_kwargs(prepare_threshold))

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
    await aprobe(conn_string, pool_kwargs(prepare_threshold))

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


_MISSING_SCHEMA = (pg_errors.UndefinedTable, pg_errors.UndefinedColumn, pg_errors.InvalidSchemaName)


def _setup_required(owner: str, exc: Exception) -> SetupRequiredError:
    """A missing table, column or schema (one of :data:`_MISSING_SCHEMA`) as
    :class:`SetupRequiredError`, for the runner to raise with the driver's error as its
    cause: the usual reason is that ``setup()`` never ran, or ran on an older version of
    the package. (An ``except`` in ``run`` rather than a context manager: a short turn
    runs eight plans.)"""
    return SetupRequiredError(
        f"{owner}: the database has no tables of this version of langgraph-memory-plus "
        f"({reason(exc)}); run {owner}.setup() once to create or migrate them"
    )


class SchemaCheck(Protocol):
    """A check to run before a runner's next plan (see ``migrations.SchemaVersion``)."""

    def pending(self, owner: str) -> Plan[Query, None] | None: ...


def _checked(check: SchemaCheck | None, owner: str, plan: Plan[Query, R]) -> Plan[Query, R]:
    first = check.pending(owner) if check is not None else None
    return plan if first is None else before_first_command(first, plan)


@dataclass
class _Borrowing:
    """How long a runner waits for a pool's connection before asking the server itself.

    Until a connection has been had once, a pool that lends none within
    :data:`CONNECT_TIMEOUT` most likely cannot reach its server (a wrong host, port or
    password): a direct attempt then says why, within seconds, instead of the pool's
    ``PoolTimeout`` after 30. If the attempt succeeds the pool is only slow, and the
    borrow waits the pool's own timeout. After the first connection the pool's timeout
    applies from the start (a busy pool is not a broken server), and a ``PoolTimeout``
    is still checked against the server, to report its reason if it is gone.
    """

    reached: bool = False

    def first(self, pool: ConnectionPool[Any] | AsyncConnectionPool[Any]) -> float:
        return pool.timeout if self.reached else min(pool.timeout, CONNECT_TIMEOUT)


PROBE_INTERVAL = 5.0
"""Seconds a pool's last probe after a borrow timeout stands for the server's state."""


class PgPoolTimeoutError(PoolTimeoutError, PoolTimeout):
    """No connection of a PostgreSQL pool became free in time, and the server answers.

    Also a ``psycopg_pool.PoolTimeout``, which callers of earlier versions catch.
    """

    def __init__(self, pool: ConnectionPool[Any] | AsyncConnectionPool[Any]) -> None:
        PoolTimeout.__init__(
            self,
            f"no PostgreSQL connection of pool {pool.name!r} became free within "
            f"{pool.timeout:g} seconds (all max_size={pool.max_size} are in use); use a "
            "larger pool (pool_max_size) or fewer concurrent callers",
        )
        self.size = pool.max_size
        self.timeout = pool.timeout


class _Prober:
    """A pool's probes of its server after borrow timeouts: one at a time, at most one
    per :data:`PROBE_INTERVAL`; callers meanwhile take the last probe's answer.

    Each probe is a connection outside the pool. One per timed-out borrow turned a busy
    pool into a storm: a pool of 2 under a burst opened hundreds of them, filled the
    server's ``max_connections`` and locked everyone else out. With this gate a pool
    never holds more than its ``max_size`` plus one connection.
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.alock = asyncio.Lock()
        self.at = -PROBE_INTERVAL
        self.failure: str | None = None

    def due(self) -> bool:
        return time.monotonic() - self.at >= PROBE_INTERVAL

    def note(self, failure: MemoryConnectionError | None) -> None:
        self.failure = None if failure is None else str(failure)
        self.at = time.monotonic()

    def verdict(self) -> None:
        if self.failure is not None:
            raise MemoryConnectionError(self.failure)


_PROBERS: weakref.WeakKeyDictionary[Any, _Prober] = weakref.WeakKeyDictionary()
_PROBERS_LOCK = threading.Lock()


def _prober(
    pool: ConnectionPool[Any] | AsyncConnectionPool[Any],
) -> tuple[_Prober, str, dict[str, Any] | None] | None:
    """The pool's prober and what to connect with; ``None`` if the pool computes its
    connection settings (a callable), which a probe could not reproduce."""
    conninfo, kwargs = pool.conninfo, pool.kwargs
    if not isinstance(conninfo, str) or not (kwargs is None or isinstance(kwargs, dict)):
        return None
    with _PROBERS_LOCK:
        found = _PROBERS.get(pool)
        if found is None:
            found = _PROBERS[pool] = _Prober()
    return found, conninfo, kwargs


def _check_server(pool: ConnectionPool[Any]) -> None:
    """After a borrow timed out: :func:`unreachable` if the server is gone (see
    :class:`_Prober`)."""
    if (found := _prober(pool)) is None:
        return
    prober, conninfo, kwargs = found
    with prober.lock:  # a running probe ends within its connect_timeout
        if prober.due():
            try:
                probe(conninfo, kwargs)
            except MemoryConnectionError as exc:
                prober.note(exc)
            else:
                prober.note(None)
    prober.verdict()


async def _acheck_server(pool: AsyncConnectionPool[Any]) -> None:
    """Async :func:`_check_server`."""
    if (found := _prober(pool)) is None:
        return
    prober, conninfo, kwargs = found
    async with prober.alock:
        if prober.due():
            try:
                await aprobe(conninfo, kwargs)
            except MemoryConnectionError as exc:
                prober.note(exc)
            else:
                prober.note(None)
    prober.verdict()


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
        self.owner = owner
        self.schema: SchemaCheck | None = None  # set by the owner once its plans exist
        self._lock = threading.Lock()
        self._borrow = _Borrowing()

    def _getconn(self, pool: ConnectionPool[Any]) -> Connection[Any]:
        """A connection of ``pool`` (see :class:`_Borrowing`); the caller puts it back."""
        conn: Connection[Any]
        try:
            conn = pool.getconn(timeout=self._borrow.first(pool))
        except PoolTimeout:
            _check_server(pool)  # the server's reason, if it is it
            if self._borrow.reached:
                raise PgPoolTimeoutError(pool) from None
            try:  # only slow: wait its timeout
                conn = pool.getconn()
            except PoolTimeout:
                raise PgPoolTimeoutError(pool) from None
        self._borrow.reached = True
        return conn

    def run(self, plan: Plan[Query, R]) -> R:
        try:
            return self._run(_checked(self.schema, self.owner, plan))
        except _MISSING_SCHEMA as exc:
            raise _setup_required(self.owner, exc) from exc

    def _run(self, plan: Plan[Query, R]) -> R:
        # getconn/putconn rather than pool.connection(), and no exit stack unless a
        # transaction opens, as in AsyncPgRunner._run: most calls of a turn are one
        # standalone statement, and these layers were a sixth of the runner's own CPU.
        if not isinstance(self.conn, ConnectionPool):
            with self._lock:
                return self._on(self.conn, plan)
        pool = self.conn
        conn = self._getconn(pool)
        try:
            if conn.autocommit:  # a plan commits (or rolls back) its own transaction
                return self._on(conn, plan)
            with conn:  # commit or roll back, as pool.connection() does
                return self._on(conn, plan)
        finally:
            pool.putconn(conn)

    def _on(self, conn: Connection[Any], plan: Plan[Query, R]) -> R:
        pgarrays.ready(conn)
        if self.pipeline:
            return self._pipelined(conn, plan)
        transaction: ExitStack | None = None
        with _cursor(conn) as cur:

            def execute(query: Query) -> Rows | None:
                nonlocal transaction
                if transaction is None and not (query.standalone and conn.autocommit):
                    transaction = ExitStack()
                    transaction.enter_context(conn.transaction())
                return _execute(cur, query)

            try:
                result = drive(plan, execute)
            except BaseException:
                if transaction is not None:
                    transaction.__exit__(*sys.exc_info())
                raise
            if transaction is not None:
                transaction.close()
        return result

    def _pipelined(self, conn: Connection[Any], plan: Plan[Query, R]) -> R:
        # In pipeline mode the statements are batched anyway; the whole plan runs in one
        # transaction opened first (psycopg pipelines want BEGIN before cursors).
        with ExitStack() as stack:
            pipeline = stack.enter_context(conn.pipeline())
            stack.enter_context(conn.transaction())
            discarded = False  # see _discards

            def execute(query: Query) -> Rows | None:
                nonlocal discarded
                rows: Rows | None = None
                for one in _pipelined(query):  # a cursor per statement (see the module docstring)
                    discarded = discarded or _discards(one.sql)
                    own = stack.enter_context(_cursor(conn))
                    unprepared = discarded or _flush_pending(conn)
                    rows = _execute(own, one, prepare=False if unprepared else None)
                return rows

            result = drive(plan, execute)
            if discarded:
                pipeline.sync()
                stack.enter_context(_cursor(conn)).execute("SELECT 1", prepare=False)
        if _flush_pending(conn):  # a discard read only at the commit: send it now
            idle = conn.info.transaction_status == TransactionStatus.IDLE
            with _cursor(conn) as cur:
                cur.execute("SELECT 1", prepare=False)
            if idle and not conn.autocommit:  # opened by the SELECT: leave none open
                conn.rollback()
        return result


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
        self.owner = owner
        self.schema: SchemaCheck | None = None
        self._lock = asyncio.Lock()
        self._borrow = _Borrowing()

    async def _getconn(self, pool: AsyncConnectionPool[Any]) -> AsyncConnection[Any]:
        """A connection of ``pool`` (see :class:`_Borrowing`); the caller puts it back."""
        conn: AsyncConnection[Any]
        try:
            conn = await pool.getconn(timeout=self._borrow.first(pool))
        except PoolTimeout:
            await _acheck_server(pool)
            if self._borrow.reached:
                raise PgPoolTimeoutError(pool) from None
            try:
                conn = await pool.getconn()
            except PoolTimeout:
                raise PgPoolTimeoutError(pool) from None
        self._borrow.reached = True
        return conn

    async def run(self, plan: Plan[Query, R]) -> R:
        try:
            return await self._run(_checked(self.schema, self.owner, plan))
        except _MISSING_SCHEMA as exc:
            raise _setup_required(self.owner, exc) from exc

    async def _run(self, plan: Plan[Query, R]) -> R:
        # getconn/putconn rather than pool.connection(), and no exit stack unless a
        # transaction opens: most calls of a turn are one standalone statement, and these
        # layers were about 10 us of client CPU of each (84 us a call at concurrency 8,
        # now 75; psycopg's pool alone, 69).
        if not isinstance(self.conn, AsyncConnectionPool):
            async with self._lock:
                return await self._on(self.conn, plan)
        pool = self.conn
        conn = await self._getconn(pool)
        try:
            if conn.autocommit:  # a plan commits (or rolls back) its own transaction
                return await self._on(conn, plan)
            async with conn:  # commit or roll back, as pool.connection() does
                return await self._on(conn, plan)
        finally:
            await pool.putconn(conn)

    async def _on(self, conn: AsyncConnection[Any], plan: Plan[Query, R]) -> R:
        pgarrays.ready(conn)
        if self.pipeline:
            return await self._pipelined(conn, plan)
        cur = _acursor(conn)
        transaction: AsyncExitStack | None = None

        async def execute(query: Query) -> Rows | None:
            nonlocal transaction
            if transaction is None and not (query.standalone and conn.autocommit):
                transaction = AsyncExitStack()
                await transaction.enter_async_context(conn.transaction())
            return await _aexecute(cur, query)

        try:
            result = await adrive(plan, execute)
        except BaseException:
            if transaction is not None:
                await transaction.__aexit__(*sys.exc_info())
            raise
        finally:
            await cur.close()
        if transaction is not None:
            await transaction.aclose()
        return result

    async def _pipelined(self, conn: AsyncConnection[Any], plan: Plan[Query, R]) -> R:
        # In pipeline mode the statements are batched anyway; the whole plan runs in one
        # transaction opened first (psycopg pipelines want BEGIN before cursors).
        async with AsyncExitStack() as stack:
            pipeline = await stack.enter_async_context(conn.pipeline())
            await stack.enter_async_context(conn.transaction())
            discarded = False  # see _discards

            async def execute(query: Query) -> Rows | None:
                nonlocal discarded
                rows: Rows | None = None
                for one in _pipelined(query):  # a cursor per statement (see the module docstring)
                    discarded = discarded or _discards(one.sql)
                    own = await stack.enter_async_context(_acursor(conn))
                    unprepared = discarded or _flush_pending(conn)
                    rows = await _aexecute(own, one, prepare=False if unprepared else None)
                return rows

            result = await adrive(plan, execute)
            if discarded:
                await pipeline.sync()
                mark = await stack.enter_async_context(_acursor(conn))
                await mark.execute("SELECT 1", prepare=False)
        if _flush_pending(conn):  # a discard read only at the commit: send it now
            idle = conn.info.transaction_status == TransactionStatus.IDLE
            async with _acursor(conn) as cur:
                await cur.execute("SELECT 1", prepare=False)
            if idle and not conn.autocommit:  # opened by the SELECT: leave none open
                await conn.rollback()
        return result
