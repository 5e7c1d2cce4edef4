"""What the fence (one writer per thread) costs a chat turn, on each backend::

    python -m benchmarks.fence [--pg URL] [--redis URL] [--redis-cluster URL]
        [--turns 10] [--threads 20] [--rounds 3]

Per backend, three savers of this code on storage of their own, each running
``--threads`` fresh threads of ``--turns`` turns of ``workloads.chat_graph()``:

- ``off``: the default (no fence, no lease in the config);
- ``run``: ``fence=True``, every turn a run with a run id of its own, as the LangGraph
  server runs them: the run takes the thread's fence as it starts (one write more per
  turn) and each put / put_writes checks it (one statement, or two script arguments);
- ``lease``: ``fence.acquire`` once per thread, the lease in every turn's config.

Rounds alternate the savers' order (reversed every other round), so load on the machine
hits them alike. Reported per saver: the median over rounds of the turn p50 (ms), and the
client CPU per turn (``time.process_time`` over the timed turns: this process only, not
the database server's), each with its ratio to ``off``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from langgraph_memory_plus import PostgresSaver, RedisSaver
from langgraph_memory_plus.checkpoint.sqlite import SqliteSaver

from . import workloads as wl
from .erasure import _pg_database
from .targets import check_pg_url, check_redis_url

MODES = ("off", "run", "lease")


@contextmanager
def _saver(backend: str, where: str, mode: str) -> Iterator[Any]:
    options: dict[str, Any] = {"fence": True} if mode == "run" else {}
    if backend == "sqlite":
        with SqliteSaver.from_conn_string(os.path.join(where, f"{mode}.db"), **options) as saver:
            saver.setup()
            yield saver
    elif backend == "postgres":
        schema = f"lgmp_fence_{mode}"
        with PostgresSaver.from_conn_string(where, schema=schema, **options) as saver:
            saver.setup()
            yield saver
    else:  # redis, redis-cluster
        prefix = f"lgmp-bench-fence-{uuid.uuid4().hex[:8]}-{mode}"
        with RedisSaver.from_conn_string(where, key_prefix=prefix, **options) as saver:
            try:
                yield saver
            finally:
                for thread_id in saver._created:  # type: ignore[attr-defined]
                    saver.delete_thread(thread_id)


def _round(saver: Any, mode: str, threads: int, turns: int) -> tuple[float, float]:
    """(turn p50 ms, CPU ms per turn) of ``threads`` fresh threads of ``turns`` turns."""
    graph = wl.chat_graph().compile(checkpointer=saver)
    created = getattr(saver, "_created", None)
    times: list[float] = []
    cpu = 0.0
    for _ in range(threads):
        thread_id = f"fence-{uuid.uuid4().hex[:12]}"
        if created is not None:
            created.append(thread_id)
        config: dict[str, Any] = {"configurable": {"thread_id": thread_id}}
        if mode == "lease":
            lease = saver.fence.acquire(thread_id, owner=f"bench-{os.getpid()}", lease_s=600)
            config = dict(lease.config(config))
        for turn in range(turns):
            run = {**config, "run_id": uuid.uuid4()} if mode == "run" else config
            inputs = {"messages": [wl.user_message(turn)]}
            c0, t0 = time.process_time(), time.perf_counter()
            graph.invoke(inputs, run)
            times.append(time.perf_counter() - t0)
            cpu += time.process_time() - c0
    return statistics.median(times) * 1000, cpu * 1000 / len(times)


def bench(backend: str, where: str, threads: int, turns: int, rounds: int) -> dict[str, Any]:
    results: dict[str, list[tuple[float, float]]] = {m: [] for m in MODES}
    with contextlib.ExitStack() as stack:
        savers = {m: stack.enter_context(_saver(backend, where, m)) for m in MODES}
        for mode, saver in savers.items():
            if backend.startswith("redis"):
                saver._created = []
            _round(saver, mode, 2, 2)  # warm up: connections, prepared statements
        for r in range(rounds):
            order = MODES if r % 2 == 0 else tuple(reversed(MODES))
            for mode in order:
                results[mode].append(_round(savers[mode], mode, threads, turns))
    return {
        m: (statistics.median(p for p, _ in rs), statistics.median(c for _, c in rs))
        for m, rs in results.items()
    }


def _print(backend: str, found: dict[str, tuple[float, float]]) -> None:
    p0, c0 = found["off"]
    print(f"\n{backend}: turn p50 ms (x off), CPU ms/turn (x off)")
    for mode, (p, c) in found.items():
        print(f"  {mode:6} {p:7.2f} ({p / p0:4.2f}x)   {c:7.2f} ({c / c0:4.2f}x)")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pg")
    parser.add_argument("--redis")
    parser.add_argument("--redis-cluster")
    parser.add_argument("--turns", type=int, default=10)
    parser.add_argument("--threads", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    runs: list[tuple[str, Callable[[], Any]]] = []
    with tempfile.TemporaryDirectory(prefix="lgmp-bench-fence-") as tmp:
        runs.append(("sqlite", lambda: tmp))
        if args.pg:
            check_pg_url(args.pg)
            runs.append(("postgres", lambda: args.pg))
        if args.redis:
            check_redis_url(args.redis)
            runs.append(("redis", lambda: args.redis))
        if args.redis_cluster:
            runs.append(("redis-cluster", lambda: args.redis_cluster))
        for backend, where in runs:
            if backend == "postgres":
                with _pg_database(args.pg) as url:
                    found = bench(backend, url, args.threads, args.turns, args.rounds)
            else:
                found = bench(backend, where(), args.threads, args.turns, args.rounds)
            _print(backend, found)


if __name__ == "__main__":
    main()
