"""Running plans on Redis: shared by the Redis checkpointers and stores.

Plans yield :class:`Eval` (a named Lua script on keys of one hash slot, atomic on a
single node and in Redis Cluster alike) or :class:`Scan` (admin paths only: listing
every thread). Runners register the scripts once and send them with ``EVALSHA``,
loading them again when the server has forgotten them (e.g. after a restart).

Scripts and batches go to the server packed by hiredis on a connection of the client's
pool (:class:`_Wire`), not through redis-py's command methods: a put's script has about
fifty arguments, and redis-py's per-command Python (argument encoding, script and
observability wrappers) cost about as much as the rest of the put's client work.
"""

from __future__ import annotations

import asyncio
import inspect
import re
import weakref
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from functools import partial
from typing import Any, TypeVar, cast
from urllib.parse import quote, unquote, urlsplit

import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.asyncio.connection
import redis.cluster
from redis.asyncio.retry import Retry as AsyncRetry
from redis.backoff import ExponentialBackoff
from redis.exceptions import (
    AskError,
    ClusterDownError,
    MovedError,
    NoScriptError,
    RedisClusterException,
    ResponseError,
    TryAgainError,
)
from redis.retry import Retry

from ..errors import InvalidConfigError, MemoryConnectionError, PoolTimeoutError
from .connect import CONNECT_TIMEOUT, reason
from .plan import Plan, adrive, drive
from .urls import redact, redis_database, scrub

R = TypeVar("R")

SyncClient = redis.Redis | redis.cluster.RedisCluster
AsyncClient = redis.asyncio.Redis | redis.asyncio.cluster.RedisCluster
CLUSTER_CLIENTS = (redis.cluster.RedisCluster, redis.asyncio.cluster.RedisCluster)


@dataclass(frozen=True)
class Eval:
    """Run the script registered as ``script`` on ``keys`` (all in one hash slot)."""

    script: str
    keys: Sequence[bytes]
    args: Sequence[bytes | str | int | float]


@dataclass(frozen=True)
class Scan:
    """Every key matching a glob pattern, across all nodes of a cluster."""

    match: bytes


@dataclass(frozen=True)
class Batch:
    """Plain commands sent in one pipeline (not a transaction), on any hash slots: the
    replies come back as a list, in order. For reads and idempotent writes only.

    With ``then``, the script runs after the commands and its reply is the answer. On a
    single node both go in one round trip (the pipeline keeps their order); on a
    cluster, where the commands' slots may be anywhere, the script follows the pipeline.
    """

    commands: Sequence[tuple[Any, ...]]
    then: Eval | None = None


_ONE_KEY = frozenset(
    {b"ZADD", b"ZREM", b"ZRANGE", b"ZSCORE", b"ZCARD", b"PEXPIRE", b"PERSIST", b"PTTL"}
    | {b"HGET", b"HMGET"}
)
"""Commands whose only key is their first argument (as batches send them)."""


def _one_node(client: redis.cluster.RedisCluster, batch: Batch) -> redis.Redis | None:
    """The client of the one node that serves every key of ``batch``, when all are in one
    hash slot (else ``None``).

    redis-py's cluster pipeline spends several times a plain pipeline's Python on each
    command, and a put's thread pays for it twice over while the graph's own thread holds
    the GIL: a thread-index step 1 (four ``ZADD`` of one slot) took about 3 ms of a chat
    turn's input put that way, against about 0.3 ms on the node's own client.
    """
    keys = [_first_key(args) for args in batch.commands]
    if not keys or any(key is None for key in keys):
        return None
    keyslot = cast(Any, client).keyslot
    slot = keyslot(keys[0])
    if any(keyslot(key) != slot for key in keys[1:]):
        return None
    return _node_of(client, slot)


def _slot_node(client: redis.cluster.RedisCluster, keys: Sequence[bytes]) -> redis.Redis | None:
    """The client of the node serving a script's keys (one hash slot), if it has any."""
    if not keys:
        return None
    return _node_of(client, cast(Any, client).keyslot(keys[0]))


def _node_of(client: redis.cluster.RedisCluster, slot: int) -> redis.Redis | None:
    try:
        node = client.nodes_manager.get_node_from_slot(slot)
    except RedisClusterException:  # slots not covered (a node lost): redis-py's path
        return None
    return cast("redis.Redis | None", node.redis_connection)


def _first_key(args: tuple[Any, ...]) -> Any:
    """The key a batched command routes by: a one-key command's first argument, an
    ``EVAL``'s or ``EVALSHA``'s first key (its keys share a slot, as every script's);
    ``None`` for others."""
    name = _utf8_name(args[0]) if args else b""
    if name in _ONE_KEY and len(args) >= 2:
        return args[1]
    if name in (b"EVAL", b"EVALSHA") and len(args) >= 4 and int(args[2]) >= 1:
        return args[3]
    return None


def _utf8_name(name: Any) -> bytes:
    return name.upper().encode() if isinstance(name, str) else bytes(name).upper()


_hiredis_pack: Callable[[tuple[Any, ...]], bytes] | None
try:
    from hiredis import pack_command as _hiredis_pack
except ImportError:  # redis-py without hiredis: the same bytes from Python
    _hiredis_pack = None


def _pack(args: Sequence[Any]) -> bytes:
    """One command in the Redis protocol. Arguments are bytes, str (UTF-8), int or float,
    as redis-py takes them."""
    if _hiredis_pack is not None:
        try:
            packed: bytes = _hiredis_pack(tuple(args))
            return packed
        except TypeError:  # bytearray, memoryview: spelled out below
            pass
    parts = [b"*%d\r\n" % len(args)]
    for arg in args:
        if isinstance(arg, bool):
            raise redis.DataError("a command argument must not be a bool")
        if isinstance(arg, str):
            arg = arg.encode()
        elif isinstance(arg, (int, float)):
            arg = repr(arg).encode()
        else:
            arg = bytes(arg)
        parts.append(b"$%d\r\n%b\r\n" % (len(arg), arg))
    return b"".join(parts)


def _evalsha(script: Any, command: Eval) -> tuple[Any, ...]:
    return ("EVALSHA", script.sha, len(command.keys), *command.keys, *command.args)


def _pool_args(pool: Any) -> tuple[str, ...]:
    """What ``get_connection`` takes: nothing since redis-py 5.3, a command name before."""
    try:
        param = inspect.signature(pool.get_connection).parameters.get("command_name")
    except (TypeError, ValueError):
        return ()
    return ("EVALSHA",) if param is not None and param.default is param.empty else ()


def _replies(read: Callable[[], Any], n: int) -> list[Any]:
    """``n`` replies, an error reply as its exception (every reply is read, so the
    connection stays in step)."""
    out: list[Any] = []
    for _ in range(n):
        try:
            out.append(read())
        except ResponseError as exc:
            out.append(exc)
    return out


def _refused(reply: Any) -> bool:
    return isinstance(reply, NoScriptError)


def _missing(replies: list[Any]) -> bool:
    return any(isinstance(r, NoScriptError) for r in replies)


def _by_source(
    commands: Sequence[Sequence[Any]], replies: list[Any], sources: Mapping[str, str]
) -> list[Sequence[Any]]:
    """The commands the server refused for a script it forgot, to send again: each
    ``EVALSHA`` of a known script as ``EVAL`` of its source, which cannot be refused so
    (a ``SCRIPT FLUSH`` landing between the scripts' loading and the resend refused it
    again, and the call failed with ``NoScriptError``) and loads the script as it runs."""
    again: list[Sequence[Any]] = []
    for command, reply in zip(commands, replies, strict=True):
        if not isinstance(reply, NoScriptError):
            continue
        source = sources.get(command[1]) if _utf8_name(command[0]) == b"EVALSHA" else None
        again.append(command if source is None else ("EVAL", source, *command[2:]))
    return again


def _raised(replies: list[Any]) -> list[Any]:
    for reply in replies:
        if isinstance(reply, Exception):
            raise reply
    return replies


_REDIRECTED = (
    MovedError,
    AskError,
    TryAgainError,
    ClusterDownError,
    redis.ConnectionError,
    redis.TimeoutError,
)
"""A cluster node's answers that send a command back through redis-py's cluster client
(which follows redirections and refreshes its slots): every script is idempotent."""


class _Wire:
    """Packed commands on a connection of a blocking client's pool, their replies read
    raw (scripts and the commands batches send have no reply callbacks), with the
    connection's retry on connection errors as redis-py's own path."""

    def __init__(self, client: redis.Redis) -> None:
        self.pool = client.connection_pool
        self._args = _pool_args(self.pool)

    def send(self, commands: Sequence[Sequence[Any]]) -> list[Any]:
        packed = b"".join([_pack(c) for c in commands])
        pool = self.pool
        conn: Any = cast(Any, pool).get_connection(*self._args)

        def exchange() -> list[Any]:
            conn.send_packed_command([packed])
            return _replies(conn.read_response, len(commands))

        try:
            replies: list[Any] = conn.retry.call_with_retry(
                exchange, lambda _error: conn.disconnect()
            )
            return replies
        finally:
            pool.release(conn)


# asyncio's own on Python 3.11.3+, else the async-timeout package: redis-py's choice
_deadline: Callable[[float | None], Any] = redis.asyncio.connection.async_timeout  # type: ignore[attr-defined]


def _plain(conn: Any) -> bool:
    """Whether an asyncio connection's exchange can skip redis-py's per-command wrapping:
    no health check due before a command, and no maintenance notices (on RESP3 they
    stretch a read's timeout while it runs; RESP2 has none). Push frames of other kinds
    are the parser's, on either path."""
    if getattr(conn, "health_check_interval", 0):
        return False
    if getattr(conn, "protocol", 2) in (2, "2", None):
        return True
    config = getattr(conn, "maint_notifications_config", None)
    return config is None or getattr(config, "enabled", True) is False


async def _exchange_plain(conn: Any, packed: bytes, n: int) -> list[Any]:
    """Send ``packed`` and read ``n`` replies under one socket timeout for the exchange.

    redis-py's asyncio connection gives each write an ``asyncio.wait_for`` (a task of
    its own on Python 3.11) and each reply a timeout context; a script call paid about
    60 us of client CPU for that against 30-45 us here. Failures end as redis-py's
    do: the connection is dropped (its reply may be in flight), a timeout is a
    ``TimeoutError``, an ``OSError`` a ``ConnectionError`` (the retry's to handle)."""
    if not conn.is_connected:
        await conn.connect()
    out: list[Any] = []
    try:
        async with _deadline(conn.socket_timeout):
            writer = conn._writer
            writer.write(packed)
            await writer.drain()
            read = conn._parser.read_response
            for _ in range(n):
                out.append(await read())  # an error reply comes back as its exception
    except asyncio.TimeoutError:
        await conn.disconnect(nowait=True)
        raise redis.TimeoutError("Timeout reading from Redis") from None
    except OSError as exc:
        await conn.disconnect(nowait=True)
        raise redis.ConnectionError(f"Error while talking to Redis: {exc}") from exc
    except BaseException:
        await conn.disconnect(nowait=True)
        raise
    return out


class _AsyncWire:
    """:class:`_Wire` for a ``redis.asyncio`` client."""

    def __init__(self, client: redis.asyncio.Redis) -> None:
        self.pool = client.connection_pool
        self._args = _pool_args(self.pool)

    async def send(self, commands: Sequence[Sequence[Any]]) -> list[Any]:
        packed = b"".join([_pack(c) for c in commands])
        pool = self.pool
        conn: Any = await cast(Any, pool).get_connection(*self._args)

        async def exchange() -> list[Any]:
            if _plain(conn):
                return await _exchange_plain(conn, packed, len(commands))
            await conn.send_packed_command([packed])
            out: list[Any] = []
            for _ in range(len(commands)):
                try:
                    out.append(await conn.read_response())
                except ResponseError as exc:
                    out.append(exc)
            return out

        async def fail(_error: BaseException) -> None:
            await conn.disconnect()

        try:
            replies: list[Any] = await conn.retry.call_with_retry(exchange, fail)
            return replies
        finally:
            await pool.release(conn)


def glob_escape(text: str) -> str:
    """``text`` as a literal inside a Redis ``SCAN MATCH`` pattern."""
    return re.sub(r"([*?\[\]\\])", r"\\\1", text)


def _check_client(client: Any, allowed: tuple[type, ...], owner: str) -> None:
    if not isinstance(client, allowed):
        names = ", ".join(t.__name__ for t in allowed)
        raise InvalidConfigError(f"{owner} needs one of {names}, got {type(client).__name__}")
    if cast(Any, client).get_encoder().decode_responses:
        raise InvalidConfigError(
            f"{owner} stores binary values: give it a client made with decode_responses=False"
        )


def _client_options(kwargs: dict[str, Any], *, is_async: bool = False) -> dict[str, Any]:
    """Defaults for the clients this package opens from a URL.

    A short retry on connection errors (every script is idempotent, so a retry after a
    lost reply is safe), of the asyncio kind for an asyncio client (redis-py warns when
    given the blocking one), and no maintenance notifications: with them on, redis-py 8's
    asyncio pool skips its check for connections a server restart left dead.
    """
    retry = (AsyncRetry if is_async else Retry)(ExponentialBackoff(cap=0.5, base=0.05), 2)
    options: dict[str, Any] = {
        "retry": retry,
        "retry_on_error": [redis.ConnectionError, redis.TimeoutError],
    }
    try:
        from redis.maint_notifications import MaintNotificationsConfig
    except ImportError:  # redis-py before 7
        pass
    else:
        options["maint_notifications_config"] = MaintNotificationsConfig(enabled=False)
    return {**options, **kwargs}


DEFAULT_POOL_SIZE = 100
DEFAULT_POOL_TIMEOUT = 30.0


def _pool_exhausted(exc: redis.ConnectionError) -> bool:
    """Whether a blocking pool gave up waiting (redis-py words it so since 2.x)."""
    return str(exc) == "No connection available."


class _BlockingPool(redis.BlockingConnectionPool):
    """A pool whose callers wait (bounded) for a free connection, failing with our error."""

    def get_connection(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().get_connection(*args, **kwargs)  # type: ignore[no-untyped-call]
        except redis.ConnectionError as exc:
            if not _pool_exhausted(exc):
                raise
        raise PoolTimeoutError(self.max_connections, self.timeout)


class _AsyncBlockingPool(redis.asyncio.BlockingConnectionPool):
    """Async :class:`_BlockingPool`."""

    async def get_connection(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return await super().get_connection(*args, **kwargs)  # type: ignore[no-untyped-call]
        except redis.ConnectionError as exc:
            if not _pool_exhausted(exc):
                raise
        raise PoolTimeoutError(self.max_connections, self.timeout)


# redis.asyncio's RedisCluster has no pool class to swap: its nodes raise
# MaxConnectionsError when full. The clients we open get a gate instead, as many places
# as each node has connections, that callers wait at (bounded) before each command.
_GATES: weakref.WeakKeyDictionary[Any, tuple[asyncio.Semaphore, int, float]] = (
    weakref.WeakKeyDictionary()
)


@asynccontextmanager
async def _gate(client: Any) -> AsyncIterator[None]:
    found = _GATES.get(client)
    if found is None:
        yield
        return
    gate, size, timeout = found
    try:
        await asyncio.wait_for(gate.acquire(), timeout)
    except asyncio.TimeoutError:
        waited = False
    else:
        waited = True
    if not waited:
        raise PoolTimeoutError(size, timeout)
    try:
        yield
    finally:
        gate.release()


def _pool_options(url: str, size: int | None, timeout: float | None) -> tuple[int, float]:
    redis_database(url)  # checks the user info, the port and the database first
    size = DEFAULT_POOL_SIZE if size is None else size
    timeout = DEFAULT_POOL_TIMEOUT if timeout is None else timeout
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise InvalidConfigError(f"pool_max_size must be an integer >= 1, got {size!r}")
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
        raise InvalidConfigError(f"pool_timeout must be a number of seconds > 0, got {timeout!r}")
    return size, float(timeout)


def url_parameters() -> frozenset[str]:
    """The query parameters redis-py reads from a URL (``?socket_timeout=5``): parsed
    ones, and the client and SSL settings it passes on as text."""
    import inspect

    from redis.connection import URL_QUERY_ARGUMENT_PARSERS, AbstractConnection, SSLConnection

    passed = {
        name
        for cls in (AbstractConnection, SSLConnection)
        for name in inspect.signature(cls.__init__).parameters
        if name.startswith("ssl_") or name in ("client_name", "username", "password")
    }
    return frozenset(URL_QUERY_ARGUMENT_PARSERS) | passed


def _split_scheme(url: str) -> tuple[str, bool]:
    scheme, sep, rest = url.partition("://")
    if not sep:
        raise InvalidConfigError("a Redis URL looks like redis://host:6379/0")
    if scheme.endswith("+cluster"):
        return f"{scheme[: -len('+cluster')]}://{rest}", True
    return url, False


def _opened(make: Callable[[], R], url: str) -> R:
    """``make()``, a redis-py ``ValueError`` (which may quote the URL) masked."""
    try:
        return make()
    except ValueError as exc:
        message = scrub(str(exc).splitlines()[0] if str(exc) else "", url)
    raise InvalidConfigError(f"bad Redis URL {redact(url)}: {message}")


def check_url(url: str) -> None:
    """An ``InvalidConfigError`` for a query parameter redis-py does not know (it would
    pass it on to the connection class, which fails with a ``TypeError`` at the first
    command)."""
    known = url_parameters()
    query = url.partition("#")[0].partition("?")[2]
    for segment in filter(None, query.split("&")):
        name = unquote(segment.partition("=")[0])
        if name not in known:
            raise InvalidConfigError(
                f"unknown Redis URL parameter {name!r}; redis-py reads {', '.join(sorted(known))}"
            )


def _connect_options(url: str, kwargs: dict[str, Any]) -> dict[str, Any]:
    """A short connect timeout unless the URL or the caller sets one: an unreachable host
    fails in seconds, not after the system's TCP timeout."""
    if "socket_connect_timeout" in url or "socket_connect_timeout" in kwargs:
        return kwargs
    return {"socket_connect_timeout": CONNECT_TIMEOUT, **kwargs}


def sync_client_from_url(
    url: str,
    *,
    pool_max_size: int | None = None,
    pool_timeout: float | None = None,
    **kwargs: Any,
) -> SyncClient:
    """A client for ``redis://``, ``rediss://`` or ``redis+cluster://`` (``rediss+cluster://``).

    Its pool (one per node on a cluster) holds up to ``pool_max_size`` connections; a call
    that finds them all busy waits up to ``pool_timeout`` seconds, then raises
    :class:`PoolTimeoutError`.
    """
    check_url(url)
    size, timeout = _pool_options(url, pool_max_size, pool_timeout)
    target, cluster = _split_scheme(url)
    kwargs = _connect_options(url, kwargs)
    pool_class = partial(_BlockingPool, timeout=timeout)
    options = {**kwargs, "max_connections": size}
    if cluster:
        return _opened(
            lambda: redis.cluster.RedisCluster.from_url(
                target, connection_pool_class=pool_class, **options
            ),
            url,
        )
    pool = _opened(lambda: _BlockingPool.from_url(url, timeout=timeout, **options), url)
    return redis.Redis.from_pool(pool)


def async_client_from_url(
    url: str,
    *,
    pool_max_size: int | None = None,
    pool_timeout: float | None = None,
    **kwargs: Any,
) -> AsyncClient:
    """Async :func:`sync_client_from_url`; await :func:`initialize` before sharing it."""
    check_url(url)
    size, timeout = _pool_options(url, pool_max_size, pool_timeout)
    target, cluster = _split_scheme(url)
    kwargs = _connect_options(url, kwargs)
    if cluster:
        options = {**kwargs, "max_connections": size}
        client = _opened(
            lambda: redis.asyncio.cluster.RedisCluster.from_url(target, **options), url
        )
        _GATES[client] = (asyncio.Semaphore(size), size, timeout)
        return client
    options = {**_client_options(kwargs, is_async=True), "max_connections": size}
    apool = _opened(lambda: _AsyncBlockingPool.from_url(url, timeout=timeout, **options), url)
    return redis.asyncio.Redis.from_pool(apool)


async def initialize(client: AsyncClient) -> None:
    """Discover an async cluster client's nodes before concurrent use.

    A fresh ``redis.asyncio`` cluster client whose first commands run concurrently races
    on discovering the cluster (``'NoneType' object has no attribute 'writelines'``).
    """
    if isinstance(client, redis.asyncio.cluster.RedisCluster):
        await client.initialize()


_UNREACHABLE = (redis.RedisError, redis.exceptions.RedisClusterException, OSError)


_NO_PASSWORD = re.compile(
    r"must be called with the client already authenticated|NOAUTH|Authentication required", re.I
)


def unreachable(url: str, exc: BaseException) -> MemoryConnectionError:
    """One line: the URL with its password masked, and redis-py's reason.

    A server that wants a password and got none answers redis-py's first command, which
    is ``HELLO`` since redis-py 5 and says so in words about ``HELLO``: that one is told
    plainly.
    """
    try:
        secret = unquote(urlsplit(url).password or "")
    except ValueError:
        secret = ""
    why = reason(exc, [secret])
    if not secret and isinstance(exc, redis.AuthenticationError) and _NO_PASSWORD.search(why):
        why = "password required: the server asks for one and the URL has none (redis://:password@host)"
    return MemoryConnectionError(f"cannot reach Redis at {redact(url)}: {why}")


def open_client(url: str, **kwargs: Any) -> SyncClient:
    """:func:`sync_client_from_url`, checked with a ``PING``: a server that cannot be
    reached or refuses the password is a :class:`MemoryConnectionError` at once."""
    try:
        client = sync_client_from_url(url, **kwargs)
    except _UNREACHABLE as exc:  # a cluster client connects to learn the slots
        raise unreachable(url, exc) from None
    try:
        client.ping()
    except _UNREACHABLE as exc:
        client.close()
        raise unreachable(url, exc) from None
    return client


async def aopen_client(url: str, **kwargs: Any) -> AsyncClient:
    """Async :func:`open_client`, the cluster's nodes discovered (:func:`initialize`)."""
    try:
        client = async_client_from_url(url, **kwargs)
    except _UNREACHABLE as exc:
        raise unreachable(url, exc) from None
    try:
        await initialize(client)  # a cluster learns its nodes before any concurrent use
        await client.ping()
    except _UNREACHABLE as exc:
        await client.aclose()
        raise unreachable(url, exc) from None
    return client


_CONNECTING = (redis.ConnectionError, redis.TimeoutError, RedisClusterException, OSError)
"""What a client raises when it cannot connect (``AuthenticationError`` is one)."""


def _client_url(client: object) -> str:
    """Where a client of the caller's own connects, as a URL (password percent-encoded, so
    :func:`unreachable` can mask it): its pool's settings, or a cluster's first node."""
    nodes = getattr(client, "nodes_manager", None)
    if nodes is not None:
        kwargs = dict(getattr(nodes, "connection_kwargs", {}) or {})
        first = next(iter(getattr(nodes, "startup_nodes", {}) or {}), "")
        scheme, place = "redis+cluster", str(first)
    else:
        kwargs = dict(getattr(getattr(client, "connection_pool", None), "connection_kwargs", {}))
        scheme = "unix" if kwargs.get("path") else "redis"
        place = str(
            kwargs.get("path") or f"{kwargs.get('host', 'localhost')}:{kwargs.get('port', 6379)}"
        )
        place += "" if kwargs.get("path") else f"/{kwargs.get('db', 0)}"
    user, password = kwargs.get("username") or "", kwargs.get("password") or ""
    auth = f"{quote(str(user), safe='')}:{quote(str(password), safe='')}@" if password else ""
    return f"{scheme}://{auth}{place}"


class _FirstContact:
    """Until a client of the caller's own has served a plan, a failure to connect is a
    one-line :class:`MemoryConnectionError` naming where (password masked) and why, as
    ``from_conn_string`` reports it; afterwards redis-py's errors pass as they are (a lost
    connection mid-run is the driver's to report, and the caller's to retry)."""

    def __init__(self, client: object) -> None:
        self.client = client
        self.reached = False

    @contextmanager
    def watch(self) -> Iterator[None]:
        if self.reached:
            yield
            return
        try:
            yield
        except _CONNECTING as exc:
            if isinstance(exc, PoolTimeoutError) or (
                isinstance(exc, redis.ConnectionError) and _pool_exhausted(exc)
            ):
                raise  # a busy pool, not an unreachable server
            raise unreachable(_client_url(self.client), exc) from None
        self.reached = True


class RedisRunner:
    """Runs plans on a blocking ``Redis`` or ``RedisCluster`` client."""

    def __init__(self, client: object, scripts: Mapping[str, str], *, owner: str) -> None:
        # ``object``: the type is checked here, with an error that names the right class.
        _check_client(client, (redis.Redis, redis.cluster.RedisCluster), owner)
        self.client = cast(SyncClient, client)
        self._scripts = {name: self.client.register_script(src) for name, src in scripts.items()}
        self._by_sha = {self._scripts[name].sha: src for name, src in scripts.items()}
        self._contact = _FirstContact(client)
        # per node client (one on a single node): its wire, None for a single-connection
        # client (redis-py's own path keeps its lock); a node gone from the cluster goes
        self._wires: weakref.WeakKeyDictionary[redis.Redis, _Wire | None] = (
            weakref.WeakKeyDictionary()
        )

    def _wire(self, client: redis.Redis) -> _Wire | None:
        try:
            return self._wires[client]
        except KeyError:
            wire = None if client.connection is not None else _Wire(client)
            self._wires[client] = wire
            return wire

    def _send(self, client: Any, commands: Sequence[Sequence[Any]]) -> list[Any]:
        """The commands' replies (an error reply as its exception), in one round trip on a
        node; scripts the server forgot (a restart, ``SCRIPT FLUSH``) are loaded again
        and the commands they refused are sent again, in their order."""
        replies = self._raw(client, commands)
        if _missing(replies):
            for source in self._by_sha.values():
                client.script_load(source)
            again = _by_source(commands, replies, self._by_sha)
            more = iter(self._raw(client, again))
            replies = [next(more) if _refused(r) else r for r in replies]
        return replies

    def _raw(self, client: Any, commands: Sequence[Sequence[Any]]) -> list[Any]:
        wire = None if isinstance(client, redis.cluster.RedisCluster) else self._wire(client)
        if wire is not None:
            return wire.send(commands)
        pipe = client.pipeline(transaction=False)
        for args in commands:
            pipe.execute_command(*args)
        replies: list[Any] = pipe.execute(raise_on_error=False)
        return replies

    def _eval(self, command: Eval) -> Any:
        script = self._scripts[command.script]
        client = self.client
        if not isinstance(client, redis.cluster.RedisCluster):
            [reply] = _raised(self._send(client, [_evalsha(script, command)]))
            return reply
        node = _slot_node(client, command.keys)
        if node is not None:
            try:
                [reply] = _raised(self._send(node, [_evalsha(script, command)]))
                return reply
            except _REDIRECTED:
                pass
        try:
            return script(keys=command.keys, args=command.args)
        except NoScriptError:  # forgotten again after redis-py loaded it: see _by_source
            source = self._by_sha[script.sha]
            return client.eval(source, len(command.keys), *command.keys, *command.args)

    def _execute(self, command: Eval | Scan | Batch) -> Any:
        if isinstance(command, Eval):
            return self._eval(command)
        if isinstance(command, Batch):
            if isinstance(self.client, redis.cluster.RedisCluster):
                replies = self._cluster_batch(self.client, command)
                return replies if command.then is None else self._eval(command.then)
            commands = list(command.commands)
            if command.then is not None:
                commands.append(_evalsha(self._scripts[command.then.script], command.then))
            replies = _raised(self._send(self.client, commands))
            return replies if command.then is None else replies[-1]
        return list(self.client.scan_iter(match=command.match, count=1000))

    def _cluster_batch(self, client: redis.cluster.RedisCluster, batch: Batch) -> list[Any]:
        """A batch's replies on a cluster: on its node's own client when it has one slot;
        on a moved slot, a lost node or any other error, again through redis-py's cluster
        pipeline, which follows redirections (batches are reads and idempotent writes)."""
        node = _one_node(client, batch)
        if node is not None:
            try:
                return _raised(self._send(node, batch.commands))
            except redis.RedisError:
                pass
        return _raised(self._send(client, batch.commands))

    def run(self, plan: Plan[Eval | Scan | Batch, R]) -> R:
        if self._contact.reached:
            return drive(plan, self._execute)
        with self._contact.watch():
            return drive(plan, self._execute)


class AsyncRedisRunner:
    """Runs plans on an asyncio ``Redis`` or ``RedisCluster`` client."""

    def __init__(self, client: object, scripts: Mapping[str, str], *, owner: str) -> None:
        _check_client(client, (redis.asyncio.Redis, redis.asyncio.cluster.RedisCluster), owner)
        self.client = cast(AsyncClient, client)
        self._scripts = {name: self.client.register_script(src) for name, src in scripts.items()}
        self._by_sha = {self._scripts[name].sha: src for name, src in scripts.items()}
        self._contact = _FirstContact(client)
        plain = isinstance(client, redis.asyncio.Redis) and client.connection is None
        self._wire = _AsyncWire(cast(redis.asyncio.Redis, client)) if plain else None

    async def _execute(self, command: Eval | Scan | Batch) -> Any:
        if self.client not in _GATES:  # most clients: no gate to pass (see _gate)
            return await self._run_one(command)
        async with _gate(self.client):
            return await self._run_one(command)

    async def _send(self, commands: Sequence[Sequence[Any]]) -> list[Any]:
        """:meth:`RedisRunner._send` (a cluster's pipeline routes each command)."""
        replies = await self._raw(commands)
        if _missing(replies):
            for source in self._by_sha.values():
                await self.client.script_load(source)
            again = _by_source(commands, replies, self._by_sha)
            more = iter(await self._raw(again))
            replies = [next(more) if _refused(r) else r for r in replies]
        return replies

    async def _raw(self, commands: Sequence[Sequence[Any]]) -> list[Any]:
        if self._wire is not None:
            return await self._wire.send(commands)
        pipe = self.client.pipeline(transaction=False)
        for args in commands:
            pipe.execute_command(*args)
        replies: list[Any] = await pipe.execute(raise_on_error=False)
        return replies

    async def _eval(self, command: Eval) -> Any:
        script = self._scripts[command.script]
        if self._wire is None:
            try:
                return await script(keys=command.keys, args=command.args)
            except NoScriptError:  # forgotten again after redis-py loaded it: see _by_source
                source = self._by_sha[script.sha]
                return await self.client.eval(
                    source, len(command.keys), *command.keys, *command.args
                )
        [reply] = _raised(await self._send([_evalsha(script, command)]))
        return reply

    async def _run_one(self, command: Eval | Scan | Batch) -> Any:
        if isinstance(command, Eval):
            return await self._eval(command)
        if isinstance(command, Batch):
            commands = list(command.commands)
            carried = command.then is not None and self._wire is not None
            if carried:
                assert command.then is not None
                commands.append(_evalsha(self._scripts[command.then.script], command.then))
            replies = _raised(await self._send(commands))
            if command.then is None:
                return replies
            return replies[-1] if carried else await self._eval(command.then)
        return [key async for key in self.client.scan_iter(match=command.match, count=1000)]

    async def run(self, plan: Plan[Eval | Scan | Batch, R]) -> R:
        if self._contact.reached:
            return await adrive(plan, self._execute)
        with self._contact.watch():
            return await adrive(plan, self._execute)
