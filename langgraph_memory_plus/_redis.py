"""Running plans on Redis: shared by the Redis checkpointers and stores.

Plans yield :class:`Eval` (a named Lua script on keys of one hash slot, atomic on a
single node and in Redis Cluster alike) or :class:`Scan` (admin paths only: listing
every thread). Runners register the scripts once and send them with ``EVALSHA``,
falling back to ``EVAL`` when the server has forgotten them (e.g. after a restart).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar, cast
from urllib.parse import unquote, urlsplit

import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.cluster
from redis.backoff import ExponentialBackoff
from redis.retry import Retry

from ._connect import CONNECT_TIMEOUT, reason
from ._plan import Plan, adrive, drive
from .errors import InvalidConfigError, MemoryConnectionError

R = TypeVar("R")

SyncClient = redis.Redis | redis.cluster.RedisCluster
AsyncClient = redis.asyncio.Redis | redis.asyncio.cluster.RedisCluster


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


def _client_options(kwargs: dict[str, Any]) -> dict[str, Any]:
    """Defaults for the clients this package opens from a URL.

    A short retry on connection errors (every script is idempotent, so a retry after a
    lost reply is safe), and no maintenance notifications: with them on, redis-py 8's
    asyncio pool skips its check for connections a server restart left dead.
    """
    options: dict[str, Any] = {
        "retry": Retry(ExponentialBackoff(cap=0.5, base=0.05), 2),
        "retry_on_error": [redis.ConnectionError, redis.TimeoutError],
    }
    try:
        from redis.maint_notifications import MaintNotificationsConfig
    except ImportError:  # redis-py before 7
        pass
    else:
        options["maint_notifications_config"] = MaintNotificationsConfig(enabled=False)
    return {**options, **kwargs}


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


def _split_cluster(url: str) -> tuple[str, bool]:
    scheme, sep, rest = url.partition("://")
    if not sep:
        raise InvalidConfigError("a Redis URL looks like redis://host:6379/0")
    if scheme.endswith("+cluster"):
        return f"{scheme[: -len('+cluster')]}://{rest}", True
    return url, False


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


def sync_client_from_url(url: str, **kwargs: Any) -> SyncClient:
    """A client for ``redis://``, ``rediss://`` or ``redis+cluster://`` (``rediss+cluster://``)."""
    check_url(url)
    target, cluster = _split_cluster(url)
    kwargs = _connect_options(url, kwargs)
    if cluster:
        return redis.cluster.RedisCluster.from_url(target, **kwargs)
    return redis.Redis.from_url(url, **kwargs)


def async_client_from_url(url: str, **kwargs: Any) -> AsyncClient:
    """Async :func:`sync_client_from_url`."""
    check_url(url)
    target, cluster = _split_cluster(url)
    kwargs = _connect_options(url, kwargs)
    if cluster:
        return redis.asyncio.cluster.RedisCluster.from_url(target, **kwargs)
    return redis.asyncio.Redis.from_url(url, **_client_options(kwargs))


_UNREACHABLE = (redis.RedisError, redis.exceptions.RedisClusterException, OSError)


def unreachable(url: str, exc: BaseException) -> MemoryConnectionError:
    """One line: the URL with its password masked, and redis-py's reason."""
    from .url import redact

    try:
        secret = unquote(urlsplit(url).password or "")
    except ValueError:
        secret = ""
    return MemoryConnectionError(f"cannot reach Redis at {redact(url)}: {reason(exc, [secret])}")


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
    """Async :func:`open_client`."""
    client = async_client_from_url(url, **kwargs)
    try:
        await client.ping()
    except _UNREACHABLE as exc:
        await client.aclose()
        raise unreachable(url, exc) from None
    return client


class RedisRunner:
    """Runs plans on a blocking ``Redis`` or ``RedisCluster`` client."""

    def __init__(self, client: object, scripts: Mapping[str, str], *, owner: str) -> None:
        # ``object``: the type is checked here, with an error that names the right class.
        _check_client(client, (redis.Redis, redis.cluster.RedisCluster), owner)
        self.client = cast(SyncClient, client)
        self._scripts = {name: self.client.register_script(src) for name, src in scripts.items()}

    def _execute(self, command: Eval | Scan) -> Any:
        if isinstance(command, Eval):
            return self._scripts[command.script](keys=command.keys, args=command.args)
        return list(self.client.scan_iter(match=command.match, count=1000))

    def run(self, plan: Plan[Eval | Scan, R]) -> R:
        return drive(plan, self._execute)


class AsyncRedisRunner:
    """Runs plans on an asyncio ``Redis`` or ``RedisCluster`` client."""

    def __init__(self, client: object, scripts: Mapping[str, str], *, owner: str) -> None:
        _check_client(client, (redis.asyncio.Redis, redis.asyncio.cluster.RedisCluster), owner)
        self.client = cast(AsyncClient, client)
        self._scripts = {name: self.client.register_script(src) for name, src in scripts.items()}

    async def _execute(self, command: Eval | Scan) -> Any:
        if isinstance(command, Eval):
            return await self._scripts[command.script](keys=command.keys, args=command.args)
        return [key async for key in self.client.scan_iter(match=command.match, count=1000)]

    async def run(self, plan: Plan[Eval | Scan, R]) -> R:
        return await adrive(plan, self._execute)
