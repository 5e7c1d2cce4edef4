"""Prometheus metrics for savers, stores and memory nodes (extra ``prometheus``).

``PrometheusListener(registry=...)`` is a listener: pass it in ``listeners=[...]`` (or
``add_listener``) on every saver and store to watch, and call :meth:`watch_nodes` for the
memory nodes' counters (injection-scan refusals, prefetch hits, store timeouts). Names use
base units and suffixes (``_seconds``, ``_bytes``, ``_total``) behind one prefix.

Labels stay bounded: never a thread id, user id or raw namespace. Store namespaces appear
only as the template they match (``namespace_templates=["users/*/preferences"]``; an
unmatched namespace is ``other``) and are left out when no template is given.
"""

from __future__ import annotations

from collections.abc import Sequence

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Histogram

from .core import add_global_listener, remove_global_listener
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
BYTES_BUCKETS = tuple(float(4**k * 256) for k in range(10))  # 256 B .. 64 MiB
MESSAGE_BUCKETS = (1.0, 5.0, 10.0, 20.0, 40.0, 60.0, 80.0, 100.0, 150.0, 250.0, 500.0)

_WRITES = (CheckpointSaved, WritesSaved, StoreWritten, StoreDeleted)
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


class PrometheusListener:
    """Records every event it is handed as Prometheus metrics.

    Args:
        registry: where the metrics are registered (the global ``REGISTRY`` by default);
            one listener per registry and prefix.
        prefix: put before every metric name.
        namespace_templates: label store metrics with the matching template; without
            templates the namespace label is left out.
    """

    def __init__(
        self,
        *,
        registry: CollectorRegistry | None = None,
        prefix: str = "lgmp_",
        namespace_templates: Sequence[str] | None = None,
    ) -> None:
        registry = REGISTRY if registry is None else registry
        self._template = (
            None if namespace_templates is None else NamespaceTemplates(namespace_templates)
        )
        ns = ("namespace",) if self._template is not None else ()
        p = prefix
        self.duration = Histogram(
            f"{p}operation_duration_seconds",
            "Duration of memory operations (storage time).",
            ("operation", "backend", "result", *ns),
            registry=registry,
            buckets=DURATION_BUCKETS,
        )
        self.store_lookups = Counter(
            f"{p}store_lookups",
            "Store reads (gets and searches) by result: hit, miss, error.",
            ("backend", "result", *ns),
            registry=registry,
        )
        self.checkpoint_loads = Counter(
            f"{p}checkpoint_loads",
            "Checkpoint loads (get_tuple) by result: hit, miss, error.",
            ("backend", "result"),
            registry=registry,
        )
        self.checkpoint_bytes = Histogram(
            f"{p}checkpoint_bytes",
            "Bytes written per checkpoint (encoded checkpoint, metadata, blobs, list items).",
            ("backend",),
            registry=registry,
            buckets=BYTES_BUCKETS,
        )
        self.checkpoint_messages = Histogram(
            f"{p}checkpoint_messages",
            "Items in the list channels (messages) of each saved checkpoint.",
            ("backend",),
            registry=registry,
            buckets=MESSAGE_BUCKETS,
        )
        self.write_failures = Counter(
            f"{p}write_failures",
            "Failed writes by result: conflict (expected_version) or error.",
            ("operation", "backend", "result", *ns),
            registry=registry,
        )
        self.ttl_deleted = Counter(
            f"{p}ttl_sweep_deleted",
            "Expired threads (kind=checkpoint) and items (kind=store) a sweep deleted.",
            ("kind", "backend"),
            registry=registry,
        )
        self.scan_refusals = Counter(
            f"{p}injection_scan_refusals",
            "Memories the injection scanner refused, on write or on read.",
            ("stage",),
            registry=registry,
        )
        self.prefetch_hits = Counter(
            f"{p}prefetch_hits",
            "Prefetched store reads that answered a model call.",
            registry=registry,
        )
        self.node_timeouts = Counter(
            f"{p}node_store_timeouts",
            "Store reads of memory nodes (prefetched or not) that timed out.",
            registry=registry,
        )

    def _ns(self, namespace: Namespace) -> tuple[str, ...]:
        return () if self._template is None else (self._template(namespace),)

    def __call__(self, event: MemoryEvent) -> None:
        if isinstance(event, NodeCounted):
            self._node(event)
            return
        result = event.result
        ns: tuple[str, ...] = ()
        if isinstance(event, (StoreRead, StoreWritten, StoreDeleted)):
            ns = self._ns(event.namespace)
        elif self._template is not None:
            ns = ("",)
        self.duration.labels(event.name, event.backend, result, *ns).observe(event.duration)
        if isinstance(event, StoreRead):
            self.store_lookups.labels(event.backend, result, *ns).inc()
        elif isinstance(event, CheckpointLoaded):
            self.checkpoint_loads.labels(event.backend, result).inc()
        elif isinstance(event, _WRITES) and event.error is not None:
            self.write_failures.labels(event.name, event.backend, result, *ns).inc()
        elif isinstance(event, CheckpointSaved):
            self.checkpoint_bytes.labels(event.backend).observe(event.bytes_written)
            self.checkpoint_messages.labels(event.backend).observe(event.message_count)
        elif isinstance(event, (CheckpointsExpired, StoreExpired)) and event.deleted:
            self.ttl_deleted.labels(event.kind, event.backend).inc(event.deleted)

    def _node(self, event: NodeCounted) -> None:
        if event.counter in _REFUSALS:
            self.scan_refusals.labels(_REFUSALS[event.counter]).inc(event.n)
        elif event.counter == "prefetch_used":
            self.prefetch_hits.inc(event.n)
        elif event.counter == "store_timeouts":
            self.node_timeouts.inc(event.n)

    def watch_nodes(self) -> PrometheusListener:
        """Also count the memory nodes' events (they have no saver to register on)."""
        add_global_listener(self)
        return self

    def unwatch_nodes(self) -> None:
        remove_global_listener(self)


__all__ = ["NamespaceTemplates", "PrometheusListener"]
