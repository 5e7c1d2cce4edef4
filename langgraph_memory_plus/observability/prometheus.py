"""Prometheus metrics for savers, stores and memory nodes (extra ``prometheus``).

``PrometheusListener(registry=...)`` is a listener: pass it in ``listeners=[...]`` (or
``add_listener``) on every saver and store to watch, and call :meth:`watch_nodes` for the
memory nodes' counters (injection-scan refusals, prefetch hits, store timeouts). Names use
base units and suffixes (``_seconds``, ``_bytes``, ``_total``) behind one prefix; the
metrics themselves are listed in :mod:`.metrics`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

try:
    from prometheus_client import REGISTRY, CollectorRegistry, Counter, Histogram
    from prometheus_client.core import GaugeMetricFamily, Metric
    from prometheus_client.registry import Collector
except ImportError as exc:  # name the extra, not only the missing module
    raise ImportError(
        f"langgraph_memory_plus.observability.prometheus needs prometheus_client ({exc}): "
        "pip install 'langgraph-memory-plus[prometheus]'"
    ) from exc

from .approvals import DEFAULT_MAX_AGE, HELP, CountsPending, PendingApprovals
from .core import WatchesNodes
from .events import MemoryEvent
from .metrics import METRICS, NamespaceTemplates, Shape, shape, steps
from .metrics import Metric as MemoryMetric

_BIND_CACHE = 4096
"""Event shapes kept bound (labels are bounded; this only caps a mistake)."""

Recorder = Callable[[float], None]

_SUFFIX = {"s": "_seconds", "By": "_bytes", "1": ""}


class PrometheusListener(WatchesNodes):
    """Records every event it is handed as Prometheus metrics.

    Args:
        registry: where the metrics are registered (the global ``REGISTRY`` by default);
            one listener per registry and prefix.
        prefix: put before every metric name.
        namespace_templates: label store metrics with the template the namespace matches
            (``["users/*/preferences"]``; ``other`` when none does). Without templates the
            namespace label is left out.
    """

    def __init__(
        self,
        *,
        registry: CollectorRegistry | None = None,
        prefix: str = "lgmp_",
        namespace_templates: Sequence[str] | None = None,
    ) -> None:
        registry = REGISTRY if registry is None else registry
        self._registry, self._prefix = registry, prefix
        self._templates = (
            None if namespace_templates is None else NamespaceTemplates(namespace_templates)
        )
        self.metrics = {
            name: self._create(prefix, metric, registry) for name, metric in METRICS.items()
        }
        self._bound: dict[Shape, tuple[tuple[Recorder, str | None], ...]] = {}
        self._pending: _PendingCollector | None = None

    def _create(self, prefix: str, metric: MemoryMetric, registry: CollectorRegistry) -> Any:
        labels = metric.labels
        if metric.by_namespace and self._templates is not None:
            labels = (*labels, "namespace")
        name = f"{prefix}{metric.name}{_SUFFIX[metric.unit]}"
        if metric.kind == "counter":  # prometheus_client adds the ``_total``
            return Counter(name, metric.help, labels, registry=registry)
        return Histogram(name, metric.help, labels, registry=registry, buckets=metric.buckets)

    def __call__(self, event: MemoryEvent) -> None:
        key = shape(event, self._templates)
        bound = self._bound.get(key)
        if bound is None:
            bound = self._bind(key, event)
        for record, field in bound:
            record(1 if field is None else getattr(event, field))

    def _bind(self, key: Shape, event: MemoryEvent) -> tuple[tuple[Recorder, str | None], ...]:
        """The ``inc`` / ``observe`` of each labelled child ``event``'s shape records,
        looked up once: ``labels()`` validates and locks on every call, a child stays."""
        bound = tuple(
            (self._child(name, labels), field)
            for name, field, labels in steps(event, self._templates)
        )
        if len(self._bound) < _BIND_CACHE:
            self._bound[key] = bound
        return bound

    def _child(self, name: str, labels: tuple[str, ...]) -> Recorder:
        metric = self.metrics[name]
        child = metric.labels(*labels) if labels else metric
        record: Recorder = child.inc if isinstance(metric, Counter) else child.observe
        return record

    def watch_approvals(
        self, approvals: CountsPending, *, max_age: float = DEFAULT_MAX_AGE
    ) -> PendingApprovals:
        """Expose ``<prefix>pending_approvals``: the queue's pending count, asked when
        scraped and reused for ``max_age`` seconds (see :mod:`.approvals` for why).

        Idempotent: a second call registers nothing more (a registry refuses a metric name
        twice); the gauge then reads the queue and ``max_age`` of the latest call."""
        gauge = PendingApprovals(approvals, max_age=max_age)
        if self._pending is not None:
            self._pending.gauge = gauge
            return gauge
        self._pending = _PendingCollector(f"{self._prefix}pending_approvals", gauge)
        self._registry.register(self._pending)
        return gauge


__all__ = ["NamespaceTemplates", "PrometheusListener"]


class _PendingCollector(Collector):
    """One gauge sample per scrape, from :class:`PendingApprovals` (none before a count)."""

    def __init__(self, name: str, gauge: PendingApprovals) -> None:
        self._name, self.gauge = name, gauge

    def describe(self) -> Iterable[Metric]:
        return [GaugeMetricFamily(self._name, HELP)]  # registering must not count

    def collect(self) -> Iterable[Metric]:
        family = GaugeMetricFamily(self._name, HELP)
        value = self.gauge.pending()
        if value is not None:
            family.add_metric([], value)
        return [family]
