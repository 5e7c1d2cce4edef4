"""What a short turn's storage costs a saver by itself, without LangGraph around it::

    python -m benchmarks.replay [--backend sqlite|postgres|redis] [--turns 1500]
        [--pg URL] [--redis URL]

In a real turn a saver's calls share the process with LangGraph's runtime and its executor
threads, so their cost moves with caches, thread switches and the machine's load (the
interleaved and statements benchmarks measure them there). Here each saver of the backend
(the featureless one of :mod:`benchmarks.minimal`, LangGraph's own where there is one,
rung 6 of :mod:`benchmarks.ladder` and ours) runs one turn of ``workloads.chat_graph()``
while its ``get_tuple``, ``put`` and ``put_writes`` calls are recorded; then those calls
are made again, one thread id per replayed turn, ``--turns`` times in one thread with
nothing else running: process CPU per turn and per kind of call, the storage work alone,
steady from run to run. Only a thread's first turn replays exactly (a later turn's puts
build on what earlier reads handed out). On PostgreSQL and Redis the server's CPU per
turn is reported beside the client's where it can be read: Redis's own count
(``INFO cpu``), and for PostgreSQL the client backends' user and system time in
``/proc`` (the server on this machine; in 10 ms ticks, so over hundreds of turns).

On SQLite every statement's CPU inside ``sqlite3`` is added up by its text as well, in a
second run with connections opened by a timing factory (a Python call around each
statement, which costs a turn 100-500 us more: the statement table is read as parts of
that run's total, not of the first): where the engine's share of a turn goes.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import os
import re
import sqlite3
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from typing import Any

from . import interleaved as il
from . import ladder as lad
from . import minimal as mn
from . import targets as tg
from . import workloads as wl

CALLS = ("get_tuple", "put", "put_writes")

_SQL_SPENT: Counter[str] = Counter()
_SQL_RUNS: Counter[str] = Counter()


def _statement(sql: str) -> str:
    """A statement's kind: its first words, literal values left out."""
    return re.sub(r"\s+", " ", sql).strip()[:60]


def _timed(kind: str, started: int) -> None:
    _SQL_SPENT[kind] += time.process_time_ns() - started
    _SQL_RUNS[kind] += 1


class _TimedCursor(sqlite3.Cursor):
    """Adds each statement's CPU to :data:`_SQL_SPENT` under its kind."""

    def execute(self, sql: str, parameters: Any = (), /) -> _TimedCursor:
        started = time.process_time_ns()
        try:
            return super().execute(sql, parameters)
        finally:
            _timed(_statement(sql), started)

    def executemany(self, sql: str, parameters: Any, /) -> _TimedCursor:
        started = time.process_time_ns()
        try:
            return super().executemany(sql, parameters)
        finally:
            _timed("many: " + _statement(sql), started)


class _TimedConnection(sqlite3.Connection):
    """Statements through the connection or its cursors, and ``commit()``, timed."""

    def cursor(self, factory: Any = _TimedCursor) -> Any:
        return super().cursor(factory)

    def execute(self, sql: str, parameters: Any = (), /) -> sqlite3.Cursor:
        cursor: _TimedCursor = self.cursor()
        return cursor.execute(sql, parameters)

    def executemany(self, sql: str, parameters: Any, /) -> sqlite3.Cursor:
        cursor: _TimedCursor = self.cursor()
        return cursor.executemany(sql, parameters)

    def commit(self) -> None:
        started = time.process_time_ns()
        try:
            super().commit()
        finally:
            _timed("commit()", started)


@contextlib.contextmanager
def _timed_sqlite() -> Iterator[None]:
    """Every ``sqlite3.connect`` meanwhile opens a :class:`_TimedConnection`."""
    connect = sqlite3.connect

    def timed(*args: Any, **kwargs: Any) -> sqlite3.Connection:
        kwargs.setdefault("factory", _TimedConnection)
        conn: sqlite3.Connection = connect(*args, **kwargs)
        return conn

    sqlite3.connect = timed  # type: ignore[assignment]
    try:
        yield
    finally:
        sqlite3.connect = connect


def _renamed(config: Any, new: str) -> Any:
    """``config`` with ``new`` for its thread id."""
    return {**config, "configurable": {**config["configurable"], "thread_id": new}}


def _record(saver: Any, marker: str) -> list[tuple[str, tuple[Any, ...], dict[str, Any]]]:
    """One warm-up turn, then the calls one turn makes (arguments deep-copied: the graph
    goes on using its objects)."""
    graph = wl.chat_graph().compile(checkpointer=saver)
    mn._turn(graph, f"{marker}-warm")
    calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []
    originals = {name: getattr(saver, name) for name in CALLS}

    def recording(name: str) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            calls.append((name, copy.deepcopy(args), copy.deepcopy(kwargs)))
            return originals[name](*args, **kwargs)

        return call

    for name in CALLS:
        setattr(saver, name, recording(name))
    try:
        mn._turn(graph, f"{marker}-recorded")
    finally:
        for name in CALLS:
            setattr(saver, name, originals[name])
    return calls


def replay_saver(
    target: tg.Target, env: tg.Env, turns: int, server: tg.ServerCpu = lambda: None
) -> dict[str, Any]:
    """CPU per replayed turn, in all and per kind of call (microseconds), the server's
    (``server``, microseconds; None if unread) and the calls a turn makes; the first tenth
    of the turns warms up and is not counted."""
    with lad.open_saver(target, env) as (saver, marker):
        calls = _record(saver, marker)
        warm = max(1, turns // 10)
        spent: Counter[str] = Counter()
        _SQL_SPENT.clear()
        _SQL_RUNS.clear()
        total = 0
        server_before: float | None = None
        for n in range(warm + turns):
            thread = f"{marker}-r{n}"
            if n == warm:
                spent.clear()
                _SQL_SPENT.clear()
                _SQL_RUNS.clear()
                total = 0
                server_before = server()
            for name, args, kwargs in calls:
                config = _renamed(args[0], thread)
                started = time.process_time_ns()
                getattr(saver, name)(config, *args[1:], **kwargs)
                took = time.process_time_ns() - started
                spent[name] += took
                total += took
        server_after = server()
        # the last replayed turn reads back what it stored
        got = saver.get_tuple({"configurable": {"thread_id": thread}})
        assert got is not None and len(got.checkpoint["channel_values"]["messages"]) == 2
    return {
        "calls per turn": len(calls),
        "us/turn": total / turns / 1e3,
        "server us/turn": None
        if server_before is None or server_after is None
        else (server_after - server_before) / turns * 1e6,
        **{name: spent[name] / turns / 1e3 for name in CALLS},
        "sql": {k: (v / turns / 1e3, _SQL_RUNS[k] / turns) for k, v in _SQL_SPENT.items()},
    }


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks.replay")
    p.add_argument("--backend", choices=sorted(il.BACKENDS), default="sqlite")
    p.add_argument("--turns", type=int, default=1500)
    p.add_argument("--pg", default="postgresql://postgres@127.0.0.1:5432/test")
    p.add_argument("--redis", default="redis://127.0.0.1:6379/0")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> dict[str, dict[str, Any]]:
    args = parse_args(argv)
    env = tg.Env(pg=args.pg, redis=args.redis)
    _, ours, featureless, official, rung6 = il.BACKENDS[args.backend]
    savers = {"featureless": featureless, "official": official, "rung6": rung6, "ours": ours}
    load = os.getloadavg()[0]
    out: dict[str, dict[str, Any]] = {}
    with tg.server_cpu(args.backend, env) as server:
        for label, target in savers.items():
            if target is not None:
                out[label] = replay_saver(target, env, args.turns, server)
    if args.backend == "sqlite":
        # Again with every statement timed: the timing's own cost (a Python call around
        # each statement) is in these, so they are read as parts, not added to the above.
        with _timed_sqlite():
            for label, target in savers.items():
                if target is not None:
                    timed = replay_saver(target, env, args.turns)
                    out[label]["sql"] = timed["sql"]
                    out[label]["us/turn timed"] = timed["us/turn"]
    print(
        f"{args.backend}: one turn's calls replayed {args.turns} times per saver, "
        f"load {load:.2f} -> {os.getloadavg()[0]:.2f}"
    )
    ref_label = "official" if "official" in out else "featureless"
    ref = out[ref_label]["us/turn"]
    print(
        f"| saver | CPU us/turn | x {ref_label} | get_tuple | put | put_writes "
        "| server CPU us/turn | client + server |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for label, row in out.items():
        server_us = row["server us/turn"]
        both = "-" if server_us is None else f"{row['us/turn'] + server_us:.0f}"
        print(
            f"| {label} | {row['us/turn']:.0f} | {row['us/turn'] / ref:.2f}x | "
            + " | ".join(f"{row[name]:.0f}" for name in CALLS)
            + f" | {'-' if server_us is None else f'{server_us:.0f}'} | {both} |"
        )
    if args.backend == "sqlite":
        for label, row in out.items():
            sql = sorted(row["sql"].items(), key=lambda kv: -kv[1][0])
            spent = sum(us for us, _ in row["sql"].values())
            print(
                f"\n{label}: {spent:.0f} us/turn inside sqlite3, of "
                f"{row['us/turn timed']:.0f} with every statement timed"
            )
            print("| statement | us/turn | runs/turn |")
            print("|---|---:|---:|")
            for kind, (us, runs) in sql:
                if runs >= 0.5:
                    print(f"| `{kind}` | {us:.0f} | {runs:.1f} |")
    return out


if __name__ == "__main__":
    main()
