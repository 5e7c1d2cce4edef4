"""Running plans on Redis: shared by the Redis checkpointers and stores.

Plans yield :class:`Eval` (a named Lua script on keys of one hash slot, atomic on a
single node and in Redis Cluster alike) or :class:`Scan` (admin paths only: listing
every thread). Runners register the scripts once and send them with ``EVALSHA``,
falling back to ``EVAL`` when the server has forgotten them (e.g. after a restart).
"""

from __future__ import annotations

import asyncio
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
import redis.cluster
from redis.asyncio.retry import Retry as AsyncRetry
from redis.backoff import ExponentialBackoff
from redis.exceptions import RedisClusterException
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


def _pipelined(client: Any, scripts: Mapping[str, Any], batch: Batch) -> tuple[Any, bool]:
    """The pipeline for ``batch``, and whether it carries the script (``EVALSHA``)."""
    pipe = client.pipeline(transaction=False)
    for args in batch.commands:
        pipe.execute_command(*args)
    carried = batch.then is not None and not isinstance(client, CLUSTER_CLIENTS)
    if carried:
        assert batch.then is not None
        script = scripts[batch.then.script]
        pipe.execute_command(
            "EVALSHA", script.sha, len(batch.then.keys), *batch.then.keys, *batch.then.args
        )
    return pipe, carried


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
    node = client.nodes_manager.get_node_from_slot(slot)
    return cast("redis.Redis | None", node.redis_connection)


def _first_key(args: tuple[Any, ...]) -> Any:
    """The key a batched command routes by: a one-key command's first argument, an
    ``EVAL``'s first key (its keys share a slot, as every script's); ``None`` for others."""
    name = _utf8_name(args[0]) if args else b""
    if name in _ONE_KEY and len(args) >= 2:
        return args[1]
    if name == b"EVAL" and len(args) >= 4 and int(args[2]) >= 1:
        return args[3]
    return None


def _utf8_name(name: Any) -> bytes:
    return name.upper().encode() if isinstance(name, str) else bytes(name).upper()


def _script_reply(replies: list[Any]) -> Any:
    """The carried script's reply; ``NoScriptError`` (server restarted) means: run it."""
    for reply in replies[:-1]:
        if isinstance(reply, Exception):
            raise reply
    if isinstance(replies[-1], redis.exceptions.NoScriptError):
        return _RUN_SCRIPT
    if isinstance(replies[-1], Exception):
        raise replies[-1]
    return replies[-1]


_RUN_SCRIPT = object()


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
        self._contact = _FirstContact(client)

    def _execute(self, command: Eval | Scan | Batch) -> Any:
        if isinstance(command, Eval):
            return self._scripts[command.script](keys=command.keys, args=command.args)
        if isinstance(command, Batch):
            if isinstance(self.client, redis.cluster.RedisCluster):
                replies = self._cluster_batch(self.client, command)
                return replies if command.then is None else self._execute(command.then)
            pipe, carried = _pipelined(self.client, self._scripts, command)
            if not carried:
                replies = pipe.execute()
                return replies if command.then is None else self._execute(command.then)
            reply = _script_reply(pipe.execute(raise_on_error=False))
            return self._execute(command.then) if reply is _RUN_SCRIPT else reply  # type: ignore[arg-type]
        return list(self.client.scan_iter(match=command.match, count=1000))

    def _cluster_batch(self, client: redis.cluster.RedisCluster, batch: Batch) -> list[Any]:
        """A batch's replies on a cluster: on its node's own client when it has one slot;
        on a moved slot, a lost node or any other error, again through redis-py's cluster
        pipeline, which follows redirections (batches are reads and idempotent writes)."""
        node = _one_node(client, batch)
        if node is not None:
            pipe: Any = node.pipeline(transaction=False)
            for args in batch.commands:
                pipe.execute_command(*args)
            try:
                replies: list[Any] = pipe.execute()
                return replies
            except redis.RedisError:
                pass
        cluster_pipe, _ = _pipelined(client, self._scripts, Batch(batch.commands))
        replies = cluster_pipe.execute()
        return replies

    def run(self, plan: Plan[Eval | Scan | Batch, R]) -> R:
        with self._contact.watch():
            return drive(plan, self._execute)


class AsyncRedisRunner:
    """Runs plans on an asyncio ``Redis`` or ``RedisCluster`` client."""

    def __init__(self, client: object, scripts: Mapping[str, str], *, owner: str) -> None:
        _check_client(client, (redis.asyncio.Redis, redis.asyncio.cluster.RedisCluster), owner)
        self.client = cast(AsyncClient, client)
        self._scripts = {name: self.client.register_script(src) for name, src in scripts.items()}
        self._contact = _FirstContact(client)

    async def _execute(self, command: Eval | Scan | Batch) -> Any:
        if self.client not in _GATES:  # most clients: no gate to pass (see _gate)
            return await self._send(command)
        async with _gate(self.client):
            return await self._send(command)

    async def _send(self, command: Eval | Scan | Batch) -> Any:
        if isinstance(command, Eval):
            return await self._scripts[command.script](keys=command.keys, args=command.args)
        if isinstance(command, Batch):
            pipe, carried = _pipelined(self.client, self._scripts, command)
            if not carried:
                replies = await pipe.execute()
                return replies if command.then is None else await self._send(command.then)
            reply = _script_reply(await pipe.execute(raise_on_error=False))
            if reply is _RUN_SCRIPT:
                return await self._send(command.then)  # type: ignore[arg-type]
            return reply
        return [key async for key in self.client.scan_iter(match=command.match, count=1000)]

    async def run(self, plan: Plan[Eval | Scan | Batch, R]) -> R:
        with self._contact.watch():
            return await adrive(plan, self._execute)
