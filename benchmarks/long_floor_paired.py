"""``benchmarks.long_floor``'s savers on one thread each, turn by turn in one process::

    python -m benchmarks.long_floor_paired --turns 1000 --savers "off_sqlite;fresh objects;..."
    python -m benchmarks.long_floor_paired --turns 1000 \
        --savers "tree:/tmp/before:sqlite;tree:/work/main:sqlite"

A saver ``tree:PATH:BACKEND`` is ours from the source tree ``PATH`` (its
``langgraph_memory_plus`` imported under another name, as :mod:`benchmarks.interleaved`
does), on ``sqlite``, ``postgres`` or ``redis``: the before/after of a change on a long
thread.

Each turn runs once on every saver, in an order rotated every turn, so a load change on
the shared machine reaches all of them alike. Reports turn p50 (wall, CPU), and the
median over turns of each saver's turn time over the first saver's at the same turn."""

from __future__ import annotations

import argparse
import contextlib
import gc
import importlib
import os
import statistics
import tempfile
import time
from collections.abc import Sequence
from typing import Any

from . import interleaved as il
from . import long_floor as lf
from . import minimal as mn
from . import targets as tg
from . import workloads as wl


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(prog="python -m benchmarks.long_floor_paired")
    p.add_argument("--pg", default="postgresql://postgres@127.0.0.1:5432/test")
    p.add_argument("--redis", default="redis://127.0.0.1:6379/0")
    p.add_argument("--turns", type=int, default=1000)
    p.add_argument(
        "--savers",
        default=f"off_sqlite;{lf.FRESH_C};{lf.FRESH_CHECKED};{lf.SHARED_LEAVES}",
        help="';'-separated; the first is the reference",
    )
    args = p.parse_args(argv)
    env = tg.Env(pg=args.pg, redis=args.redis)
    names = [n.strip() for n in args.savers.split(";") if n.strip()]
    load_before = os.getloadavg()
    wall: dict[str, list[float]] = {n: [] for n in names}
    cpu: dict[str, list[float]] = {n: [] for n in names}
    trees = _trees(names)
    with contextlib.ExitStack() as stack:
        graphs = {}
        for i, name in enumerate(names):
            if name in trees:
                package, backend = trees[name]
                saver, marker = il._open_ours(package, backend, stack, env)
            else:
                saver, marker = stack.enter_context(lf._open(name, env))
            graph = wl.chat_graph().compile(checkpointer=saver)
            mn._turn(graph, f"{marker}-{i}-warm")
            graphs[name] = (graph, f"{marker}-{i}-t0")
        gc.collect()
        for turn in range(1, args.turns + 1):
            k = turn % len(names)
            for name in names[k:] + names[:k]:
                graph, thread_id = graphs[name]
                started, started_cpu = time.perf_counter(), time.process_time()
                mn._turn(graph, thread_id, turn)
                cpu[name].append(time.process_time() - started_cpu)
                wall[name].append(time.perf_counter() - started)
        for name, (graph, thread_id) in graphs.items():
            config: Any = {"configurable": {"thread_id": thread_id}}
            wl._check_conversation(dict(graph.get_state(config).values), args.turns, name)
    ref = names[0]
    load_after = os.getloadavg()
    print(
        f"T={args.turns}, turn-interleaved, order rotated; load {load_before[0]:.2f} "
        f"{load_before[1]:.2f} -> {load_after[0]:.2f} {load_after[1]:.2f}"
    )
    print(f"| saver | turn p50 ms | CPU p50 ms | p50/{ref} wall | CPU | paired median wall | CPU |")
    print("|---|---|---|---|---|---|---|")
    out = {}
    for name in names:
        w, c = statistics.median(wall[name]), statistics.median(cpu[name])
        rw, rc = w / statistics.median(wall[ref]), c / statistics.median(cpu[ref])
        pw = statistics.median(a / b for a, b in zip(wall[name], wall[ref], strict=True))
        pc = statistics.median(a / b for a, b in zip(cpu[name], cpu[ref], strict=True) if b)
        out[name] = (w, c, rw, rc, pw, pc)
        print(
            f"| {name} | {w * 1e3:.2f} | {c * 1e3:.2f} | {rw:.3f}x | {rc:.3f}x | "
            f"{pw:.3f}x | {pc:.3f}x |"
        )
    return out


def _trees(names: Sequence[str]) -> dict[str, tuple[Any, str]]:
    """The ``tree:PATH:BACKEND`` savers among ``names``: each tree's package, imported under
    a name of its own, and the backend."""
    specs = {}
    for name in names:
        if name.startswith("tree:"):
            path, _, backend = name[len("tree:") :].rpartition(":")
            if backend not in il.BACKENDS or not path:
                raise SystemExit(f"{name!r}: want tree:PATH:{'|'.join(il.BACKENDS)}")
            specs[name] = (path, backend)
    if not specs:
        return {}
    packages = {f"lgmp_t{i}": path for i, (path, _) in enumerate(specs.values())}
    il._copy_packages(packages, tempfile.mkdtemp(prefix="lgmp-trees-"))
    return {
        name: (importlib.import_module(package), backend)
        for (name, (_, backend)), package in zip(specs.items(), packages, strict=True)
    }


if __name__ == "__main__":
    main()
