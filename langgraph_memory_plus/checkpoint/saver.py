"""The public ``BaseCheckpointSaver`` API, written once for every backend and both modes.

Each method parses its arguments, asks the backend's :class:`CheckpointPlans` for a plan
and hands the plan to the driver: ``_run`` (blocking) or ``_arun`` (awaitable). A
synchronous driver runs its async methods in a worker thread; an asynchronous driver runs
its sync methods on its event loop from other threads. Drivers implement only those two
methods and the connection handling behind them.
"""

from __future__ import annotations

import asyncio
import itertools
import random
import secrets
import threading
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    DeltaChannelHistory,
)
from langgraph.checkpoint.serde.base import SerializerProtocol

from ..drivers.bridge import AsyncBridge, SyncBridge
from ..drivers.plan import Plan, Restart
from ..encryption import Encryption, Location
from ..errors import CorruptDataError, InvalidConfigError
from ..observability import events as ev
from ..observability.core import Listener, Observable
from ..threads.core import RecordInput, record_input
from ..threads.transcripts import RecordedIds, lines_of
from .codec import CheckpointCodec, EncodedCheckpoint, EncodedWrite, StoredCheckpoint
from .config import (
    ListQuery,
    SaverSettings,
    Target,
    TTLConfig,
    list_memory_bytes,
    read_checkpoint_target,
    read_target,
    thread_key,
)
from .fence import (
    RUN_TOKENS,
    Claim,
    Fence,
    FenceOptions,
    held_claim,
    instance_name,
    run_id_of,
)
from .lists import DEFAULT_MAX_BYTES, ListMemory

if TYPE_CHECKING:
    from ..threads.api import ThreadPlans, Threads

R = TypeVar("R")

_RUN: ContextVar[tuple[bytes, str, str] | None] = ContextVar("lgmp_fence_run", default=None)
"""The run (thread key, run id, owner) the calls of this context belong to, set as a
root graph starts (its first read, with a run id) or by a root write with a run id:
LangGraph gives subgraphs no run id, but runs their nodes and its own writes in copies of
the run's context, so a subgraph's writes are fenced as their run's, and the same run id
started twice (a queue item delivered twice) is two owners, the later start winning."""
_TASK_KEY = "__pregel_task_id"
"""Set in the config of a write made inside a run's task (LangGraph's
``CONFIG_KEY_TASK_ID``): the context outlives the run (a sync run reads its checkpoint in
the caller's context), so an owner-less write after it (``update_state`` on a subgraph)
must not be taken for the old run's."""

PRUNE_STRATEGIES = ("keep_latest", "delete")
LIST_PAGE_SIZE = 100
READ_ATTEMPTS = 3
READ_ATTEMPTS_RACING = 12
OWNERS_CACHED = 4096
"""Threads whose owner a saver remembers (per-tenant keys: see ``_user_of``)."""


L = TypeVar("L")


class _KeyedLocks(Generic[L]):
    """A lock per key, kept only while a caller holds or waits for it.

    A run's fence take is held across a round trip; one lock per saver made the run
    starts of all threads queue behind each other, where only the writes of one thread
    may race (see :meth:`CheckpointSaverBase._take`).
    """

    def __init__(self, make: Callable[[], L]) -> None:
        self._make = make
        self._guard = threading.Lock()
        self._locks: dict[Any, list[Any]] = {}  # key -> [lock, callers]

    @contextmanager
    def of(self, key: Any) -> Iterator[L]:
        with self._guard:
            entry = self._locks.get(key)
            if entry is None:
                entry = self._locks[key] = [self._make(), 0]
            entry[1] += 1
        try:
            yield entry[0]
        finally:
            with self._guard:
                entry[1] -= 1
                if entry[1] == 0:
                    del self._locks[key]


class CheckpointPlans(Protocol):
    """What a backend provides: one plan per storage operation, no I/O of its own."""

    max_value_bytes: int
    inline_scalars: bool
    """Whether the backend stores small scalar values inline (see ``CheckpointCodec``)."""
    metadata_as_json: bool
    """Whether the backend can read metadata back from its JSON projection alone."""

    @property
    def threads(self) -> ThreadPlans:
        """Reads of the thread index the backend keeps with every write."""
        ...

    def setup(self) -> Plan[Any, None]: ...

    def get_tuple(
        self, codec: CheckpointCodec, target: Target
    ) -> Plan[Any, CheckpointTuple | None]: ...

    def list_page(
        self, codec: CheckpointCodec, query: ListQuery, page_size: int
    ) -> Plan[Any, tuple[list[CheckpointTuple], ListQuery | None]]: ...

    def put(
        self,
        target: Target,
        encoded: EncodedCheckpoint,
        record: RecordInput,
        fence: Claim | None = None,
    ) -> Plan[Any, bool]:
        """Store a checkpoint; with ``fence``, only if its owner and number are the
        thread's current ones, checked atomically with the write (see ``fence.py``).

        False when nothing was stored because ``encoded.refers`` and its parent is not
        stored (any more): the rows it names may be gone with it. Checked atomically
        with the write, so a purge, a trim or a deletion after it keeps what it names."""
        ...

    def put_writes(
        self,
        target: Target,
        writes: list[EncodedWrite],
        fence: Claim | None = None,
        owner: str | None = None,
    ) -> Plan[Any, None]:
        """Store a task's pending writes. ``owner`` (the run's user, as the index stores
        a value): on a thread not in the thread index (its put has not come), recorded
        with the writes as the thread's owner in waiting, so that ``erase_user`` finds a
        thread of pending writes only (:meth:`pending_threads`)."""
        ...

    def pending_threads(
        self, owner: str, cursor: Any, limit: int, forget: bool
    ) -> Plan[Any, tuple[list[str], Any]]:
        """Up to ``limit`` threads of pending writes only (no thread index record) whose
        writes named ``owner``, after ``cursor`` (``None``: from the start); returns their
        ids and the next cursor (``None``: no more). ``forget``: drop marks found stale
        (a real erasure; a dry run changes nothing)."""
        ...

    def forget_pending(self, owner: str, thread_ids: Sequence[str]) -> Plan[Any, None]:
        """After the erasure deleted ``thread_ids``: their owner-in-waiting marks of
        ``owner`` that live apart from the thread (Redis) go too."""
        ...

    def delete_thread(self, thread_id: str) -> Plan[Any, None]: ...

    def unless_erased(
        self, owner: str | None, write: Plan[Any, None], target: Target, checkpoint_id: str
    ) -> Plan[Any, bool | None]:
        """``write`` unless ``owner`` is held by an erasure. ``target``: the thread and
        namespace it writes (a backend that checks outside the write's transaction deletes
        the thread when a hold appeared meanwhile); ``checkpoint_id``: the checkpoint it
        writes or writes for, whose writes already stored go too when it is dropped and
        that checkpoint is not stored."""
        ...

    def drop_orphan_writes(self, target: Target, checkpoint_id: str, owner: str) -> Plan[Any, None]:
        """Remove the pending writes stored for ``checkpoint_id`` (in ``target``'s thread
        and namespace) unless that checkpoint is stored: the writes of a put the erasure
        hold dropped (``owner``'s). LangGraph runs a step's put and its writes side by
        side, so a new thread's writes can land before the hold and its put after: the
        erasure finds a thread with no checkpoint (no index record) only by the owner in
        waiting its writes named (:meth:`pending_threads`), and writes that named no user
        nothing else would ever remove. A thread left empty loses its id, as after a
        refusal, and its index entries."""
        ...

    def hold_erased(self, owner: str, seconds: float) -> Plan[Any, None]: ...

    def lift_erased(self, owner: str) -> Plan[Any, bool]: ...

    def delete_for_runs(self, run_ids: Sequence[str]) -> Plan[Any, None]: ...

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> Plan[Any, None]: ...

    def prune(self, thread_ids: Sequence[str], keep_latest: bool) -> Plan[Any, None]: ...

    def delta_history(
        self, codec: CheckpointCodec, target: Target, channels: Sequence[str]
    ) -> Plan[Any, dict[str, DeltaChannelHistory]]: ...

    def sweep_expired(self, batch_size: int) -> Plan[Any, tuple[int, bool]]:
        """One batch: (threads deleted, whether more may be waiting)."""
        ...


def _at(target: Target) -> dict[str, Any]:
    """The fields of an event about one checkpoint (or the latest of a thread)."""
    return {
        "thread_id": target.thread_id,
        "checkpoint_ns": target.checkpoint_ns,
        "checkpoint_id": target.checkpoint_id,
    }


def _page(
    plans: CheckpointPlans, codec: CheckpointCodec, query: ListQuery
) -> Callable[[], Plan[Any, tuple[list[CheckpointTuple], ListQuery | None]]]:
    """A list page's read, for :meth:`CheckpointSaverBase._whole` (bound to ``query``)."""
    return lambda: plans.list_page(codec, query, LIST_PAGE_SIZE)


def _ns_and_id(t: CheckpointTuple) -> tuple[str, str]:
    configurable = t.config["configurable"]
    return configurable.get("checkpoint_ns", ""), configurable["checkpoint_id"]


def _thread_ids(thread_ids: Sequence[str], what: str) -> list[str]:
    if isinstance(thread_ids, str):
        raise InvalidConfigError(f"{what} takes a list of thread ids, not a single string")
    return [read_target({"configurable": {"thread_id": t}}).thread_id for t in thread_ids]


class CheckpointSaverBase(Observable, BaseCheckpointSaver[str], ABC):
    """Shared saver logic; subclasses supply ``_plans``, ``_run`` and ``_arun``."""

    _plans: CheckpointPlans

    def __init__(
        self,
        *,
        serde: SerializerProtocol | None = None,
        ttl: TTLConfig | None = None,
        keep_last: int | None = None,
        thread_index_keys: Sequence[str] | None = None,
        transcripts: bool = False,
        transcript_ttl: float | None = None,
        listeners: Sequence[Listener] | None = None,
        list_memory_mib: float = DEFAULT_MAX_BYTES / (1024 * 1024),
        encryption: Encryption | None = None,
        fence: bool | FenceOptions | None = None,
    ) -> None:
        super().__init__(serde=serde)
        if encryption is not None and not isinstance(encryption, Encryption):
            raise InvalidConfigError(
                f"encryption must be an Encryption, got {type(encryption).__name__}"
            )
        self.encryption = encryption
        """Encryption at rest (see :mod:`..encryption`), or ``None``."""
        self._init_listeners(listeners)
        self.settings = SaverSettings.build(
            ttl, keep_last, thread_index_keys, transcripts, transcript_ttl
        )
        self._lists = ListMemory(max_bytes=list_memory_bytes(list_memory_mib))
        self._recorded = RecordedIds()
        self._fence_options = FenceOptions.of(fence)
        self._fence_lease_s = (self._fence_options or FenceOptions()).lease_s
        self._fence_name = instance_name()
        # (thread key, owner) -> the number a run took (auto mode), newest last
        self._fence_runs: OrderedDict[tuple[bytes, str], int] = OrderedDict()
        # (thread key, run id) -> the owner of that run's latest start on this saver
        self._fence_starts: OrderedDict[tuple[bytes, str], str] = OrderedDict()
        self._fence_starts_lock = threading.Lock()
        self._fence_runs_lock = threading.Lock()  # _fence_runs only, never across I/O
        # a run's take, per thread (async: per event loop and thread)
        self._fence_locks = _KeyedLocks(threading.Lock)
        self._fence_alocks = _KeyedLocks(asyncio.Lock)
        # thread key -> its owner as this process last saw it (tenant keys only)
        self._owners: OrderedDict[bytes, str | None] = OrderedDict()
        self._owners_lock = threading.Lock()
        # (for puts and reads, for history pages), built on first use (see ``_codecs``)
        self._built_codecs: tuple[CheckpointCodec, CheckpointCodec] | None = None

    @property
    def fence(self) -> Fence:
        """Ownership leases: ``acquire``, ``renew``, ``release``, ``get`` (and ``a*``)."""
        return Fence(self)

    # -- the fence: which owner a write claims to be ----------------------------------

    def _claim(self, config: RunnableConfig, target: Target) -> Claim | None:
        """The write's claim: a lease in its config, else (``fence=True``) its run's.

        ``None`` (nothing checked, nothing sent) when the fence is off and the config
        carries no lease, or the write belongs to no run.
        """
        held = held_claim(config)
        if held is not None or self._fence_options is None or not self._fence_options.auto:
            return held
        run_id = run_id_of(config)
        run = _RUN.get()
        if run is not None and run[0] != target.thread_key:
            run = None
        if run_id is None:
            if (
                run is None
                or target.checkpoint_ns == ""
                or _TASK_KEY not in (config.get("configurable") or {})
            ):
                return None
            owner = run[2]  # a subgraph of the run this context belongs to
        elif run is not None and run[1] == run_id:
            owner = run[2]  # this invocation of the run (see _run_start)
        else:
            # a call outside the run's context: its latest start here, if any
            owner = self._fence_starts.get((target.thread_key, run_id)) or (
                f"run:{run_id}@{self._fence_name}"
            )
            if target.checkpoint_ns == "":
                _RUN.set((target.thread_key, run_id, owner))
        token = self._fence_runs.get((target.thread_key, owner))
        return Claim(owner, token, self._fence_options.lease_s)

    def _take_plan(self, target: Target, claim: Claim) -> Plan[Any, None]:
        """A run takes its thread's fence as it starts, superseding any owner."""
        _, state = yield from self._plans.fence_take(  # type: ignore[attr-defined]
            target.thread_id, claim.owner, claim.lease_s, True, run=True
        )
        claim.token = state.token

    def _taken(self, target: Target, claim: Claim) -> int | None:
        with self._fence_runs_lock:
            return self._fence_runs.get((target.thread_key, claim.owner))

    def _remember_run(self, target: Target, claim: Claim) -> None:
        assert claim.token is not None
        key = (target.thread_key, claim.owner)
        with self._fence_runs_lock:
            self._fence_runs[key] = claim.token
            self._fence_runs.move_to_end(key)
            while len(self._fence_runs) > RUN_TOKENS:
                self._fence_runs.popitem(last=False)

    def _take(self, target: Target, claim: Claim | None) -> None:
        """Before a run's first write: one take per run even when its writes race (a
        second take by the same owner would keep the number, but one racing a takeover
        by another owner would steal the thread back). Only writes of one thread race
        so: the lock is the thread's."""
        if claim is None or claim.token is not None:
            return
        with self._fence_locks.of(target.thread_key) as lock, lock:
            claim.token = self._taken(target, claim)
            if claim.token is None:
                self._run(self._take_plan(target, claim))
            self._remember_run(target, claim)

    async def _atake(self, target: Target, claim: Claim | None) -> None:
        """Async :meth:`_take`. An ``asyncio.Lock`` serves one event loop: the key
        names the loop too (a loop in use is alive, so its id is not reused meanwhile)."""
        if claim is None or claim.token is not None:
            return
        key = (id(asyncio.get_running_loop()), target.thread_key)
        with self._fence_alocks.of(key) as lock:
            async with lock:
                claim.token = self._taken(target, claim)
                if claim.token is None:
                    await self._arun(self._take_plan(target, claim))
                self._remember_run(target, claim)

    @property
    def threads(self) -> Threads:
        """The thread index: ``search``, ``count``, ``get``, ``sessions`` (and ``a*``)."""
        from ..threads.api import Threads

        return Threads(self, self._plans.threads, self.settings.index_keys)

    @abstractmethod
    def _run(self, plan: Plan[Any, R]) -> R:
        """Run one plan to completion, blocking."""

    @abstractmethod
    async def _arun(self, plan: Plan[Any, R]) -> R:
        """Run one plan to completion without blocking the event loop."""

    def _new_codec(self) -> CheckpointCodec:
        """A codec of this saver's own, for a caller that changes it (see ``_codecs``)."""
        return CheckpointCodec(
            self.serde,
            max_value_bytes=self._plans.max_value_bytes,
            memory=self._lists,
            inline=self._plans.inline_scalars,
            metadata_as_json=self._plans.metadata_as_json,
            encryption=self.encryption,
            index_keys=self.settings.index_keys,
        )

    def _codecs(self) -> tuple[CheckpointCodec, CheckpointCodec]:
        """The codecs every call shares, built once rather than per call (a short turn
        makes eight calls). Built again when the ``serde`` or ``encryption`` they were
        built with is no longer the saver's: ``with_allowlist`` clones the saver with a
        new ``serde``. A codec holds no per-call state: the user whose tenant key seals a
        value is passed to each encode."""
        built = self._built_codecs
        if (
            built is None
            or built[0].serde is not self.serde
            or built[0].encryption is not self.encryption
        ):
            history = self._new_codec()
            history.track_views = False
            built = self._built_codecs = (self._new_codec(), history)
        return built

    @property
    def _codec(self) -> CheckpointCodec:
        """The codec of puts and reads (shared: never changed by its users)."""
        return self._codecs()[0]

    @property
    def _history_codec(self) -> CheckpointCodec:
        """For ``list()``: what it hands out is never what a put builds on."""
        return self._codecs()[1]

    # -- plans for each public method -------------------------------------------------

    @staticmethod
    def _whole(read: Callable[[], Plan[Any, R]]) -> Plan[Any, R]:
        """Run a read again when pieces of what it found were missing.

        A checkpoint's list items (and on PostgreSQL its blobs and writes) are read after
        the checkpoint itself, so a ``delete_thread``, ``prune`` or retention in between
        leaves the read with a checkpoint whose items are gone: every backend reports a
        missing item, page or spine (``lists.resolve_list``), never a shorter list. Read
        again, it finds the thread gone (``None``) or its new state. Damage that is really
        stored fails the same way every time: raised after :data:`READ_ATTEMPTS` alike
        failures in a row. A failure unlike the one before means the data changed
        meanwhile (a thread deleted and written again while a loaded machine reads it):
        read again, up to :data:`READ_ATTEMPTS_RACING` reads in all.
        """
        last, alike = "", 0
        for attempt in range(1, READ_ATTEMPTS_RACING + 1):
            try:
                return (yield from read())
            except CorruptDataError as exc:
                alike = alike + 1 if str(exc) == last else 1
                last = str(exc)
                if alike == READ_ATTEMPTS or attempt == READ_ATTEMPTS_RACING:
                    raise
        raise AssertionError("unreachable")

    def _get_tuple_plan(self, config: RunnableConfig) -> Plan[Any, CheckpointTuple | None]:
        target = read_target(config)
        codec = self._codec
        found = yield from self._observed_event(
            self._whole(lambda: self._plans.get_tuple(codec, target)),
            ev.CheckpointLoaded,
            lambda found: {**_at(target), "hit": found is not None},
        )
        if found is None:
            # Deleted, perhaps by another process, with the items its lists used.
            self._lists.forget_lists(target.thread_key)
        elif self._tenant_user_key() is not None:
            owner = self._user_of(config, found.metadata)
            if owner is not None:
                self._saw_owner(target.thread_key, owner)
        elif target.checkpoint_id is None:
            codec.forget_replaced_lists(target, found.checkpoint)
        return found

    def _put_plan(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
        whole: bool = False,
    ) -> tuple[Plan[Any, None], RunnableConfig, Callable[[], None], Target, Claim | None]:
        """The put's plan, the config it returns, what to do once it is stored, and the
        target and fence claim (taken, when it has no number yet, before the plan runs).

        The plan raises :class:`Restart` when the checkpoint names rows of its parent's
        and the parent is gone (a write that revived the expired thread purged it, with
        those rows): its transaction rolls back, then the caller puts it ``whole``
        (every channel's value, no list built on a stored one), standing alone. Not in
        the same transaction: the first try may hold locks (PostgreSQL: the thread
        index's row) that the whole one, taking the locked path, must take after others.
        """
        target = read_target(config)
        claim = self._claim(config, target)
        codec = self._codec
        user = self._user_of(config, metadata, target.thread_key)
        values = checkpoint.get("channel_values") or {}
        lines = []
        if self.settings.transcripts and "messages" in new_versions:
            lines = lines_of(values.get("messages"), self._recorded.known(target.thread_key))
        encoded = codec.encode_checkpoint(
            target, config, checkpoint, metadata, new_versions, user_id=user, whole=whole
        )
        sizes = (
            [len(encoded.checkpoint[1]), len(encoded.metadata[1])]
            + [len(b.data or b"") for b in encoded.blobs]
            + [len(data) for _, data in encoded.items.values()]
        )
        record = record_input(
            target.checkpoint_ns,
            values,
            encoded.metadata_json,
            sizes,
            self.settings.index_keys,
            lines,
        )
        if self.encryption is not None:
            record = self._sealed(record, target.thread_id, user)

        def store() -> Plan[Any, None]:
            if not (yield from self._plans.put(target, encoded, record, claim)):
                assert encoded.refers, "a checkpoint that names no stored row is stored"
                raise Restart

        plan = self._observed_event(
            store(),
            ev.CheckpointSaved,
            lambda _: {
                **_at(target),
                "checkpoint_id": checkpoint["id"],
                "bytes_written": sum(sizes),
                "message_count": sum(len(v) for v in values.values() if isinstance(v, list)),
            },
        )

        def stored() -> None:
            codec.commit(target, encoded)
            self._recorded.add(target.thread_key, record.lines)

        return plan, target.config(checkpoint["id"]), stored, target, claim

    def _put_writes_plan(
        self,
        config: RunnableConfig,
        target: Target,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str,
        claim: Claim | None = None,
        owner: str | None = None,
    ) -> Plan[Any, None]:
        """``target``: ``config``'s, as :func:`read_checkpoint_target` reads it;
        ``owner``: the run's user as the index stores it (see ``CheckpointPlans``)."""
        user = self._user_of(config, None, target.thread_key)
        encoded = self._codec.encode_writes(target, writes, task_id, task_path, user)
        return self._observed_event(
            self._plans.put_writes(target, encoded, claim, owner)
            if claim is not None or owner is not None
            else self._plans.put_writes(target, encoded),
            ev.WritesSaved,
            lambda _: {
                **_at(target),
                "task_id": task_id,
                "write_count": len(encoded),
                "bytes_written": sum(len(w.data or b"") for w in encoded),
            },
        )

    def _tenant_user_key(self) -> str | None:
        """The index's user key when per-tenant keys are configured, else ``None``."""
        enc = self.encryption
        if enc is None or enc.tenant_keys is None or not self.settings.index_keys:
            return None
        return self.settings.index_keys[0]

    def _user_of(
        self,
        config: RunnableConfig,
        metadata: Mapping[str, Any] | None,
        thread: bytes | None = None,
    ) -> str | None:
        """The thread's user (the index's user key), for per-tenant keys; only looked up
        when tenant keys are configured.

        With ``thread`` (a write): the run's user, else the thread's owner as this process
        saw it (:meth:`_learn_owner` reads the index first when it has not): a later turn
        that omits the user (a resume, a worker knowing only the thread id) is sealed with
        the owner's key, so dropping that key shreds it too.
        """
        key = self._tenant_user_key()
        if key is None:
            return None
        found = (config.get("configurable") or {}).get(key)
        if found is None:
            found = (config.get("metadata") or {}).get(key)
        if found is None and metadata is not None:
            found = metadata.get(key)
        user = found if isinstance(found, str) and found else None
        if thread is None:
            return user
        if user is not None:
            self._saw_owner(thread, user)
            return user
        with self._owners_lock:
            return self._owners.get(thread)

    def _saw_owner(self, thread: bytes, owner: str | None) -> None:
        with self._owners_lock:
            self._owners[thread] = owner
            self._owners.move_to_end(thread)
            while len(self._owners) > OWNERS_CACHED:
                self._owners.popitem(last=False)

    def _owner_plan(self, config: RunnableConfig, target: Target | None) -> Plan[Any, None] | None:
        """One read of the thread's index owner, before a write whose config names no
        user seals anything; ``None`` when not needed (tenant keys off, the user given, or
        the owner already seen by this process). ``target``: ``config``'s, if parsed."""
        key = self._tenant_user_key()
        if key is None or self._user_of(config, None) is not None:
            return None
        if target is None:
            target = read_target(config)
        thread_id, thread = target.thread_id, target.thread_key
        with self._owners_lock:
            if thread in self._owners:
                return None

        def read() -> Plan[Any, None]:
            stored = yield from self._plans.threads.get(thread_id)
            owner = None if stored is None else stored.metadata.get(key)
            self._saw_owner(thread, owner if isinstance(owner, str) and owner else None)

        return read()

    def _learn_owner(self, config: RunnableConfig, target: Target | None = None) -> None:
        if (plan := self._owner_plan(config, target)) is not None:
            self._run(plan)

    async def _alearn_owner(self, config: RunnableConfig, target: Target | None = None) -> None:
        if (plan := self._owner_plan(config, target)) is not None:
            await self._arun(plan)

    def _sealed(self, record: RecordInput, thread_id: str, user: str | None) -> RecordInput:
        """``record`` with its title and transcript texts sealed (see :mod:`..encryption`)."""
        enc = self.encryption
        assert enc is not None
        title = record.title
        if title is not None:
            title = enc.seal_text(title, Location("title", thread_id, user_id=user))
        lines = tuple(
            replace(
                line,
                text=enc.seal_text(
                    line.text, Location("transcript", thread_id, key=line.id, user_id=user)
                ),
            )
            for line in record.lines
        )
        return replace(record, title=title, lines=lines)

    def _writes_claim(self, config: RunnableConfig, target: Target) -> Claim | None:
        """A put_writes' claim (``None`` without a fence or lease)."""
        if self._fence_options is None and held_claim(config) is None:
            return None
        return self._claim(config, target)

    def _prune_plan(self, thread_ids: Sequence[str], strategy: str) -> Plan[Any, None]:
        if strategy not in PRUNE_STRATEGIES:
            raise InvalidConfigError(
                f"unknown prune strategy {strategy!r}; use one of {PRUNE_STRATEGIES}"
            )
        ids = _thread_ids(thread_ids, "prune")
        for thread_id in ids:
            self._lists.forget_lists(thread_key(thread_id))
        return self._observed_event(
            self._plans.prune(ids, strategy == "keep_latest"),
            ev.ThreadsPruned,
            lambda _: {"thread_ids": tuple(ids), "strategy": strategy},
        )

    def _delete_for_runs_plan(self, run_ids: Sequence[str]) -> Plan[Any, None]:
        self._lists.clear()  # the runs' threads are not known here
        ids = [str(r) for r in run_ids]
        return self._observed_event(
            self._plans.delete_for_runs(ids), ev.RunsDeleted, lambda _: {"run_ids": tuple(ids)}
        )

    def _copy_plan(self, source_thread_id: str, target_thread_id: str) -> Plan[Any, None]:
        source, target = _thread_ids([source_thread_id, target_thread_id], "copy_thread")
        self._lists.forget_lists(thread_key(target))
        with self._owners_lock:
            self._owners.pop(thread_key(target), None)
        return self._observed_event(
            self._plans.copy_thread(source, target)
            if self.encryption is None
            else self._sealed_copy_plan(source, target),
            ev.ThreadCopied,
            lambda _: {"source_thread_id": source, "target_thread_id": target},
        )

    def _sealed_copy_plan(self, source: str, target: str) -> Plan[Any, None]:
        """``copy_thread`` with encryption on: envelopes are bound to their thread id, so
        a byte copy would not open under the target's. Each checkpoint of the source
        (every namespace, oldest first) is opened and put again under the target id with
        its id, parent and metadata, then its pending writes with their task paths, as a
        byte copy would store them; the target is indexed as a new thread (from these
        puts). With tenant keys, checkpoints whose metadata names no user are sealed with
        the source's owner's key. The source is read whole before anything is written.
        """
        codec = self._new_codec()  # its decode_tuple is wrapped below
        codec.track_views = False
        paths: dict[tuple[str, str, str], str] = {}
        decode = codec.decode_tuple

        def recording(stored: StoredCheckpoint, *args: Any, **kwargs: Any) -> CheckpointTuple:
            # ``list`` leaves out a write's task path; the stored rows have it
            for task_id, _, _, _, path, _ in stored.writes:
                paths[(stored.checkpoint_ns, stored.checkpoint_id, task_id)] = path
            return decode(stored, *args, **kwargs)

        codec.decode_tuple = recording  # type: ignore[method-assign]
        tuples: list[CheckpointTuple] = []
        query: ListQuery | None = ListQuery.build(
            {"configurable": {"thread_id": source}}, None, None, None
        )
        while query is not None:
            page, query = yield from self._whole(_page(self._plans, codec, query))
            tuples.extend(page)
        if not tuples:
            return
        if (key := self._tenant_user_key()) is not None:
            stored = yield from self._plans.threads.get(source)
            owner = None if stored is None else stored.metadata.get(key)
            self._saw_owner(thread_key(target), owner if isinstance(owner, str) else None)
        versions: dict[tuple[str, str], Mapping[str, Any]] = {}
        for t in sorted(tuples, key=_ns_and_id):
            ns, cid = _ns_and_id(t)
            parent = (t.parent_config or {}).get("configurable", {}).get("checkpoint_id")
            current = dict(t.checkpoint.get("channel_versions") or {})
            before = versions.get((ns, parent)) if parent else None
            new_versions = (
                current
                if before is None
                else {c: v for c, v in current.items() if before.get(c) != v}
            )
            versions[(ns, cid)] = current
            at: dict[str, Any] = {"thread_id": target, "checkpoint_ns": ns}
            if parent:
                at["checkpoint_id"] = parent
            plan, _, stored_put, _, _ = self._put_plan(
                {"configurable": at}, t.checkpoint, t.metadata, new_versions
            )
            try:
                yield from plan
            except Restart:
                # Its parent is gone: this copy trimmed it (``keep_last``) before the
                # checkpoint forked from it came. Put whole in the copy's transaction,
                # which holds the target's locks already (the copy is one plan: a
                # Restart escaping it was the error ``copy_thread`` raised).
                plan, _, stored_put, _, _ = self._put_plan(
                    {"configurable": at}, t.checkpoint, t.metadata, new_versions, whole=True
                )
                yield from plan
            stored_put()
            at = {"thread_id": target, "checkpoint_ns": ns, "checkpoint_id": cid}
            for task_id, group in itertools.groupby(t.pending_writes or (), key=lambda w: w[0]):
                writes = [(w[1], w[2]) for w in group]
                path = paths.get((ns, cid, task_id), "")
                # special writes (interrupts, errors) apart, so each keeps its index
                for part in (
                    [w for w in writes if w[0] in WRITES_IDX_MAP],
                    [w for w in writes if w[0] not in WRITES_IDX_MAP],
                ):
                    if part:
                        writes_at: RunnableConfig = {"configurable": at}
                        yield from self._put_writes_plan(
                            writes_at, read_checkpoint_target(writes_at), part, task_id, path
                        )

    def _delta_plan(
        self, config: RunnableConfig, channels: Sequence[str]
    ) -> Plan[Any, dict[str, DeltaChannelHistory]]:
        target, names = read_target(config), list(channels)
        codec = self._codec
        return self._observed_event(
            self._whole(lambda: self._plans.delta_history(codec, target, names)),
            ev.HistoryLoaded,
            lambda _: {**_at(target), "channels": tuple(names)},
        )

    def _list_page_plan(
        self, query: ListQuery
    ) -> Plan[Any, tuple[list[CheckpointTuple], ListQuery | None]]:
        codec = self._history_codec
        return self._observed_event(
            self._whole(lambda: self._plans.list_page(codec, query, LIST_PAGE_SIZE)),
            ev.CheckpointsListed,
            lambda page: {
                "thread_id": query.thread_id,
                "checkpoint_ns": query.checkpoint_ns,
                "count": 0 if page is None else len(page[0]),
            },
        )

    def _sweep_batch_plan(self, batch_size: int) -> Plan[Any, tuple[int, bool]]:
        return self._observed_event(
            self._plans.sweep_expired(batch_size),
            ev.CheckpointsExpired,
            lambda done: {"deleted": 0 if done is None else done[0]},
        )

    @staticmethod
    def _check_batch(batch_size: int) -> int:
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise InvalidConfigError(f"batch_size must be a positive integer, got {batch_size!r}")
        return batch_size

    # -- synchronous API --------------------------------------------------------------

    def _run_start(self, config: RunnableConfig) -> tuple[Target, Claim] | None:
        """With ``fence=True``, a run's first read of its thread (LangGraph's loop reads
        its checkpoint as the run starts, with the run id) takes the thread's fence: two
        runs resumed from one checkpoint are then two owners before either writes."""
        if self._fence_options is None or not self._fence_options.auto:
            return None
        run_id = run_id_of(config)
        if run_id is None or held_claim(config) is not None:
            return None
        target = read_target(config)
        if target.checkpoint_ns != "":
            return None
        # each start is an owner of its own: the same run id started twice on this
        # saver (a redelivered queue item) must not run as one owner twice
        owner = f"run:{run_id}@{self._fence_name}#{secrets.token_hex(4)}"
        _RUN.set((target.thread_key, run_id, owner))
        with self._fence_starts_lock:  # not the take locks: held across a take's I/O
            starts = self._fence_starts
            starts[(target.thread_key, run_id)] = owner
            starts.move_to_end((target.thread_key, run_id))
            while len(starts) > RUN_TOKENS:
                starts.popitem(last=False)
        return target, Claim(owner, None, self._fence_options.lease_s)

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        if (start := self._run_start(config)) is not None:
            self._take(*start)
        return self._run(self._get_tuple_plan(config))

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        query: ListQuery | None = ListQuery.build(config, filter, before, limit)
        while query is not None:
            page, query = self._run(self._list_page_plan(query))
            yield from page

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        self._learn_owner(config)
        plan, saved, stored, target, claim = self._put_plan(
            config, checkpoint, metadata, new_versions
        )
        self._take(target, claim)
        try:
            self._run(plan)
        except Restart:  # its parent went: stored whole (see _put_plan)
            plan, saved, stored, target, claim = self._put_plan(
                config, checkpoint, metadata, new_versions, whole=True
            )
            self._run(plan)
        stored()
        return saved

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        target = read_checkpoint_target(config)
        claim = self._writes_claim(config, target)
        self._take(target, claim)
        self._learn_owner(config, target)
        self._run(self._put_writes_plan(config, target, writes, task_id, task_path, claim))

    def _delete_plan(self, thread_id: str) -> Plan[Any, None]:
        thread_id = _thread_ids([thread_id], "delete_thread")[0]
        self._lists.forget_thread(thread_key(thread_id))
        with self._owners_lock:
            self._owners.pop(thread_key(thread_id), None)
        return self._observed_event(
            self._plans.delete_thread(thread_id),
            ev.ThreadDeleted,
            lambda _: {"thread_id": thread_id},
        )

    def delete_thread(self, thread_id: str) -> None:
        self._run(self._delete_plan(thread_id))

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        self._run(self._delete_for_runs_plan(run_ids))

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        self._run(self._copy_plan(source_thread_id, target_thread_id))

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        self._run(self._prune_plan(thread_ids, strategy))

    def get_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        return self._run(self._delta_plan(config, channels)) if channels else {}

    def sweep_expired(self, batch_size: int = 500) -> int:
        """Delete expired threads, ``batch_size`` per transaction; returns how many.

        Expired threads are already invisible to every read; sweeping reclaims the space.
        """
        batch, total, more = self._check_batch(batch_size), 0, True
        while more:
            deleted, more = self._run(self._sweep_batch_plan(batch))
            total += deleted
        return total

    # -- asynchronous API -------------------------------------------------------------

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        if (start := self._run_start(config)) is not None:
            await self._atake(*start)
        return await self._arun(self._get_tuple_plan(config))

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        query: ListQuery | None = ListQuery.build(config, filter, before, limit)
        while query is not None:
            page, query = await self._arun(self._list_page_plan(query))
            for item in page:
                yield item

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        await self._alearn_owner(config)
        plan, saved, stored, target, claim = self._put_plan(
            config, checkpoint, metadata, new_versions
        )
        await self._atake(target, claim)
        try:
            await self._arun(plan)
        except Restart:  # its parent went: stored whole (see _put_plan)
            plan, saved, stored, target, claim = self._put_plan(
                config, checkpoint, metadata, new_versions, whole=True
            )
            await self._arun(plan)
        stored()
        return saved

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        target = read_checkpoint_target(config)
        claim = self._writes_claim(config, target)
        await self._atake(target, claim)
        await self._alearn_owner(config, target)
        await self._arun(self._put_writes_plan(config, target, writes, task_id, task_path, claim))

    async def adelete_thread(self, thread_id: str) -> None:
        await self._arun(self._delete_plan(thread_id))

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        await self._arun(self._delete_for_runs_plan(run_ids))

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        await self._arun(self._copy_plan(source_thread_id, target_thread_id))

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        await self._arun(self._prune_plan(thread_ids, strategy))

    async def aget_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        return await self._arun(self._delta_plan(config, channels)) if channels else {}

    async def asweep_expired(self, batch_size: int = 500) -> int:
        """Async :meth:`sweep_expired`."""
        batch, total, more = self._check_batch(batch_size), 0, True
        while more:
            deleted, more = await self._arun(self._sweep_batch_plan(batch))
            total += deleted
        return total

    def get_next_version(self, current: str | None, channel: None) -> str:
        """Versions ``<counter>.<random>`` that sort as strings in counter order.

        The counter is 7 base-36 digits (7.8e10 steps), the random part 6 (31 bits): it
        keeps two branches forked from one checkpoint from minting the same version for
        different values, which matters because blobs are keyed by version. A version is
        stored several times in every checkpoint, so this is 14 characters, not the 49 of
        LangGraph's own format. Decimal counters of 10 or more digits (earlier versions of
        this package, LangGraph's format) are read as decimal; the next version still sorts
        after them.
        """
        if current is None:
            current_v = 0
        elif isinstance(current, int):
            current_v = current
        else:
            head = current.split(".", 1)[0]
            current_v = int(head) if len(head) >= 10 else int(head, 36)
        return f"{_base36(current_v + 1, 7)}.{_base36(random.getrandbits(31), 6)}"


_DIGITS36 = "0123456789abcdefghijklmnopqrstuvwxyz"
_PAIRS36 = tuple(a + b for a in _DIGITS36 for b in _DIGITS36)
"""Every two base-36 digits, by value: a version takes half the divisions."""


def _base36(n: int, width: int) -> str:
    """``n`` in base 36, zero-padded: fixed-width strings sort as their numbers."""
    digits = []
    while n:
        n, r = divmod(n, 1296)
        digits.append(_PAIRS36[r])
    return "".join(reversed(digits)).lstrip("0").rjust(width, "0")


class SyncDriver(SyncBridge, CheckpointSaverBase, ABC):
    """A saver whose storage calls block; its async methods run in a worker thread."""


class AsyncDriver(AsyncBridge, CheckpointSaverBase, ABC):
    """A saver whose storage calls are awaited; sync calls are served on its event loop."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self._bind_loop()
