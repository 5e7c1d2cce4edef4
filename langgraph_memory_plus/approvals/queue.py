"""The reviewers' queue: pending approvals read from the thread index, and decisions.

Nothing here keeps a list of its own. An approval *is* a pending interrupt in the thread
index (``saver.threads``), which the saver writes in the same statement or script as the
checkpoint; the only thing stored beside it is the decision record, once a reviewer
decides. So a redeploy, a crash or a second replica can never leave the queue out of
step with what the threads wait for.

Exactly once: the decision record is created with a create-only store write
(``expected_version=0``), so of two reviewers deciding at once one wins and the other
gets :class:`ApprovalConflictError`. Resuming is claimed on the record itself: a
*lease* (an owner token and an expiry) set by a write conditional on the version read,
so of any number of callers applying the same decision (a double click, a client retry,
``recover()`` on a replica starting) exactly one resumes; the others get the decided
approval back and resume nothing. A claimant that crashes leaves its lease to expire
(``lease``, 10 minutes by default); ``recover()`` then takes it over, once, and resumes
the thread only while the index still shows it interrupted on that interrupt id.

One resume of a thread at a time: interrupts of one step (parallel ``Send`` tasks) are
answered by separate decisions, and two resumes of one checkpoint at once would each
leave the other's task waiting. A *gate* per thread (a leased item beside the records,
taken by a conditional write) admits one; the others wait for it, then resume from the
checkpoint it left.

Every write after the create is conditional on the version read and changes only the
lease and ``resumed_at`` of the record *as stored*: a record anonymized by
``erase_user`` meanwhile stays anonymized.

Records are keyed by thread id and interrupt id together (a copied thread shares its
interrupt ids with the original); records of earlier versions, keyed by the interrupt
id alone, are still read for their own thread.

An approval's window counts from the checkpoint its interrupt is pending on (its UUIDv6
id tells when it was made), not from the index's last write: a thread copied into
another saver, or whose index was rebuilt, keeps the time its reviewer was asked.
An overdue approval is answered like a decision: ``expire_overdue(graph=...)`` resumes
its thread with a rejection saying that it expired (the tool does not run, the agent is
told), under the same record, lease and exactly-once resume as :meth:`Approvals.decide`.

Sync and async share the plans below; the two drivers only run their commands.
"""

from __future__ import annotations

import asyncio
import builtins
import hashlib
import inspect
import json
import math
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone
from typing import Any

from langgraph.store.base import BaseStore, GetOp, PutOp, SearchOp
from langgraph.types import Command

from ..drivers.plan import Plan, adrive, drive
from ..errors import ConflictError, InvalidConfigError
from ..store.base import ConditionalPutOp
from ..store.values import encode_json
from ..threads.core import INTERRUPT, check_user_id, checkpoint_time
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
DEFAULT_LEASE = timedelta(minutes=10)
"""How long a resume may run before ``recover()`` takes it over (a crashed claimant)."""
CLAIM_TRIES = 8
"""Conditional writes tried before giving up on a record others keep changing."""
GATE_POLL = 0.05
"""Seconds between looks at a thread another decision is resuming."""
GATE_WAIT = 30.0
"""Seconds (at most one lease) a decision waits for another one's resume of its thread
before it leaves its own resume to a retry or :meth:`Approvals.recover`."""
DEFAULT_NAMESPACE = ("approvals", "decisions")
TTL_FACTOR = 1.5
CHUNK = 500
"""Threads read per index page while listing, counting or sweeping."""
EXPIRED_MESSAGE = (
    "This request expired: no reviewer decided within the approval window, "
    "so it was not carried out."
)
"""What the agent is told when ``expire_overdue`` answers an approval (a rejection)."""


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
class _Latest:
    """The latest root checkpoint (``get_tuple``, or ``None``) of each thread, in order;
    read at once where the driver is async."""

    thread_ids: tuple[str, ...]


@dataclass(frozen=True)
class _Batch:
    ops: list[Any]


@dataclass(frozen=True)
class _Resume:
    graph: Any
    command: Command[Any] | None
    """``None``: continue a run that stopped midway (``invoke(None, config)``)."""
    config: dict[str, Any]


@dataclass(frozen=True)
class _Unfinished:
    """Whether the thread's last checkpoint still has tasks to run (``get_state().next``)."""

    graph: Any
    config: dict[str, Any]


@dataclass(frozen=True)
class _Notify:
    callback: Callable[[Any], Any]
    argument: Any


@dataclass(frozen=True)
class _Sleep:
    seconds: float


_Cmd = _Search | _GetThread | _Latest | _Batch | _Resume | _Unfinished | _Notify | _Sleep


def _seconds(value: timedelta | float, what: str) -> float:
    seconds = value.total_seconds() if isinstance(value, timedelta) else value
    if (
        isinstance(seconds, bool)
        or not isinstance(seconds, (int, float))
        or not math.isfinite(seconds)
        or seconds <= 0
    ):
        raise InvalidConfigError(
            f"{what} must be a positive, finite timedelta or number of seconds, got {value!r}"
        )
    return float(seconds)


def gate_key(thread_id: str) -> str:
    """The store key of a thread's resume gate (hashed: it names no thread)."""
    return f"g-{hashlib.sha256(thread_id.encode()).hexdigest()[:40]}"


def record_key(thread_id: str, approval_id: str) -> str:
    """The store key of a decision record: the thread and the interrupt together (a copied
    thread shares interrupt ids), hashed so the key names neither."""
    digest = hashlib.sha256(f"{thread_id}\x00{approval_id}".encode()).hexdigest()
    return f"d-{digest[:40]}"


@dataclass(frozen=True)
class _Stored:
    """A decision record as stored: its key (new or legacy), version and raw value."""

    key: str
    version: int
    value: dict[str, Any]

    @property
    def record(self) -> DecisionRecord:
        return DecisionRecord.from_value(self.value)

    def lease_holder(self, now: datetime) -> str | None:
        """The owner of a live lease, if any."""
        lease = self.value.get("lease")
        if not isinstance(lease, dict):
            return None
        try:
            live = datetime.fromisoformat(lease["expires_at"]) > now
        except (KeyError, TypeError, ValueError):
            return None
        return str(lease.get("owner")) if live else None


def _stored(item: Any) -> _Stored:
    return _Stored(item.key, int(getattr(item, "version", 0) or 0), dict(item.value))


def _made_at(checkpoint: Any) -> datetime | None:
    """When a checkpoint tuple's checkpoint was made: its UUIDv6 id, else its ``ts``."""
    seconds = checkpoint_time(checkpoint.config.get("configurable", {}).get("checkpoint_id"))
    if seconds is not None:
        return datetime.fromtimestamp(seconds, timezone.utc)
    try:
        made = datetime.fromisoformat(str(checkpoint.checkpoint.get("ts")))
    except ValueError:
        return None
    return made if made.tzinfo is not None else made.replace(tzinfo=timezone.utc)


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
            trail outlives the threads. It must take conditional writes (ours do).
        window: how long an approval stays decidable (24 hours by default); the saver's
            checkpoint TTL must be at least 1.5x as long (checked here).
        lease: how long one caller's resume is exclusively its own (10 minutes by
            default). Past it, :meth:`recover` takes the resume over (the claimant is taken
            for crashed), so it must be longer than the slowest resume (tool) runs.
        clock: time source, for tests.
    """

    def __init__(
        self,
        saver: Any,
        store: BaseStore,
        *,
        window: timedelta | float = DEFAULT_WINDOW,
        lease: timedelta | float = DEFAULT_LEASE,
        namespace: tuple[str, ...] = DEFAULT_NAMESPACE,
        clock: Callable[[], datetime] = _utcnow,
    ) -> None:
        threads = getattr(saver, "threads", None)
        if threads is None or not hasattr(threads, "search"):
            raise InvalidConfigError("Approvals needs a saver of this package (saver.threads)")
        self.window = timedelta(seconds=_seconds(window, "window"))
        self.lease = timedelta(seconds=_seconds(lease, "lease"))
        self.saver = saver
        self.store = store
        check_ttl(saver.settings.ttl_seconds, self.window.total_seconds())
        self.namespace = tuple(namespace)
        # Beside the records, not under them: a search of the records never meets a gate.
        self.gates = (*self.namespace[:-1], f"{self.namespace[-1]}-gates")
        self.clock = clock
        self._threads = threads
        self.user_key: str = threads.user_key

    # -- reading ------------------------------------------------------------------------

    def _of_thread(
        self,
        thread: Any,
        records: dict[tuple[str, str], _Stored],
        asked: dict[tuple[str, str], datetime],
    ) -> builtins.list[Approval]:
        now = self.clock()
        out = []
        for task_id, interrupts in thread["interrupts"].items():
            for item in interrupts:
                kind, actions = parse_request(item.value, getattr(item, "response_schema", None))
                created = asked.get((thread["thread_id"], item.id), thread["updated_at"])
                expires = created + self.window
                stored = records.get((thread["thread_id"], item.id))
                record = None if stored is None else stored.record
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

    def _records(
        self, pairs: Iterable[tuple[str, str]]
    ) -> Plan[_Cmd, dict[tuple[str, str], _Stored]]:
        """The records of ``(thread_id, approval_id)`` pairs; a record of an earlier
        version (keyed by the interrupt id alone) counts for its own thread only."""
        pairs = list(dict.fromkeys(pairs))
        if not pairs:
            return {}
        ops = [GetOp(self.namespace, record_key(t, i)) for t, i in pairs]
        ops += [GetOp(self.namespace, i) for _, i in pairs]
        items = yield _Batch(ops)
        out: dict[tuple[str, str], _Stored] = {}
        for n, pair in enumerate(pairs):
            item, legacy = items[n], items[len(pairs) + n]
            if item:
                out[pair] = _stored(item)
            elif legacy and legacy.value.get("thread_id") == pair[0]:
                out[pair] = _stored(legacy)
        return out

    def _stored_of(self, thread_id: str, approval_id: str) -> Plan[_Cmd, _Stored | None]:
        found = yield from self._records([(thread_id, approval_id)])
        return found.get((thread_id, approval_id))

    def _asked(self, threads: list[Any]) -> Plan[_Cmd, dict[tuple[str, str], datetime]]:
        """When each pending interrupt of ``threads`` was asked: the time of the checkpoint
        it is pending on, which a copy or an index rebuild keeps (the index's
        ``updated_at`` is its own last write: the import's time for a copied thread).
        Never later than ``updated_at``; an interrupt not found there keeps that."""
        out: dict[tuple[str, str], datetime] = {}
        threads = [t for t in threads if any(t["interrupts"].values())]
        if not threads:
            return out
        tuples = yield _Latest(tuple(t["thread_id"] for t in threads))
        for thread, latest in zip(threads, tuples, strict=True):
            made = None if latest is None else _made_at(latest)
            if made is None:
                continue
            for _, channel, value in latest.pending_writes or ():
                if channel == INTERRUPT:
                    for item in value if isinstance(value, (list, tuple)) else (value,):
                        key = (thread["thread_id"], str(getattr(item, "id", "")))
                        out[key] = min(made, thread["updated_at"])
        return out

    def _approvals(self, threads: list[Any]) -> Plan[_Cmd, list[Approval]]:
        pairs = [
            (t["thread_id"], i.id) for t in threads for its in t["interrupts"].values() for i in its
        ]
        records = yield from self._records(pairs)
        asked = yield from self._asked(threads)
        return [a for t in threads for a in self._of_thread(t, records, asked)]

    def _scan(
        self, user_id: Any, chunk: int, start: int = 0
    ) -> Plan[_Cmd, tuple[list[Approval], bool]]:
        """One page of interrupted threads (oldest first) as approvals; whether more."""
        metadata = None if user_id is None else {self.user_key: check_user_id(user_id)}
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
            found = yield from self._decided(user_id, action, status)
            return found[offset : offset + limit]
        if status == "expired":
            found = yield from self._expired(user_id, action)
            return found[offset : offset + limit]
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

    def _decided(self, user_id: Any, action: str | None, status: str) -> Plan[_Cmd, list[Approval]]:
        """Decided approvals, oldest decision first, from their records (the interrupt may
        be long gone). The store has no order of its own to page by, so every matching
        record is read (in pages of 500) and sorted here."""
        filt: dict[str, Any] = {"status": status}
        if user_id is not None:
            filt["user_id"] = check_user_id(user_id)
        out: list[Approval] = []
        start = 0
        while True:
            (items,) = yield _Batch([SearchOp(self.namespace, filt, CHUNK, start)])
            for item in items:
                record = DecisionRecord.from_value(item.value)
                if action is None or any(a["name"] == action for a in record.actions):
                    out.append(_from_record(record, self.window))
            if len(items) < CHUNK:
                break
            start += CHUNK
        out.sort(key=lambda a: (a.created_at, a.thread_id, a.id))
        return out

    def _expired(self, user_id: Any, action: str | None) -> Plan[_Cmd, list[Approval]]:
        """Expired approvals, oldest first: overdue interrupts still waiting (marked or
        not), and marked ones whose thread was answered (from their records)."""
        waiting: list[Approval] = []
        start, more = 0, True
        while more:
            page, more = yield from self._scan(user_id, CHUNK, start)
            start += CHUNK
            waiting += [a for a in page if self._wanted(a, action, "expired")]
        seen = {(a.thread_id, a.id) for a in waiting}
        marked = yield from self._decided(user_id, action, "expired")
        out = waiting + [a for a in marked if (a.thread_id, a.id) not in seen]
        out.sort(key=lambda a: (a.created_at, a.thread_id, a.id))
        return out

    def _count_plan(self, user_id: Any, action: str | None, status: str | None) -> Plan[_Cmd, int]:
        self._check_status(status)
        if status in ("approved", "rejected", "edited"):
            found = yield from self._decided(user_id, action, status)
            return len(found)
        if status == "expired":
            found = yield from self._expired(user_id, action)
            return len(found)
        total, start, more = 0, 0, True
        while more:
            page, more = yield from self._scan(user_id, CHUNK, start)
            start += CHUNK
            total += sum(1 for a in page if self._wanted(a, action, status))
        return total

    def _find(self, approval: Approval | str, thread_id: str | None) -> Plan[_Cmd, Approval]:
        found, _ = yield from self._locate(approval, thread_id)
        return found

    def _recorded_thread(self, approval_id: str) -> Plan[_Cmd, str | None]:
        """The thread a decision record names, if the approval has one."""
        (items,) = yield _Batch([SearchOp(self.namespace, {"approval_id": approval_id}, 1, 0)])
        return str(items[0].value.get("thread_id")) if items else None

    def _locate(
        self, approval: Approval | str, thread_id: str | None
    ) -> Plan[_Cmd, tuple[Approval, _Stored | None]]:
        """The approval as it stands now (from its thread, else its decision record), and
        its stored record."""
        approval_id = approval.id if isinstance(approval, Approval) else approval
        if not isinstance(approval_id, str) or not approval_id:
            raise InvalidConfigError(f"approval id must be a non-empty string, got {approval!r}")
        if isinstance(approval, Approval):
            thread_id = approval.thread_id
        if thread_id is None:  # a record names its thread; else look through the queue
            thread_id = yield from self._recorded_thread(approval_id)
        if thread_id is None:
            start, more = 0, True
            while more:
                page, more = yield from self._scan(None, CHUNK, start)
                start += CHUNK
                for found in page:
                    if found.id == approval_id:
                        thread_id = found.thread_id
                        more = False
                        break
        if thread_id is None:  # decided meanwhile: its record is written before the resume
            thread_id = yield from self._recorded_thread(approval_id)
        if thread_id is None:
            raise ApprovalNotFoundError(f"no pending approval or decision with id {approval_id!r}")
        # The thread first: a decision is recorded before its resume moves the thread on,
        # so a record read after a thread that no longer waits is there.
        thread = yield _GetThread(thread_id)
        stored = yield from self._stored_of(thread_id, approval_id)
        records = {} if stored is None else {(thread_id, approval_id): stored}
        asked = (yield from self._asked([thread])) if thread else {}
        for found in self._of_thread(thread, records, asked) if thread else []:
            if found.id == approval_id:
                return found, stored
        if stored is not None:
            return _from_record(stored.record, self.window), stored
        raise ApprovalNotFoundError(f"no pending approval or decision with id {approval_id!r}")

    # -- deciding -----------------------------------------------------------------------

    def _put(self, key: str, value: dict[str, Any], expected: int) -> _Batch:
        op = PutOp(self.namespace, key, value, index=False, ttl=None)
        return _Batch([ConditionalPutOp(op, expected)])

    def _config(self, approval: Approval, config: dict[str, Any] | None) -> dict[str, Any]:
        configurable = dict((config or {}).get("configurable") or {})
        configurable["thread_id"] = approval.thread_id
        if approval.user_id is not None:
            configurable.setdefault(self.user_key, approval.user_id)
        return {**(config or {}), "configurable": configurable}

    def _lease_value(self, token: str) -> dict[str, Any]:
        return {"owner": token, "expires_at": (self.clock() + self.lease).isoformat()}

    def _claim(self, stored: _Stored, token: str) -> Plan[_Cmd, bool]:
        """Take the resume of a recorded decision: whether this caller got it."""
        try:
            yield self._put(
                stored.key, {**stored.value, "lease": self._lease_value(token)}, stored.version
            )
        except ConflictError:
            return False
        return True

    def _finish(self, key: str, token: str, resumed: bool) -> Plan[_Cmd, DecisionRecord | None]:
        """Drop this caller's lease (marking ``resumed_at`` if it resumed) on the record as
        stored now: whatever erasure or anyone else changed meanwhile stays changed."""
        for _ in range(CLAIM_TRIES):
            (item,) = yield _Batch([GetOp(self.namespace, key)])
            if item is None:
                return None
            stored = _stored(item)
            lease = stored.value.get("lease")
            if isinstance(lease, dict) and lease.get("owner") != token:
                return stored.record  # taken over (our lease had expired): theirs now
            value: dict[str, Any] = {**stored.value, "lease": None}
            if resumed and value.get("resumed_at") is None:
                value["resumed_at"] = self.clock().isoformat()
            try:
                yield self._put(key, value, stored.version)
            except ConflictError:
                continue
            return DecisionRecord.from_value(value)
        raise ApprovalConflictError(f"decision record {key!r} keeps changing; try again")

    def _withdraw(self, key: str, token: str) -> Plan[_Cmd, None]:
        """Delete a record this caller just created (its lease still ours), as stored."""
        for _ in range(CLAIM_TRIES):
            (item,) = yield _Batch([GetOp(self.namespace, key)])
            if item is None:
                return
            stored = _stored(item)
            lease = stored.value.get("lease")
            if not isinstance(lease, dict) or lease.get("owner") != token:
                return
            try:
                yield _Batch([ConditionalPutOp(PutOp(self.namespace, key, None), stored.version)])
            except ConflictError:
                continue
            return
        raise ApprovalConflictError(f"decision record {key!r} keeps changing; try again")

    def _enter(self, thread_id: str, token: str, wait: bool) -> Plan[_Cmd, bool]:
        """Take the thread's resume gate: one resume of a thread at a time, whatever
        interrupt it answers (two at once would each leave the other's task waiting).
        ``wait``: while another holds it, look again for up to ``GATE_WAIT`` seconds."""
        key = gate_key(thread_id)
        ttl = 2 * self.lease.total_seconds() / 60  # a dead holder's gate goes in time
        deadline = time.monotonic() + min(GATE_WAIT, self.lease.total_seconds())
        while True:
            (item,) = yield _Batch([GetOp(self.gates, key, refresh_ttl=False)])
            version = 0 if item is None else int(getattr(item, "version", 0) or 0)
            if version == 0 or _stored(item).lease_holder(self.clock()) is None:
                value = {"lease": self._lease_value(token)}
                op = PutOp(self.gates, key, value, index=False, ttl=ttl)
                try:
                    yield _Batch([ConditionalPutOp(op, version)])
                except ConflictError:
                    continue
                return True
            if not wait or time.monotonic() >= deadline:
                return False
            yield _Sleep(GATE_POLL)

    def _leave(self, thread_id: str, token: str) -> Plan[_Cmd, None]:
        key = gate_key(thread_id)
        for _ in range(CLAIM_TRIES):
            (item,) = yield _Batch([GetOp(self.gates, key, refresh_ttl=False)])
            lease = _stored(item).value.get("lease") if item is not None else None
            if not isinstance(lease, dict) or lease.get("owner") != token:
                return  # expired and taken over: not ours to open
            op = PutOp(self.gates, key, None)
            try:
                yield _Batch([ConditionalPutOp(op, _stored(item).version)])
            except ConflictError:
                continue
            return

    def _apply(
        self,
        approval: Approval,
        record: DecisionRecord,
        key: str,
        token: str,
        graph: Any,
        config: Any,
        created: bool = False,
        wait: bool = True,
    ) -> Plan[_Cmd, DecisionRecord | None]:
        """Resume the thread with a decision whose lease this caller holds, if the thread
        still waits on it, through the thread's gate; a failing resume gives the lease
        back at once. ``created``: this caller just recorded the decision. ``None``:
        the gate stayed shut (``wait`` False, or ``GATE_WAIT``), the lease given back."""
        thread = yield _GetThread(approval.thread_id)
        if thread is None and created:
            # Deleted (or erased) since it was read: erasure may have looked for the
            # user's records before this one existed, so it goes too.
            yield from self._withdraw(key, token)
            raise ApprovalNotFoundError(
                f"thread {approval.thread_id!r} of approval {approval.id!r} was deleted"
            )
        if thread is None:
            done = yield from self._finish(key, token, resumed=True)
            return record if done is None else done
        if not (yield from self._enter(approval.thread_id, token, wait)):
            yield from self._finish(key, token, resumed=False)
            return None
        try:
            out = yield from self._resume(approval, record, key, token, graph, config)
        except Exception:
            yield from self._leave(approval.thread_id, token)
            raise
        yield from self._leave(approval.thread_id, token)
        return out

    def _resume(
        self,
        approval: Approval,
        record: DecisionRecord,
        key: str,
        token: str,
        graph: Any,
        config: Any,
    ) -> Plan[_Cmd, DecisionRecord]:
        """:meth:`_apply` behind the gate."""
        if not (yield from self._still_mine(key, token)):
            (item,) = yield _Batch([GetOp(self.namespace, key)])
            return record if item is None else _stored(item).record
        thread = yield _GetThread(approval.thread_id)  # another resume may have run
        waiting = thread is not None and any(
            i.id == approval.id for its in thread["interrupts"].values() for i in its
        )
        run_config = self._config(approval, config)
        command: Command[Any] | None = None
        if waiting:
            command = Command(resume={approval.id: resume_value(approval, record)})
        elif thread is not None and not any(thread["interrupts"].values()):
            # A claimant that crashed after the resume's first step: finish its run.
            waiting = bool((yield _Unfinished(graph, run_config)))
        if waiting:
            try:
                yield _Resume(graph, command, run_config)
            except Exception:
                yield from self._finish(key, token, resumed=False)
                raise
        done = yield from self._finish(key, token, resumed=True)
        return record if done is None else done

    def _still_mine(self, key: str, token: str) -> Plan[_Cmd, bool]:
        """Renew this caller's lease after waiting at the gate (or take it again, given
        back meanwhile); whether it holds it: not resumed nor taken by another."""
        for _ in range(CLAIM_TRIES):
            (item,) = yield _Batch([GetOp(self.namespace, key)])
            if item is None:
                return False
            stored = _stored(item)
            if stored.value.get("resumed_at") is not None:
                return False
            if stored.lease_holder(self.clock()) not in (None, token):
                return False
            if (yield from self._claim(stored, token)):
                return True
        return False

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
        # As the record will hold them (tuples are lists in JSON): the same edit sent
        # again compares equal to the stored one; what JSON cannot hold fails here.
        args = json.loads(encode_json(args, escape=False))
        found, stored = yield from self._locate(approval, thread_id)
        key = record_key(found.thread_id, found.id) if stored is None else stored.key
        token = uuid.uuid4().hex
        created = False
        for _ in range(CLAIM_TRIES):
            if stored is None:
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
                try:  # recorded and claimed in one create-only write
                    yield self._put(key, {**mine.as_value(), "lease": self._lease_value(token)}, 0)
                except ConflictError:
                    stored = yield from self._stored_of(found.thread_id, found.id)
                    continue
                record, created = mine, True
                break
            record = stored.record
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
            if record.resumed_at is not None or stored.lease_holder(self.clock()) is not None:
                # Done, or being resumed by another caller right now: the same answer.
                return replace(found, status=record.status, decision=record)
            if (yield from self._claim(stored, token)):
                break
            stored = yield from self._stored_of(found.thread_id, found.id)
        else:
            raise ApprovalConflictError(f"approval {found.id!r} keeps changing; try again")
        applied = yield from self._apply(found, record, key, token, graph, config, created)
        if applied is None:
            raise ApprovalConflictError(
                f"approval {found.id!r} is recorded, but another decision's resume of its "
                "thread is still running; send it again later (or let recover() finish it)"
            )
        return replace(found, status=applied.status, decision=applied)

    def _recover_plan(self, graph: Any, config: Any, limit: int) -> Plan[_Cmd, int]:
        """Finish decisions recorded but never resumed (a crash in between), each claimed
        as :meth:`decide` claims it: a resume still under way (its lease live) is left
        alone, one whose claimant crashed is taken over once its lease expired. Expiries
        count too: one marked without a graph is answered here."""
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
            raise InvalidConfigError(f"limit must be a non-negative integer, got {limit!r}")
        done, start = 0, 0
        waiting = {"resumed_at": None}  # expiries marked without a graph are answered too
        while done < limit:
            (items,) = yield _Batch([SearchOp(self.namespace, waiting, CHUNK, start)])
            # Records resumed here leave the filter: the next page starts past the others.
            start += len(items)
            for item in items:
                stored = _stored(item)
                record = stored.record
                if record.resumed_at is not None:
                    continue
                if stored.lease_holder(self.clock()) is not None:
                    continue  # under way elsewhere
                token = uuid.uuid4().hex
                if not (yield from self._claim(stored, token)):
                    continue  # someone else took it first
                try:
                    found = yield from self._find(record.approval_id, record.thread_id)
                except ApprovalNotFoundError:  # cannot be: the record is there
                    found = _from_record(record, self.window)
                applied = yield from self._apply(
                    found, record, stored.key, token, graph, config, wait=False
                )
                if applied is None:
                    continue  # its thread is resuming another decision: left for later
                done += 1
                start -= 1
                if done == limit:
                    break
            if len(items) < CHUNK:
                break
        return done

    def _expire_one(
        self,
        approval: Approval,
        on_expired: Callable[[Approval], Any] | None,
        graph: Any,
        config: Any,
        message: str,
    ) -> Plan[_Cmd, tuple[bool, bool]]:
        """Mark one overdue approval (and answer its thread, given a graph): whether this
        call marked it, and whether it resumed its thread."""
        token = uuid.uuid4().hex
        record = approval.decision
        if record is not None:
            if graph is None or record.decision != "expire" or record.resumed_at is not None:
                return False, False
            # Marked by a sweep without a graph, or its resume crashed: answer it now.
            stored = yield from self._stored_of(approval.thread_id, approval.id)
            if stored is None or stored.lease_holder(self.clock()) is not None:
                return False, False  # being answered elsewhere
            if not (yield from self._claim(stored, token)):
                return False, False
            yield from self._apply(approval, stored.record, stored.key, token, graph, config)
            return False, True
        record = DecisionRecord(
            approval.id,
            approval.thread_id,
            approval.user_id,
            "expire",
            "system:expiry",
            self.clock(),
            message=message,
            actions=action_dicts(approval.actions),
        )
        key = record_key(approval.thread_id, approval.id)
        value = record.as_value()
        if graph is not None:  # marked and claimed in one create-only write
            value["lease"] = self._lease_value(token)
        try:
            yield self._put(key, value, 0)
        except ConflictError:  # decided (or marked) meanwhile
            return False, False
        if graph is not None:
            record = yield from self._apply(approval, record, key, token, graph, config)
        if on_expired is not None:
            yield _Notify(on_expired, replace(approval, decision=record))
        return True, graph is not None

    def _expire_plan(
        self,
        batch_size: int,
        on_expired: Callable[[Approval], Any] | None,
        progress: Callable[[int], Any] | None,
        graph: Any,
        config: Any,
        message: str,
    ) -> Plan[_Cmd, int]:
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise InvalidConfigError(f"batch_size must be a positive integer, got {batch_size!r}")
        if not isinstance(message, str):
            raise InvalidConfigError(f"message must be a string, got {message!r}")
        total, again = 0, True
        while again:
            # Resumed threads leave the queue, shifting the pages of any sweep running at
            # once: a pass that resumed one is followed by another, so the last pass of
            # the last sweep to resume sees every thread in place.
            again, start, more = False, 0, True
            while more:
                page, more = yield from self._scan(None, batch_size, start)
                moved = 0  # resumed threads leave their place in the queue's order
                for approval in page:
                    if approval.status == "expired":
                        marked, resumed = yield from self._expire_one(
                            approval, on_expired, graph, config, message
                        )
                        total, moved = total + marked, moved + resumed
                start += batch_size - moved
                again = again or moved > 0
                if progress is not None:
                    yield _Notify(progress, total)
        return total

    # -- drivers ------------------------------------------------------------------------

    def _execute(self, command: _Cmd) -> Any:
        if isinstance(command, _Search):
            return self._threads.search(**command.kwargs)
        if isinstance(command, _GetThread):
            return self._threads.get(command.thread_id)
        if isinstance(command, _Latest):
            return [self.saver.get_tuple(_root_config(t)) for t in command.thread_ids]
        if isinstance(command, _Batch):
            return self.store.batch(command.ops)
        if isinstance(command, _Resume):
            return command.graph.invoke(command.command, command.config)
        if isinstance(command, _Unfinished):
            return bool(command.graph.get_state(command.config).next)
        if isinstance(command, _Sleep):
            return time.sleep(command.seconds)
        return command.callback(command.argument)

    async def _aexecute(self, command: _Cmd) -> Any:
        if isinstance(command, _Search):
            return await self._threads.asearch(**command.kwargs)
        if isinstance(command, _GetThread):
            return await self._threads.aget(command.thread_id)
        if isinstance(command, _Latest):
            reads = (self.saver.aget_tuple(_root_config(t)) for t in command.thread_ids)
            return await asyncio.gather(*reads)
        if isinstance(command, _Batch):
            return await self.store.abatch(command.ops)
        if isinstance(command, _Resume):
            return await command.graph.ainvoke(command.command, command.config)
        if isinstance(command, _Unfinished):
            return bool((await command.graph.aget_state(command.config)).next)
        if isinstance(command, _Sleep):
            return await asyncio.sleep(command.seconds)
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
        Raises :class:`ApprovalConflictError` when someone else decided otherwise first,
        :class:`ApprovalExpiredError` after the window, and
        :class:`DecisionNotAllowedError` for what the review config does not allow.
        The same decision sent again (a double click, a retry) is answered with the
        decided approval and resumes nothing, also while the first call still resumes
        (its ``decision.resumed_at`` is then ``None``). After a crash, calling it again
        once the claimant's lease expired finishes the resume.
        """
        plan = self._decide_plan(approval, decision, by, args, message, graph, thread_id, config)
        return drive(plan, self._execute)

    def recover(self, graph: Any, *, config: dict[str, Any] | None = None, limit: int = 100) -> int:
        """Resume threads whose decision was recorded but not applied (a crash in
        between); returns how many. A resume whose lease is live is someone's under way
        and is left alone."""
        return drive(self._recover_plan(graph, config, limit), self._execute)

    def expire_overdue(
        self,
        *,
        graph: Any = None,
        config: dict[str, Any] | None = None,
        message: str = EXPIRED_MESSAGE,
        batch_size: int = 100,
        on_expired: Callable[[Approval], Any] | None = None,
        progress: Callable[[int], Any] | None = None,
    ) -> int:
        """Mark approvals past their window ``expired``, ``batch_size`` threads a page;
        returns how many it marked. ``on_expired(approval)`` per approval,
        ``progress(total)`` per page. Resumable: a second run skips what the first marked.

        With ``graph``, each thread is also answered, exactly once: resumed with a
        rejection carrying ``message`` (Agent Inbox: ``ignore``), so the tool does not
        run, the agent is told, and the thread no longer waits in the index. One marked
        without a graph waits until a run with one, or :meth:`recover`, answers it."""
        plan = self._expire_plan(batch_size, on_expired, progress, graph, config, message)
        return drive(plan, self._execute)

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
        graph: Any = None,
        config: dict[str, Any] | None = None,
        message: str = EXPIRED_MESSAGE,
        batch_size: int = 100,
        on_expired: Callable[[Approval], Any] | None = None,
        progress: Callable[[int], Any] | None = None,
    ) -> int:
        """Async :meth:`expire_overdue` (resumes with ``graph.ainvoke``; callbacks may be
        coroutines)."""
        plan = self._expire_plan(batch_size, on_expired, progress, graph, config, message)
        return await adrive(plan, self._aexecute)


def _root_config(thread_id: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}


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
