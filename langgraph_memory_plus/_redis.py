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

import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.cluster
from redis.backoff import ExponentialBackoff
from redis.retry import Retry

from ._plan import Plan, adrive, drive
from .errors import InvalidConfigError

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
    carried = batch.then is not None and not isinstance(
        client, (redis.cluster.RedisCluster, redis.asyncio.cluster.RedisCluster)
    )
    if carried:
        assert batch.then is not None
        script = scripts[batch.then.script]
        pipe.execute_command(
            "EVALSHA", script.sha, len(batch.then.keys), *batch.then.keys, *batch.then.args
        )
    return pipe, carried


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


def sync_client_from_url(url: str, **kwargs: Any) -> SyncClient:
    """A client for ``redis://``, ``rediss://`` or ``redis+cluster://`` (``rediss+cluster://``)."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        raise InvalidConfigError("a Redis URL looks like redis://host:6379/0")
    if scheme.endswith("+cluster"):
        return redis.cluster.RedisCluster.from_url(
            f"{scheme[: -len('+cluster')]}://{rest}", **kwargs
        )
    return redis.Redis.from_url(url, **kwargs)


def async_client_from_url(url: str, **kwargs: Any) -> AsyncClient:
    """Async :func:`sync_client_from_url`."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        raise InvalidConfigError("a Redis URL looks like redis://host:6379/0")
    if scheme.endswith("+cluster"):
        return redis.asyncio.cluster.RedisCluster.from_url(
            f"{scheme[: -len('+cluster')]}://{rest}", **kwargs
        )
    return redis.asyncio.Redis.from_url(url, **_client_options(kwargs))


class RedisRunner:
    """Runs plans on a blocking ``Redis`` or ``RedisCluster`` client."""

    def __init__(self, client: object, scripts: Mapping[str, str], *, owner: str) -> None:
        # ``object``: the type is checked here, with an error that names the right class.
        _check_client(client, (redis.Redis, redis.cluster.RedisCluster), owner)
        self.client = cast(SyncClient, client)
        self._scripts = {name: self.client.register_script(src) for name, src in scripts.items()}

    def _execute(self, command: Eval | Scan | Batch) -> Any:
        if isinstance(command, Eval):
            return self._scripts[command.script](keys=command.keys, args=command.args)
        if isinstance(command, Batch):
            pipe, carried = _pipelined(self.client, self._scripts, command)
            if not carried:
                replies = pipe.execute()
                return replies if command.then is None else self._execute(command.then)
            reply = _script_reply(pipe.execute(raise_on_error=False))
            return self._execute(command.then) if reply is _RUN_SCRIPT else reply  # type: ignore[arg-type]
        return list(self.client.scan_iter(match=command.match, count=1000))

    def run(self, plan: Plan[Eval | Scan | Batch, R]) -> R:
        return drive(plan, self._execute)


class AsyncRedisRunner:
    """Runs plans on an asyncio ``Redis`` or ``RedisCluster`` client."""

    def __init__(self, client: object, scripts: Mapping[str, str], *, owner: str) -> None:
        _check_client(client, (redis.asyncio.Redis, redis.asyncio.cluster.RedisCluster), owner)
        self.client = cast(AsyncClient, client)
        self._scripts = {name: self.client.register_script(src) for name, src in scripts.items()}

    async def _execute(self, command: Eval | Scan | Batch) -> Any:
        if isinstance(command, Eval):
            return await self._scripts[command.script](keys=command.keys, args=command.args)
        if isinstance(command, Batch):
            pipe, carried = _pipelined(self.client, self._scripts, command)
            if not carried:
                replies = await pipe.execute()
                return replies if command.then is None else await self._execute(command.then)
            reply = _script_reply(await pipe.execute(raise_on_error=False))
            if reply is _RUN_SCRIPT:
                return await self._execute(command.then)  # type: ignore[arg-type]
            return reply
        return [key async for key in self.client.scan_iter(match=command.match, count=1000)]

    async def run(self, plan: Plan[Eval | Scan | Batch, R]) -> R:
        return await adrive(plan, self._execute)
