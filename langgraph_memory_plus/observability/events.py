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
class CheckpointLoaded(MemoryEvent):
    """``get_tuple``: ``checkpoint_id`` is the one asked for (None: the latest)."""

    kind = "checkpoint"
    operation = "loaded"
    thread_id: str
    checkpoint_ns: str
    checkpoint_id: str | None
    hit: bool = False

    def _success(self) -> Result:
        return "hit" if self.hit else "miss"


@dataclass(frozen=True, kw_only=True)
class CheckpointSaved(MemoryEvent):
    """``put``: ``bytes_written`` sums the encoded checkpoint, metadata, blobs and list
    items; ``message_count`` the items of the checkpoint's list channels (``messages``)."""

    kind = "checkpoint"
    operation = "saved"
    thread_id: str
    checkpoint_ns: str
    checkpoint_id: str
    bytes_written: int
    message_count: int


@dataclass(frozen=True, kw_only=True)
class WritesSaved(MemoryEvent):
    """``put_writes``: a task's pending writes."""

    kind = "checkpoint"
    operation = "writes_saved"
    thread_id: str
    checkpoint_ns: str
    checkpoint_id: str | None
    task_id: str
    write_count: int
    bytes_written: int


@dataclass(frozen=True, kw_only=True)
class ThreadDeleted(MemoryEvent):
    kind = "checkpoint"
    operation = "deleted"
    thread_id: str


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
class CheckpointsExpired(MemoryEvent):
    """One batch of ``sweep_expired``: ``deleted`` threads."""

    kind = "checkpoint"
    operation = "expired"
    deleted: int


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
class StoreWritten(MemoryEvent):
    """A put; ``bytes_written`` is the value's size as stored JSON."""

    kind = "store"
    operation = "written"
    namespace: Namespace
    key: str
    bytes_written: int
    expected_version: int | None = None


@dataclass(frozen=True, kw_only=True)
class StoreDeleted(MemoryEvent):
    kind = "store"
    operation = "deleted"
    namespace: Namespace
    key: str
    expected_version: int | None = None


@dataclass(frozen=True, kw_only=True)
class StoreExpired(MemoryEvent):
    """One batch of ``sweep_ttl``: ``deleted`` items."""

    kind = "store"
    operation = "expired"
    deleted: int


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
    "MemoryEvent",
    "NodeCounted",
    "Result",
    "StoreDeleted",
    "StoreExpired",
    "StoreRead",
    "StoreWritten",
    "ThreadCopied",
    "ThreadDeleted",
    "ThreadsPruned",
    "WritesSaved",
]
