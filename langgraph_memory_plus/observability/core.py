"""Registering listeners and handing them events, without ever failing the operation.

Savers and stores inherit :class:`Observable`. Their shared core wraps a plan with
:meth:`Observable._observed` only when a listener is registered: with none, the plan runs
untouched and no event is built. The wrapper is itself a plan, so the blocking and the
async drivers run it alike and every backend reports the same events.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Sequence
from time import perf_counter
from typing import Any, Protocol, TypeVar

from ..drivers.plan import Plan, Restart
from .events import MemoryEvent

logger = logging.getLogger("langgraph_memory_plus.observability")

C = TypeVar("C")
R = TypeVar("R")


class Listener(Protocol):
    """Anything called with each event: a function, or an object with ``__call__``.

    It runs inline, in the thread (or on the event loop) that ran the operation, after
    the operation's storage work: keep it quick, and hand slow work to a queue.
    """

    def __call__(self, event: MemoryEvent, /) -> None: ...


EventsOf = Callable[[Any, float, BaseException | None], Sequence[MemoryEvent]]
"""Builds the events of a finished plan from (result or None, duration, error or None)."""

Fields = dict[str, Any]
"""An event's own fields, beside the ``backend``, ``duration`` and ``error`` all share."""


_BACKENDS = {"postgres": "postgresql", "redis": "redis", "sqlite": "sqlite"}


def db_system(owner: object) -> str:
    """The ``db.system`` of a saver or store, read from the package its class lives in."""
    for cls in type(owner).__mro__:
        for part in cls.__module__.split("."):
            if part in _BACKENDS:
                return _BACKENDS[part]
    return "other"


def _deliver(listeners: Iterable[Listener], events: Sequence[MemoryEvent]) -> int:
    """Call every listener with every event; returns how many calls raised (each logged)."""
    failed = 0
    for event in events:
        for listener in listeners:
            try:
                listener(event)
            except Exception:
                failed += 1
                logger.exception("memory listener %r failed on %s", listener, event.name)
    return failed


class Observable:
    """``listeners=[...]`` at construction, ``add_listener`` / ``remove_listener`` later."""

    _listeners: tuple[Listener, ...] = ()
    listener_errors: int = 0
    """How many listener calls raised (each is logged and swallowed)."""

    _errors_lock = threading.Lock()

    def _init_listeners(self, listeners: Iterable[Listener] | None) -> None:
        self._listeners = tuple(listeners or ())
        self.listener_errors = 0
        self._backend = db_system(self)

    def add_listener(self, listener: Listener) -> None:
        """Register ``listener`` for every later operation (again: called twice)."""
        if not callable(listener):
            raise TypeError(f"a listener must be callable, got {type(listener).__name__}")
        self._listeners = (*self._listeners, listener)

    def remove_listener(self, listener: Listener) -> None:
        """Unregister ``listener`` (its last registration); ValueError if it is not one."""
        listeners = list(self._listeners)
        for i in range(len(listeners) - 1, -1, -1):
            if listeners[i] == listener:
                del listeners[i]
                self._listeners = tuple(listeners)
                return
        raise ValueError(f"{listener!r} is not a registered listener")

    @property
    def listeners(self) -> tuple[Listener, ...]:
        return self._listeners

    def _emit(self, events: Sequence[MemoryEvent]) -> None:
        failed = _deliver(self._listeners, events)
        if failed:
            with self._errors_lock:
                self.listener_errors += failed

    def _observed(self, plan: Plan[C, R], events_of: EventsOf) -> Plan[C, R]:
        """``plan``, reporting its events when it ends; ``plan`` itself with no listener."""
        if not self._listeners:
            return plan
        return self._watch(plan, events_of)

    def _observed_event(
        self, plan: Plan[C, R], event: type[MemoryEvent], fields_of: Callable[[Any], Fields]
    ) -> Plan[C, R]:
        """``plan``, reporting one ``event`` with the fields ``fields_of(result or None)``
        gives; they are built only when a listener is there to receive them."""
        if not self._listeners:
            return plan
        backend = self._backend

        def events_of(result: Any, took: float, error: BaseException | None) -> list[MemoryEvent]:
            return [event(backend=backend, duration=took, error=error, **fields_of(result))]

        return self._watch(plan, events_of)

    def _watch(self, plan: Plan[C, R], events_of: EventsOf) -> Plan[C, R]:
        start = perf_counter()
        try:
            result = yield from plan
        except Restart:  # not an error: the caller runs another plan (see there)
            raise
        except Exception as exc:
            self._emit(events_of(None, perf_counter() - start, exc))
            raise
        self._emit(events_of(result, perf_counter() - start, None))
        return result


# -- events from outside a saver or store (memory nodes) --------------------------------------

_global: tuple[Listener, ...] = ()


def add_global_listener(listener: Listener) -> None:
    """Register ``listener`` for the events memory nodes report (scan refusals, prefetch)."""
    global _global
    _global = (*_global, listener)


def remove_global_listener(listener: Listener) -> None:
    """Unregister a listener :func:`add_global_listener` registered (no error if absent)."""
    global _global
    _global = tuple(item for item in _global if item != listener)


def has_global_listeners() -> bool:
    """Whether building a node event is worth it (False: nobody listens)."""
    return bool(_global)


def emit_global(event: MemoryEvent) -> None:
    """Hand a node's event to the global listeners; a failing one is logged."""
    _deliver(_global, [event])


W = TypeVar("W", bound="WatchesNodes")


class WatchesNodes:
    """For metric listeners: also receive the memory nodes' events (global listeners)."""

    def __call__(self, event: MemoryEvent) -> None:
        raise NotImplementedError

    def watch_nodes(self: W) -> W:
        """Also count the memory nodes' events (they have no saver to register on)."""
        add_global_listener(self)
        return self

    def unwatch_nodes(self) -> None:
        remove_global_listener(self)


__all__ = [
    "Listener",
    "Observable",
    "WatchesNodes",
    "add_global_listener",
    "db_system",
    "emit_global",
    "has_global_listeners",
    "logger",
    "remove_global_listener",
]
