"""What the metric listeners record, written once for Prometheus and OpenTelemetry.

:func:`steps` turns an event into ``(metric, value field, labels)`` triples; each adapter only
creates its instruments from :data:`METRICS` and records them. The triples depend only on the
event's :func:`shape` (type, backend, result, namespace template), a handful per deployment,
so adapters bind them to instruments and label sets once per shape: per event, what is left
is one dict lookup and the instruments' own record calls. Labels stay bounded:
never a thread id, user id or raw namespace. Store namespaces appear only as the template
they match (``users/*/preferences``; ``other`` when none does), and not at all without
templates.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from .events import (
    CheckpointLoaded,
    CheckpointSaved,
    CheckpointsExpired,
    MemoryEvent,
    Namespace,
    NodeCounted,
    StoreDeleted,
    StoreExpired,
    StoreRead,
    StoreWritten,
    WritesSaved,
)

DURATION_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
BYTES_BUCKETS = tuple(float(256 * 4**k) for k in range(10))  # 256 B .. 64 MiB
MESSAGE_BUCKETS = (1.0, 5.0, 10.0, 20.0, 40.0, 60.0, 80.0, 100.0, 150.0, 250.0, 500.0)


@dataclass(frozen=True)
class Metric:
    """One metric: ``name`` is the Prometheus base name (before prefix and suffix)."""

    name: str
    kind: Literal["counter", "histogram"]
    unit: Literal["s", "By", "1"]
    help: str
    labels: tuple[str, ...]
    by_namespace: bool = False
    buckets: tuple[float, ...] = ()


METRICS = {
    m.name: m
    for m in (
        Metric(
            "operation_duration",
            "histogram",
            "s",
            "Duration of memory operations (storage time).",
            ("operation", "backend", "result"),
            by_namespace=True,
            buckets=DURATION_BUCKETS,
        ),
        Metric(
            "store_lookups",
            "counter",
            "1",
            "Store reads (gets and searches) by result: hit, miss, error.",
            ("backend", "result"),
            by_namespace=True,
        ),
        Metric(
            "checkpoint_loads",
            "counter",
            "1",
            "Checkpoint loads (get_tuple) by result: hit, miss, error.",
            ("backend", "result"),
        ),
        Metric(
            "checkpoint",
            "histogram",
            "By",
            "Bytes written per checkpoint (encoded checkpoint, metadata, blobs, list items).",
            ("backend",),
            buckets=BYTES_BUCKETS,
        ),
        Metric(
            "checkpoint_messages",
            "histogram",
            "1",
            "Items in the list channels (messages) of each saved checkpoint.",
            ("backend",),
            buckets=MESSAGE_BUCKETS,
        ),
        Metric(
            "write_failures",
            "counter",
            "1",
            "Failed writes by result: conflict (expected_version) or error.",
            ("operation", "backend", "result"),
            by_namespace=True,
        ),
        Metric(
            "ttl_sweep_deleted",
            "counter",
            "1",
            "Expired threads (kind=checkpoint) and items (kind=store) a sweep deleted.",
            ("kind", "backend"),
        ),
        Metric(
            "injection_scan_refusals",
            "counter",
            "1",
            "Memories the injection scanner refused, on write or on read (stage).",
            ("stage",),
        ),
        Metric(
            "prefetch_hits",
            "counter",
            "1",
            "Turns that took a prefetched store read (minus prefetch_timeouts: answered).",
            (),
        ),
        Metric(
            "prefetch_misses",
            "counter",
            "1",
            "Turns of a prefetching injector that found no prefetched read (or a stale one).",
            (),
        ),
        Metric(
            "prefetch_timeouts",
            "counter",
            "1",
            "Prefetched store reads a turn took that did not answer within its timeout.",
            (),
        ),
        Metric(
            "node_store_timeouts",
            "counter",
            "1",
            "Store reads of memory nodes (prefetched or not) that timed out.",
            (),
        ),
    )
}

_WRITES = (CheckpointSaved, WritesSaved, StoreWritten, StoreDeleted)
_SWEPT = (CheckpointsExpired, StoreExpired)
_NODE_COUNTERS = {
    "prefetch_used": "prefetch_hits",
    "prefetch_missed": "prefetch_misses",
    "prefetch_timeouts": "prefetch_timeouts",
    "store_timeouts": "node_store_timeouts",
}
_REFUSALS = {"refused": "write", "unsafe_fields": "read", "unsafe_results": "read"}


class NamespaceTemplates:
    """Maps a namespace to the first template it matches (``*`` matches one label)."""

    def __init__(self, templates: Sequence[str]) -> None:
        if isinstance(templates, str):
            raise TypeError("namespace_templates takes a list of templates, not one string")
        self.templates = [(t, tuple(t.split("/"))) for t in templates]

    def __call__(self, namespace: Namespace) -> str:
        for text, parts in self.templates:
            if len(parts) == len(namespace) and all(
                p in ("*", label) for p, label in zip(parts, namespace, strict=True)
            ):
                return text
        return "other"


Step = tuple[str, str | None, tuple[str, ...]]
"""One measurement: the metric, the event field holding its value (None: 1), its labels."""

Shape = tuple[object, ...]
"""What decides an event's measurements: its type, backend, result, namespace template
(and, for sweeps, whether they deleted anything; for node events, the counter)."""


def shape(event: MemoryEvent, templates: NamespaceTemplates | None) -> Shape:
    """The key under which :func:`steps` is the same for every event: listeners bind
    their instruments and label sets once per shape, then only read the values."""
    kind = type(event)
    if isinstance(event, NodeCounted):
        return (kind, event.counter)
    swept = bool(event.deleted) if isinstance(event, _SWEPT) else None
    return (kind, event.backend, event.result, _template(event, templates), swept)


def _template(event: MemoryEvent, templates: NamespaceTemplates | None) -> tuple[str, ...]:
    """``(template,)`` of the event's namespace (``""``: it has none); ``()`` without templates."""
    if templates is None:
        return ()
    namespace = getattr(event, "namespace", None)
    return (templates(namespace) if namespace is not None else "",)


def steps(event: MemoryEvent, templates: NamespaceTemplates | None) -> tuple[Step, ...]:
    """The measurements of every event of ``event``'s :func:`shape`; label values follow
    each metric's ``labels``, then the namespace template when ``templates`` is set and
    the metric is ``by_namespace`` (``""`` for events without a namespace)."""
    if isinstance(event, NodeCounted):
        if event.counter in _REFUSALS:
            return (("injection_scan_refusals", "n", (_REFUSALS[event.counter],)),)
        if event.counter in _NODE_COUNTERS:
            return ((_NODE_COUNTERS[event.counter], "n", ()),)
        return ()
    result, backend = event.result, event.backend
    ns = _template(event, templates)
    found: list[Step] = [("operation_duration", "duration", (event.name, backend, result, *ns))]
    if isinstance(event, StoreRead):
        found.append(("store_lookups", None, (backend, result, *ns)))
    elif isinstance(event, CheckpointLoaded):
        found.append(("checkpoint_loads", None, (backend, result)))
    elif isinstance(event, _WRITES) and event.error is not None:
        found.append(("write_failures", None, (event.name, backend, result, *ns)))
    elif isinstance(event, CheckpointSaved):
        found.append(("checkpoint", "bytes_written", (backend,)))
        found.append(("checkpoint_messages", "message_count", (backend,)))
    elif isinstance(event, _SWEPT) and event.deleted:
        found.append(("ttl_sweep_deleted", "deleted", (event.kind, backend)))
    return tuple(found)


__all__ = ["METRICS", "Metric", "NamespaceTemplates", "Shape", "Step", "shape", "steps"]
