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

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from .approvals import DEFAULT_MAX_AGE, HELP, CountsPending, PendingApprovals
from .core import WatchesNodes
from .events import MemoryEvent
from .metrics import METRICS, NamespaceTemplates, measure
from .metrics import Metric as MemoryMetric

_CHILD_CACHE = 4096
"""Labelled children kept for reuse (labels are bounded; this only caps a mistake)."""

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
        self._children: dict[tuple[str, tuple[str, ...]], Callable[[float], None]] = {}

    def _create(self, prefix: str, metric: MemoryMetric, registry: CollectorRegistry) -> Any:
        labels = metric.labels
        if metric.by_namespace and self._templates is not None:
            labels = (*labels, "namespace")
        name = f"{prefix}{metric.name}{_SUFFIX[metric.unit]}"
        if metric.kind == "counter":  # prometheus_client adds the ``_total``
            return Counter(name, metric.help, labels, registry=registry)
        return Histogram(name, metric.help, labels, registry=registry, buckets=metric.buckets)

    def __call__(self, event: MemoryEvent) -> None:
        for name, value, labels in measure(event, self._templates):
            key = (name, labels)
            record = self._children.get(key)
            if record is None:
                record = self._child(name, labels)
            record(value)

    def _child(self, name: str, labels: tuple[str, ...]) -> Callable[[float], None]:
        """The ``inc`` / ``observe`` of one labelled child, looked up once: ``labels()``
        validates and locks on every call, the child itself stays the same."""
        metric = self.metrics[name]
        child = metric.labels(*labels) if labels else metric
        counter = isinstance(metric, Counter)
        record: Callable[[float], None] = child.inc if counter else child.observe
        if len(self._children) < _CHILD_CACHE:
            self._children[(name, labels)] = record
        return record

    def watch_approvals(
        self, approvals: CountsPending, *, max_age: float = DEFAULT_MAX_AGE
    ) -> PendingApprovals:
        """Expose ``<prefix>pending_approvals``: the queue's pending count, asked when
        scraped and reused for ``max_age`` seconds (see :mod:`.approvals` for why)."""
        gauge = PendingApprovals(approvals, max_age=max_age)
        self._registry.register(_PendingCollector(f"{self._prefix}pending_approvals", gauge))
        return gauge


__all__ = ["NamespaceTemplates", "PrometheusListener"]


class _PendingCollector(Collector):
    """One gauge sample per scrape, from :class:`PendingApprovals` (none before a count)."""

    def __init__(self, name: str, gauge: PendingApprovals) -> None:
        self._name, self._gauge = name, gauge

    def describe(self) -> Iterable[Metric]:
        return [GaugeMetricFamily(self._name, HELP)]  # registering must not count

    def collect(self) -> Iterable[Metric]:
        family = GaugeMetricFamily(self._name, HELP)
        value = self._gauge.pending()
        if value is not None:
            family.add_metric([], value)
        return [family]
