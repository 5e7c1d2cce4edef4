"""``from_url``: one entry point that opens a checkpointer and a store on any backend.

::

    from langgraph_memory_plus.url import from_url

    with from_url("postgresql://user:pass@host/db", ttl=60 * 24) as memory:
        graph = builder.compile(checkpointer=memory.checkpointer, store=memory.store)
        graph.invoke(inputs, {"configurable": {"thread_id": "t1"}})

    async with from_url("redis://localhost:6379/0") as memory:   # the asyncio classes
        graph = builder.compile(checkpointer=memory.checkpointer, store=memory.store)
        await graph.ainvoke(inputs, config)

One name for both calling styles: ``from_url(...)`` only reads and checks the URL and the
options (a bad URL or option fails right there); the ``with`` statement opens the blocking
classes and ``async with`` the asyncio ones, so the calling style you already write picks the
flavour and there is no ``afrom_url`` twin to keep in step. Leaving the block closes what was
opened (pools, clients, files), in reverse order.

URLs: ``postgresql://`` (or ``postgres://``), ``redis://``, ``rediss://``,
``redis+cluster://`` (``rediss+cluster://``), ``sqlite:///relative.db`` /
``sqlite:////absolute.db`` (SQLAlchemy's convention; ``sqlite://`` is in memory) and
``memory://`` (LangGraph's ``InMemorySaver`` / ``InMemoryStore``). With no URL,
``LANGGRAPH_MEMORY_URL`` is read, and without it a SQLite file in the user's data directory
(``$XDG_DATA_HOME`` or ``~/.local/share``, then ``langgraph-memory-plus/memory.db``) is used,
so a first run needs no server and a second run finds what the first one stored.

Options have the same name as keyword arguments and as URL query parameters
(``?ttl=1440&keep_last=10``); a query parameter that is not one of them is left in the URL
for the driver (``sslmode=require``). See :data:`OPTIONS` for which backend takes which; an
option a backend does not take is an error, never silently ignored.

Errors are one line and never show a password: a bad URL or option raises
:class:`~langgraph_memory_plus.errors.InvalidConfigError`, a server that cannot be reached
:class:`MemoryConnectionError`, both naming the URL with its password masked.
"""

from __future__ import annotations

import asyncio
import difflib
import inspect
import math
import os
import re
from collections.abc import Callable, Generator, Sequence
from contextlib import AsyncExitStack, ExitStack
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal, TypedDict, cast
from urllib.parse import quote, unquote

from langgraph.checkpoint.serde.base import SerializerProtocol
from langgraph.store.base import IndexConfig
from typing_extensions import Unpack

from .drivers.connect import need, reason
from .drivers.plan import adrive, drive
from .drivers.sqlite import path_from_url
from .drivers.urls import check_conninfo, check_port, check_userinfo, redact, redis_database, scrub
from .encryption import ENV_KEYS, Encryption
from .errors import InvalidConfigError, MemoryConnectionError, MemoryPlusError

if TYPE_CHECKING:  # the savers and stores import their drivers' packages' code lazily
    from .checkpoint.saver import AsyncDriver, CheckpointSaverBase, SyncDriver
    from .observability.core import Listener
    from .store.base import AsyncStore, StoreBase, SyncStore

ENV_VAR = "LANGGRAPH_MEMORY_URL"
APP_DIR = "langgraph-memory-plus"
DEFAULT_FILE = "memory.db"

SCHEMES = {
    "postgresql": "postgres",
    "postgres": "postgres",
    "redis": "redis",
    "rediss": "redis",
    "redis+cluster": "redis",
    "rediss+cluster": "redis",
    "sqlite": "sqlite",
    "memory": "memory",
}
EXAMPLES = "postgresql://, redis://, rediss://, redis+cluster://, sqlite:///file.db, memory://"
SERVERS = frozenset({"postgres", "redis", "sqlite"})
EVERY = frozenset(SCHEMES.values())


class StoreUnavailableError(MemoryPlusError, NotImplementedError):
    """This version of the package has no store for the URL's backend."""


# -- options ------------------------------------------------------------------------------


def _number(name: str, value: Any, *, minimum: float, strict: bool) -> float:
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            raise InvalidConfigError(f"{name} must be a number, got {value!r}") from None
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or (value <= minimum if strict else value < minimum)
    ):
        bound = f"greater than {minimum:g}" if strict else f"at least {minimum:g}"
        raise InvalidConfigError(f"{name} must be a number {bound}, got {value!r}")
    return float(value)


def _integer(name: str, value: Any, minimum: int) -> int:
    if isinstance(value, str) and re.fullmatch(r"\s*[+]?\d+\s*", value):
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise InvalidConfigError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return value


def _boolean(name: str, value: Any) -> bool:
    if isinstance(value, str):
        word = value.strip().lower()
        if word in ("1", "true", "yes", "on"):
            return True
        if word in ("0", "false", "no", "off"):
            return False
    if isinstance(value, bool):
        return value
    raise InvalidConfigError(f"{name} must be true or false, got {value!r}")


def _name(name: str, value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise InvalidConfigError(f"{name} must be a non-empty string, got {value!r}")
    return value


def _names(name: str, value: Any) -> list[str]:
    """A list of names, or one comma-separated string of them (as in a URL)."""
    if isinstance(value, str):
        value = [part.strip() for part in value.split(",") if part.strip()]
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise InvalidConfigError(f"{name} must be a list of names, got {value!r}")
    return list(value)


def _threshold(name: str, value: Any) -> int | None:
    """``prepare_threshold``: a count, or none/off for no server-side prepared statements."""
    if value is None or (isinstance(value, str) and value.strip().lower() in ("none", "off")):
        return None
    return _integer(name, value, minimum=0)


def _fence(name: str, value: Any) -> Any:
    """``fence``: on/off in a URL, or a ``FenceOptions`` given as a keyword."""
    from .checkpoint.fence import FenceOptions

    return value if isinstance(value, FenceOptions) else _boolean(name, value)


def _fence_lease(fence: Any, lease_s: float) -> Any:
    """``fence`` with ``fence_lease_s`` folded in (``FenceOptions(lease_s=...)``)."""
    from .checkpoint.fence import FenceOptions

    if fence is True:
        return FenceOptions(lease_s=lease_s)
    if isinstance(fence, FenceOptions):
        if fence.lease_s != lease_s:
            raise InvalidConfigError(
                f"fence_lease_s={lease_s:g} differs from fence=FenceOptions(lease_s="
                f"{fence.lease_s:g}); give the lease once"
            )
        return fence
    raise InvalidConfigError("fence_lease_s needs the fence on: add fence=true")


def _choice(name: str, value: Any, *, choices: tuple[str, ...]) -> str:
    word = value.strip().lower() if isinstance(value, str) else None
    if word not in choices:
        raise InvalidConfigError(f"{name} must be one of {', '.join(choices)}, got {value!r}")
    return word


def _encryption(name: str, value: Any) -> Any:
    """An ``Encryption``, or in a URL ``env``: the keys of the environment
    (``LANGGRAPH_MEMORY_ENCRYPTION_KEYS``); ``off``: none even if that is set."""
    if isinstance(value, str):
        word = value.strip().lower()
        if word in ("off", "none", "false", "0"):
            return None
        if word != "env":
            raise InvalidConfigError(f"{name} in a URL is 'env' or 'off'; pass keys as {name}=")
        found = Encryption.from_env()
        if found is None:
            raise InvalidConfigError(f"{name}=env but {ENV_KEYS} is not set")
        return found
    if value is not None and not isinstance(value, Encryption):
        raise InvalidConfigError(f"{name} must be an Encryption, got {type(value).__name__}")
    return value


def _object(name: str, value: Any) -> Any:
    if isinstance(value, str):
        raise InvalidConfigError(f"{name} cannot be given as text in a URL; pass it as {name}=")
    return value


@dataclass(frozen=True)
class Option:
    """One ``from_url`` option: how to read it, which backends take it, what it means."""

    read: Callable[[str, Any], Any]
    backends: frozenset[str]
    meaning: str


OPTIONS: dict[str, Option] = {
    "ttl": Option(
        partial(_number, minimum=0, strict=True),
        SERVERS,
        "minutes: a thread expires that long after its last write, a store item after its "
        "last write (or read); checkpoint_ttl / store_ttl set one of them apart",
    ),
    "checkpoint_ttl": Option(
        partial(_number, minimum=0, strict=True),
        SERVERS,
        "minutes a thread lives after its last write (instead of ttl, for threads only)",
    ),
    "store_ttl": Option(
        partial(_number, minimum=0, strict=True),
        SERVERS,
        "minutes a store item lives after its last write or read (instead of ttl, for items only)",
    ),
    "refresh_on_read": Option(
        _boolean, SERVERS, "reads also restart the TTL (default: no for threads, yes for items)"
    ),
    "keep_last": Option(
        partial(_integer, minimum=1), SERVERS, "keep the newest N checkpoints per thread"
    ),
    "list_memory_mib": Option(
        partial(_number, minimum=0, strict=False),
        SERVERS,
        "MiB the saver may keep of recent list channels (messages) to skip re-reading and "
        "re-serializing them (default 64; 0 turns it off)",
    ),
    "transcripts": Option(
        _boolean, SERVERS, "keep each thread's clean chat history (saver.threads.transcript)"
    ),
    "transcript_ttl": Option(
        partial(_number, minimum=0, strict=True),
        SERVERS,
        "minutes a transcript line is kept (default: forever)",
    ),
    "fence": Option(
        _fence,
        SERVERS,
        "one writer per thread: a run takes its thread's fence as it starts, and writes of "
        "a run another one superseded are refused (FencedWriteError); or a FenceOptions",
    ),
    "fence_lease_s": Option(
        partial(_number, minimum=0, strict=True),
        SERVERS,
        "seconds a run's fence lease lasts (with fence on): until then acquire without force "
        "is refused; on Redis the fence key expires 15 minutes after the lease or the last "
        "fenced write",
    ),
    "thread_index_keys": Option(
        _names, SERVERS, "metadata keys the thread index indexes, comma separated (user_id)"
    ),
    "schema": Option(_name, frozenset({"postgres"}), "PostgreSQL schema for the tables"),
    "key_prefix": Option(_name, frozenset({"redis"}), "first part of every Redis key"),
    "pool_min_size": Option(
        partial(_integer, minimum=0), frozenset({"postgres"}), "connections kept open"
    ),
    "pool_max_size": Option(
        partial(_integer, minimum=1),
        frozenset({"postgres", "redis", "sqlite"}),
        "most connections open at once",
    ),
    "pool_timeout": Option(
        partial(_number, minimum=0, strict=True),
        frozenset({"redis", "sqlite"}),
        "seconds a call waits for a free pooled connection before PoolTimeoutError",
    ),
    "prepare_threshold": Option(
        _threshold,
        frozenset({"postgres"}),
        "executions before psycopg prepares a statement; none (or off) for PgBouncer in "
        "transaction mode",
    ),
    "busy_timeout": Option(
        partial(_number, minimum=0, strict=False),
        frozenset({"sqlite"}),
        "seconds a SQLite writer waits for another process's write",
    ),
    "synchronous": Option(
        partial(_choice, choices=("normal", "full")),
        frozenset({"sqlite"}),
        "when a SQLite commit reaches the disk: normal (at WAL checkpoints; safe from "
        "process crashes) or full (every commit)",
    ),
    "vector_backend": Option(
        partial(_choice, choices=("auto", "pgvector", "exact")),
        frozenset({"postgres"}),
        "how the store scores search(query=...): auto (pgvector where the server has it, "
        "else exactly in SQL), pgvector (an error without it), exact",
    ),
    "hnsw": Option(
        _boolean,
        frozenset({"postgres"}),
        "with pgvector, an HNSW index for searches with a query and no prefix or filter "
        "(approximate)",
    ),
    "setup": Option(_boolean, EVERY, "run setup() (migrations) on entering; default true"),
    "index": Option(_object, EVERY, "the store's semantic search config (keyword only)"),
    "serde": Option(_object, EVERY, "the checkpointer's serializer (keyword only)"),
    "encryption": Option(
        _encryption,
        SERVERS,
        "an Encryption (keys) for everything stored that carries user text; in a URL "
        "'env' (LANGGRAPH_MEMORY_ENCRYPTION_KEYS, also read when the option is not given) "
        "or 'off'",
    ),
    "listeners": Option(
        _object, SERVERS, "callables given an event per saver and store operation (keyword only)"
    ),
}


def _split(url: str) -> tuple[str, str, str]:
    """``url`` as (everything before the query, the query, ``#fragment`` or "").

    Split by hand: ``urlunsplit`` would turn ``sqlite:////abs.db`` into ``sqlite://abs.db``.
    """
    rest, hash_, fragment = url.partition("#")
    base, _, query = rest.partition("?")
    return base, query, hash_ + fragment


def _check_address(url: str, backend: str) -> None:
    """The checks that must pass before any parser sees ``url`` (see :mod:`.drivers.urls`)."""
    if backend == "redis":
        redis_database(url)
    elif backend == "postgres":
        check_userinfo(url)
        check_port(url)


def _sqlite_path(url: str) -> str:
    """:func:`path_from_url`, its error (which quotes the URL) with any password masked."""
    try:
        return path_from_url(url)
    except InvalidConfigError as exc:
        message = scrub(str(exc), url)
    raise InvalidConfigError(message)


def default_path() -> Path:
    """Where ``from_url()`` keeps its SQLite file when no URL is given anywhere."""
    base = os.environ.get("XDG_DATA_HOME", "")
    root = Path(base) if os.path.isabs(base) else Path.home() / ".local" / "share"
    return root / APP_DIR / DEFAULT_FILE


def default_url() -> str:
    """``LANGGRAPH_MEMORY_URL``, else the SQLite file of :func:`default_path`."""
    path = quote(str(default_path()), safe="/\\:")  # a '%', '?' or '#' in it stays text
    return os.environ.get(ENV_VAR, "").strip() or f"sqlite:///{path}"


# -- opening ------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Enter:
    """Step: enter a context manager (an async one with ``async with``); answers its value."""

    cm: Any


@dataclass(frozen=True)
class _Call:
    """Step: call ``fn`` (awaiting what it returns, if awaitable); answers its result.

    ``reach``: failing means the backend named so cannot be reached.
    """

    fn: Callable[[], Any]
    reach: str | None = None


@dataclass(frozen=True)
class _Defer:
    """Step: call ``fn`` (awaiting it, if awaitable) when the block is left."""

    fn: Callable[[], Any]


_Step = _Enter | _Call | _Defer
_Opening = Generator[_Step, Any, tuple[Any, Any]]


async def _maybe_await(fn: Callable[[], Any]) -> None:
    result = fn()
    if inspect.isawaitable(result):
        await result


class Memory:
    """A checkpointer and a store opened from one URL; see :func:`from_url`.

    ``with`` opens the blocking classes, ``async with`` the asyncio ones; ``checkpointer``
    and ``store`` are there inside the block. ``url`` is the URL with its password masked.

    Typed as this package's savers and stores (``checkpointer.threads``,
    ``sweep_expired``, ``store.start_ttl_sweeper``...); ``with`` gives a :class:`SyncMemory`
    and ``async with`` an :class:`AsyncMemory`, whose store's sweeper methods are blocking
    or awaited. Only ``memory://`` (for tests) hands out LangGraph's ``InMemorySaver`` and
    ``InMemoryStore``, which have none of those extras.
    """

    def __init__(self, url: str, backend: str, target: str, options: dict[str, Any]) -> None:
        self.url = redact(url)
        self.backend = backend
        self._raw = url
        self._target = target
        self._options = options
        self._opened: tuple[Any, Any] | None = None
        self._stack: ExitStack | AsyncExitStack | None = None

    def __repr__(self) -> str:
        state = "open" if self._opened else "not open"
        return f"<Memory {self.url} ({state})>"

    @property
    def checkpointer(self) -> CheckpointSaverBase:
        """The checkpointer, for ``builder.compile(checkpointer=...)``."""
        saver: CheckpointSaverBase = self._open_parts()[0]
        return saver

    @property
    def store(self) -> StoreBase:
        """The store, for ``builder.compile(store=...)``."""
        store = self._open_parts()[1]
        if isinstance(store, str):
            raise StoreUnavailableError(store)
        result: StoreBase = store
        return result

    @property
    def checkpoint_ttl(self) -> float | None:
        """Minutes a thread lives after its last write (``checkpoint_ttl``, else ``ttl``)."""
        return self._ttl("checkpoint_ttl")

    @property
    def store_ttl(self) -> float | None:
        """Minutes a store item lives (``store_ttl``, else ``ttl``)."""
        return self._ttl("store_ttl")

    def _ttl(self, name: str) -> float | None:
        minutes: float | None = self._options.get(name, self._options.get("ttl"))
        return minutes

    def _open_parts(self) -> tuple[Any, Any]:
        if self._opened is None:
            raise InvalidConfigError(
                f"{self!r}: use it in a 'with' (or 'async with') block, and its checkpointer "
                "and store inside the block"
            )
        return self._opened

    # -- the context managers -----------------------------------------------------------

    def _start(self) -> None:
        if self._stack is not None:
            raise InvalidConfigError(f"{self!r} is already open; open another from_url()")

    def __enter__(self) -> SyncMemory:
        self._start()
        stack = self._stack = ExitStack()
        try:
            self._opened = drive(self._open(is_async=False), partial(self._sync_step, stack))
        except BaseException:
            self._close_sync()
            raise
        return cast("SyncMemory", self)  # the same object: its parts are the blocking ones

    def __exit__(self, *exc: object) -> None:
        self._close_sync()

    def _close_sync(self) -> None:
        stack, self._stack, self._opened = self._stack, None, None
        assert isinstance(stack, ExitStack)
        stack.close()

    async def __aenter__(self) -> AsyncMemory:
        self._start()
        stack = self._stack = AsyncExitStack()
        try:
            self._opened = await adrive(self._open(is_async=True), partial(self._async_step, stack))
        except BaseException:
            await self._close_async()
            raise
        return cast("AsyncMemory", self)  # the same object: its parts are the asyncio ones

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self._close_async()

    async def _close_async(self) -> None:
        stack, self._stack, self._opened = self._stack, None, None
        assert isinstance(stack, AsyncExitStack)
        await stack.aclose()

    def _sync_step(self, stack: ExitStack, step: _Step) -> Any:
        if isinstance(step, _Enter):
            return stack.enter_context(step.cm)
        if isinstance(step, _Defer):
            stack.callback(step.fn)
            return None
        try:
            return step.fn()
        except Exception as exc:
            if step.reach is None:
                raise
            raise self._unreachable(step.reach, exc) from None

    async def _async_step(self, stack: AsyncExitStack, step: _Step) -> Any:
        if isinstance(step, _Enter):
            if hasattr(step.cm, "__aenter__"):
                return await stack.enter_async_context(step.cm)
            return stack.enter_context(step.cm)
        if isinstance(step, _Defer):
            stack.push_async_callback(_maybe_await, step.fn)
            return None
        try:
            result = step.fn()
            return await result if inspect.isawaitable(result) else result
        except Exception as exc:
            if step.reach is None:
                raise
            raise self._unreachable(step.reach, exc) from None

    def _unreachable(self, what: str, exc: Exception) -> MemoryConnectionError:
        """One line naming the URL without its password, and the driver's first line."""
        why = scrub(reason(exc), self._raw)
        return MemoryConnectionError(f"cannot reach {what} at {self.url}: {why}")

    # -- what each backend opens, written once for both flavours --------------------------

    def _open(self, is_async: bool) -> _Opening:
        opener = {
            "postgres": self._postgres,
            "redis": self._redis,
            "sqlite": self._sqlite,
            "memory": self._memory,
        }[self.backend]
        saver, store = yield from opener(is_async)
        if self._options.get("setup", True) and self.backend != "memory":
            yield _Call(saver.setup)
            if not isinstance(store, str):
                yield _Call(store.setup)
        if not isinstance(store, str) and hasattr(store, "_before_close"):
            yield _Defer(store._before_close)  # stops a TTL sweeper the caller started
        return saver, store

    def _component_options(self, minutes: float | None, *names: str) -> dict[str, Any]:
        """The constructor options of a saver (or store) among ``names``, its TTL of
        ``minutes``, and the listeners."""
        o = self._options
        options: dict[str, Any] = {k: o[k] for k in (*names, "listeners") if k in o}
        if minutes is not None:
            ttl = {"default_ttl": minutes}
            if "refresh_on_read" in o:
                ttl["refresh_on_read"] = o["refresh_on_read"]
            options["ttl"] = ttl
        return options

    def _saver_options(self) -> dict[str, Any]:
        return self._component_options(
            self.checkpoint_ttl,
            "keep_last",
            "serde",
            "transcripts",
            "transcript_ttl",
            "thread_index_keys",
            "list_memory_mib",
            "encryption",
            "fence",
        )

    def _store_options(self, *names: str) -> dict[str, Any]:
        return self._component_options(self.store_ttl, "index", "encryption", *names)

    def _postgres(self, is_async: bool) -> _Opening:
        from .checkpoint.postgres import AsyncPostgresSaver, PostgresSaver
        from .drivers.postgres import DEFAULT_PREPARE_THRESHOLD, open_async_pool, open_pool
        from .store.postgres import AsyncPostgresStore, PostgresStore

        o, target = self._options, self._target
        pool = yield _Enter(  # the pool connects once first: MemoryConnectionError if it cannot
            (open_async_pool if is_async else open_pool)(
                target,
                min_size=o.get("pool_min_size", 1),
                max_size=o.get("pool_max_size", 10),
                prepare_threshold=o.get("prepare_threshold", DEFAULT_PREPARE_THRESHOLD),
            )
        )
        schema = {"schema": o["schema"]} if "schema" in o else {}
        saver_cls = AsyncPostgresSaver if is_async else PostgresSaver
        store_cls = AsyncPostgresStore if is_async else PostgresStore
        store_options = self._store_options("vector_backend", "hnsw")
        return (
            saver_cls(pool, **schema, **self._saver_options()),
            store_cls(pool, **schema, **store_options),
        )

    def _redis(self, is_async: bool) -> _Opening:
        from .checkpoint.redis import AsyncRedisSaver, RedisSaver
        from .drivers.redis import aopen_client, open_client

        o = self._options
        options = {name: o[name] for name in ("pool_max_size", "pool_timeout") if name in o}
        # Connects (an async cluster learns its nodes) and pings: MemoryConnectionError if
        # the server cannot be had.
        client = yield _Call(
            partial(aopen_client if is_async else open_client, self._target, **options)
        )
        yield _Defer(client.aclose if is_async else client.close)
        prefix = {"key_prefix": o["key_prefix"]} if "key_prefix" in o else {}
        saver_cls = AsyncRedisSaver if is_async else RedisSaver
        saver = saver_cls(client, **prefix, **self._saver_options())
        try:
            from .store.redis import AsyncRedisStore, RedisStore
        except ImportError:
            return saver, (
                "this version of langgraph-memory-plus has no Redis store yet: use "
                "memory.checkpointer with Redis, and a postgresql:// or sqlite:/// URL "
                "for the store"
            )
        store_cls = AsyncRedisStore if is_async else RedisStore
        return saver, store_cls(client, **prefix, **self._store_options())

    def _sqlite(self, is_async: bool) -> _Opening:
        from .checkpoint.sqlite import AsyncSqliteSaver, SqliteSaver
        from .drivers.sqlite import SqlitePool
        from .store.sqlite import AsyncSqliteStore, SqliteStore

        o = self._options
        if self._target == str(default_path()):
            default_path().parent.mkdir(parents=True, exist_ok=True)
        sizes: dict[str, Any] = {"max_size": o["pool_max_size"]} if "pool_max_size" in o else {}
        for name in ("busy_timeout", "synchronous", "pool_timeout"):
            if name in o:
                sizes[name] = o[name]
        pool = yield _Enter(SqlitePool(self._target, **sizes))
        check = partial(asyncio.to_thread, pool.check) if is_async else pool.check
        yield _Call(check, "the SQLite database")
        saver_cls = AsyncSqliteSaver if is_async else SqliteSaver
        store_cls = AsyncSqliteStore if is_async else SqliteStore
        return saver_cls(pool, **self._saver_options()), store_cls(pool, **self._store_options())

    def _memory(self, is_async: bool) -> _Opening:
        from langgraph.checkpoint.memory import InMemorySaver
        from langgraph.store.memory import InMemoryStore

        o = self._options
        saver = InMemorySaver(serde=o.get("serde"))
        store = InMemoryStore(index=o["index"]) if "index" in o else InMemoryStore()
        return saver, store
        yield


class SyncMemory(Memory):
    """What ``with from_url(...) as memory`` gives: the blocking saver and store.

    A type only: ``memory`` is the :class:`Memory` itself, whose parts are these classes.
    """

    @property
    def checkpointer(self) -> SyncDriver:
        saver: SyncDriver = self._open_parts()[0]
        return saver

    @property
    def store(self) -> SyncStore:
        return cast("SyncStore", super().store)


class AsyncMemory(Memory):
    """What ``async with from_url(...) as memory`` gives: the asyncio saver and store.

    A type only, as :class:`SyncMemory`.
    """

    @property
    def checkpointer(self) -> AsyncDriver:
        saver: AsyncDriver = self._open_parts()[0]
        return saver

    @property
    def store(self) -> AsyncStore:
        return cast("AsyncStore", super().store)


class UrlOptions(TypedDict, total=False):
    """The keyword arguments of :func:`from_url` (:data:`OPTIONS` says what each means and
    which backend takes it); typed, so a type checker flags a misspelt one."""

    ttl: float
    checkpoint_ttl: float
    store_ttl: float
    refresh_on_read: bool
    keep_last: int
    list_memory_mib: float
    schema: str
    key_prefix: str
    pool_min_size: int
    pool_max_size: int
    pool_timeout: float
    prepare_threshold: int | None
    busy_timeout: float
    synchronous: Literal["normal", "full"]
    thread_index_keys: Sequence[str]
    transcripts: bool
    transcript_ttl: float | None
    fence: Any
    fence_lease_s: float
    vector_backend: Literal["auto", "pgvector", "exact"]
    hnsw: bool
    setup: bool
    index: IndexConfig
    serde: SerializerProtocol
    listeners: Sequence[Listener]
    encryption: Encryption | None


def _driver_parameters(backend: str) -> frozenset[str]:
    """The URL query parameters the backend's driver reads itself (``sslmode=require``)."""
    if backend == "postgres":
        need("postgres")
        from .drivers.postgres import conninfo_keywords

        return frozenset(conninfo_keywords())
    if backend == "redis":
        need("redis")
        from .drivers.redis import url_parameters

        return url_parameters()
    return frozenset()


def _did_you_mean(name: str, backend: str | None) -> str:
    """`` (did you mean 'x'?)`` for the closest of our options (and, in a URL, the
    driver's parameters), else nothing."""
    known = [*OPTIONS, *(sorted(_driver_parameters(backend)) if backend else ())]
    close = difflib.get_close_matches(name, known, n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _driver_note(backend: str) -> str:
    """What else a URL may carry: the few Redis URL parameters by name; for PostgreSQL,
    libpq's (about 40, listed in its documentation) only in general."""
    if backend == "postgres":
        return (
            "; libpq's connection parameters (sslmode, connect_timeout, application_name, "
            "...) pass through to the driver"
        )
    driver = sorted(_driver_parameters(backend))
    return f", and the driver's {', '.join(driver)}" if driver else ""


def from_url(url: str | None = None, **options: Unpack[UrlOptions]) -> Memory:
    """A checkpointer and a store for ``url``, opened by ``with`` or ``async with``.

    ``url``: see the module docstring; ``None`` reads ``LANGGRAPH_MEMORY_URL``, else uses a
    SQLite file in the user's data directory. ``options`` (also accepted as URL query
    parameters, with the same names): ``ttl`` (minutes, threads and store items alike),
    ``checkpoint_ttl`` and ``store_ttl`` (minutes, for one of them instead of ``ttl``),
    ``refresh_on_read``, ``keep_last``,
    ``transcripts``, ``transcript_ttl`` (minutes) and ``thread_index_keys`` (the thread index),
    ``schema`` and ``prepare_threshold`` (PostgreSQL; ``none`` for PgBouncer in transaction
    mode), ``vector_backend`` and ``hnsw`` (the PostgreSQL store's semantic search),
    ``key_prefix`` (Redis), ``pool_min_size`` (PostgreSQL),
    ``pool_max_size``, ``pool_timeout`` (Redis and SQLite, seconds to wait for a free connection),
    ``busy_timeout`` (SQLite, seconds), ``synchronous`` (SQLite: ``normal``, the default,
    or ``full`` to sync every commit to disk), ``setup`` (default true: run the
    migrations on entering), and, as keyword arguments only, ``index`` (the store's
    semantic search), ``serde`` (the checkpointer's serializer) and ``listeners`` (given
    to the saver and the store).

    Raises ``InvalidConfigError`` for a bad URL or option, at once; entering the block
    raises :class:`MemoryConnectionError` when the backend cannot be reached.
    """
    if url is None:
        url = default_url()
    if not isinstance(url, str):
        raise InvalidConfigError(f"from_url needs a URL string, got {type(url).__name__}")
    shown = redact(url)
    scheme, sep, _ = url.partition("://")
    if not sep and url.startswith("sqlite:"):
        scheme, sep = "sqlite", ":"
    backend = SCHEMES.get(scheme.lower()) if sep else None
    if backend is None:
        what = f"unsupported URL scheme {scheme!r}" if sep else "not a URL"
        raise InvalidConfigError(f"{what}: {shown}; use one of {EXAMPLES}")
    if backend in ("postgres", "redis"):
        need(backend)  # a missing driver names its extra, at once
    _check_address(url, backend)
    base, query, fragment = _split(url)
    given: dict[str, Any] = {}
    rest: list[str] = []  # the driver's own parameters, passed on exactly as written
    for segment in filter(None, query.split("&")):
        raw_name, _, raw_value = segment.partition("=")
        name, value = unquote(raw_name), unquote(raw_value)
        if name in OPTIONS:
            if name in given:
                raise InvalidConfigError(f"{name} appears twice in {shown}")
            given[name] = OPTIONS[name].read(name, value)
        elif name in _driver_parameters(backend):
            rest.append(segment)
        else:
            raise InvalidConfigError(
                f"unknown option {name!r} in {shown}{_did_you_mean(name, backend)}; "
                f"options are {', '.join(OPTIONS)}{_driver_note(backend)}"
            )
    keywords: dict[str, Any] = dict(options)
    for name, given_value in keywords.items():
        if name not in OPTIONS:
            raise InvalidConfigError(
                f"unknown option {name!r} for from_url{_did_you_mean(name, None)}; "
                f"options are {', '.join(OPTIONS)}"
            )
        value = OPTIONS[name].read(name, given_value)
        if name in given and given[name] != value:
            raise InvalidConfigError(
                f"{name} is given twice, differently: {given[name]!r} in the URL "
                f"({shown}) and {value!r} as an argument"
            )
        given[name] = value
    for name in given:
        if backend not in OPTIONS[name].backends:
            takes = ", ".join(sorted(OPTIONS[name].backends))
            raise InvalidConfigError(
                f"option {name!r} does not apply to {shown} (it is for: {takes})"
            )
    if "fence_lease_s" in given:
        given["fence"] = _fence_lease(given.get("fence"), given.pop("fence_lease_s"))
    if "encryption" not in given and backend in SERVERS:
        env = Encryption.from_env()
        if env is not None:
            given["encryption"] = env
    if backend == "sqlite":
        target = _sqlite_path(base + fragment)
    elif backend == "memory":
        target = ""
    else:
        target = base + ("?" + "&".join(rest) if rest else "") + fragment
        if backend == "postgres":
            check_conninfo(target)
    return Memory(url, backend, target, given)


__all__ = [
    "OPTIONS",
    "AsyncMemory",
    "Memory",
    "MemoryConnectionError",
    "StoreUnavailableError",
    "SyncMemory",
    "UrlOptions",
    "default_path",
    "default_url",
    "from_url",
    "redact",
]
