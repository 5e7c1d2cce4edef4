"""What metrics and traces cost a chat turn: p50 with nothing on, and with each listener.

``python -m benchmarks.observability --pg URL --redis URL [--turns N] [--backends ...]``

One saver per backend (PostgreSQL, Redis, SQLite) on storage of its own, and the two-node
chat graph of :mod:`benchmarks.workloads` (``model`` then ``remember``, ``messages``
reduced by ``add_messages``). Modes:

- ``off``: no listener (the shipped default: the plans run unwrapped);
- ``off_again``: no listener either, on a thread of its own: the control. Its "overhead"
  is what the machine's noise alone makes of two identical modes;
- ``prometheus``: a :class:`PrometheusListener` on a registry of its own;
- ``otel_metrics``: an :class:`OpenTelemetryListener` with ``traces=False`` on the SDK's
  ``MeterProvider`` with an in-memory reader: the default listener, which queues each
  event's numbers and hands them to the SDK when the reader collects. The reader is not
  collected during the timed turns (in production that happens on the reader's schedule,
  on its own thread): one collection after them is timed on its own, and reported per
  turn (``drain``: over the inline listener's collection, which has no queue to drain);
- ``otel_metrics_inline``: the same with ``deferred=False``: every SDK call during the
  operation, as before;
- ``otel_traces``: one with ``metrics=False`` on the SDK's ``TracerProvider`` (batch span
  processor, as in production, into an in-memory exporter).

Every mode has a thread of its own, and the modes take turns one chat turn at a time (the
order rotating), so the drift of a shared machine hits all of them alike. The overhead is
each mode's p50 against ``off``'s in the same run (goal for metrics: <= 3%); ``paired`` is
the median of each turn's time over the ``off`` turn next to it (same thread length, a
few milliseconds apart), which a loaded machine disturbs less.

The turn p50s move with the machine's load; the per-event costs below them do not, so
the report also gives the overhead they predict (events per turn x cost per event, over
``off``'s p50), and the floor the SDK sets for traces: a bare
``tracer.start_as_current_span`` loop with no code of ours.

That prediction runs low: a loop of one listener call keeps its code and data hot, and
runs several times more instructions per nanosecond than a chat turn does. ``--instructions``
measures what the machine's load cannot move: CPU instructions (valgrind's callgrind, one
process per count) inside every saver call, on every thread, per turn over ``off``
(``noop``: a listener that does nothing, i.e. what building and delivering the events
costs), against a whole turn's instructions (a whole process of N turns minus one of none).
The share of a turn's instructions is the overhead to expect on a quiet machine.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any

from langgraph_memory_plus.drivers.plan import Plan
from langgraph_memory_plus.observability.otel import MAX_PENDING

from .targets import check_pg_url, check_redis_url
from .threads import _pg_database
from .workloads import chat_graph, user_message

MODES = ("off", "off_again", "prometheus", "otel_metrics", "otel_metrics_inline", "otel_traces")
COLLECTED = ("otel_metrics", "otel_metrics_inline")
"""The modes whose in-memory reader is collected (once, timed) after the turns."""


@contextmanager
def _turn_saver(lgmp: Any, backend: str, url: str) -> Iterator[Any]:
    """A saver of ``backend`` on storage of its own, removed afterwards."""
    if backend == "postgres":
        with _pg_database(url) as db, lgmp.PostgresSaver.from_conn_string(db) as saver:
            saver.setup()
            yield saver
    elif backend == "sqlite":
        with (
            tempfile.TemporaryDirectory() as tmp,
            lgmp.SqliteSaver.from_conn_string(str(Path(tmp) / "t.db")) as saver,
        ):
            saver.setup()
            yield saver
    else:
        prefix = f"lgmpbo{uuid.uuid4().hex[:8]}"
        with lgmp.RedisSaver.from_conn_string(url, key_prefix=prefix) as saver:
            try:
                yield saver
            finally:
                for key in saver.client.scan_iter(match=f"{prefix}:*", count=5000):
                    saver.client.unlink(key)


def _tracer_provider() -> Any:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    tracer = TracerProvider()
    tracer.add_span_processor(BatchSpanProcessor(InMemorySpanExporter()))
    return tracer


Made = tuple[Any, Callable[[], Any] | None]
"""A mode's listener and, for OTel metrics, its reader's ``collect``."""


def listeners() -> dict[str, Callable[[], Made]]:
    """A fresh listener per mode (each Prometheus one on a registry of its own, each OTel
    one on providers of its own)."""

    def prometheus() -> Made:
        from prometheus_client import CollectorRegistry

        from langgraph_memory_plus.observability.prometheus import PrometheusListener

        return PrometheusListener(registry=CollectorRegistry()), None

    def otel_metrics(deferred: bool) -> Made:
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import InMemoryMetricReader

        from langgraph_memory_plus.observability.otel import OpenTelemetryListener

        reader = InMemoryMetricReader()
        meter = MeterProvider(metric_readers=[reader])
        listener = OpenTelemetryListener(meter_provider=meter, traces=False, deferred=deferred)
        return listener, reader.get_metrics_data

    def otel_traces() -> Made:
        from langgraph_memory_plus.observability.otel import OpenTelemetryListener

        return OpenTelemetryListener(tracer_provider=_tracer_provider(), metrics=False), None

    return {
        "prometheus": prometheus,
        "otel_metrics": partial(otel_metrics, True),
        "otel_metrics_inline": partial(otel_metrics, False),
        "otel_traces": otel_traces,
    }


def backend_row(backend: str, url: str, turns: int) -> dict[str, Any]:
    import langgraph_memory_plus as lgmp

    made = {mode: make() for mode, make in listeners().items()}
    collect = {mode: made[mode][1] for mode in COLLECTED}
    times: dict[str, list[float]] = {mode: [] for mode in MODES}
    with _turn_saver(lgmp, backend, url) as saver:
        graph = chat_graph().compile(checkpointer=saver)
        configs = {m: {"configurable": {"thread_id": f"obs-{m}"}} for m in MODES}
        for mode in MODES:  # thread setup and warm-up, not timed
            graph.invoke({"messages": [user_message(0)]}, configs[mode])
        for n in range(turns):
            shift = n % len(MODES)
            for mode in MODES[shift:] + MODES[:shift]:
                if mode in made:
                    saver.add_listener(made[mode][0])
                start = time.perf_counter()
                graph.invoke({"messages": [user_message(n + 1)]}, configs[mode])
                times[mode].append(time.perf_counter() - start)
                if mode in made:
                    saver.remove_listener(made[mode][0])
        assert saver.listener_errors == 0
        seen: list[Any] = []
        saver.add_listener(seen.append)
        graph.invoke({"messages": [user_message(turns + 1)]}, configs["off"])
    p50 = {mode: statistics.median(values) * 1000 for mode, values in times.items()}
    row: dict[str, Any] = {"backend": backend, "turns": turns, "events_per_turn": len(seen)}
    row["otel_metrics_pending"] = made["otel_metrics"][0].pending  # none collected in the turns
    row.update(_collections(collect, turns, p50["off"]))
    for mode in MODES:
        row[f"{mode}_p50_ms"] = round(p50[mode], 3)
    for mode in MODES[1:]:
        row[f"{mode}_overhead_pct"] = round((p50[mode] / p50["off"] - 1) * 100, 2)
        paired = [on / off for on, off in zip(times[mode], times["off"], strict=True)]
        row[f"{mode}_paired_pct"] = round((statistics.median(paired) - 1) * 100, 2)
    return row


def _timed_ms(call: Callable[[], Any]) -> float:
    start = time.perf_counter()
    call()
    return (time.perf_counter() - start) * 1000


def _collections(
    collect: dict[str, Callable[[], Any] | None], turns: int, off_p50_ms: float
) -> dict[str, float]:
    """One collection of each OTel metrics reader after the turns: the deferred one drains
    every turn's measurements into the SDK, the inline one only reads the SDK's storage.
    The difference, per turn, is what deferring moved onto the collecting thread (the
    inline collection is timed before and after, and the faster kept: a warm baseline
    that makes the drain look no cheaper than it is)."""
    inline, deferred = collect["otel_metrics_inline"], collect["otel_metrics"]
    assert inline is not None and deferred is not None
    before = _timed_ms(inline)
    drained = _timed_ms(deferred)
    baseline = min(before, _timed_ms(inline))
    drain_us = (drained - baseline) * 1000 / turns
    return {
        "otel_metrics_collect_ms": round(drained, 3),
        "otel_metrics_inline_collect_ms": round(baseline, 3),
        "otel_metrics_drain_us_per_turn": round(drain_us, 2),
        "otel_metrics_drain_pct_of_off_p50": round(drain_us / 10 / off_p50_ms, 2),
    }


def _per_call_us(call: Callable[[], Any], reps: int) -> float:
    start = time.perf_counter()
    for _ in range(reps):
        call()
    return round((time.perf_counter() - start) / reps * 1e6, 2)


def _no_events(*_: Any) -> list[Any]:
    return []


def micro_row(reps: int) -> dict[str, Any]:
    """Per-event cost of each listener, of the no-listener path, and of the SDK itself
    (a bare span loop), in microseconds."""
    from langgraph_memory_plus.observability import CheckpointSaved
    from langgraph_memory_plus.observability.core import Observable

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
    for mode, make in listeners().items():
        listener, _ = make()
        call = partial(listener, event)
        call()  # first-use caches
        if mode == "otel_metrics":  # within the bound (past it, each call records one)
            listener.flush()
            calls = min(reps, MAX_PENDING)
            row[f"{mode}_us_per_event"] = _per_call_us(call, calls)
            row["otel_metrics_drain_us_per_event"] = round(
                _timed_ms(listener.flush) * 1000 / calls, 2
            )
        else:
            row[f"{mode}_us_per_event"] = _per_call_us(call, reps)
    owner = Observable()
    owner._init_listeners(None)

    def unobserved() -> Plan[Any, None]:
        return None
        yield

    row["off_us_per_event"] = _per_call_us(lambda: owner._observed(unobserved(), _no_events), reps)
    tracer = _tracer_provider().get_tracer("bare")

    def bare_span() -> None:
        with tracer.start_as_current_span("put sqlite"):
            pass

    row["sdk_bare_span_us"] = _per_call_us(bare_span, reps)
    return row


def _table(rows: list[dict[str, Any]], micro: dict[str, Any]) -> str:
    lines = [
        "| backend | events/turn | mode | p50 ms | vs off: p50 | vs off: paired | predicted |",
        "|---|---:|---|---:|---:|---:|---:|",
    ]
    for r in rows:
        for m in MODES:
            per_event = micro.get(f"{m}_us_per_event", 0.0) if m != "off" else 0.0
            predicted = r["events_per_turn"] * per_event / 10 / r["off_p50_ms"]
            versus = (
                ("", "", "")
                if m == "off"
                else (
                    f"{r[f'{m}_overhead_pct']:+.2f}%",
                    f"{r[f'{m}_paired_pct']:+.2f}%",
                    f"{predicted:.2f}%",
                )
            )
            cells = [r["backend"], str(r["events_per_turn"]), m, f"{r[f'{m}_p50_ms']:.3f}", *versus]
            lines.append("| " + " | ".join(cells) + " |")
    floor = [
        f"| {r['backend']} | "
        f"{r['events_per_turn'] * micro['sdk_bare_span_us'] / 10 / r['off_p50_ms']:.2f}% |"
        for r in rows
    ]
    collected = [
        f"| {r['backend']} | {r['otel_metrics_pending']:,} | {r['otel_metrics_collect_ms']:.2f} "
        f"| {r['otel_metrics_inline_collect_ms']:.2f} | {r['otel_metrics_drain_us_per_turn']:.1f} "
        f"| {r['otel_metrics_drain_pct_of_off_p50']:.2f}% |"
        for r in rows
    ]
    return "\n".join(
        [
            *lines,
            "",
            "| backend | otel_metrics: pending after the turns | its collection ms "
            "| otel_metrics_inline: collection ms | drain us / turn | of off p50 |",
            "|---|---:|---:|---:|---:|---:|",
            *collected,
            "",
            "Per event (us): "
            + ", ".join(f"{m} {micro[f'{m}_us_per_event']}" for m in ("off", *MODES[2:]))
            + f"; otel_metrics' drain (at collection) {micro['otel_metrics_drain_us_per_event']}"
            + f"; the SDK's bare start_as_current_span: {micro['sdk_bare_span_us']}",
            "",
            "| backend | SDK floor for traces (events/turn x bare span, over off p50) |",
            "|---|---:|",
            *floor,
        ]
    )


# -- CPU instructions (valgrind) ---------------------------------------------------------------

ROOT = Path(__file__).resolve().parent.parent
COUNTED = (
    "off",
    "noop",
    "prometheus",
    "otel_metrics",
    "otel_metrics_inline",
    "otel_metrics_drained",
    "otel_traces",
)
"""``otel_metrics_drained``: ``otel_metrics`` plus one drain of everything it queued
(``listener.flush()``, as a collection would) counted after the turns: the instructions
deferring moved off the saver calls, onto the collecting thread."""
_SAVER_CALLS = ("get_tuple", "put", "put_writes")


def _ignore(_: Any) -> None:
    """The ``noop`` listener: the events are built and delivered, nothing records them."""


def counted_turns(backend: str, url: str, mode: str, turns: int, scope: str) -> None:
    """In the child process callgrind runs: ``turns`` chat turns with ``mode``'s listener.

    Callgrind collects inside ``sys.call_tracing`` (``--toggle-collect``, per thread):
    with ``scope="storage"`` every saver call runs in one, whichever thread LangGraph
    runs it on; with ``"process"`` nothing does and the whole process is counted.
    """
    import langgraph_memory_plus as lgmp

    made = {m: make()[0] for m, make in listeners().items()}
    made["noop"] = _ignore
    with _turn_saver(lgmp, backend, url) as saver:
        graph = chat_graph().compile(checkpointer=saver)
        config = {"configurable": {"thread_id": "obs-count"}}
        for listener in made.values():  # first-use caches, in every mode alike
            saver.add_listener(listener)
            graph.invoke({"messages": [user_message(0)]}, config)
            saver.remove_listener(listener)
        made["otel_metrics"].flush()  # the SDK's first-use caches too
        if mode != "off":
            saver.add_listener(made[mode.removesuffix("_drained")])
        if scope == "storage":
            for name in _SAVER_CALLS:
                call = getattr(saver, name)

                def counted(*args: Any, _call: Any = call, **kwargs: Any) -> Any:
                    return sys.call_tracing(partial(_call, *args, **kwargs), ())

                setattr(saver, name, counted)
        for n in range(turns):
            graph.invoke({"messages": [user_message(n + 1)]}, config)
        assert saver.listener_errors == 0
        if mode == "otel_metrics_drained" and scope == "storage":
            sys.call_tracing(made["otel_metrics"].flush, ())


def _instructions(args: argparse.Namespace, backend: str, mode: str, turns: int, scope: str) -> int:
    toggle = ["--toggle-collect=sys_call_tracing"] if scope == "storage" else []
    command = [
        "valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", *toggle,
        sys.executable, "-m", "benchmarks.observability", "--pg", args.pg, "--redis", args.redis,
        "--count", f"{backend},{mode},{turns},{scope}",
    ]  # fmt: skip
    env = {**os.environ, "PYTHONHASHSEED": "0"}  # same dict layouts, run after run
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, check=True)
    found = re.search(r"Collected : (\d+)", done.stderr)
    if found is None:
        raise RuntimeError(f"no instruction count from callgrind:\n{done.stderr[-2000:]}")
    return int(found.group(1))


def instructions_row(args: argparse.Namespace, backend: str, events: int) -> dict[str, Any]:
    """Instructions per turn each mode adds inside the saver calls, per event, and as a
    share of a whole turn's instructions (with nothing on)."""
    turns = args.turns
    storage = {m: _instructions(args, backend, m, turns, "storage") for m in COUNTED}
    whole = _instructions(args, backend, "off", turns, "process")
    whole -= _instructions(args, backend, "off", 0, "process")
    turn = whole / turns
    row: dict[str, Any] = {"backend": backend, "turns": turns, "turn_instructions": round(turn)}
    row["storage_instructions"] = round(storage["off"] / turns)
    for mode in COUNTED[1:]:
        extra = (storage[mode] - storage["off"]) / turns
        row[f"{mode}_per_turn"] = round(extra)
        row[f"{mode}_per_event"] = round(extra / events)
        row[f"{mode}_share_pct"] = round(extra / turn * 100, 2)
    return row


def _instructions_table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| backend | turn (instructions) | mode | added per turn | per event | share of turn |",
        "|---|---:|---|---:|---:|---:|",
    ]
    for r in rows:
        for m in COUNTED[1:]:
            lines.append(
                f"| {r['backend']} | {r['turn_instructions']:,} | {m} | {r[f'{m}_per_turn']:,} "
                f"| {r[f'{m}_per_event']:,} | {r[f'{m}_share_pct']:.2f}% |"
            )
    return "\n".join(lines)


def _events_per_turn(backend: str, url: str) -> int:
    import langgraph_memory_plus as lgmp

    seen: list[Any] = []
    with _turn_saver(lgmp, backend, url) as saver:
        graph = chat_graph().compile(checkpointer=saver)
        config = {"configurable": {"thread_id": "obs-events"}}
        graph.invoke({"messages": [user_message(0)]}, config)
        saver.add_listener(seen.append)
        graph.invoke({"messages": [user_message(1)]}, config)
    return len(seen)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--pg", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--backends", default="postgres,sqlite,redis")
    parser.add_argument("--turns", type=int, default=300, help="timed turns per mode")
    parser.add_argument("--reps", type=int, default=20_000, help="calls per micro measure")
    parser.add_argument("--json", type=Path)
    parser.add_argument(
        "--instructions",
        action="store_true",
        help="count CPU instructions under valgrind instead of timing (--turns per count)",
    )
    parser.add_argument("--count", help=argparse.SUPPRESS)  # the child callgrind runs
    args = parser.parse_args(argv)
    check_pg_url(args.pg)
    check_redis_url(args.redis)
    urls = {"postgres": args.pg, "redis": args.redis, "sqlite": ""}
    if args.count:
        backend, mode, turns, scope = args.count.split(",")
        counted_turns(backend, urls[backend], mode, int(turns), scope)
        return 0
    load = {"start": os.getloadavg()}
    if args.instructions:
        if shutil.which("valgrind") is None:
            parser.error("--instructions needs valgrind on PATH")
        counts = []
        for backend in args.backends.split(","):
            row = instructions_row(args, backend, _events_per_turn(backend, urls[backend]))
            print(json.dumps(row), file=sys.stderr)
            counts.append(row)
        load["end"] = os.getloadavg()
        print(_instructions_table(counts))
        print(
            f"\nLoad average (does not move the counts): start {load['start']}, end {load['end']}"
        )
        if args.json:
            args.json.write_text(
                json.dumps({"instructions": counts, "load": load}, indent=2) + "\n"
            )
        return 0
    rows = []
    for backend in args.backends.split(","):
        row = backend_row(backend, urls[backend], args.turns)
        print(json.dumps(row), file=sys.stderr)
        rows.append(row)
    micro = micro_row(args.reps)
    load["end"] = os.getloadavg()
    print(_table(rows, micro))
    print(f"\nLoad average: start {load['start']}, end {load['end']}")
    if args.json:
        out = {"turns": rows, "micro": micro, "load": load}
        args.json.write_text(json.dumps(out, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
