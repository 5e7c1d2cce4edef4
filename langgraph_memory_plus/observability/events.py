"""The typed events savers and stores hand their listeners, one per storage operation.

Every event is a frozen dataclass: listeners may keep it, pass it to another thread or
queue it, and no later operation changes it. Each carries the backend (``db.system``:
``postgresql``, ``redis`` or ``sqlite``), how long the storage part took (``duration``,
seconds, measured around the plan's run, so sync and async report the same span of work)
and ``error``: the exception the operation raised (it still propagates to the caller).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

from ..errors import ConflictError

Result = Literal["hit", "miss", "ok", "error", "conflict"]
Namespace = tuple[str, ...]


@dataclass(frozen=True, kw_only=True)
class MemoryEvent:
    """What every event carries. ``name`` is ``"<kind>.<operation>"``."""

    kind: ClassVar[Literal["checkpoint", "store", "node"]]
    operation: ClassVar[str]
    backend: str
    duration: float
    error: BaseException | None = None

    @property
    def name(self) -> str:
        return f"{self.kind}.{self.operation}"

    @property
    def result(self) -> Result:
        """``error`` / ``conflict`` on failure; else ``hit`` / ``miss`` for reads, ``ok``."""
        if self.error is not None:
            return "conflict" if isinstance(self.error, ConflictError) else "error"
        return self._success()

    def _success(self) -> Result:
        return "ok"


# -- checkpoints ---------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class _AtCheckpoint(MemoryEvent):
    """An operation on one thread and namespace (``checkpoint_id`` None: the latest)."""

    kind = "checkpoint"
    thread_id: str
    checkpoint_ns: str
    checkpoint_id: str | None


@dataclass(frozen=True, kw_only=True)
class CheckpointLoaded(_AtCheckpoint):
    """``get_tuple``: ``checkpoint_id`` is the one asked for (None: the latest)."""

    operation = "loaded"
    hit: bool = False

    def _success(self) -> Result:
        return "hit" if self.hit else "miss"


@dataclass(frozen=True, kw_only=True)
class CheckpointSaved(_AtCheckpoint):
    """``put``: ``bytes_written`` sums the encoded checkpoint, metadata, blobs and list
    items; ``message_count`` the items of the checkpoint's list channels (``messages``)."""

    operation = "saved"
    checkpoint_id: str
    bytes_written: int
    message_count: int


@dataclass(frozen=True, kw_only=True)
class WritesSaved(_AtCheckpoint):
    """``put_writes``: a task's pending writes."""

    operation = "writes_saved"
    task_id: str
    write_count: int
    bytes_written: int


@dataclass(frozen=True, kw_only=True)
class HistoryLoaded(_AtCheckpoint):
    """``get_delta_channel_history``: the history of ``channels`` up to a checkpoint."""

    operation = "history_loaded"
    channels: tuple[str, ...]


@dataclass(frozen=True, kw_only=True)
class CheckpointsListed(MemoryEvent):
    """One page of ``list``: ``count`` checkpoints (``thread_id`` None: every thread's).

    A page, not the whole listing: ``list`` is lazy and its caller may stop early.
    """

    kind = "checkpoint"
    operation = "listed"
    thread_id: str | None
    checkpoint_ns: str | None
    count: int = 0


@dataclass(frozen=True, kw_only=True)
class ThreadDeleted(MemoryEvent):
    kind = "checkpoint"
    operation = "deleted"
    thread_id: str


@dataclass(frozen=True, kw_only=True)
class RunsDeleted(MemoryEvent):
    """``delete_for_runs``: the checkpoints and writes of these runs."""

    kind = "checkpoint"
    operation = "runs_deleted"
    run_ids: tuple[str, ...]


@dataclass(frozen=True, kw_only=True)
class ThreadCopied(MemoryEvent):
    kind = "checkpoint"
    operation = "copied"
    source_thread_id: str
    target_thread_id: str


@dataclass(frozen=True, kw_only=True)
class ThreadsPruned(MemoryEvent):
    kind = "checkpoint"
    operation = "pruned"
    thread_ids: tuple[str, ...]
    strategy: str


@dataclass(frozen=True, kw_only=True)
class _Swept(MemoryEvent):
    """One batch of a sweep: ``deleted`` is how many it removed."""

    operation = "expired"
    deleted: int


@dataclass(frozen=True, kw_only=True)
class CheckpointsExpired(_Swept):
    """One batch of ``sweep_expired``: ``deleted`` threads."""

    kind = "checkpoint"


# -- store items ---------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class StoreRead(MemoryEvent):
    """A get (``key`` set) or a search (``key`` None, ``namespace`` the prefix).

    A hit is a get that found the item or a search that found at least one; ``count`` is
    how many items the read returned.
    """

    kind = "store"
    operation = "read"
    namespace: Namespace
    key: str | None
    count: int = 0
    query: str | None = None

    def _success(self) -> Result:
        return "hit" if self.count else "miss"


@dataclass(frozen=True, kw_only=True)
class _ItemChanged(MemoryEvent):
    """A put or delete of one item, optionally conditional on ``expected_version``."""

    kind = "store"
    namespace: Namespace
    key: str
    expected_version: int | None = None


@dataclass(frozen=True, kw_only=True)
class StoreWritten(_ItemChanged):
    """A put; ``bytes_written`` is the value's size as stored JSON."""

    operation = "written"
    bytes_written: int


@dataclass(frozen=True, kw_only=True)
class StoreDeleted(_ItemChanged):
    operation = "deleted"


@dataclass(frozen=True, kw_only=True)
class _BelowPrefix(MemoryEvent):
    """An operation on every namespace below the prefix ``namespace``; ``count``: how
    many namespaces or items it found (or removed)."""

    kind = "store"
    namespace: Namespace
    count: int = 0


@dataclass(frozen=True, kw_only=True)
class NamespacesListed(_BelowPrefix):
    """A ``list_namespaces``: ``namespace`` is its prefix condition (``*`` for a
    wildcard label; ``()`` without one)."""

    operation = "namespaces_listed"


@dataclass(frozen=True, kw_only=True)
class StoreCounted(_BelowPrefix):
    """A ``count``: ``count`` live items below ``namespace``."""

    operation = "counted"


@dataclass(frozen=True, kw_only=True)
class NamespaceDeleted(_BelowPrefix):
    """A ``delete_namespace``: ``count`` items below ``namespace`` removed."""

    operation = "namespace_deleted"


@dataclass(frozen=True, kw_only=True)
class StoreExpired(_Swept):
    """One batch of ``sweep_ttl``: ``deleted`` items."""

    kind = "store"


# -- memory nodes (no storage backend: ``backend`` is ``""``) ---------------------------------


@dataclass(frozen=True, kw_only=True)
class NodeCounted(MemoryEvent):
    """A memory node counted something in its ``stats`` (``refused``: the injection
    scanner refused a memory, ``prefetch_used``: a prefetched read answered, ``store_timeouts``:
    the store or a prefetch did not answer in time, ...); ``n`` is how many."""

    kind = "node"
    operation = "counted"
    counter: str
    n: int = 1


__all__ = [
    "CheckpointLoaded",
    "CheckpointSaved",
    "CheckpointsExpired",
    "CheckpointsListed",
    "HistoryLoaded",
    "MemoryEvent",
    "NamespaceDeleted",
    "NamespacesListed",
    "NodeCounted",
    "Result",
    "RunsDeleted",
    "StoreCounted",
    "StoreDeleted",
    "StoreExpired",
    "StoreRead",
    "StoreWritten",
    "ThreadCopied",
    "ThreadDeleted",
    "ThreadsPruned",
    "WritesSaved",
]
