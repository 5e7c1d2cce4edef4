"""Serving both calling styles from one driver: blocking code and ``asyncio`` code.

Every public class of this package (checkpointers, stores) has a blocking and an async
flavour, and each flavour must also answer the other style's methods: LangGraph calls
``aget_tuple`` on a blocking saver inside ``ainvoke``, and tools call ``store.get`` on an
async store from a worker thread. A driver implements only the style it speaks (``_run``
or ``_arun``); one of these mixins supplies the other. They are generic over what a
"plan" is, so savers and stores share them.
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from typing import Any, TypeVar

from .plan import Plan

R = TypeVar("R")


class SyncBridge(ABC):
    """A driver whose storage calls block; its awaitable calls run in a worker thread.

    A thread, not the event loop, because a blocking call on the loop would stall every
    other coroutine for the length of a database round trip.
    """

    @abstractmethod
    def _run(self, plan: Plan[Any, R]) -> R:
        """Run one plan to completion, blocking."""

    async def _arun(self, plan: Plan[Any, R]) -> R:
        return await asyncio.to_thread(self._run, plan)


class AsyncBridge(ABC):
    """A driver whose storage calls are awaited; blocking calls are served on its loop.

    Async connections belong to the event loop that opened them, so a blocking call from
    another thread is submitted to that loop and waited for. A blocking call made *on*
    that loop would wait for itself forever, so it is refused with an explanation.
    """

    loop: asyncio.AbstractEventLoop

    def _bind_loop(self) -> None:
        try:
            self.loop = asyncio.get_running_loop()
        except RuntimeError:
            self.loop = asyncio.new_event_loop()

    @abstractmethod
    async def _arun(self, plan: Plan[Any, R]) -> R:
        """Run one plan to completion without blocking the event loop."""

    def _run(self, plan: Plan[Any, R]) -> R:
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self.loop:
            plan.close()
            raise asyncio.InvalidStateError(
                f"synchronous calls to {type(self).__name__} would block its own event loop; "
                "use its async methods (the 'a'-prefixed ones) from async code"
            )
        if not self.loop.is_running():
            plan.close()
            raise asyncio.InvalidStateError(
                f"{type(self).__name__} serves synchronous calls on the event loop it was "
                "created in, and that loop is not running"
            )
        return asyncio.run_coroutine_threadsafe(self._arun(plan), self.loop).result()
