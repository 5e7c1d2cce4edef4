"""Store TTL: the ``ttl=`` option checked once, and the background sweepers.

Expiry is enforced by every read (an expired item is never returned, listed or counted),
so sweeping only reclaims space; a sweeper that falls behind or stops costs disk, not
correctness. The blocking store sweeps from a daemon thread, the async store from a task
on its event loop, each calling the store's own ``sweep_ttl``.
"""

from __future__ import annotations

import asyncio
import logging
import math
import threading
from collections.abc import Awaitable, Callable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from langgraph.store.base import TTLConfig

from ..errors import InvalidConfigError

logger = logging.getLogger("langgraph_memory_plus.store")

DEFAULT_SWEEP_MINUTES = 5.0
SWEEPER_NAME = "lgmp-ttl-sweeper"
"""The name of a sweeper's thread or task (what a test or a debugger looks for)."""
TTL_OPTIONS = ("default_ttl", "refresh_on_read", "sweep_interval_minutes", "omit_expired")


def check_minutes(value: Any, what: str) -> float:
    """A positive, finite number of minutes (fractions welcome: tests use seconds)."""
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or value <= 0
    ):
        raise InvalidConfigError(f"{what} must be a positive number of minutes, got {value!r}")
    return float(value)


def read_ttl_config(ttl: Any) -> TTLConfig | None:
    """Check LangGraph's ``TTLConfig`` dict; returns a copy.

    ``omit_expired`` is accepted for compatibility and has no effect: expired items are
    always omitted.
    """
    if ttl is None:
        return None
    if not isinstance(ttl, Mapping):
        raise InvalidConfigError("ttl must be a dict like {'default_ttl': minutes}")
    unknown = set(ttl) - set(TTL_OPTIONS)
    if unknown:
        raise InvalidConfigError(f"unknown ttl option(s): {sorted(unknown)}")
    config: TTLConfig = {}
    if ttl.get("default_ttl") is not None:
        config["default_ttl"] = check_minutes(ttl["default_ttl"], "ttl['default_ttl']")
    if ttl.get("sweep_interval_minutes") is not None:
        minutes = check_minutes(ttl["sweep_interval_minutes"], "ttl['sweep_interval_minutes']")
        config["sweep_interval_minutes"] = minutes  # type: ignore[typeddict-item]
    config["refresh_on_read"] = bool(ttl.get("refresh_on_read", True))
    return config


def item_ttl(value: Any) -> float | None:
    """A ``PutOp.ttl``: ``None`` (never expires) or positive minutes."""
    return None if value is None else check_minutes(value, "ttl")


def sweep_interval(config: TTLConfig | None, minutes: float | None) -> float:
    """Seconds between sweeps: the argument, else the config's, else five minutes."""
    if minutes is not None:
        return check_minutes(minutes, "sweep_interval_minutes") * 60.0
    configured = (config or {}).get("sweep_interval_minutes")
    return float(configured or DEFAULT_SWEEP_MINUTES) * 60.0


@dataclass
class ThreadSweeper:
    """Calls ``sweep`` every ``interval`` seconds on a daemon thread until stopped."""

    sweep: Callable[[], int]
    interval: float

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self.future: Future[None] = Future()
        self._thread = threading.Thread(target=self._loop, daemon=True, name=SWEEPER_NAME)
        self.future.add_done_callback(lambda f: self._stop.set() if f.cancelled() else None)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                deleted = self.sweep()
                if deleted:
                    logger.info("TTL sweep deleted %d expired items", deleted)
            except Exception:
                logger.exception("TTL sweep failed; retrying after the next interval")
        if not self.future.done():
            self.future.set_result(None)

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def stop(self, timeout: float | None) -> bool:
        self._stop.set()
        self._thread.join(timeout)
        return not self._thread.is_alive()


@dataclass
class TaskSweeper:
    """Awaits ``sweep`` every ``interval`` seconds in a task on the running loop."""

    sweep: Callable[[], Awaitable[int]]
    interval: float

    def __post_init__(self) -> None:
        self._stop = asyncio.Event()
        self.task: asyncio.Task[None] = asyncio.get_running_loop().create_task(
            self._loop(), name=SWEEPER_NAME
        )

    async def _loop(self) -> None:
        while True:
            try:
                await asyncio.wait_for(self._stop.wait(), self.interval)
                return
            except asyncio.TimeoutError:
                pass
            try:
                deleted = await self.sweep()
                if deleted:
                    logger.info("TTL sweep deleted %d expired items", deleted)
            except Exception:
                logger.exception("TTL sweep failed; retrying after the next interval")

    @property
    def running(self) -> bool:
        return not self.task.done()

    async def stop(self, timeout: float | None) -> bool:
        self._stop.set()
        try:
            await asyncio.wait_for(asyncio.shield(self.task), timeout)
        except asyncio.TimeoutError:
            return False
        return True
