"""What metrics cost a chat turn: p50 with no listener, with Prometheus, with OpenTelemetry.

``python -m benchmarks.observability --pg URL --redis URL [--turns N] [--rounds R]``

One saver per backend (PostgreSQL, Redis, SQLite) on storage of its own; the same
one-node chat graph as ``benchmarks.threads``. Each round runs ``--turns`` turns on fresh
threads in every mode, the modes alternating within the round (off, prometheus, otel,
then again), so slow drift of the machine hits all modes alike. Modes:

- ``off``: no listener (the shipped default: the plans run unwrapped);
- ``prometheus``: a :class:`PrometheusListener` on a registry of its own;
- ``otel``: an :class:`OpenTelemetryListener` on the real SDK (batch span processor, as in
  production, into an in-memory exporter; in-memory metric reader).

Reports p50 per mode and the overhead against ``off`` (goal: <= 3%).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .targets import check_pg_url, check_redis_url
from .threads import _chat_graph, _seed_message, _turn_saver

MODES = ("off", "prometheus", "otel")


def _listeners() -> dict[str, Callable[[], Any]]:
    def prometheus() -> Any:
        from prometheus_client import CollectorRegistry

        from langgraph_memory_plus.observability.prometheus import PrometheusListener

        return PrometheusListener(registry=CollectorRegistry())

    def otel() -> Any:
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import InMemoryMetricReader
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

        from langgraph_memory_plus.observability.otel import OpenTelemetryListener

        tracer = TracerProvider()
        tracer.add_span_processor(BatchSpanProcessor(InMemorySpanExporter()))
        meter = MeterProvider(metric_readers=[InMemoryMetricReader()])
        return OpenTelemetryListener(tracer_provider=tracer, meter_provider=meter)

    return {"prometheus": prometheus, "otel": otel}


def backend_row(backend: str, url: str, turns: int, rounds: int) -> dict[str, Any]:
    import langgraph_memory_plus as lgmp

    made = _listeners()
    listeners = {mode: made[mode]() for mode in made}
    times: dict[str, list[float]] = {mode: [] for mode in MODES}
    with _turn_saver(lgmp, backend, url) as saver:
        graph = _chat_graph().compile(checkpointer=saver)
        for r in range(rounds):
            order = MODES if r % 2 == 0 else tuple(reversed(MODES))
            for mode in order:
                if mode != "off":
                    saver.add_listener(listeners[mode])
                config = {"configurable": {"thread_id": f"obs-{mode}-{r}"}}
                graph.invoke({"messages": [_seed_message(0)]}, config)  # thread setup
                for n in range(turns):
                    message = _seed_message(r * 10_000 + n + 1)
                    start = time.perf_counter()
                    graph.invoke({"messages": [message]}, config)
                    times[mode].append(time.perf_counter() - start)
                if mode != "off":
                    saver.remove_listener(listeners[mode])
        assert saver.listener_errors == 0
    p50 = {mode: statistics.median(values) * 1000 for mode, values in times.items()}
    row: dict[str, Any] = {"backend": backend, "turns": turns * rounds}
    for mode in MODES:
        row[f"{mode}_p50_ms"] = round(p50[mode], 3)
    for mode in MODES[1:]:
        row[f"{mode}_overhead_pct"] = round((p50[mode] / p50["off"] - 1) * 100, 2)
    return row


def micro_row(reps: int) -> dict[str, Any]:
    """Per-event cost of each listener and of the no-listener path, in microseconds: the
    turn p50s above are as noisy as the machine, these are not. ``events/turn`` is how
    many events one chat turn emits (counted on SQLite)."""
    import tempfile

    import langgraph_memory_plus as lgmp
    from langgraph_memory_plus.observability import CheckpointSaved

    event = CheckpointSaved(
        backend="sqlite",
        duration=0.001,
        thread_id="t",
        checkpoint_ns="",
        checkpoint_id="c",
        bytes_written=2048,
        message_count=12,
    )
    row: dict[str, Any] = {}
    for mode, make in _listeners().items():
        listener = make()
        start = time.perf_counter()
        for _ in range(reps):
            listener(event)
        row[f"{mode}_us_per_event"] = round((time.perf_counter() - start) / reps * 1e6, 2)
    with (
        tempfile.TemporaryDirectory() as tmp,
        lgmp.SqliteSaver.from_conn_string(f"{tmp}/m.db") as saver,
    ):
        saver.setup()
        start = time.perf_counter()
        for _ in range(reps):
            saver._observed(iter(()), lambda *_: [])  # what every call pays with none
        row["no_listener_us_per_call"] = round((time.perf_counter() - start) / reps * 1e6, 3)
        seen: list[Any] = []
        saver.add_listener(seen.append)
        graph = _chat_graph().compile(checkpointer=saver)
        graph.invoke({"messages": [_seed_message(0)]}, {"configurable": {"thread_id": "m"}})
        seen.clear()
        graph.invoke({"messages": [_seed_message(1)]}, {"configurable": {"thread_id": "m"}})
        row["events_per_turn"] = len(seen)
    return row


def _table(rows: list[dict[str, Any]]) -> str:
    head = (
        "| backend | turns | off p50 ms | prometheus p50 ms | overhead | otel p50 ms | overhead |"
    )
    lines = [head, "|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(
            f"| {r['backend']} | {r['turns']} | {r['off_p50_ms']:.3f} | "
            f"{r['prometheus_p50_ms']:.3f} | {r['prometheus_overhead_pct']:+.2f}% | "
            f"{r['otel_p50_ms']:.3f} | {r['otel_overhead_pct']:+.2f}% |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--pg", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--backends", default="postgres,redis,sqlite")
    parser.add_argument("--turns", type=int, default=100, help="turns per mode and round")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    check_pg_url(args.pg)
    check_redis_url(args.redis)
    urls = {"postgres": args.pg, "redis": args.redis, "sqlite": ""}
    rows = []
    for backend in args.backends.split(","):
        row = backend_row(backend, urls[backend], args.turns, args.rounds)
        print(json.dumps(row), file=sys.stderr)
        rows.append(row)
    micro = micro_row(20_000)
    print(_table(rows))
    print()
    print(
        f"Per event: prometheus {micro['prometheus_us_per_event']} us, otel "
        f"{micro['otel_us_per_event']} us; with no listener {micro['no_listener_us_per_call']} "
        f"us per call; {micro['events_per_turn']} events per chat turn."
    )
    if args.json:
        args.json.write_text(json.dumps({"turns": rows, "micro": micro}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
