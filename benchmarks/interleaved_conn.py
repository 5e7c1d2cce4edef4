"""Rung 6 of the PostgreSQL ladder with one connection, as LangGraph's ``PostgresSaver`` has,
beside rung 6 with its pool and the official saver, interleaved thread by thread::

    python -m benchmarks.interleaved_conn [--turns 10] [--threads 60] [--warmup 20]

``benchmarks.interleaved`` compares rung 6, which borrows a connection from a
``psycopg_pool.ConnectionPool`` (min 2, max 4) around every call, with the official saver,
which holds one connection and a lock (``PostgresSaver.from_conn_string``). A pool is
not one of the features the ladder prices; this asks what the pool costs rung 6 by
giving the same saver, unchanged otherwise, one connection behind a lock."""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import threading
import time
from collections.abc import Iterator
from typing import Any

import psycopg

from . import ladder as lad
from . import minimal as mn
from . import targets as tg
from . import workloads as wl


class OneConnection:
    """What the ladder's savers use of a pool (``connection()``, ``close()``) over one
    autocommit connection with prepared statements, behind a lock (as the official
    saver's ``_cursor``)."""

    def __init__(self, url: str) -> None:
        self.conn = psycopg.connect(url, autocommit=True, prepare_threshold=0)
        self.lock = threading.Lock()

    @contextlib.contextmanager
    def connection(self) -> Iterator[psycopg.Connection[Any]]:
        with self.lock:
            yield self.conn

    def close(self) -> None:
        self.conn.close()


class _Binary:
    """A connection whose statements ask for binary results (as the official saver's
    cursors: ``conn.cursor(binary=True)``)."""

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self._conn = conn

    def execute(self, query: Any, params: Any = None, **kwargs: Any) -> Any:
        return self._conn.execute(query, params, binary=True, **kwargs)

    def cursor(self, *args: Any, **kwargs: Any) -> Any:
        return self._conn.cursor(*args, binary=True, **kwargs)

    def transaction(self) -> Any:
        return self._conn.transaction()


class OneBinaryConnection(OneConnection):
    @contextlib.contextmanager
    def connection(self) -> Iterator[Any]:
        with self.lock:
            yield _Binary(self.conn)


ONE_CONN_BIN = tg.Target("ladder PG 6, one binary connection", "lad_pg1b6", lad.LADDER, "postgres")
ONE_CONN = tg.Target("ladder PG 6, one connection", "lad_pg1c6", lad.LADDER, "postgres")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--pg", default="postgresql://postgres@127.0.0.1:5432/test")
    p.add_argument("--turns", type=int, default=10)
    p.add_argument("--threads", type=int, default=60)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--keys", default="official,rung6,rung6_1conn,featureless")
    args = p.parse_args()
    env = tg.Env(pg=args.pg, redis="redis://127.0.0.1:6379/0")
    keys = args.keys.split(",")
    openers = {
        "featureless": lambda: mn.open_saver(mn.MIN_PG, env),
        "official": lambda: mn.open_saver(tg.OFF_PG, env),
        "rung6": lambda: lad.open_saver(lad._rung_targets("postgres", "PG")[5], env),
        "rung6_1conn": lambda: lad.open_saver(ONE_CONN, env),
        "rung6_1conn_bin": lambda: lad.open_saver(ONE_CONN_BIN, env),
    }
    cpu: dict[str, list[float]] = {k: [] for k in keys}
    wall: dict[str, list[float]] = {k: [] for k in keys}
    with contextlib.ExitStack() as stack:
        units = {k: stack.enter_context(openers[k]()) for k in keys}  # type: ignore[no-untyped-call]
        if "rung6_1conn" in units:
            saver = units["rung6_1conn"][0]
            url = saver.pool.conninfo
            saver.pool.close()
            saver.pool = OneConnection(url)
        if "rung6_1conn_bin" in units:
            saver = units["rung6_1conn_bin"][0]
            url = saver.pool.conninfo
            saver.pool.close()
            saver.pool = OneBinaryConnection(url)
        graphs = {}
        for key, (saver, marker) in units.items():
            graphs[key] = wl.chat_graph().compile(checkpointer=saver)
            for i in range(args.warmup):
                mn._turn(graphs[key], f"{marker}-warm{i}")
        load = os.getloadavg()
        for thread in range(args.threads):
            shift = thread % len(keys)
            for key in keys[shift:] + keys[:shift]:
                marker = units[key][1]
                started = time.process_time()
                walls = []
                for turn in range(1, args.turns + 1):
                    begun = time.perf_counter()
                    mn._turn(graphs[key], f"{marker}-t{thread}", turn)
                    walls.append(time.perf_counter() - begun)
                cpu[key].append((time.process_time() - started) / args.turns * 1000.0)
                wall[key].append(statistics.median(walls) * 1000.0)
        load_after = os.getloadavg()
        for key, (_, marker) in units.items():
            mn._turn(graphs[key], f"{marker}-t0", args.turns + 1)
            config: Any = {"configurable": {"thread_id": f"{marker}-t0"}}
            wl._check_conversation(dict(graphs[key].get_state(config).values), args.turns + 1, key)
    print(
        f"T={args.turns}, {args.threads} threads per saver, load {load[0]:.2f} {load[1]:.2f}"
        f" -> {load_after[0]:.2f} {load_after[1]:.2f}"
    )
    print("| saver | cpu/turn p50 ms | turn p50 ms (wall) | /official cpu | /official wall |")
    print("|---|---:|---:|---:|---:|")
    for key in keys:
        rc = statistics.median(a / b for a, b in zip(cpu[key], cpu["official"], strict=True))
        rw = statistics.median(a / b for a, b in zip(wall[key], wall["official"], strict=True))
        print(
            f"| {key} | {statistics.median(cpu[key]):.3f} | {statistics.median(wall[key]):.3f}"
            f" | {rc:.3f} | {rw:.3f} |"
        )


if __name__ == "__main__":
    main()
