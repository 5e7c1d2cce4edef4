"""Running plans on SQLite (the standard library's ``sqlite3``): shared by savers and stores.

SQLite is the embedded backend: a file, no server. What that changes for a runner:

- **Transactions decide concurrency.** SQLite has one writer per database file at a time.
  A plan's transaction is opened by its first statement: ``BEGIN IMMEDIATE`` (take the
  write lock now) when that statement is marked ``write``, a plain deferred ``BEGIN`` (a
  read snapshot; in WAL mode readers never wait for writers) otherwise. A plan that must
  read and then write atomically (a put reads its thread's tombstone first) marks its first
  read ``write``. A read-only prefix that is followed by a write (a store batch that reads,
  then writes; a read that refreshes a TTL) is committed first and the write runs in a new
  ``BEGIN IMMEDIATE`` transaction: upgrading a read snapshot in place fails outright
  (``SQLITE_BUSY_SNAPSHOT``) whenever another process committed in between, while a fresh
  write transaction simply waits its turn.
- **Several processes, one file.** Connections this package opens use WAL mode (readers and
  the writer don't block each other), a busy timeout (a writer waits for another process's
  write to finish instead of failing), and ``synchronous=NORMAL``, SQLite's advice for WAL
  mode: a commit is safe from a crash of the process at once, and reaches the disk at the
  next WAL checkpoint, so it costs no fsync. After a power loss or an OS crash the newest
  commits may be rolled back, never half-applied. ``synchronous="full"`` syncs the WAL at
  every commit instead (LangGraph's own SqliteSaver does), at about 0.3 ms a commit or
  much more on a busy disk. Writers of one process to one file queue on a mutex before
  ``BEGIN IMMEDIATE``, so they take turns instead of sleep-polling against each other;
  SQLite's busy timeout only arbitrates between processes.
- **Async without blocking the loop.** ``sqlite3`` only blocks. The async classes run each
  plan on a worker thread of the runner's own, as many as its pool has connections (one
  for a caller's connection): not the event loop's default executor, where plans waiting
  for a connection or for the write lock took every thread, and LangGraph's nodes and
  every other ``asyncio.to_thread`` of the process queued behind them. The connections are
  opened with ``check_same_thread=False`` and each is used by one plan at a time.

Versioned migrations reuse :mod:`.migrations`' idea: a bookkeeping table per component and
an append-only list of migrations. SQLite has no advisory locks; the migration plan's
``BEGIN IMMEDIATE`` serializes concurrent ``setup()`` calls from several processes.
"""

from __future__ import annotations

import asyncio
import contextvars
import math
import os
import sqlite3
import threading
import time
import weakref
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from types import TracebackType
from typing import Any, ClassVar, Literal, TypedDict, TypeVar, cast
from urllib.parse import unquote, urlsplit

from typing_extensions import Self

from ..errors import InvalidConfigError, PoolTimeoutError, SetupRequiredError
from .closing import aclosing_first, closing_first
from .options import check_options, split_options
from .plan import Plan, drive
from .urls import redact

R = TypeVar("R")
P = TypeVar("P")

MIN_VERSION = (3, 24, 0)  # UPSERT (row values and common table expressions are older)
DEFAULT_POOL_SIZE = 4
DEFAULT_BUSY_TIMEOUT = 30.0
DEFAULT_POOL_TIMEOUT = 30.0  # seconds a borrower waits when every connection is out
Synchronous = Literal["normal", "full"]
SYNCHRONOUS: tuple[Synchronous, ...] = ("normal", "full")
DEFAULT_SYNCHRONOUS: Synchronous = "normal"
MEMORY = ":memory:"


@dataclass(frozen=True)
class Query:
    """One statement for a runner to send.

    ``fetch``: rows come back (a list of tuples); otherwise the answer is the row count.
    ``write``: the statement writes, or opens a plan that will write and must not let
    another writer in between (see the module docstring). ``many``: ``params`` is a
    sequence of parameter sets for ``executemany``. ``outside``: a statement SQLite refuses
    inside a transaction (``PRAGMA journal_mode``); it is sent only as a plan's first
    statement and skipped inside a caller's own open transaction. ``alone``: a statement
    that needs no transaction shared with the plan's later statements; as a plan's first
    statement it runs without ``BEGIN``/``COMMIT`` (one statement is its own snapshot, and
    is atomic), and what follows opens a transaction as usual. An ``alone`` write (not
    ``fetch`` nor ``many``) queues on the process's write mutex for itself, and answers
    its row count; on a caller's connection outside autocommit mode (``isolation_level``
    not ``None``) it opens its transaction as any write does.
    """

    sql: str
    params: Sequence[Any] | Mapping[str, Any] = ()
    fetch: bool = False
    write: bool = False
    many: bool = False
    outside: bool = False
    alone: bool = False


Rows = list[tuple[Any, ...]]


def check_version() -> None:
    if sqlite3.sqlite_version_info < MIN_VERSION:
        raise InvalidConfigError(
            f"the SQLite backend needs SQLite {'.'.join(map(str, MIN_VERSION))} or newer; "
            f"this Python's sqlite3 module uses SQLite {sqlite3.sqlite_version}"
        )


def path_from_url(url: str) -> str:
    """The database path of a ``sqlite://`` URL, as SQLAlchemy reads them.

    ``sqlite:///relative.db`` (relative to the working directory), ``sqlite:////abs/x.db``
    (absolute), ``sqlite://`` or ``sqlite:///:memory:`` (in memory). Percent escapes are
    decoded. Options in the query string are :func:`~langgraph_memory_plus.url.from_url`'s
    business; a caller that only wants the path must have removed them.
    """
    parts = urlsplit(url)
    shown = redact(url)  # a mistaken URL may still hold a password
    if parts.scheme != "sqlite":
        raise InvalidConfigError(f"not a sqlite:// URL: {shown!r}")
    if parts.netloc:
        raise InvalidConfigError(
            f"a SQLite URL names a file, not a host: got {shown!r}; use sqlite:///relative.db "
            "or sqlite:////absolute/path.db"
        )
    if parts.query or parts.fragment:
        raise InvalidConfigError(
            f"{shown!r}: options in a SQLite URL are read by from_url(); pass them as "
            "keyword arguments here"
        )
    path = unquote(parts.path[1:] if parts.path.startswith("/") else parts.path)
    return path or MEMORY


def database_path(target: str | os.PathLike[str]) -> str:
    """A path, ``":memory:"``, or a ``sqlite://`` URL, as the path ``sqlite3`` opens."""
    text = os.fspath(target)
    if not isinstance(text, str):
        raise InvalidConfigError(f"a SQLite database path must be text, got {target!r}")
    return path_from_url(text) if text.startswith("sqlite:") else text


_WRITE_LOCKS: dict[str, threading.Lock] = {}
_WRITE_LOCKS_GUARD = threading.Lock()


def _write_lock(path: str) -> threading.Lock:
    """The mutex this process's writers to ``path`` queue on, shared by every pool on it
    (a saver and a store on one file take turns without polling each other)."""
    key = os.path.realpath(path)
    with _WRITE_LOCKS_GUARD:
        return _WRITE_LOCKS.setdefault(key, threading.Lock())


def execute_outside(conn: sqlite3.Connection, sql: str, params: Any = ()) -> None:
    """Run a statement outside any transaction (a ``PRAGMA journal_mode``), trying again
    while SQLite refuses it as locked, within the connection's busy timeout.

    Connections (of one process or several) switching one new file to WAL at once each
    take a shared lock and then ask for the exclusive one: SQLite answers all but one
    "database is locked" at once, without the busy handler (waiting could deadlock). Each
    refused statement has ended and let go of its lock, so trying again finds the file
    switched, or switches it.
    """
    deadline = time.monotonic() + conn.execute("PRAGMA busy_timeout").fetchone()[0] / 1000
    pause = 0.001
    while True:
        try:
            conn.execute(sql, params)
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() + pause > deadline:
                raise
        time.sleep(pause)
        pause = min(pause * 2, 0.05)


def _seconds(name: str, value: object, *, finite: bool = False) -> float:
    """A non-negative number of seconds (``finite``: not infinity either), as a float."""
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not value >= 0
        or (finite and value == math.inf)
    ):
        raise InvalidConfigError(f"{name} must be a non-negative number of seconds, got {value!r}")
    return float(value)


@dataclass
class _Turn:
    """A borrower waiting for a connection: ``served`` once it has one (``conn``) or a
    place to open one (``conn`` is ``None``). ``wake`` (on the pool's lock) wakes it
    alone: waking every waiter at each return cost each of them a turn of the lock."""

    wake: threading.Condition
    conn: sqlite3.Connection | None = None
    served: bool = False


class SqlitePool:
    """The connections of one process to one SQLite database, opened on first use.

    Up to ``max_size`` plans run at once (readers in parallel; writers one at a time, as
    SQLite allows). ``":memory:"`` gets exactly one connection, since every connection to
    ``":memory:"`` would be a database of its own. ``busy_timeout`` (seconds) is how long a
    writer waits for another process's write before ``sqlite3.OperationalError``;
    ``pool_timeout`` how long a call waits when all ``max_size`` connections are out before
    :class:`PoolTimeoutError` (never forever: a plan that hangs holds its connection).
    ``synchronous`` is ``"normal"`` (default) or ``"full"``; see the module docstring.

    A context manager (sync and async) that closes the connections on exit; savers and
    stores built on it share it (``SqliteSaver(pool)``, ``SqliteStore(pool)``).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        max_size: int = DEFAULT_POOL_SIZE,
        busy_timeout: float = DEFAULT_BUSY_TIMEOUT,
        synchronous: Synchronous = DEFAULT_SYNCHRONOUS,
        pool_timeout: float = DEFAULT_POOL_TIMEOUT,
    ) -> None:
        check_version()
        if synchronous not in SYNCHRONOUS:
            raise InvalidConfigError(
                f"synchronous must be one of {', '.join(SYNCHRONOUS)}, got {synchronous!r}"
            )
        if isinstance(max_size, bool) or not isinstance(max_size, int) or max_size < 1:
            raise InvalidConfigError(f"pool_max_size must be a positive integer, got {max_size!r}")
        self.path = database_path(path)
        # "" is a private temporary database per connection, as ":memory:" is.
        self.in_memory = self.path in (MEMORY, "")
        self.max_size = 1 if self.in_memory else max_size
        self.busy_timeout = _seconds("busy_timeout", busy_timeout)
        self.pool_timeout = _seconds("pool_timeout", pool_timeout, finite=True)
        self.synchronous: Synchronous = synchronous
        self.write_lock = threading.Lock() if self.in_memory else _write_lock(self.path)
        # Borrowed and idle connections are counted under one lock; a borrower waits (on
        # a condition of its own) only when all ``max_size`` are out (a semaphore cost a
        # Python-level condition per borrow and per return). Waiting borrowers queue: a connection
        # returned (or a place freed) goes to the first of them, never to a thread that
        # comes later. Left idle, it went to the thread that had just returned it and
        # borrowed again at once (a loop of writes), and the waiters starved until
        # pool_timeout.
        self._lock = threading.Lock()
        self._line: deque[_Turn] = deque()
        self._open_count = 0  # opened and not closed: idle, handed over or borrowed
        self._idle: list[sqlite3.Connection] = []
        self._closed = False
        # Worker pools of the runners on this pool (weakly: a runner dropped early lets
        # its threads end), stopped when it closes.
        self._workers: list[weakref.ref[ThreadPoolExecutor]] = []

    def __repr__(self) -> str:
        return f"SqlitePool({self.path!r}, max_size={self.max_size})"

    def _open(self) -> sqlite3.Connection:
        conn = sqlite3.connect(
            self.path,
            timeout=self.busy_timeout,
            isolation_level=None,  # we send BEGIN/COMMIT ourselves
            check_same_thread=False,  # one plan at a time, possibly on a worker thread
            # Every statement stays prepared: a saver's and a store's on one pool, and
            # the multi-row INSERTs of each row count, pass the default 128.
            cached_statements=512,
        )
        try:
            # synchronous first: on a new file, switching to WAL is a commit of its own.
            conn.execute(f"PRAGMA synchronous={self.synchronous.upper()}")  # a checked name
            execute_outside(conn, "PRAGMA journal_mode=WAL")  # persistent; "memory" for :memory:
        except BaseException:
            conn.close()
            raise
        return conn

    @contextmanager
    def connection(self) -> Iterator[sqlite3.Connection]:
        """Borrow a connection (waiting while ``max_size`` are in use)."""
        conn = self.acquire()
        try:
            yield conn
        finally:
            self.release(conn)

    def acquire(self) -> sqlite3.Connection:
        """Borrow a connection; hand it back with :meth:`release` (what :meth:`connection`
        does, without a generator per call: runners borrow one per plan).
        :class:`PoolTimeoutError` if none comes free within ``pool_timeout`` seconds."""
        with self._lock:
            if self._closed:
                raise InvalidConfigError(f"{self!r} is closed")
            if self._line:  # others wait already: behind them
                conn = self._wait_turn()
            elif self._idle:
                return self._idle.pop()
            elif self._open_count < self.max_size:
                self._open_count += 1
                conn = None
            else:  # every connection is out
                conn = self._wait_turn()
            if conn is not None:
                return conn
        try:
            return self._open()
        except BaseException:
            self._forget_one()
            raise

    def _wait_turn(self) -> sqlite3.Connection | None:
        """Queue (under the lock) until a returned connection is handed over, or a freed
        place (then ``None``: open one). Every connection is out (a plan that hangs, a
        caller holding one): wait at most pool_timeout in all, then say so, rather than
        hang."""
        deadline = time.monotonic() + self.pool_timeout
        turn = _Turn(threading.Condition(self._lock))
        self._line.append(turn)
        try:
            while not turn.served:
                if self._closed:
                    raise InvalidConfigError(f"{self!r} is closed")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise PoolTimeoutError(self.max_size, self.pool_timeout, "SQLite")
                turn.wake.wait(left)
        except BaseException:
            if not turn.served:
                self._line.remove(turn)
            else:  # served as it gave up (an interrupt): what it got is not lost
                self._pass_on(turn.conn)
            raise
        return turn.conn

    def _pass_on(self, conn: sqlite3.Connection | None) -> None:
        """(Under the lock.) A connection, or a place (``None``), that no borrower keeps:
        the next waiter's, else idle; once the pool is closed, closed and forgotten."""
        if self._serve_next(conn):
            return
        if conn is not None and not self._closed:
            self._idle.append(conn)
            return
        self._open_count -= 1
        if conn is not None:
            conn.close()

    def _serve_next(self, conn: sqlite3.Connection | None) -> bool:
        """Give the first waiting borrower ``conn`` (``None``: a place to open one);
        whether one was waiting (none is, once the pool is closed)."""
        if self._closed or not self._line:
            return False
        turn = self._line.popleft()
        turn.conn, turn.served = conn, True
        turn.wake.notify()
        return True

    def _forget_one(self) -> None:
        """A connection was closed (or never opened): its place is free."""
        with self._lock:
            self._pass_on(None)  # a waiter takes the place over

    def release(self, conn: sqlite3.Connection) -> None:
        """Take back a borrowed connection (closed if the pool is, or if it is still in a
        transaction)."""
        with self._lock:
            if not self._closed and not conn.in_transaction:
                self._pass_on(conn)
                return
        try:
            conn.close()
        finally:
            self._forget_one()

    def check(self) -> None:
        """Open (or reuse) a connection and read the schema: fails if the file is unusable."""
        with self.connection() as conn:
            conn.execute("SELECT count(*) FROM sqlite_master").fetchall()

    def serve(self, workers: ThreadPoolExecutor) -> None:
        """Stop ``workers`` (a runner's threads for plans on this pool) when it closes."""
        with self._lock:
            self._workers = [w for w in self._workers if w() is not None]
            self._workers.append(weakref.ref(workers))

    def close(self) -> None:
        """Close idle connections now, and the borrowed ones when they come back; end
        the worker threads of the runners on it (see :meth:`serve`)."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
            self._open_count -= len(idle)
            for turn in self._line:  # waiting borrowers learn it is closed
                turn.wake.notify()
            workers, self._workers = self._workers, []
        for conn in idle:
            conn.close()
        for ref in workers:
            executor = ref()
            if executor is not None:
                executor.shutdown(wait=False)

    async def aclose(self) -> None:
        """:meth:`close` from a worker thread (closing may checkpoint the WAL file)."""
        await asyncio.to_thread(self.close)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()


class _Transaction:
    """One plan's transaction on one connection, opened by its first statement."""

    SAVEPOINT = "lgmp_plan"

    def __init__(self, conn: sqlite3.Connection, write_lock: threading.Lock | None) -> None:
        self.conn = conn
        self.write_lock = write_lock
        self.nested = conn.in_transaction  # the caller's own transaction: use a savepoint
        self.state = "none"  # none | read | write | nested
        self.locked = False

    def execute(self, query: Query) -> Any:
        if query.outside:
            if self.state == "none" and not self.nested:
                execute_outside(self.conn, query.sql, query.params)
            return None
        if not (query.alone and self.state == "none" and not self.nested):
            self._begin(query.write)
        elif query.write:
            if self.conn.isolation_level is None:
                return self._alone_write(query)
            # sqlite3 would open a transaction of its own before the write, and leave it open
            self._begin(True)
        if query.many:
            cursor = self.conn.executemany(query.sql, cast(Any, query.params))
        else:
            cursor = self.conn.execute(query.sql, query.params)
        return cursor.fetchall() if query.fetch else cursor.rowcount

    def _alone_write(self, query: Query) -> Any:
        """A write that is atomic by itself, in autocommit: its own transaction without
        ``BEGIN IMMEDIATE``/``COMMIT``. It queues on the process's write mutex as they do;
        SQLite takes the write lock when the statement starts, before it reads."""
        if self.write_lock is None:
            return self.conn.execute(query.sql, query.params).rowcount
        with self.write_lock:
            return self.conn.execute(query.sql, query.params).rowcount

    def _begin(self, write: bool) -> None:
        if self.state in ("write", "nested") or (self.state == "read" and not write):
            return
        if self.nested:
            self.conn.execute(f"SAVEPOINT {self.SAVEPOINT}")
            self.state = "nested"
            return
        if self.state == "read":
            self.conn.execute("COMMIT")  # the reads are done; writes get a transaction of their own
            self.state = "none"
        if not write:
            self.conn.execute("BEGIN")
            self.state = "read"
            return
        if self.write_lock is not None:
            self.write_lock.acquire()
            self.locked = True
        self.conn.execute("BEGIN IMMEDIATE")
        self.state = "write"

    def finish(self, ok: bool) -> None:
        try:
            if self.state == "nested":
                if not ok:
                    self.conn.execute(f"ROLLBACK TO {self.SAVEPOINT}")
                self.conn.execute(f"RELEASE {self.SAVEPOINT}")
            elif self.state != "none" and self.conn.in_transaction:
                if ok:
                    try:
                        self.conn.execute("COMMIT")
                    except BaseException:
                        if self.conn.in_transaction:
                            self.conn.execute("ROLLBACK")
                        raise
                else:
                    self.conn.execute("ROLLBACK")
        finally:
            if self.locked and self.write_lock is not None:
                self.locked = False
                self.write_lock.release()


class SqliteRunner:
    """Runs plans on a :class:`SqlitePool` or a caller's ``sqlite3.Connection``.

    A caller's connection is used by one plan at a time, under a lock. If it is already
    inside a transaction when a plan starts, the plan runs in a savepoint of it and the
    caller commits (as PostgreSQL's runner does with a caller's open transaction).
    """

    def __init__(
        self, conn: object, *, owner: str, setup: Callable[[], Plan[Query, None]] | None = None
    ) -> None:
        # ``object``: the type is checked here, with an error that names the right class.
        check_version()
        if not isinstance(conn, (SqlitePool, sqlite3.Connection)):
            raise InvalidConfigError(
                f"{owner} needs a sqlite3.Connection or a SqlitePool, got "
                f"{type(conn).__name__} (use {owner}.from_conn_string(path) to open a file)"
            )
        self.conn = conn
        self.owner = owner
        self._lock = threading.Lock()
        self._setup = setup
        self._setup_lock = threading.Lock()
        # The async classes' worker threads (started on first use; they end with the
        # runner, or when its pool closes): one per connection the plans can hold at once.
        self._workers = ThreadPoolExecutor(
            max_workers=conn.max_size if isinstance(conn, SqlitePool) else 1,
            thread_name_prefix=f"lgmp-sqlite-{owner}",
        )
        if isinstance(conn, SqlitePool):
            conn.serve(self._workers)

    def _ensure_setup(self, explicit: Plan[Query, None] | None = None) -> None:
        """Run the component's migrations before its first plan, once per runner: an
        embedded database sets itself up, as LangGraph's ``SqliteSaver`` does (the check
        is one read when the tables are current). ``explicit``: the plan of a ``setup()``
        call, run instead of the automatic one, which it stands for (running both made a
        first ``setup()`` migrate, then check the version again in a second transaction)."""
        with self._setup_lock:  # other plans wait here until the tables are there
            if explicit is not None:
                self._run(explicit)
            elif self._setup is not None:
                self._run(self._setup())
            self._setup = None  # not after a failure: the next call tries again

    def run(self, plan: Plan[Query, R]) -> R:
        try:
            if self._setup is not None:
                self._ensure_setup()
        except BaseException:
            plan.close()
            raise
        return self._run(plan)

    def setup(self, plan: Plan[Query, None]) -> None:
        """Run ``plan``, the component's ``setup()``, in place of the automatic setup."""
        self._ensure_setup(plan)

    async def in_worker(self, call: Callable[[P], R], plan: P) -> R:
        """``call(plan)`` on one of this runner's worker threads, in the caller's context
        (as ``asyncio.to_thread`` would run it)."""
        context = contextvars.copy_context()
        loop = asyncio.get_running_loop()
        try:
            future = loop.run_in_executor(self._workers, context.run, call, plan)
        except RuntimeError:  # its pool closed, and the workers with it
            getattr(plan, "close", lambda: None)()
            raise InvalidConfigError(f"{self.conn!r} is closed") from None
        return await future

    def _run(self, plan: Plan[Query, R]) -> R:
        try:
            pool = self.conn
            if isinstance(pool, SqlitePool):
                conn = pool.acquire()
                try:
                    return self._drive(plan, conn, pool.write_lock)
                finally:
                    pool.release(conn)
            with self._lock:
                return self._drive(plan, pool, None)
        except sqlite3.OperationalError as exc:
            if str(exc).startswith(("no such table", "no such column")):
                raise SetupRequiredError(
                    f"{self.owner}: the database has no tables of this version of "
                    f"langgraph-memory-plus ({exc}); run {self.owner}.setup() to create or "
                    "migrate them"
                ) from exc
            raise
        except sqlite3.ProgrammingError as exc:
            if "same thread" in str(exc):
                raise InvalidConfigError(
                    f"{self.owner} uses its connection from worker threads (its async methods "
                    "run there): open it with sqlite3.connect(path, check_same_thread=False)"
                ) from None
            raise
        finally:
            plan.close()

    @staticmethod
    def _drive(
        plan: Plan[Query, R], conn: sqlite3.Connection, write_lock: threading.Lock | None
    ) -> R:
        transaction = _Transaction(conn, write_lock)
        try:
            result = drive(plan, transaction.execute)
        except BaseException:
            transaction.finish(ok=False)
            raise
        transaction.finish(ok=True)
        return result


def migrate(
    table: str, migrations: Sequence[Sequence[str]], fresh: Sequence[str] = ()
) -> Plan[Query, bool]:
    """Apply the migrations not yet recorded in ``table``, in order, in one transaction.

    ``migrations[v]`` is version ``v``: a sequence of single statements. ``fresh``, if
    given, is the layout of the last version: a file without ``table`` gets it directly,
    and every version recorded, instead of replaying each migration (fewer statements, no
    backfill of rows a new file cannot have), which the plan's result says. A file whose
    versions were deleted but whose ``table`` is there replays them all, so nothing it
    holds is skipped. ``table`` is a constant of the caller. WAL mode is switched on first
    (it is a property of the file).
    """
    yield Query("PRAGMA journal_mode=WAL", outside=True)
    # A read that takes the write lock: no other setup() gets in until this one commits.
    found: Rows = yield Query(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?",
        (table,),
        fetch=True,
        write=True,
    )
    start = 0
    if found:
        rows: Rows = yield Query(f"SELECT coalesce(max(v), -1) FROM {table}", fetch=True)
        start = rows[0][0] + 1
    else:
        yield Query(f"CREATE TABLE {table} (v INTEGER PRIMARY KEY, applied_at REAL NOT NULL)")
    pending = range(start, len(migrations))
    created = bool(fresh) and not found
    for statement in fresh if created else [s for v in pending for s in migrations[v]]:
        yield Query(statement)
    if pending:  # one statement for all of them
        now = time.time()
        yield Query(
            f"INSERT INTO {table} (v, applied_at) VALUES {', '.join('(?, ?)' for _ in pending)}",
            [value for version in pending for value in (version, now)],
        )
    return created


# -- the SQLite half of every driver class --------------------------------------------------


def _refuse_on_loop(owner: str) -> None:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return
    raise asyncio.InvalidStateError(
        f"synchronous calls to {owner} would block the event loop running in this thread; "
        "use its async methods (the 'a'-prefixed ones) from async code"
    )


class SqliteConnectOptions(TypedDict, total=False):
    """How ``from_conn_string`` opens the file: up to ``pool_max_size`` (default 4)
    connections (a call finding them all out waits up to ``pool_timeout`` seconds, default
    30, then raises :class:`PoolTimeoutError`), a writer waits ``busy_timeout`` seconds
    (default 30) for another process's write, and ``synchronous`` (``"normal"`` or
    ``"full"``) says when a commit reaches the disk (see :class:`SqlitePool`)."""

    pool_max_size: int
    busy_timeout: float
    synchronous: Synchronous
    pool_timeout: float


class _SqliteDriver:
    """What both flavours share: the runner and opening a pool from a path or URL."""

    _runner: SqliteRunner
    _options: ClassVar[type]  # the constructor's options (a TypedDict)

    _plans: Any  # the component's plans; their ``setup()`` runs before the first call

    def _connect(self, conn: object) -> None:
        self._runner = SqliteRunner(
            conn, owner=type(self).__name__, setup=lambda: self._plans.setup()
        )

    @classmethod
    def _pool(cls, target: str | os.PathLike[str], options: Mapping[str, Any]) -> SqlitePool:
        """The pool ``from_conn_string`` opens; every option is checked first."""
        check_options(
            f"{cls.__name__}.from_conn_string", options, SqliteConnectOptions, cls._options
        )
        return SqlitePool(
            target,
            max_size=options.get("pool_max_size", DEFAULT_POOL_SIZE),
            busy_timeout=options.get("busy_timeout", DEFAULT_BUSY_TIMEOUT),
            synchronous=options.get("synchronous", DEFAULT_SYNCHRONOUS),
            pool_timeout=options.get("pool_timeout", DEFAULT_POOL_TIMEOUT),
        )

    @classmethod
    def _on_pool(cls, pool: SqlitePool, options: Mapping[str, Any]) -> Self:
        rest = split_options(options, SqliteConnectOptions)[1]
        instance: Self = cast(Any, cls)(pool, **rest)
        return instance


class SqliteSyncDriver(_SqliteDriver):
    """Blocking: plans run on the calling thread (async methods: a worker thread)."""

    def _run(self, plan: Plan[Any, R]) -> R:
        return self._runner.run(plan)

    def setup(self) -> None:
        """Create or migrate the tables; safe to run repeatedly and concurrently. Done
        before the first call anyway; called first, it is that setup, not one more."""
        self._runner.setup(self._plans.setup())

    @classmethod
    @contextmanager
    def _open(
        cls, conn_string: str | os.PathLike[str], options: Mapping[str, Any]
    ) -> Iterator[Self]:
        """``from_conn_string``: open a database file (a path, ``":memory:"`` or a
        ``sqlite:///`` URL) and an instance on it; close both after."""
        with (
            cls._pool(conn_string, options) as pool,
            closing_first(cls._on_pool(pool, options)) as instance,
        ):
            yield instance


class SqliteAsyncDriver(_SqliteDriver):
    """Awaited: each plan runs on a worker thread, so the event loop never waits on disk.

    Nothing binds these classes to an event loop (their connections are thread-safe by
    construction), so their blocking methods also work from any thread that is not running
    an event loop; on a loop they are refused, as for the other async classes, because they
    would stall every coroutine for as long as another process holds the write lock.
    """

    def _bind_loop(self) -> None:
        """No loop to bind (see the class docstring)."""

    def _run(self, plan: Plan[Any, R]) -> R:
        try:
            _refuse_on_loop(type(self).__name__)
        except BaseException:
            plan.close()
            raise
        return self._runner.run(plan)

    async def _arun(self, plan: Plan[Any, R]) -> R:
        return await self._runner.in_worker(self._runner.run, plan)

    async def setup(self) -> None:
        """Async :meth:`SqliteSyncDriver.setup`."""
        await self._runner.in_worker(self._runner.setup, self._plans.setup())

    @classmethod
    @asynccontextmanager
    async def _open(
        cls, conn_string: str | os.PathLike[str], options: Mapping[str, Any]
    ) -> AsyncIterator[Self]:
        """Async :meth:`SqliteSyncDriver._open`: the same arguments."""
        async with (
            cls._pool(conn_string, options) as pool,
            aclosing_first(cls._on_pool(pool, options)) as instance,
        ):
            yield instance
