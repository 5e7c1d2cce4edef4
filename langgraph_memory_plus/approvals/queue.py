"""The reviewers' queue: pending approvals read from the thread index, and decisions.

Nothing here keeps a list of its own. An approval *is* a pending interrupt in the thread
index (``saver.threads``), which the saver writes in the same statement or script as the
checkpoint; the only thing stored beside it is the decision record, once a reviewer
decides. So a redeploy, a crash or a second replica can never leave the queue out of
step with what the threads wait for.

Exactly once: the decision record is created with a create-only store write
(``expected_version=0``), so of two reviewers deciding at once one wins and the other
gets :class:`ApprovalConflictError`. The thread is resumed only while the index still
shows it interrupted on that interrupt id, so re-applying a decision after a crash
(between recording and resuming) resumes it, and re-applying it after a resume does
nothing: the tool runs once.

Sync and async share the plans below; the two drivers only run their commands.
"""

from __future__ import annotations

import builtins
import inspect
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone
from typing import Any

from langgraph.store.base import BaseStore, GetOp, PutOp, SearchOp
from langgraph.types import Command

from ..drivers.plan import Plan, adrive, drive
from ..errors import ConflictError, InvalidConfigError
from ..store.base import ConditionalPutOp
from .core import (
    STATUSES,
    Approval,
    ApprovalConflictError,
    ApprovalExpiredError,
    ApprovalNotFoundError,
    DecisionRecord,
    action_dicts,
    check_decision,
    parse_request,
    resume_value,
)

DEFAULT_WINDOW = timedelta(hours=24)
DEFAULT_NAMESPACE = ("approvals", "decisions")
TTL_FACTOR = 1.5
CHUNK = 500
"""Threads read per index page while listing, counting or sweeping."""


def _utcnow() -> datetime:
    return datetime.now(timezone.utc)


# -- commands the plans yield ---------------------------------------------------------


@dataclass(frozen=True)
class _Search:
    kwargs: dict[str, Any]


@dataclass(frozen=True)
class _GetThread:
    thread_id: str


@dataclass(frozen=True)
class _Batch:
    ops: list[Any]


@dataclass(frozen=True)
class _Resume:
    graph: Any
    command: Command[Any]
    config: dict[str, Any]


@dataclass(frozen=True)
class _Notify:
    callback: Callable[[Any], Any]
    argument: Any


_Cmd = _Search | _GetThread | _Batch | _Resume | _Notify


def _seconds(value: timedelta | float, what: str) -> float:
    seconds = value.total_seconds() if isinstance(value, timedelta) else value
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or seconds <= 0:
        raise InvalidConfigError(f"{what} must be a positive timedelta or seconds, got {value!r}")
    return float(seconds)


def check_ttl(ttl_seconds: float | None, window_seconds: float) -> None:
    """A checkpoint TTL must leave the approval window room: at least 1.5x of it.

    Otherwise a reviewer approves a thread whose checkpoint is gone, and the agent starts
    over with no error anywhere.
    """
    if ttl_seconds is not None and ttl_seconds < TTL_FACTOR * window_seconds:
        raise InvalidConfigError(
            f"checkpoint TTL ({ttl_seconds / 60:g} minutes) is shorter than {TTL_FACTOR}x the "
            f"approval window ({window_seconds / 60:g} minutes): a thread would expire "
            f"while it waits for a reviewer; raise ttl['default_ttl'] to at least "
            f"{TTL_FACTOR * window_seconds / 60:g} minutes or shorten the window"
        )


class Approvals:
    """Pending approvals of one saver's threads; decisions recorded in ``store``.

    Args:
        saver: a saver of this package (its thread index is the queue).
        store: where decision records go (``namespace``); they carry no TTL, so the audit
            trail outlives the threads.
        window: how long an approval stays decidable (24 hours by default); the saver's
            checkpoint TTL must be at least 1.5x as long (checked here).
        clock: time source, for tests.
    """

    def __init__(
        self,
        saver: Any,
        store: BaseStore,
        *,
        window: timedelta | float = DEFAULT_WINDOW,
        namespace: tuple[str, ...] = DEFAULT_NAMESPACE,
        clock: Callable[[], datetime] = _utcnow,
    ) -> None:
        threads = getattr(saver, "threads", None)
        if threads is None or not hasattr(threads, "search"):
            raise InvalidConfigError("Approvals needs a saver of this package (saver.threads)")
        self.saver = saver
        self.store = store
        self.window = timedelta(seconds=_seconds(window, "window"))
        check_ttl(saver.settings.ttl_seconds, self.window.total_seconds())
        self.namespace = tuple(namespace)
        self.clock = clock
        self._threads = threads
        self.user_key: str = threads.user_key

    # -- reading ------------------------------------------------------------------------

    def _of_thread(
        self, thread: Any, records: dict[str, DecisionRecord]
    ) -> builtins.list[Approval]:
        now = self.clock()
        out = []
        for task_id, interrupts in thread["interrupts"].items():
            for item in interrupts:
                kind, actions = parse_request(item.value, getattr(item, "response_schema", None))
                created = thread["updated_at"]
                expires = created + self.window
                record = records.get(item.id)
                if record is not None:
                    status = record.status
                else:
                    status = "expired" if now >= expires else "pending"
                out.append(
                    Approval(
                        item.id,
                        thread["thread_id"],
                        thread["metadata"].get(self.user_key),
                        task_id,
                        created,
                        expires,
                        status,
                        kind,
                        actions,
                        item.value,
                        record,
                    )
                )
        return out

    def _records(self, ids: Iterable[str]) -> Plan[_Cmd, dict[str, DecisionRecord]]:
        ids = list(dict.fromkeys(ids))
        if not ids:
            return {}
        items = yield _Batch([GetOp(self.namespace, i) for i in ids])
        pairs = zip(ids, items, strict=True)
        return {i: DecisionRecord.from_value(it.value) for i, it in pairs if it}

    def _approvals(self, threads: list[Any]) -> Plan[_Cmd, list[Approval]]:
        ids = [i.id for t in threads for its in t["interrupts"].values() for i in its]
        records = yield from self._records(ids)
        return [a for t in threads for a in self._of_thread(t, records)]

    def _scan(
        self, user_id: Any, chunk: int, start: int = 0
    ) -> Plan[_Cmd, tuple[list[Approval], bool]]:
        """One page of interrupted threads (oldest first) as approvals; whether more."""
        metadata = None if user_id is None else {self.user_key: user_id}
        threads = yield _Search(
            dict(
                metadata=metadata,
                status="interrupted",  # the index's status order: no scan on any backend
                sort_by="updated_at",
                sort_order="asc",
                limit=chunk,
                offset=start,
            )
        )
        more = len(threads) == chunk
        approvals = yield from self._approvals(threads)
        return approvals, more

    @staticmethod
    def _check_status(status: Any) -> None:
        if status is not None and status not in STATUSES:
            raise InvalidConfigError(f"unknown status {status!r}; use one of {STATUSES}")

    @staticmethod
    def _wanted(approval: Approval, action: str | None, status: str | None) -> bool:
        if status is not None and approval.status != status:
            return False
        return action is None or any(a.name == action for a in approval.actions)

    def _list_plan(
        self, user_id: Any, action: str | None, status: str | None, limit: int, offset: int
    ) -> Plan[_Cmd, list[Approval]]:
        self._check_status(status)
        for name, value in (("limit", limit), ("offset", offset)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise InvalidConfigError(f"{name} must be a non-negative integer, got {value!r}")
        if status in ("approved", "rejected", "edited"):
            return (yield from self._decided(user_id, action, status, limit, offset))
        out: list[Approval] = []
        skip, start, more = offset, 0, limit > 0
        chunk = min(CHUNK, max(20, offset + limit))
        while more:
            page, more = yield from self._scan(user_id, chunk, start)
            start, chunk = start + chunk, min(CHUNK, chunk * 2)  # fewer trips past idle ones
            for approval in page:
                if not self._wanted(approval, action, status):
                    continue
                if skip:
                    skip -= 1
                    continue
                out.append(approval)
                if len(out) == limit:
                    return out
        return out

    def _decided(
        self, user_id: Any, action: str | None, status: str, limit: int, offset: int
    ) -> Plan[_Cmd, list[Approval]]:
        """Decided approvals come from their records (the interrupt may be long gone)."""
        filt: dict[str, Any] = {"status": status}
        if user_id is not None:
            filt["user_id"] = user_id
        out: list[Approval] = []
        skip, start = offset, 0
        while len(out) < limit:
            (items,) = yield _Batch([SearchOp(self.namespace, filt, CHUNK, start)])
            for item in items:
                record = DecisionRecord.from_value(item.value)
                if action is not None and not any(a["name"] == action for a in record.actions):
                    continue
                if skip:
                    skip -= 1
                    continue
                out.append(_from_record(record, self.window))
                if len(out) == limit:
                    break
            if len(items) < CHUNK:
                break
            start += CHUNK
        out.sort(key=lambda a: (a.created_at, a.id))
        return out

    def _count_plan(self, user_id: Any, action: str | None, status: str | None) -> Plan[_Cmd, int]:
        self._check_status(status)
        if status in ("approved", "rejected", "edited"):
            found = yield from self._decided(user_id, action, status, 10**9, 0)
            return len(found)
        total, start, more = 0, 0, True
        while more:
            page, more = yield from self._scan(user_id, CHUNK, start)
            start += CHUNK
            total += sum(1 for a in page if self._wanted(a, action, status))
        return total

    def _find(self, approval: Approval | str, thread_id: str | None) -> Plan[_Cmd, Approval]:
        """The approval as it stands now: from its thread, else its decision record."""
        approval_id = approval.id if isinstance(approval, Approval) else approval
        if not isinstance(approval_id, str) or not approval_id:
            raise InvalidConfigError(f"approval id must be a non-empty string, got {approval!r}")
        if isinstance(approval, Approval):
            thread_id = approval.thread_id
        records = yield from self._records([approval_id])
        record = records.get(approval_id)
        if thread_id is None and record is not None:
            thread_id = record.thread_id
        if thread_id is not None:
            thread = yield _GetThread(thread_id)
            for found in (yield from self._approvals([thread] if thread else [])):
                if found.id == approval_id:
                    return found
        else:  # no thread given: look through the queue (bounded pages)
            start, more = 0, True
            while more:
                page, more = yield from self._scan(None, CHUNK, start)
                start += CHUNK
                for found in page:
                    if found.id == approval_id:
                        return found
        if record is not None:
            return _from_record(record, self.window)
        raise ApprovalNotFoundError(f"no pending approval or decision with id {approval_id!r}")

    # -- deciding -----------------------------------------------------------------------

    def _put(self, record: DecisionRecord, expected: int | None) -> _Batch:
        op = PutOp(self.namespace, record.approval_id, record.as_value(), index=False, ttl=None)
        return _Batch([op if expected is None else ConditionalPutOp(op, expected)])

    def _config(self, approval: Approval, config: dict[str, Any] | None) -> dict[str, Any]:
        configurable = dict((config or {}).get("configurable") or {})
        configurable["thread_id"] = approval.thread_id
        if approval.user_id is not None:
            configurable.setdefault(self.user_key, approval.user_id)
        return {**(config or {}), "configurable": configurable}

    def _apply(
        self, approval: Approval, record: DecisionRecord, graph: Any, config: Any
    ) -> Plan[_Cmd, DecisionRecord]:
        """Resume the thread with a recorded decision, if it still waits on it."""
        thread = yield _GetThread(approval.thread_id)
        waiting = thread is not None and any(
            i.id == approval.id for its in thread["interrupts"].values() for i in its
        )
        if waiting:
            command: Command[Any] = Command(resume={approval.id: resume_value(approval, record)})
            yield _Resume(graph, command, self._config(approval, config))
        done = replace(record, resumed_at=self.clock())
        yield self._put(done, None)
        return done

    def _decide_plan(
        self,
        approval: Approval | str,
        decision: str,
        by: str,
        args: Any,
        message: str | None,
        graph: Any,
        thread_id: str | None,
        config: Any,
    ) -> Plan[_Cmd, Approval]:
        if not isinstance(by, str) or not by:
            raise InvalidConfigError(f"by (who decides) must be a non-empty string, got {by!r}")
        found = yield from self._find(approval, thread_id)
        record = found.decision
        if record is None:
            if found.status == "expired":
                raise ApprovalExpiredError(
                    f"approval {found.id!r} expired at {found.expires_at.isoformat()}"
                )
            check_decision(found, decision, args)
            mine = DecisionRecord(
                found.id,
                found.thread_id,
                found.user_id,
                decision,
                by,
                self.clock(),
                args,
                message,
                action_dicts(found.actions),
            )
            try:
                yield self._put(mine, 0)
                record = mine
            except ConflictError:
                record = (yield from self._records([found.id]))[found.id]
                if (record.decision, record.by) == (decision, by):
                    raise ApprovalConflictError(
                        f"approval {found.id!r} is being decided by {by!r} elsewhere"
                    ) from None
        if record.decision == "expire":
            raise ApprovalExpiredError(
                f"approval {found.id!r} expired (marked {record.decided_at})"
            )
        if (record.decision, record.by, record.args, record.message) != (
            decision,
            by,
            args,
            message,
        ):
            raise ApprovalConflictError(
                f"approval {found.id!r} was already decided: {record.decision!r} by "
                f"{record.by!r} at {record.decided_at.isoformat()}"
            )
        if record.resumed_at is None:
            record = yield from self._apply(found, record, graph, config)
        return replace(found, status=record.status, decision=record)

    def _recover_plan(self, graph: Any, config: Any, limit: int) -> Plan[_Cmd, int]:
        """Finish decisions recorded but never resumed (a crash in between)."""
        (items,) = yield _Batch([SearchOp(self.namespace, {"resumed_at": None}, limit, 0)])
        done = 0
        for item in items:
            record = DecisionRecord.from_value(item.value)
            if record.decision == "expire" or record.resumed_at is not None:
                continue
            found = yield from self._find(record.approval_id, record.thread_id)
            yield from self._apply(found, record, graph, config)
            done += 1
        return done

    def _expire_plan(
        self,
        batch_size: int,
        on_expired: Callable[[Approval], Any] | None,
        progress: Callable[[int], Any] | None,
    ) -> Plan[_Cmd, int]:
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise InvalidConfigError(f"batch_size must be a positive integer, got {batch_size!r}")
        total, start, more = 0, 0, True
        while more:
            page, more = yield from self._scan(None, batch_size, start)
            start += batch_size
            for approval in page:
                if approval.status == "pending":
                    more = False  # oldest first: everything after this is newer
                if approval.status != "expired" or approval.decision is not None:
                    continue
                record = DecisionRecord(
                    approval.id,
                    approval.thread_id,
                    approval.user_id,
                    "expire",
                    "system:expiry",
                    self.clock(),
                    actions=action_dicts(approval.actions),
                )
                try:
                    yield self._put(record, 0)
                except ConflictError:  # decided (or marked) meanwhile
                    continue
                total += 1
                if on_expired is not None:
                    yield _Notify(on_expired, replace(approval, decision=record))
            if progress is not None:
                yield _Notify(progress, total)
        return total

    # -- drivers ------------------------------------------------------------------------

    def _execute(self, command: _Cmd) -> Any:
        if isinstance(command, _Search):
            return self._threads.search(**command.kwargs)
        if isinstance(command, _GetThread):
            return self._threads.get(command.thread_id)
        if isinstance(command, _Batch):
            return self.store.batch(command.ops)
        if isinstance(command, _Resume):
            return command.graph.invoke(command.command, command.config)
        return command.callback(command.argument)

    async def _aexecute(self, command: _Cmd) -> Any:
        if isinstance(command, _Search):
            return await self._threads.asearch(**command.kwargs)
        if isinstance(command, _GetThread):
            return await self._threads.aget(command.thread_id)
        if isinstance(command, _Batch):
            return await self.store.abatch(command.ops)
        if isinstance(command, _Resume):
            return await command.graph.ainvoke(command.command, command.config)
        result = command.callback(command.argument)
        return (await result) if inspect.isawaitable(result) else result

    # -- synchronous API ----------------------------------------------------------------

    def list(
        self,
        *,
        user_id: Any = None,
        action: str | None = None,
        status: str | None = "pending",
        limit: int = 20,
        offset: int = 0,
    ) -> builtins.list[Approval]:
        """Approvals across all threads, oldest first: by user, by action name, by status
        (``pending`` by default; ``None``: every open interrupt)."""
        return drive(self._list_plan(user_id, action, status, limit, offset), self._execute)

    def count(
        self, *, user_id: Any = None, action: str | None = None, status: str | None = "pending"
    ) -> int:
        """How many :meth:`list` finds with no limit."""
        return drive(self._count_plan(user_id, action, status), self._execute)

    def get(self, approval: Approval | str, *, thread_id: str | None = None) -> Approval:
        """One approval as it stands now (``thread_id`` spares a look through the queue)."""
        return drive(self._find(approval, thread_id), self._execute)

    def decide(
        self,
        approval: Approval | str,
        decision: str,
        *,
        by: str,
        graph: Any,
        args: Any = None,
        message: str | None = None,
        thread_id: str | None = None,
        config: dict[str, Any] | None = None,
    ) -> Approval:
        """Record ``by``'s decision, then resume the thread with it, exactly once.

        ``decision``: ``approve``, ``reject`` (``message``: the reason), ``edit`` (``args``:
        the new arguments) or ``respond`` (``message``: the answer in the tool's place).
        Raises :class:`ApprovalConflictError` when someone else decided first,
        :class:`ApprovalExpiredError` after the window, and
        :class:`DecisionNotAllowedError` for what the review config does not allow.
        Calling it again with the same decision after a crash finishes the resume.
        """
        plan = self._decide_plan(approval, decision, by, args, message, graph, thread_id, config)
        return drive(plan, self._execute)

    def recover(self, graph: Any, *, config: dict[str, Any] | None = None, limit: int = 100) -> int:
        """Resume threads whose decision was recorded but not applied; returns how many."""
        return drive(self._recover_plan(graph, config, limit), self._execute)

    def expire_overdue(
        self,
        *,
        batch_size: int = 100,
        on_expired: Callable[[Approval], Any] | None = None,
        progress: Callable[[int], Any] | None = None,
    ) -> int:
        """Mark approvals past their window ``expired``, ``batch_size`` threads a page;
        ``on_expired(approval)`` per approval, ``progress(total)`` per page. Resumable:
        a second run skips what the first marked."""
        return drive(self._expire_plan(batch_size, on_expired, progress), self._execute)

    # -- asynchronous API ---------------------------------------------------------------

    async def alist(
        self,
        *,
        user_id: Any = None,
        action: str | None = None,
        status: str | None = "pending",
        limit: int = 20,
        offset: int = 0,
    ) -> builtins.list[Approval]:
        """Async :meth:`list`."""
        return await adrive(self._list_plan(user_id, action, status, limit, offset), self._aexecute)

    async def acount(
        self, *, user_id: Any = None, action: str | None = None, status: str | None = "pending"
    ) -> int:
        """Async :meth:`count`."""
        return await adrive(self._count_plan(user_id, action, status), self._aexecute)

    async def aget(self, approval: Approval | str, *, thread_id: str | None = None) -> Approval:
        """Async :meth:`get`."""
        return await adrive(self._find(approval, thread_id), self._aexecute)

    async def adecide(
        self,
        approval: Approval | str,
        decision: str,
        *,
        by: str,
        graph: Any,
        args: Any = None,
        message: str | None = None,
        thread_id: str | None = None,
        config: dict[str, Any] | None = None,
    ) -> Approval:
        """Async :meth:`decide` (resumes with ``graph.ainvoke``)."""
        plan = self._decide_plan(approval, decision, by, args, message, graph, thread_id, config)
        return await adrive(plan, self._aexecute)

    async def arecover(
        self, graph: Any, *, config: dict[str, Any] | None = None, limit: int = 100
    ) -> int:
        """Async :meth:`recover`."""
        return await adrive(self._recover_plan(graph, config, limit), self._aexecute)

    async def aexpire_overdue(
        self,
        *,
        batch_size: int = 100,
        on_expired: Callable[[Approval], Any] | None = None,
        progress: Callable[[int], Any] | None = None,
    ) -> int:
        """Async :meth:`expire_overdue` (callbacks may be coroutines)."""
        return await adrive(self._expire_plan(batch_size, on_expired, progress), self._aexecute)


def _from_record(record: DecisionRecord, window: timedelta) -> Approval:
    """An approval whose interrupt is gone, as its decision record remembers it."""
    from .core import Action

    actions = tuple(Action(a["name"], dict(a.get("args") or {})) for a in record.actions)
    created = record.decided_at
    return Approval(
        record.approval_id,
        record.thread_id,
        record.user_id,
        "",
        created,
        created + window,
        record.status,
        "raw",
        actions,
        None,
        record,
    )
