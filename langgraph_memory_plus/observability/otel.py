"""OpenTelemetry spans and metrics for savers, stores and memory nodes (extra ``otel``).

Uses only ``opentelemetry-api``: with no SDK configured by the application every call is
the API's no-op. ``OpenTelemetryListener()`` is a listener (``listeners=[...]`` or
``add_listener``); :meth:`watch_nodes` adds the memory nodes' counters.

Each operation becomes one CLIENT span, a child of whatever span is current where the
operation ran, backdated to the operation's start. Attributes follow the database
conventions (``db.system`` / ``db.system.name``, ``db.operation.name``) and the GenAI
memory ones: ``gen_ai.operation.name`` (``search_memory``, ``update_memory``,
``delete_memory`` for store items), ``gen_ai.conversation.id`` (the thread id),
``gen_ai.memory.store.id``, ``gen_ai.memory.record.id`` (the item key),
``gen_ai.memory.scope`` (``session`` for checkpoints, ``user`` for store items). The search
text (``gen_ai.memory.query.text``) is content: it is recorded only when
``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`` is true.

The metrics are those of :mod:`.metrics` under ``lgmp.`` names with UCUM units (``s``,
``By``). Raw queries are left to the psycopg and redis-py instrumentations.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from opentelemetry import metrics as otel_metrics
from opentelemetry import trace
from opentelemetry.metrics import CallbackOptions, Meter, Observation, get_meter
from opentelemetry.trace import SpanKind, Status, StatusCode

from .approvals import DEFAULT_MAX_AGE, HELP, CountsPending, PendingApprovals
from .core import WatchesNodes
from .events import (
    CheckpointLoaded,
    CheckpointSaved,
    CheckpointsExpired,
    CheckpointsListed,
    HistoryLoaded,
    MemoryEvent,
    NamespaceDeleted,
    NamespacesListed,
    NodeCounted,
    RunsDeleted,
    StoreCounted,
    StoreDeleted,
    StoreExpired,
    StoreRead,
    StoreWritten,
    ThreadCopied,
    ThreadDeleted,
    ThreadsPruned,
    WritesSaved,
)
from .metrics import METRICS, Metric, NamespaceTemplates, Shape, shape, steps

_SCOPE = "langgraph_memory_plus"

CAPTURE_CONTENT = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"

_DB_OPERATION = {
    CheckpointLoaded: "get_tuple",
    CheckpointSaved: "put",
    WritesSaved: "put_writes",
    ThreadDeleted: "delete_thread",
    CheckpointsListed: "list",
    HistoryLoaded: "get_delta_channel_history",
    RunsDeleted: "delete_for_runs",
    ThreadCopied: "copy_thread",
    ThreadsPruned: "prune",
    CheckpointsExpired: "sweep_expired",
    StoreWritten: "put",
    StoreDeleted: "delete",
    NamespacesListed: "list_namespaces",
    StoreCounted: "count",
    NamespaceDeleted: "delete_namespace",
    StoreExpired: "sweep_ttl",
}
_OTEL_NAMES = {"checkpoint": "checkpoint.size", "checkpoint_messages": "checkpoint.messages"}
_UNITS = {"s": "s", "By": "By", "1": "{operation}"}
_MEMORY_OPERATION = {
    StoreRead: "search_memory",
    StoreWritten: "update_memory",
    StoreDeleted: "delete_memory",
}


def capture_content() -> bool:
    """The standard GenAI content-capture switch (off unless set to ``true``)."""
    return os.environ.get(CAPTURE_CONTENT, "").strip().lower() == "true"


_FIELDS = ("checkpoint_ns", "bytes_written", "message_count", "write_count", "deleted", "count")
_Static = dict[tuple[type[MemoryEvent], str, bool], tuple[tuple[str, Any], ...]]


def _static(event: MemoryEvent, store_id: str | None) -> tuple[tuple[str, Any], ...]:
    """The attributes every event of this type and backend shares (built once each)."""
    attrs: dict[str, Any] = {"db.system": event.backend, "db.system.name": event.backend}
    if isinstance(event, StoreRead):
        attrs["db.operation.name"] = "get" if event.key is not None else "search"
    elif type(event) in _DB_OPERATION:
        attrs["db.operation.name"] = _DB_OPERATION[type(event)]
    if type(event) in _MEMORY_OPERATION:
        attrs["gen_ai.operation.name"] = _MEMORY_OPERATION[type(event)]
        attrs["gen_ai.memory.scope"] = "user"
        if store_id is not None:
            attrs["gen_ai.memory.store.id"] = store_id
    return tuple(attrs.items())


def attributes(
    event: MemoryEvent, store_id: str | None, cache: _Static | None = None
) -> dict[str, Any]:
    """A span's attributes for ``event`` (content only with the capture switch on).

    What depends only on the event's type and backend comes from ``cache`` (filled on
    first use; bounded by the event types times the backends); the rest is per event.
    """
    key = (type(event), event.backend, getattr(event, "key", None) is not None)
    static = None if cache is None else cache.get(key)
    if static is None:
        static = _static(event, store_id)
        if cache is not None:
            cache[key] = static
    attrs = dict(static)
    attrs["lgmp.result"] = event.result
    thread_id = getattr(event, "thread_id", None) or getattr(event, "source_thread_id", None)
    if thread_id is not None:
        attrs["gen_ai.conversation.id"] = thread_id
        attrs["gen_ai.memory.scope"] = "session"
    if isinstance(event, ThreadCopied):
        attrs["lgmp.target_thread_id"] = event.target_thread_id
    item_key = getattr(event, "key", None)
    if item_key is not None:
        attrs["gen_ai.memory.record.id"] = item_key
    for name in _FIELDS:
        value = getattr(event, name, None)
        if value is not None:
            attrs["lgmp.records_count" if name == "count" else f"lgmp.{name}"] = value
    if isinstance(event, StoreRead) and event.query is not None and capture_content():
        attrs["gen_ai.memory.query.text"] = event.query
    if event.error is not None:
        attrs["error.type"] = type(event.error).__qualname__
    return attrs


_BIND_CACHE = 4096
"""Event shapes kept bound; labels are bounded by design, this only caps a mistake."""

_Bound = tuple[tuple[Callable[..., None], str | None, dict[str, str]], ...]
"""Per event shape: each instrument's record call, the event field it records (None: 1)
and its attributes."""


class OpenTelemetryListener(WatchesNodes):
    """Records every event it is handed as a span and as metrics.

    Args:
        tracer_provider / meter_provider: the providers to use (the global ones by default).
        store_id: ``gen_ai.memory.store.id`` for store spans (left out by default).
        namespace_templates: as for :class:`~.prometheus.PrometheusListener`.
        traces / metrics: turn either off (both on by default); off costs nothing per
            event. An unsampled span costs only its creation: attributes are built and
            set only on a recording span (so samplers do not see them).
    """

    def __init__(
        self,
        *,
        tracer_provider: trace.TracerProvider | None = None,
        meter_provider: otel_metrics.MeterProvider | None = None,
        store_id: str | None = None,
        namespace_templates: Sequence[str] | None = None,
        traces: bool = True,
        metrics: bool = True,
    ) -> None:
        self._tracer = trace.get_tracer(_SCOPE, tracer_provider=tracer_provider) if traces else None
        self._meter = get_meter(_SCOPE, meter_provider=meter_provider)
        self._store_id = store_id
        self._templates = (
            None if namespace_templates is None else NamespaceTemplates(namespace_templates)
        )
        self._record: dict[str, tuple[Callable[..., None], tuple[str, ...]]] = {}
        if metrics:
            self._record = {
                name: (self._create(self._meter, m), self._label_names(m))
                for name, m in METRICS.items()
            }
        self._bound: dict[Shape, _Bound] = {}
        self._static: _Static = {}

    def _create(self, meter: Meter, metric: Metric) -> Callable[..., None]:
        name = "lgmp." + _OTEL_NAMES.get(metric.name, metric.name.replace("_", "."))
        unit = _UNITS[metric.unit]
        if metric.kind == "counter":
            return meter.create_counter(name, unit=unit, description=metric.help).add
        return meter.create_histogram(
            name,
            unit=unit,
            description=metric.help,
            explicit_bucket_boundaries_advisory=list(metric.buckets),
        ).record

    def _label_names(self, metric: Metric) -> tuple[str, ...]:
        names = metric.labels
        if metric.by_namespace and self._templates is not None:
            names = (*names, "namespace")
        return names

    def __call__(self, event: MemoryEvent) -> None:
        if self._record:
            key = shape(event, self._templates)
            bound = self._bound.get(key)
            if bound is None:
                bound = self._bind(key, event)
            for record, field, attrs in bound:
                record(1 if field is None else getattr(event, field), attrs)
        if self._tracer is not None and not isinstance(event, NodeCounted):
            self._span(self._tracer, event)

    def _bind(self, key: Shape, event: MemoryEvent) -> _Bound:
        """The instruments and attribute dicts (never mutated) of ``event``'s shape."""
        bound = tuple(
            (record, field, dict(zip(names, labels, strict=True)))
            for name, field, labels in steps(event, self._templates)
            for record, names in (self._record[name],)
        )
        if len(self._bound) < _BIND_CACHE:
            self._bound[key] = bound
        return bound

    def _span(self, tracer: trace.Tracer, event: MemoryEvent) -> None:
        end = time.time_ns()
        operation = _MEMORY_OPERATION.get(type(event)) or _DB_OPERATION.get(type(event))
        span = tracer.start_span(
            f"{operation or event.name} {event.backend}",
            kind=SpanKind.CLIENT,
            start_time=end - int(event.duration * 1e9),
        )
        if span.is_recording():
            span.set_attributes(attributes(event, self._store_id, self._static))
            if event.error is not None:
                span.record_exception(event.error)
                span.set_status(Status(StatusCode.ERROR, type(event.error).__qualname__))
        span.end(end_time=end)

    def watch_approvals(
        self, approvals: CountsPending, *, max_age: float = DEFAULT_MAX_AGE
    ) -> PendingApprovals:
        """Observe ``lgmp.approvals.pending`` (an observable gauge): the queue's pending
        count, asked when the reader collects and reused for ``max_age`` seconds (see
        :mod:`.approvals` for why). On the meter provider even with ``metrics=False``."""
        gauge = PendingApprovals(approvals, max_age=max_age)

        def observe(_: CallbackOptions) -> Iterable[Observation]:
            value = gauge.pending()
            return [] if value is None else [Observation(value)]

        self._meter.create_observable_gauge(
            "lgmp.approvals.pending", callbacks=[observe], unit="{approval}", description=HELP
        )
        return gauge


__all__ = ["CAPTURE_CONTENT", "OpenTelemetryListener", "attributes", "capture_content"]
