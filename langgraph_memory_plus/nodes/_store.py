"""Store access for the nodes: written once as plans, run blocking or awaited, never fatal.

Every node in this package talks to the store in a few fixed ways (read a profile,
read-modify-write it, put a memory), each must work under ``invoke`` and ``ainvoke``, and
none may fail a turn because the store is down or slow. So, as in the context tools, the
logic is written once as a plan (see :mod:`langgraph_memory_plus.drivers.plan`) that yields
*steps*, and :class:`StoreRunner` executes each step blocking (:meth:`StoreRunner.run`) or
awaited (:meth:`StoreRunner.arun`).

A runner hands failures and timeouts back to the plan as :class:`StoreFailure` *values*
instead of raising, because what to do about them is the plan's business: the profile
injector goes on without a profile, the learner retries a lost race, a tool reports it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol, TypeVar, cast

from langgraph.store.base import BaseStore, GetOp, Op, PutOp

from ..drivers.plan import Plan, adrive, drive
from ..errors import ConflictError
from ..observability import core as observability
from ..observability.events import NodeCounted
from ..store.base import ConditionalPutOp, StoreBase

logger = logging.getLogger(__name__)

R = TypeVar("R")
Namespace = tuple[str, ...]
StoreOp = Op | ConditionalPutOp


class Prefetched(Protocol):
    """Reads started ahead of time (:class:`.prefetch.Prefetcher`, which runs them on
    :func:`background_pool` and so sits above this module)."""

    active: bool

    def take(self, key: str) -> concurrent.futures.Future[Any] | None: ...


_TIMEOUTS = (TimeoutError, asyncio.TimeoutError, concurrent.futures.TimeoutError)


@dataclass(frozen=True)
class StoreCall:
    """Step: run ``ops`` as one ``batch`` (one round trip); answers the batch's results.

    ``prefetch_key`` marks a read that a prefetch started after the previous model call
    may already have answered (see :mod:`.prefetch`).
    """

    ops: tuple[StoreOp, ...]
    prefetch_key: str | None = None


@dataclass(frozen=True)
class Pause:
    """Step: wait ``seconds`` (a retry's back-off) without blocking an event loop."""

    seconds: float


Step = StoreCall | Pause


@dataclass(frozen=True)
class StoreFailure:
    """What a :class:`StoreCall` answers instead of results when the store failed."""

    error: BaseException
    timed_out: bool = False

    @property
    def conflict(self) -> bool:
        """A conditional write lost a race (worth retrying, unlike other failures)."""
        return isinstance(self.error, ConflictError)

    def describe(self) -> str:
        """A log-safe one-liner: the error type and message, never stored values."""
        if self.timed_out:
            return "timed out"
        return f"{type(self.error).__name__}: {self.error}"


NO_STORE = StoreFailure(LookupError("no store: pass one, or compile the graph with store=..."))


def finished(result: R) -> Plan[Step, R]:
    """A plan with nothing to do: it returns ``result`` without a single step."""
    return result
    yield  # makes this a generator


class Stats:
    """Counters of what a node did (``injected``, ``store_errors``, ``refused``, ...).

    Degrading quietly is only acceptable when someone can see it happened: every
    component counts its skips, failures and refusals here, so a health check or a test
    can read them. Thread-safe; several components may share one instance.
    """

    def __init__(self) -> None:
        self._counts: Counter[str] = Counter()
        self._lock = threading.Lock()

    def incr(self, event: str, n: int = 1) -> None:
        with self._lock:
            self._counts[event] += n
        if observability.has_global_listeners():  # metrics of every node, in one place
            observability.emit_global(NodeCounted(backend="", duration=0.0, counter=event, n=n))

    def __getitem__(self, event: str) -> int:
        with self._lock:
            return self._counts[event]

    def snapshot(self) -> dict[str, int]:
        """The counts so far (a copy)."""
        with self._lock:
            return dict(self._counts)

    def __repr__(self) -> str:
        return f"Stats({self.snapshot()})"


POOL_SIZE = 32
_pool: concurrent.futures.ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def background_pool() -> concurrent.futures.ThreadPoolExecutor:
    """The threads that run blocking store calls under a timeout, and prefetches.

    A blocking call cannot be abandoned halfway, only stopped being waited for; running it
    on a worker thread is what makes a timeout possible at all. Shared and bounded: a
    store that hangs ties up at most these threads, and later calls then time out in the
    queue instead of piling up threads.
    """
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = concurrent.futures.ThreadPoolExecutor(
                max_workers=POOL_SIZE, thread_name_prefix="lgmp-nodes"
            )
        return _pool


def supports_versions(store: BaseStore) -> bool:
    """Can ``store`` do conditional puts (``ConditionalPutOp``)? Ours can."""
    return isinstance(store, StoreBase)


class StoreRunner:
    """Executes a plan's steps on one store, blocking or awaited.

    Args:
        store: the store the steps run on; ``None`` answers every call with a failure
            (a component without a store degrades like one whose store is down).
        timeout: seconds to wait for one step; ``None`` waits as long as the store takes.
        prefetcher: where reads marked with a ``prefetch_key`` may already be running.
        stats: counts ``prefetch_used`` when a step takes a prefetched read,
            ``prefetch_missed`` when prefetching is on but none was there (or it was too
            old), and ``prefetch_timeouts`` when a taken one did not answer in time.
    """

    def __init__(
        self,
        store: BaseStore | None,
        *,
        timeout: float | None,
        prefetcher: Prefetched | None = None,
        stats: Stats | None = None,
    ) -> None:
        self.store = store
        self.timeout = timeout
        self.prefetcher = prefetcher
        self.stats = stats

    def run(self, plan: Plan[Step, R]) -> R:
        """Run ``plan`` to completion with blocking store calls."""
        return drive(plan, self._step)

    async def arun(self, plan: Plan[Step, R]) -> R:
        """Run ``plan`` to completion, awaiting store calls."""
        return await adrive(plan, self._astep)

    @staticmethod
    def _ops(step: StoreCall) -> list[Op]:
        # ConditionalPutOp is ours; plans only yield it to stores that take it
        # (``supports_versions``), so BaseStore's ``Op`` typing is widened here only.
        return cast(list[Op], list(step.ops))

    def _prefetched(self, step: StoreCall) -> concurrent.futures.Future[Any] | None:
        if step.prefetch_key is None or self.prefetcher is None:
            return None
        future = self.prefetcher.take(step.prefetch_key)
        if self.stats is not None and (future is not None or self.prefetcher.active):
            self.stats.incr("prefetch_missed" if future is None else "prefetch_used")
        return future

    def _timed_out(self, exc: BaseException, prefetched: bool) -> StoreFailure:
        if prefetched and self.stats is not None:
            self.stats.incr("prefetch_timeouts")  # also a store timeout, to its caller
        return StoreFailure(exc, timed_out=True)

    def _step(self, step: Step) -> Any:
        if isinstance(step, Pause):
            time.sleep(step.seconds)
            return None
        if self.store is None:
            return NO_STORE
        pending = self._prefetched(step)
        prefetched = pending is not None
        try:
            if pending is None and self.timeout is None:
                return self.store.batch(self._ops(step))
            if pending is None:
                pending = background_pool().submit(self.store.batch, self._ops(step))
            return pending.result(self.timeout)
        except _TIMEOUTS as exc:
            return self._timed_out(exc, prefetched)
        except Exception as exc:
            return StoreFailure(exc)

    async def _astep(self, step: Step) -> Any:
        if isinstance(step, Pause):
            await asyncio.sleep(step.seconds)
            return None
        if self.store is None:
            return NO_STORE
        pending = self._prefetched(step)
        try:
            if pending is None:
                return await asyncio.wait_for(self.store.abatch(self._ops(step)), self.timeout)
            # shield: giving up on a prefetch must not cancel the shared future
            return await asyncio.wait_for(
                asyncio.shield(asyncio.wrap_future(pending)), self.timeout
            )
        except _TIMEOUTS as exc:
            return self._timed_out(exc, pending is not None)
        except Exception as exc:
            return StoreFailure(exc)


# -- read-modify-write -------------------------------------------------------------------


@dataclass(frozen=True)
class Written:
    """A read-modify-write that changed the item; ``attempts`` counts lost races + 1."""

    value: dict[str, Any] | None
    attempts: int


@dataclass(frozen=True)
class Unchanged:
    """A read-modify-write whose change function found nothing to change."""

    value: dict[str, Any] | None


Change = Callable[[Mapping[str, Any] | None], dict[str, Any] | Unchanged | None]
"""Given the current value (``None``: absent), the new value (``None``: delete the item),
or an :class:`Unchanged` to write nothing. Called again after every lost race, with what
the winner wrote, so it must be a pure function of its argument."""


def backoff(attempt: int, *, base: float = 0.01, cap: float = 0.2) -> float:
    """Jittered exponential back-off, so two racing writers do not collide again in step."""
    return random.uniform(0, min(cap, base * 2**attempt))


def read_modify_write(
    namespace: Namespace,
    key: str,
    change: Change,
    *,
    conditional: bool,
    attempts: int = 5,
    index: Literal[False] | list[str] = False,
    stats: Stats | None = None,
) -> Plan[Step, Written | Unchanged | StoreFailure]:
    """Update one item so that concurrent updates are never lost.

    Reads the item, applies ``change``, and writes the result only if the item is still at
    the version read (``put(..., expected_version=...)``); a lost race re-reads and
    re-applies ``change`` on the winner's value, up to ``attempts`` times. Stores without
    versions (``conditional=False``, e.g. ``InMemoryStore``) get a plain put, where the
    last writer wins. ``index``: as for ``BaseStore.put`` (profiles are not embedded).
    """
    for attempt in range(1, attempts + 1):
        found = yield StoreCall((GetOp(namespace, key),))
        if isinstance(found, StoreFailure):
            return found
        item = found[0]
        current = None if item is None else item.value
        new = change(current)
        if isinstance(new, Unchanged):
            return new
        put = PutOp(namespace, key, new, index=index)
        op: StoreOp = put
        if conditional:
            op = ConditionalPutOp(put, 0 if item is None else int(item.version))
        written = yield StoreCall((op,))
        if not isinstance(written, StoreFailure):
            return Written(new, attempt)
        if not written.conflict:
            return written
        if stats is not None:
            stats.incr("conflicts")
        logger.debug("lost a write race on %s/%s (attempt %d), retrying", namespace, key, attempt)
        yield Pause(backoff(attempt))
    message = f"gave up on {namespace}/{key!r} after {attempts} lost write races"
    return StoreFailure(ConflictError(message))
