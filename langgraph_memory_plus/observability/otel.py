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

Measurements are handed to the SDK when a reader collects, not during the operation: the
SDK's own ``Counter.add`` / ``Histogram.record`` (40k-80k CPU instructions each, 17 a chat
turn) were most of what metrics added to a turn. See :class:`OpenTelemetryListener`.
"""

from __future__ import annotations

import itertools
import os
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from operator import attrgetter
from typing import Any

try:
    from opentelemetry import context as otel_context
    from opentelemetry import metrics as otel_metrics
    from opentelemetry import trace
    from opentelemetry.metrics import CallbackOptions, Meter, Observation, get_meter
    from opentelemetry.trace import SpanKind, Status, StatusCode
except ImportError as exc:  # name the extra, not only the missing module
    raise ImportError(
        f"langgraph_memory_plus.observability.otel needs opentelemetry-api ({exc}): "
        "pip install 'langgraph-memory-plus[otel]'"
    ) from exc

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

MAX_PENDING = 16_384
"""Events a listener holds for the next collection by default. A pending event is its
shape's (shared) bindings and its few numbers: ~140 bytes (tracemalloc, chat-turn events),
~2.2 MiB when full. That is 2,048 chat turns (8 events each) per collection, 34 turns a
second at the SDK's default 60 s export interval; past it each new event first records
the oldest one, at the cost of recording inline."""

_Counted = tuple[Callable[..., None], int | None, dict[str, str]]
"""A counter's ``add``, where its amount is in the event's values (None: 1), and its
attributes."""
_Recorded = tuple[Callable[..., None], int, dict[str, str]]
"""A histogram's ``record``, where its value is in the event's values, its attributes."""

_NO_SPAN = otel_context.Context()
"""The context deferred measurements are recorded in: the operation's span is long gone,
and the collecting thread's current span (if any) is not theirs, so no exemplar."""

_DRAINS = itertools.count()
"""Numbers the listeners' drain instruments: the SDK keeps only the first callback of an
instrument name on a meter, so every listener's needs a name of its own."""


def _no_values(_: MemoryEvent) -> tuple[()]:
    """The values of a shape with no measurements (a node counter no metric counts)."""
    return ()


class _Bound:
    """One event shape's measurements, bound to instruments and attribute dicts (never
    mutated) once: ``values`` reads the event's numbers (one C call, a scalar when there
    is one field, else a tuple), so a pending event keeps those alive, never the event (a
    search's query text, a prune's thread ids)."""

    __slots__ = ("counters", "histograms", "single", "values")

    def __init__(
        self, steps: Iterable[tuple[Callable[..., None], bool, str | None, dict[str, str]]]
    ):
        fields: list[str] = []
        counters: list[_Counted] = []
        histograms: list[_Recorded] = []
        for record, is_counter, field, attrs in steps:
            if field is not None and field not in fields:
                fields.append(field)
            index = None if field is None else fields.index(field)
            if is_counter:
                counters.append((record, index, attrs))
            else:
                assert index is not None  # steps() gives every histogram a value field
                histograms.append((record, index, attrs))
        self.counters = tuple(counters)
        self.histograms = tuple(histograms)
        self.single = len(fields) == 1
        self.values: Callable[[MemoryEvent], Any] = attrgetter(*fields) if fields else _no_values

    def record(self, values: Any) -> None:
        """Hand one event's measurements to the SDK now."""
        got = self.observe(values)
        for add, at, labels in self.counters:
            add(1 if at is None else got[at], labels)

    def observe(self, values: Any) -> Any:
        """Record the histograms' values of one event; returns its values as a tuple
        (what the counters read their amounts from)."""
        got = (values,) if self.single else values
        for record, index, attrs in self.histograms:
            record(got[index], attrs)
        return got


class _Pending:
    """Events measured but not yet handed to the SDK, oldest first.

    ``deque.append`` and ``popleft`` are atomic, so recording threads and a collecting
    thread share it without a lock: every entry is popped exactly once, by a drain or by
    an append finding the queue full. Held by the drain instrument's callback, not by the
    listener, so what a dropped listener left pending still reaches the next collection.
    """

    __slots__ = ("entries", "limit")

    def __init__(self, limit: int) -> None:
        self.entries: deque[tuple[_Bound, Any]] = deque()
        self.limit = limit

    def add(self, bound: _Bound, values: Any) -> None:
        entries = self.entries
        if len(entries) >= self.limit:
            self.drain(1)  # amortized: never more than one old event per new one
        entries.append((bound, values))

    def drain(self, count: int) -> None:
        """Record the oldest ``count`` entries (fewer if another thread took some).

        Histograms get every value; each bound counter (one instrument and attribute set)
        gets one ``add`` of its total, which is exact and saves the SDK calls of repeated
        increments.
        """
        entries = self.entries
        totals: dict[int, tuple[_Counted, float]] = {}  # the step is kept: its id stays unique
        token = otel_context.attach(_NO_SPAN)
        try:
            for _ in range(count):
                try:
                    bound, values = entries.popleft()
                except IndexError:
                    break
                got = bound.observe(values)
                for step in bound.counters:
                    amount = 1 if step[1] is None else got[step[1]]
                    total = totals.get(id(step))
                    totals[id(step)] = (step, amount if total is None else total[1] + amount)
            for (record, _, attrs), amount in totals.values():
                record(amount, attrs)
        finally:
            otel_context.detach(token)

    def observe(self, _: CallbackOptions) -> Iterable[Observation]:
        """The drain instrument's callback: the SDK runs callbacks before it reads the
        synchronous instruments, so what is drained here is in this collection. Drains
        what was pending when it started (recording threads cannot keep it going), and
        observes nothing, so the instrument itself is never exported."""
        self.drain(len(self.entries))
        return []


class OpenTelemetryListener(WatchesNodes):
    """Records every event it is handed as a span and as metrics.

    Measurements are handed to the SDK when a reader collects (periodic export, a
    ``force_flush``, a shutdown that exports, ``InMemoryMetricReader.get_metrics_data``),
    the way the SDK's ``BatchSpanProcessor`` moves span export off the operation: each
    event only queues its few numbers, and an observable instrument's callback, which the
    SDK runs at the start of every collection, records them into the counters and
    histograms (every reader of the provider sees each exactly once). The SDK's own record
    calls were most of what metrics cost an operation; they now run on the collecting
    thread, in one loop. What changes: measurement timestamps are the collection's, and no
    exemplars (they would need the operation's span as the current one). An event with an
    ``error`` is recorded at once, so its traceback is not kept alive.

    Args:
        tracer_provider / meter_provider: the providers to use (the global ones by default).
        store_id: ``gen_ai.memory.store.id`` for store spans (left out by default).
        namespace_templates: as for :class:`~.prometheus.PrometheusListener`.
        traces / metrics: turn either off (both on by default); off costs nothing per
            event. An unsampled span costs only its creation: attributes are built and
            set only on a recording span (so samplers do not see them).
        deferred: ``False`` records every measurement during the operation, as the SDK's
            instruments do when called directly: for exemplars (the SDK's default
            trace-based filter attaches the current sampled span), or for an SDK whose
            readers do not run callbacks before reading synchronous instruments.
        max_pending: at most this many events wait for a collection (see
            :data:`MAX_PENDING`); when full, each new event first records the oldest one,
            so nothing is lost and memory stays bounded even with no reader (the API's
            no-op provider).
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
        deferred: bool = True,
        max_pending: int = MAX_PENDING,
    ) -> None:
        if max_pending < 1:
            raise ValueError("max_pending must be at least 1")
        self._tracer = trace.get_tracer(_SCOPE, tracer_provider=tracer_provider) if traces else None
        self._meter = get_meter(_SCOPE, meter_provider=meter_provider)
        self._store_id = store_id
        self._templates = (
            None if namespace_templates is None else NamespaceTemplates(namespace_templates)
        )
        self._record: dict[str, tuple[Callable[..., None], tuple[str, ...]]] = {}
        self._pending: _Pending | None = None
        self._approvals: PendingApprovals | None = None
        if metrics:
            self._record = {
                name: (self._create(self._meter, m), self._label_names(m))
                for name, m in METRICS.items()
            }
            if deferred:
                self._pending = _Pending(max_pending)
                self._meter.create_observable_gauge(
                    f"lgmp.listener.deferred.{next(_DRAINS)}",
                    callbacks=[self._pending.observe],
                    description="Hands a listener's pending measurements to the SDK at "
                    "collection; observes nothing, so it is never exported.",
                )
        self._bound: dict[Shape, _Bound] = {}
        self._static: _Static = {}

    @property
    def pending(self) -> int:
        """Events measured and not yet handed to the SDK (0 with ``deferred=False``)."""
        return 0 if self._pending is None else len(self._pending.entries)

    def flush(self) -> None:
        """Hand every pending measurement to the SDK now, on this thread (a collection
        does it by itself: this is for choosing when that cost is paid)."""
        if self._pending is not None:
            self._pending.drain(len(self._pending.entries))

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
            if self._pending is None or event.error is not None:
                bound.record(bound.values(event))
            else:
                self._pending.add(bound, bound.values(event))
        if self._tracer is not None and not isinstance(event, NodeCounted):
            self._span(self._tracer, event)

    def _bind(self, key: Shape, event: MemoryEvent) -> _Bound:
        """The instruments and attribute dicts of ``event``'s shape."""
        bound = _Bound(
            (record, METRICS[name].kind == "counter", field, dict(zip(names, labels, strict=True)))
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
        first = self._approvals is None
        self._approvals = gauge  # a second call swaps the queue: still one instrument

        def observe(_: CallbackOptions) -> Iterable[Observation]:
            value = self._approvals.pending() if self._approvals is not None else None
            return [] if value is None else [Observation(value)]

        if first:
            self._meter.create_observable_gauge(
                "lgmp.approvals.pending", callbacks=[observe], unit="{approval}", description=HELP
            )
        return gauge


__all__ = [
    "CAPTURE_CONTENT",
    "MAX_PENDING",
    "OpenTelemetryListener",
    "attributes",
    "capture_content",
]
