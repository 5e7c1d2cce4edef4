"""One writer per thread: an ownership lease with a fencing number, checked by every write.

Two workers can advance the same thread (a retried request, a stuck worker that wakes up,
a second replica picking up the same queue item); without a fence every saver accepts
both and the checkpoint chain forks silently (LangGraph issues #8115 and #8796). The
fence is LangGraph's proposed ``write_ownership`` contract (PR #8894): *a write from a
superseded owner is refused, observably*.

- A thread's fence is one small record beside its checkpoints: the owner, a fencing
  number and the lease's expiry. Taking it (``saver.fence.acquire``, or a run's first
  write when the saver was made with ``fence=True``) gives a new, larger number; the
  previous holder's number is then stale.
- Every ``put`` / ``put_writes`` that carries an owner (a :class:`Lease` in its config,
  or the run id with ``fence=True``) compares its owner and number with the record in
  the write's own statement (PostgreSQL), transaction (SQLite) or Lua script (Redis): a stale
  one raises :class:`~langgraph_memory_plus.errors.FencedWriteError` and nothing of the
  write is stored. What the write builds on is not checked: the current owner may fork
  from any older checkpoint (time travel stays legal).
- Writes that carry no owner (no lease, no run id) are not fenced: ``update_state``
  outside a run, tools that write checkpoints directly.
- ``delete_thread`` (and erasure, which calls it) removes the fence: a lease on a deleted
  thread is refused. ``copy_thread`` does not copy it: the copy is a new thread, owned by
  no one until its first fenced write. Numbers never go back, even across a deletion:
  a new fence starts at the clock in microseconds.

With the fence off (the default) and no lease in the config, a write costs nothing more:
no statement, no key, no argument.
"""

from __future__ import annotations

import math
import os
import secrets
import socket
import time
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar, cast

from langchain_core.runnables import RunnableConfig

from ..drivers.plan import Plan
from ..errors import FencedWriteError, FenceHeldError, InvalidConfigError
from .config import read_target

R = TypeVar("R")


class FencedSaver(Protocol):
    """What :class:`Fence` needs of its saver (a protocol, so this module imports no
    saver: the saver imports it)."""

    _plans: Any
    _fence_lease_s: float

    def _run(self, plan: Plan[Any, R]) -> R: ...

    async def _arun(self, plan: Plan[Any, R]) -> R: ...


FENCE_KEY = "__lgmp_fence__"
"""The ``configurable`` key a lease travels under (``__``: LangGraph never copies it into
checkpoint metadata)."""
DEFAULT_LEASE_S = 300.0
MAX_LEASE_S = 1e11
"""The longest lease (about 3,000 years): every backend stores its end (PostgreSQL's
timestamps end in the year 294276, a Redis expiry is 64-bit milliseconds); a longer one
was taken on SQLite but failed every run on the others."""
RUN_TOKENS = 10_000
"""Runs per saver whose fencing number is remembered (an LRU); a run forgotten here takes
the fence again at its next write (it keeps its number if nobody took the thread since)."""


def now_us() -> int:
    """The floor of a new fence's number: numbers never repeat, even after a deletion."""
    return time.time_ns() // 1000


def _lease_seconds(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise InvalidConfigError(f"lease_s must be a positive number of seconds, got {value!r}")
    if not math.isfinite(value) or value > MAX_LEASE_S:
        raise InvalidConfigError(f"lease_s must be at most {MAX_LEASE_S:g} seconds")
    return float(value)


@dataclass(frozen=True)
class FenceOptions:
    """``fence=`` of a saver: ``True`` is ``FenceOptions()``.

    ``auto``: a run (its ``run_id`` in the config, as LangGraph and the LangGraph server
    set it) takes its thread's fence at its first write, superseding any earlier owner;
    that run's later writes are then checked. ``lease_s``: how long such a lease lasts,
    which only matters to ``fence.acquire`` without ``force`` (a run that starts always
    takes over, as the server's ``interrupt`` and ``rollback`` strategies expect).
    """

    lease_s: float = DEFAULT_LEASE_S
    auto: bool = True

    def __post_init__(self) -> None:
        _lease_seconds(self.lease_s)

    @staticmethod
    def of(value: Any) -> FenceOptions | None:
        """The saver option as given: ``None``/``False`` (off), ``True``, or options."""
        if value is None or value is False:
            return None
        if value is True:
            return FenceOptions()
        if isinstance(value, FenceOptions):
            return value
        raise InvalidConfigError(f"fence must be a bool or FenceOptions, got {value!r}")


@dataclass(frozen=True)
class FenceState:
    """A thread's fence as stored: ``owner`` is ``None`` once released."""

    owner: str | None
    token: int
    expires_at: float | None
    """Seconds since the epoch."""


@dataclass(frozen=True)
class Lease:
    """Ownership of one thread: pass ``lease.config(...)`` to the run (or to ``put``)."""

    thread_id: str
    owner: str
    token: int
    """The fencing number: larger for every owner that takes the thread after this one."""
    expires_at: float
    """Seconds since the epoch; after it, ``acquire`` by another owner succeeds."""

    def config(self, config: RunnableConfig | None = None) -> RunnableConfig:
        """``config`` (or a new one for this thread) carrying the lease: writes made with
        it are refused once another owner took the thread."""
        base: dict[str, Any] = dict(config or {})
        configurable = dict(base.get("configurable") or {})
        configurable.setdefault("thread_id", self.thread_id)
        if str(configurable["thread_id"]) != self.thread_id:
            raise InvalidConfigError(
                f"lease is for thread {self.thread_id!r}, config names "
                f"{configurable['thread_id']!r}"
            )
        configurable[FENCE_KEY] = [self.owner, self.token]
        base["configurable"] = configurable
        return cast(RunnableConfig, base)


@dataclass
class Claim:
    """What one write claims: its owner and number (``None``: take the fence first)."""

    owner: str
    token: int | None
    lease_s: float


def may_take(current: FenceState | None, owner: str, now: float, force: bool) -> bool:
    """Whether ``owner`` gets the fence: free, released, expired, its own, or forced."""
    return (
        force
        or current is None
        or current.owner is None
        or current.owner == owner
        or (current.expires_at is not None and current.expires_at <= now)
    )


def next_token(current: FenceState | None, owner: str, floor: int) -> int:
    """The number a take gives: the owner's own if it holds the fence (a run's concurrent
    first writes share one), else larger than any before."""
    if current is not None and current.owner == owner:
        return current.token
    return max((current.token if current is not None else 0) + 1, floor)


def check(thread_id: str, claim: Claim, current: FenceState | None) -> None:
    """Refuse a write whose owner or number is not the thread's current one."""
    if current is None or current.owner != claim.owner or current.token != claim.token:
        raise FencedWriteError(thread_id, claim.owner, None if current is None else current.owner)


class FencePlans(Protocol):
    """The fence operations a backend provides (the write check is in its put plans)."""

    def fence_take(
        self, thread_id: str, owner: str, lease_s: float, force: bool, run: bool = False
    ) -> Plan[Any, tuple[FenceState | None, FenceState]]:
        """(the fence found, the fence now): unchanged when not taken. ``run``: taken
        as a run starts (its next write makes it durable)."""
        ...

    def fence_renew(
        self, thread_id: str, owner: str, token: int, lease_s: float
    ) -> Plan[Any, FenceState | None]:
        """The fence after renewal, or the current one (``None``: none) if not held."""
        ...

    def fence_release(self, thread_id: str, owner: str, token: int) -> Plan[Any, bool]: ...

    def fence_state(self, thread_id: str) -> Plan[Any, FenceState | None]: ...


def _owner(value: Any) -> str:
    if not isinstance(value, str) or not value or "\x00" in value:
        raise InvalidConfigError(f"owner must be a non-empty string without NUL, got {value!r}")
    return value


def _thread_id(value: Any) -> str:
    """A thread id as a config names it (an int is its string), checked as writes do."""
    return read_target({"configurable": {"thread_id": value}}).thread_id


def held_claim(config: RunnableConfig) -> Claim | None:
    """The lease a config carries (see :meth:`Lease.config`), as a claim."""
    held = (config.get("configurable") or {}).get(FENCE_KEY)
    if held is None:
        return None
    try:
        owner, token = held
    except (TypeError, ValueError):
        raise InvalidConfigError(f"{FENCE_KEY} must be [owner, token], got {held!r}") from None
    if isinstance(token, bool) or not isinstance(token, int):
        raise InvalidConfigError(f"{FENCE_KEY} token must be an int, got {token!r}")
    return Claim(_owner(owner), token, 0.0)


def run_id_of(config: RunnableConfig) -> str | None:
    """The run a call belongs to: LangGraph sets ``config["run_id"]`` (the server also
    puts it in ``configurable``). Not the checkpoint metadata's: ``copy_threads`` writes
    checkpoints of past runs with their metadata, and must not take the thread for them."""
    for source in (config, config.get("configurable") or {}):
        run_id = source.get("run_id")
        if run_id:
            return str(run_id)
    return None


def instance_name() -> str:
    """This saver's part of an automatic owner's name: two replicas running the same run
    id are two owners."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"


class Fence:
    """``saver.fence``: take, renew, release and read a thread's ownership lease."""

    def __init__(self, saver: FencedSaver) -> None:
        self._saver = saver

    @property
    def _plans(self) -> FencePlans:
        return cast(FencePlans, self._saver._plans)

    def _take(
        self, thread_id: str, owner: str, lease_s: float | None, force: bool
    ) -> Plan[Any, Lease]:
        thread_id = _thread_id(thread_id)
        owner = _owner(owner)
        seconds = _lease_seconds(self._saver._fence_lease_s if lease_s is None else lease_s)
        before, after = yield from self._plans.fence_take(thread_id, owner, seconds, force)
        if after.owner != owner or after.expires_at is None:
            raise FenceHeldError(
                thread_id, owner, None if before is None else before.owner, after.expires_at
            )
        return Lease(thread_id, owner, after.token, after.expires_at)

    def _renew(self, lease: Lease, lease_s: float | None) -> Plan[Any, Lease]:
        seconds = _lease_seconds(self._saver._fence_lease_s if lease_s is None else lease_s)
        state = yield from self._plans.fence_renew(
            lease.thread_id, lease.owner, lease.token, seconds
        )
        if state is None or state.owner != lease.owner or state.token != lease.token:
            raise FencedWriteError(
                lease.thread_id, lease.owner, None if state is None else state.owner
            )
        assert state.expires_at is not None
        return Lease(lease.thread_id, lease.owner, lease.token, state.expires_at)

    def acquire(
        self,
        thread_id: str,
        *,
        owner: str,
        lease_s: float | None = None,
        force: bool = False,
    ) -> Lease:
        """Take ``thread_id`` for ``owner`` for ``lease_s`` seconds.

        Succeeds when the thread has no owner, its lease expired, ``owner`` holds it
        already (the number stays: owner names must be unique per worker) or ``force``;
        else raises :class:`~langgraph_memory_plus.errors.FenceHeldError`. Every write
        of the previous owner is refused from then on.
        """
        return self._saver._run(self._take(thread_id, owner, lease_s, force))

    async def aacquire(
        self,
        thread_id: str,
        *,
        owner: str,
        lease_s: float | None = None,
        force: bool = False,
    ) -> Lease:
        """Async :meth:`acquire`."""
        return await self._saver._arun(self._take(thread_id, owner, lease_s, force))

    def renew(self, lease: Lease, lease_s: float | None = None) -> Lease:
        """Extend a lease still held (same number); a superseded one raises
        :class:`~langgraph_memory_plus.errors.FencedWriteError`."""
        return self._saver._run(self._renew(lease, lease_s))

    async def arenew(self, lease: Lease, lease_s: float | None = None) -> Lease:
        """Async :meth:`renew`."""
        return await self._saver._arun(self._renew(lease, lease_s))

    def release(self, lease: Lease) -> bool:
        """Give the thread up (its writes are refused after); ``False``: it was not held.
        The number stays, so a later owner's is still larger."""
        return self._saver._run(
            self._plans.fence_release(lease.thread_id, lease.owner, lease.token)
        )

    async def arelease(self, lease: Lease) -> bool:
        """Async :meth:`release`."""
        return await self._saver._arun(
            self._plans.fence_release(lease.thread_id, lease.owner, lease.token)
        )

    def get(self, thread_id: str | int) -> FenceState | None:
        """The thread's fence (``None``: never taken, or deleted with its thread)."""
        return self._saver._run(self._plans.fence_state(_thread_id(thread_id)))

    async def aget(self, thread_id: str | int) -> FenceState | None:
        """Async :meth:`get`."""
        return await self._saver._arun(self._plans.fence_state(_thread_id(thread_id)))
