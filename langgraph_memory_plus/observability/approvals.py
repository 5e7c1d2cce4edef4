"""The pending-approvals gauge: how many approvals wait for a reviewer, asked when scraped.

Why asked, not counted from events: the queue keeps no list of its own (an approval *is*
an interrupted thread in the thread index, see :mod:`langgraph_memory_plus.approvals`),
and approvals are opened by one process and decided by another. A count kept in memory
from events would be one replica's view, and wrong after every restart. Asking
``Approvals.count()`` reads the shared index, so every replica reports the same, true
number: aggregate it with ``max``, not ``sum``.

Why cached: a count pages through the index, and scrapers call every few seconds, from
every replica. :class:`PendingApprovals` asks at most once per ``max_age`` seconds (15
by default) and answers from the last count in between; concurrent scrapes wait for one
count instead of starting their own. A count that fails is logged and the last value is
kept (none before the first success): a scrape never fails or hangs on the queue for
longer than one count takes.

No labels: a user id or thread id would be unbounded, and the total is what the alert
needs.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Protocol

from .core import logger

DEFAULT_MAX_AGE = 15.0
HELP = "Approvals waiting for a reviewer (the whole queue, read from the thread index)."


class CountsPending(Protocol):
    """What the gauge asks: :class:`~langgraph_memory_plus.approvals.Approvals` has it."""

    def count(self) -> int: ...


class PendingApprovals:
    """``pending()`` is the queue's pending count, at most ``max_age`` seconds old.

    Args:
        approvals: the queue (``Approvals``; anything with ``count()``).
        max_age: seconds a count is reused before the queue is asked again.
        clock: monotonic seconds, for tests.
    """

    def __init__(
        self,
        approvals: CountsPending,
        *,
        max_age: float = DEFAULT_MAX_AGE,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if isinstance(max_age, bool) or not isinstance(max_age, (int, float)) or max_age < 0:
            raise ValueError(f"max_age must be a number of seconds >= 0, got {max_age!r}")
        count = getattr(approvals, "count", None)
        if not callable(count):
            raise TypeError(f"expected an approvals queue with count(), got {approvals!r}")
        self._count: Callable[[], int] = count
        self.max_age = float(max_age)
        self._clock = clock
        self._value: int | None = None
        self._at = float("-inf")
        self._lock = threading.Lock()

    def pending(self) -> int | None:
        """The last count if young enough, else a new one (``None``: never counted)."""
        with self._lock:
            if self._clock() - self._at >= self.max_age:
                try:
                    self._value = int(self._count())
                except Exception:
                    logger.exception("counting pending approvals failed; keeping the last count")
                self._at = self._clock()  # a failure waits max_age too: no retry storm
            return self._value


__all__ = ["DEFAULT_MAX_AGE", "HELP", "CountsPending", "PendingApprovals"]
