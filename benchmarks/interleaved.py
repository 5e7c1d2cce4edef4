"""Ours from two source trees beside the ladder's rung 6, the official and the featureless
savers, interleaved in one process::

    python -m benchmarks.interleaved --a /path/to/tree-a --b /path/to/tree-b \\
        [--backend postgres|sqlite|redis] [--pg URL] [--redis URL] [--turns 10]
        [--threads 100] [--warmup 20]

A before/after of a change to a saver's short turn is a few percent of its CPU, and on a
shared machine the load moves more than that between two runs, or between two units of
one run; so do the ratios of issue 39's short-turn goals (ours over the official and the
featureless savers, and rung 6 over them: the bound). Here the package of each tree
(``<tree>/langgraph_memory_plus``, whose imports are all relative) is copied under another
name (``lgmp_a``, ``lgmp_b``) and imported beside the other, and the two savers of the
backend, rung 6 of the feature ladder (:mod:`benchmarks.ladder`), LangGraph's own saver
(SQLite, PostgreSQL; none runs on plain Redis) and the featureless one of
:mod:`benchmarks.minimal` run fresh threads of ``--turns`` turns in turn, the order
rotated at every thread: a swing of the load falls on all of them alike.

Reported per saver: process CPU per turn (median and mean over its threads; LangGraph
writes on executor threads), on PostgreSQL and Redis the server's CPU per turn beside it
(``targets.server_cpu``: summed over the run, a mean), the thread CPU inside ``put``,
``put_writes`` and ``get_tuple`` per turn, the median over its threads of each thread's
turn p50 (wall), and the paired medians (thread by thread, CPU and wall) of B/A, and of
each to rung 6, to the official saver and to the featureless one. The conversations are
read back afterwards (``wl._check_conversation``). Run both orders (``--a X --b Y`` and
``--a Y --b X``) and average: the two copies are not placed alike in the process (the
same tree as A and as B read up to ~2% apart).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from typing import Any

from . import ladder as lad
from . import minimal as mn
from . import targets as tg
from . import workloads as wl

CALLS = ("put", "put_writes", "get_tuple")
# Per backend: our saver's class name, its target, the featureless saver, the official
# one (Redis: none that runs on plain Redis) and the ladder's rung 6, as the ladder has them.
_OFFICIAL = {"sqlite": tg.OFF_SQLITE, "postgres": tg.OFF_PG, "redis": None}
_CLASS = {"sqlite": "SqliteSaver", "postgres": "PostgresSaver", "redis": "RedisSaver"}
BACKENDS: dict[str, tuple[str, tg.Target, tg.Target, tg.Target | None, tg.Target]] = {
    ours.backend: (
        _CLASS[ours.backend],
        ours,
        featureless,
        _OFFICIAL[ours.backend],
        rungs[lad.FILTERS - 1],
    )
    for _, featureless, rungs, ours in lad.BACKENDS
}


def _copy_packages(trees: dict[str, str], into: str) -> None:
    """``<tree>/langgraph_memory_plus`` of each tree as package ``name`` under ``into``.

    A copy imported by an earlier run in this process is dropped first: its directory is
    gone, and a submodule it imports lazily (another backend's saver) would be looked for
    there."""
    for name, tree in trees.items():
        for loaded in [m for m in sys.modules if m == name or m.startswith(f"{name}.")]:
            del sys.modules[loaded]
        shutil.copytree(
            os.path.join(tree, "langgraph_memory_plus"),
            os.path.join(into, name),
            ignore=shutil.ignore_patterns("__pycache__"),
        )
    sys.path.insert(0, into)


def _count_calls(saver: Any, spent: dict[str, float]) -> None:
    """Thread CPU inside each of the saver's calls, into ``spent`` (a call made inside
    another counts once, in the outer one)."""
    inside = threading.local()
    lock = threading.Lock()
    for name in CALLS:
        method = getattr(saver, name)

        def call(*args: Any, _method: Any = method, _name: str = name, **kwargs: Any) -> Any:
            if getattr(inside, "busy", False):
                return _method(*args, **kwargs)
            inside.busy = True
            started = time.thread_time()
            try:
                return _method(*args, **kwargs)
            finally:
                inside.busy = False
                with lock:
                    spent[_name] += time.thread_time() - started

        setattr(saver, name, call)


def _open_ours(package: Any, backend: str, stack: contextlib.ExitStack, env: tg.Env) -> Any:
    """(saver, marker) of ``package``'s saver for ``backend`` on storage of its own."""
    cls_name, target = BACKENDS[backend][:2]
    storage = tg.make_storage(target, env)
    stack.callback(storage.close)
    assert storage.url is not None
    cls = getattr(package, cls_name)
    if backend == "redis":
        saver = stack.enter_context(cls.from_conn_string(storage.url, key_prefix=storage.marker))
    else:
        saver = stack.enter_context(cls.from_conn_string(storage.url))
    saver.setup()
    return saver, storage.marker


def run(
    env: tg.Env,
    trees: dict[str, str],
    turns: int,
    threads: int,
    warmup: int,
    backend: str = "postgres",
) -> str:
    """The interleaved run; its report as text."""
    _, _, featureless, official, rung6 = BACKENDS[backend]
    keys = ["featureless", *(["official"] if official else []), "rung6", *trees]
    spent = {key: dict.fromkeys(CALLS, 0.0) for key in keys}
    cpu: dict[str, list[float]] = {key: [] for key in keys}
    wall: dict[str, list[float]] = {key: [] for key in keys}  # turn p50 per thread
    server_spent: dict[str, float | None] = dict.fromkeys(keys, 0.0)  # seconds, all threads
    with (
        tempfile.TemporaryDirectory() as packages,
        contextlib.ExitStack() as stack,
        tg.server_cpu(backend, env) as server,
    ):
        _copy_packages({f"lgmp_{key.lower()}": tree for key, tree in trees.items()}, packages)
        units = {"featureless": stack.enter_context(mn.open_saver(featureless, env))}
        if official is not None:
            units["official"] = stack.enter_context(mn.open_saver(official, env))
        units["rung6"] = stack.enter_context(lad.open_saver(rung6, env))
        for key in trees:
            package = importlib.import_module(f"lgmp_{key.lower()}")
            units[key] = _open_ours(package, backend, stack, env)
        graphs = {}
        for key, (saver, marker) in units.items():
            graphs[key] = wl.chat_graph().compile(checkpointer=saver)
            for i in range(warmup):
                mn._turn(graphs[key], f"{marker}-warm{i}")
            _count_calls(saver, spent[key])  # after the warm-up
        load = os.getloadavg()[0]
        for thread in range(threads):
            shift = thread % len(keys)
            for key in keys[shift:] + keys[:shift]:
                marker = units[key][1]
                server_before = server()
                started = time.process_time()
                walls = []
                for turn in range(1, turns + 1):
                    begun = time.perf_counter()
                    mn._turn(graphs[key], f"{marker}-t{thread}", turn)
                    walls.append(time.perf_counter() - begun)
                cpu[key].append((time.process_time() - started) / turns * 1000.0)
                wall[key].append(statistics.median(walls) * 1000.0)
                server_after, so_far = server(), server_spent[key]
                if server_before is None or server_after is None or so_far is None:
                    server_spent[key] = None
                else:
                    server_spent[key] = so_far + server_after - server_before
        load_after = os.getloadavg()[0]
        for key, (_, marker) in units.items():
            mn._turn(graphs[key], f"{marker}-t0", turns + 1)
            config: Any = {"configurable": {"thread_id": f"{marker}-t0"}}
            values = dict(graphs[key].get_state(config).values)
            wl._check_conversation(values, turns + 1, key)
    done = threads * turns
    lines = [
        f"{backend}, T={turns}, {threads} threads per saver, load {load:.2f} -> {load_after:.2f}",
        "| saver | cpu/turn p50 ms | mean ms | turn p50 ms (wall) | put ms | put_writes ms "
        "| get_tuple ms |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for key in keys:
        calls = " | ".join(f"{spent[key][c] / done * 1000.0:.3f}" for c in CALLS)
        lines.append(
            f"| {key} | {statistics.median(cpu[key]):.3f} | {statistics.fmean(cpu[key]):.3f} "
            f"| {statistics.median(wall[key]):.3f} | {calls} |"
        )
    if all(v is not None for v in server_spent.values()):
        # Summed over every thread (a unit's server time is read in 10 ms ticks on
        # PostgreSQL): means per turn, beside the process's own mean.
        both = {
            key: statistics.fmean(cpu[key]) + (server_spent[key] or 0.0) / done * 1000.0
            for key in keys
        }
        lines.append(
            "server CPU per turn, mean ms: "
            + ", ".join(f"{key} {(server_spent[key] or 0.0) / done * 1000.0:.3f}" for key in keys)
        )
        lines.append(
            "client + server CPU per turn, mean ms: "
            + ", ".join(f"{key} {both[key]:.3f}" for key in keys)
        )
    pairs = [("B", "A"), ("A", "rung6"), ("B", "rung6")]
    if official is not None:
        pairs += [("A", "official"), ("B", "official"), ("rung6", "official")]
    pairs += [("A", "featureless"), ("B", "featureless"), ("rung6", "featureless")]
    for label, measured in (("cpu", cpu), ("wall", wall)):
        ratios = {
            f"{x}/{y}": statistics.median(
                [p / q for p, q in zip(measured[x], measured[y], strict=True)]
            )
            for x, y in pairs
        }
        lines.append(
            f"paired medians ({label}): " + ", ".join(f"{k} {v:.3f}" for k, v in ratios.items())
        )
    return "\n".join(lines)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.interleaved",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--a", required=True, help="a source tree (holding langgraph_memory_plus/)")
    p.add_argument("--b", required=True, help="the other tree")
    p.add_argument("--backend", choices=sorted(BACKENDS), default="postgres")
    p.add_argument("--pg", default="postgresql://postgres@127.0.0.1:5432/test")
    p.add_argument("--redis", default="redis://127.0.0.1:6379/0")
    p.add_argument("--turns", type=int, default=10, help="turns per thread (T)")
    p.add_argument("--threads", type=int, default=100, help="threads per saver")
    p.add_argument("--warmup", type=int, default=20, help="untimed turns per saver first")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> str:
    args = parse_args(argv)
    tg.check_pg_url(args.pg)
    tg.check_redis_url(args.redis)
    env = tg.Env(pg=args.pg, redis=args.redis)
    report = run(
        env, {"A": args.a, "B": args.b}, args.turns, args.threads, args.warmup, args.backend
    )
    print(report)
    return report


if __name__ == "__main__":
    main()
