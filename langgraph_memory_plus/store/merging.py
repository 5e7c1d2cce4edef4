"""Merging concurrent async store calls into shared transactions.

Ten thousand ``aget``/``aput``/``asearch`` calls gathered at once used to borrow ten
thousand pool connections one after another, each for its own transaction: with a pool of
2 the last callers waited past the pool's timeout (``PoolTimeoutError``), as the upstream
store suite's ``test_large_batches_async`` shows. LangGraph's ``AsyncBatchedBaseStore``
merges the calls of one tick into one ``abatch``; a failure there reaches every caller of
the batch. This module merges too, but keeps each call's behaviour what it was alone:

- **Validation stays the caller's**: a call is checked and encoded in its own task before it
  is queued, so a bad key or a value too large fails that call only.
- **Only calls that commute merge**: reads with reads (gets, searches, namespace listings);
  unconditional writes with unconditional writes on other keys. Every call in a group was
  pending while the group ran, so the group's order (all its reads see one state; its
  writes apply in queue order) is one the calls could have had alone. A call mixing reads
  and writes, or with ``expected_version``, runs alone.
- **Writes keep queue order**: one write group at a time, first queued first. Two pending
  writes of one key go to successive groups, so each is applied (and observed) as alone.
- **Errors reach the right caller**: a merged group that fails on the pool or the server
  (a pool timeout, a lost connection: ``shared``) fails every call in it, as each would
  have failed alone; any other failure runs its calls again one by one, each raising its
  own error (a corrupt item fails the get that reads it, an embedder refusing one text
  fails the put of that text, not their neighbours). Failed transactions applied nothing,
  so the rerun writes once; only a connection lost during the commit itself leaves it
  unknown, as for any call, and such errors are shared, not rerun.
- **Cancellation**: a cancelled call still queued is dropped; one whose group runs is not
  waited for (the others' transaction goes on and may apply its write, as a cancelled call
  whose commit was under way may).
- **Bounded**: at most ``slots`` groups run at once (the pool's size), so callers wait in
  this queue, which has no timeout, instead of at the pool, which has one.
- **Nothing lost at close**: :meth:`CallMerger.drain` waits until every queued call ran.

Idle, it holds no task: groups start when calls arrive and a slot is free, so a lone call
runs at once, as before (no tick of delay).
"""

from __future__ import annotations

import asyncio
import itertools
from collections import deque
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, TypeVar

B = TypeVar("B")

Kind = Literal["read", "write", "alone"]

SCAN = 4000
"""The most queued calls one group is chosen from."""

MAX_GROUP_OPS = 500
"""The most ops one merged transaction takes (a read group is one statement per search)."""


@dataclass(eq=False)
class Call(Generic[B]):
    """One caller's prepared batch, waiting to run."""

    batch: B
    kind: Kind
    ops: int
    nbytes: int
    keys: frozenset[Hashable]
    seq: int
    future: asyncio.Future[list[Any]] = field(repr=False)


class CallMerger(Generic[B]):
    """Queues calls of one event loop and runs them in merged groups (see the module)."""

    def __init__(
        self,
        *,
        run_one: Callable[[B], Awaitable[list[Any]]],
        run_merged: Callable[[list[B]], Awaitable[list[list[Any]]]],
        shared: Callable[[Exception], bool],
        slots: int,
        max_bytes: int,
        max_ops: int = MAX_GROUP_OPS,
    ) -> None:
        self._loop = asyncio.get_running_loop()
        self._run_one = run_one
        self._run_merged = run_merged
        self._shared = shared
        self._slots = max(1, slots)
        self._max_bytes = max_bytes
        self._max_ops = max_ops
        self._reads: deque[Call[B]] = deque()
        self._writes: deque[Call[B]] = deque()  # "write" and "alone", in queue order
        self._busy = 0
        self._writing = False
        self._seq = itertools.count()
        self._tasks: set[asyncio.Task[None]] = set()
        self._idle = asyncio.Event()
        self._idle.set()

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        return self._loop

    def submit(
        self, batch: B, kind: Kind, *, ops: int, nbytes: int, keys: frozenset[Hashable]
    ) -> asyncio.Future[list[Any]]:
        """Queue one call; the future answers its results (or raises its error)."""
        future: asyncio.Future[list[Any]] = self._loop.create_future()
        call = Call(batch, kind, ops, nbytes, keys, next(self._seq), future)
        (self._reads if kind == "read" else self._writes).append(call)
        self._pump()
        return future

    async def drain(self) -> None:
        """Wait until every call queued so far (and any queued meanwhile) has run."""
        while not self._idle.is_set() or self._live():
            await self._idle.wait()
            self._pump()

    # -- scheduling ----------------------------------------------------------------------

    def _live(self) -> bool:
        return any(not c.future.done() for c in itertools.chain(self._reads, self._writes))

    def _pump(self) -> None:
        while self._busy < self._slots:
            taken = self._take()
            if taken is None:
                break
            group, writes = taken
            self._busy += 1
            self._idle.clear()
            task = self._loop.create_task(self._serve(group, writes))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        if self._busy == 0:
            self._idle.set()

    def _take(self) -> tuple[list[Call[B]], bool] | None:
        """The next group: from the queue whose oldest live call is older (writes only
        when no write group runs)."""
        read = self._head(self._reads)
        write = None if self._writing else self._head(self._writes)
        if write is not None and (read is None or write.seq < read.seq):
            self._writing = True
            return self._group(self._writes), True
        if read is not None:
            return self._group(self._reads), False
        return None

    @staticmethod
    def _head(queue: deque[Call[B]]) -> Call[B] | None:
        while queue and queue[0].future.done():  # cancelled while queued
            queue.popleft()
        return queue[0] if queue else None

    def _group(self, queue: deque[Call[B]]) -> list[Call[B]]:
        """Calls from the front of ``queue`` that may share one transaction.

        A write whose key a call of the group (or a call passed over) already writes
        stays queued for a later group, and so does every later write of that key, so
        writes of one key keep their order; others may join past it. At most
        :data:`SCAN` queued calls are looked at.
        """
        group = [queue.popleft()]
        if group[0].kind == "alone":
            return group
        ops, nbytes = group[0].ops, group[0].nbytes
        keys, passed = set(group[0].keys), set[Hashable]()
        kept: list[Call[B]] = []
        scanned = 0
        while queue and scanned < SCAN and ops < self._max_ops:
            call = queue.popleft()
            scanned += 1
            if call.future.done():
                continue
            if (
                call.kind == "alone"
                or ops + call.ops > self._max_ops
                or nbytes + call.nbytes > self._max_bytes
                or not keys.isdisjoint(call.keys)
                or not passed.isdisjoint(call.keys)
            ):
                kept.append(call)
                passed.update(call.keys)
                continue
            group.append(call)
            ops, nbytes = ops + call.ops, nbytes + call.nbytes
            keys.update(call.keys)
        queue.extendleft(reversed(kept))
        return group

    # -- running -------------------------------------------------------------------------

    async def _serve(self, group: list[Call[B]], writes: bool) -> None:
        try:
            live = [c for c in group if not c.future.done()]
            if len(live) == 1:
                await self._alone(live[0])
            elif live:
                try:
                    results = await self._run_merged([c.batch for c in live])
                except Exception as exc:
                    if self._shared(exc):  # the pool or the server: everyone's error
                        for call in live:
                            if not call.future.done():
                                call.future.set_exception(exc)
                        return
                    # Whose error is it? Each call again on its own says (see the module).
                    for call in live:
                        await self._alone(call)
                else:
                    for call, result in zip(live, results, strict=True):
                        if not call.future.done():
                            call.future.set_result(result)
        except BaseException:
            # This task was cancelled (the loop is closing): no caller waits forever.
            for call in group:
                if not call.future.done():
                    call.future.cancel()
            raise
        finally:
            self._busy -= 1
            if writes:
                self._writing = False
            self._pump()

    async def _alone(self, call: Call[B]) -> None:
        """Run one call in its own transaction; its caller's cancellation cancels it, as
        when it ran in the caller's task."""
        if call.future.done():
            return
        run: asyncio.Task[list[Any]] = self._loop.create_task(_awaited(self._run_one(call.batch)))

        def cancel_run(future: asyncio.Future[list[Any]]) -> None:
            if future.cancelled():
                run.cancel()

        call.future.add_done_callback(cancel_run)
        try:
            await asyncio.wait({run})
        except BaseException:
            run.cancel()
            raise
        finally:
            call.future.remove_done_callback(cancel_run)
        if call.future.done():
            if not run.cancelled():
                run.exception()  # retrieved: the caller left, nobody else wants it
            return
        if run.cancelled():
            call.future.cancel()
        elif (error := run.exception()) is not None:
            call.future.set_exception(error)
        else:
            call.future.set_result(run.result())


async def _awaited(awaitable: Awaitable[list[Any]]) -> list[Any]:
    return await awaitable


__all__ = ["MAX_GROUP_OPS", "CallMerger", "Kind"]
