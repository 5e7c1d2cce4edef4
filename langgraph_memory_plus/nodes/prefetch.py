"""Prefetching: start the next turn's profile read right after this turn's model call.

The profile read sits on the critical path of every model call (transient and replace
modes read each turn). Between two turns the user is reading and typing, so the read can
run then instead: after the model call a prefetch starts the very read the next turn will
make, on a background thread, and the next turn takes its result (waiting at most the
injector's timeout if it is still running) instead of asking the store itself.

A prefetched result is used once, and only while younger than ``max_age``: the profile
may change in between (another thread of the same user, a memory tool), and an old read
is worth less than a fresh one.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from concurrent.futures import Future
from typing import Any

from langgraph.store.base import BaseStore, Op

from ._store import background_pool


class Prefetcher:
    """Reads started ahead of time, keyed by what they read; each is taken at most once.

    Args:
        max_age: seconds a prefetched read stays usable.
        max_entries: how many users' reads to hold at once (the oldest go first), so a
            busy process does not keep a read per user forever.
    """

    def __init__(self, *, max_age: float = 60.0, max_entries: int = 1024) -> None:
        self.max_age = max_age
        self.max_entries = max_entries
        # (started, result, the task producing it when it runs on an event loop: held
        # here so it is not garbage-collected while running)
        self._entries: OrderedDict[str, tuple[float, Future[Any], asyncio.Task[Any] | None]] = (
            OrderedDict()
        )
        self._lock = threading.Lock()
        self.active = False
        """Whether a read was ever started: before that, a read finding none is no miss
        (the application does not prefetch at all)."""

    def start(self, key: str, store: BaseStore, ops: Sequence[Op]) -> Future[Any]:
        """Start reading ``ops`` in the background; replaces an older read of ``key``.

        Called from async code, the read is a task on the running loop (``abatch``);
        otherwise it runs on a worker thread (``batch``). A thread blocked on an async
        store's loop could hang for good if that loop ended first; a task is simply
        cancelled with its loop.
        """
        try:
            loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        task: asyncio.Task[Any] | None = None
        self.active = True
        if loop is None:
            future = background_pool().submit(store.batch, list(ops))
        else:
            future = Future()
            task = loop.create_task(store.abatch(list(ops)))
            task.add_done_callback(lambda done: _settle(future, done))
        with self._lock:
            self._entries.pop(key, None)
            self._entries[key] = (time.monotonic(), future, task)
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)
        return future

    def take(self, key: str) -> Future[Any] | None:
        """The read started for ``key``, if one is young enough; it is not kept."""
        with self._lock:
            entry = self._entries.pop(key, None)
        if entry is None:
            return None
        started, future, _ = entry
        if time.monotonic() - started > self.max_age:
            return None
        return future

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)


class PrefetchCancelled(Exception):
    """The loop running a prefetch ended before the read finished."""


def _settle(future: Future[Any], task: asyncio.Task[Any]) -> None:
    """Copy a finished task's outcome into the future consumers wait on."""
    if task.cancelled():
        future.set_exception(PrefetchCancelled("the prefetch's event loop ended"))
    elif (error := task.exception()) is not None:
        future.set_exception(error)
    else:
        future.set_result(task.result())
