"""See memory at work: typed events from every saver and store, and metrics on top.

Register a listener (any callable taking a :class:`MemoryEvent`) with ``listeners=[...]``
when opening a saver or store, or later with ``add_listener``. The Prometheus and
OpenTelemetry listeners live in :mod:`.prometheus` and :mod:`.otel` (optional extras,
imported only when you import those modules).
"""

from .core import (
    Listener,
    Observable,
    add_global_listener,
    emit_global,
    has_global_listeners,
    remove_global_listener,
)
from .events import (
    CheckpointLoaded,
    CheckpointSaved,
    CheckpointsExpired,
    CheckpointsListed,
    HistoryLoaded,
    MemoryEvent,
    NodeCounted,
    RunsDeleted,
    StoreDeleted,
    StoreExpired,
    StoreRead,
    StoreWritten,
    ThreadCopied,
    ThreadDeleted,
    ThreadsPruned,
    WritesSaved,
)

__all__ = [
    "CheckpointLoaded",
    "CheckpointSaved",
    "CheckpointsExpired",
    "CheckpointsListed",
    "HistoryLoaded",
    "Listener",
    "MemoryEvent",
    "NodeCounted",
    "Observable",
    "RunsDeleted",
    "StoreDeleted",
    "StoreExpired",
    "StoreRead",
    "StoreWritten",
    "ThreadCopied",
    "ThreadDeleted",
    "ThreadsPruned",
    "WritesSaved",
    "add_global_listener",
    "emit_global",
    "has_global_listeners",
    "remove_global_listener",
]
