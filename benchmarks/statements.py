"""What a short chat turn asks of the storage, and where its client CPU goes::

    python -m benchmarks.statements [--pg URL] [--redis URL] [--turns 1,10,50]
        [--sample 60] [--warmup 6] [--profile-turns 200] [--out DIR] [--no-profile]

Issue 39 asks, before any change, for two tables per short turn (fresh threads of T turns
of ``workloads.chat_graph()``), ours beside LangGraph's savers (``InMemorySaver``, the
official SQLite and PostgreSQL savers) and the featureless savers of
:mod:`benchmarks.minimal`:

1. **Counts per turn**, from the client, by wrapping the drivers (no server statistics:
   the servers are shared). Nothing is timed, so the counts do not depend on the load.

   - PostgreSQL (psycopg 3): *statements* are ``Cursor.execute`` calls, each parameter set
     of ``executemany`` and psycopg's own commands (``BEGIN``, ``COMMIT``, ``ROLLBACK``,
     ``SAVEPOINT``); *round trips*: each of those outside pipeline mode, and in pipeline
     mode (``executemany`` uses one) each ``Sync`` sent and each fetch that flushes the
     pipeline. Pool checks on borrow count too.
   - SQLite: statements as reported by ``sqlite3``'s trace callback, each run once
     (trigger programs and an upsert's update path excluded), of which ``COMMIT``\\ s;
     no round trips (in-process).
   - Redis (redis-py): *commands* sent (each command of a pipeline), of which *Lua
     calls* (``EVALSHA``/``EVAL``/``FCALL``), and *round trips* (packed sends: a pipeline
     is one), all read from the bytes each send puts on the wire.

2. **Client CPU per turn by component** (``--profile``): ``cProfile`` over
   ``--profile-turns`` turns at T=1 and T=10 of our savers and the featureless ones, the
   self time of every function summed by the component its module or name belongs to
   (codec, compression, thread index record and title, list memory, plans, driver,
   database client, LangGraph, ...). TTL fences and tombstone checks are SQL and Lua
   inside the put statements: their client CPU is nil and their cost is in the counts.
   ``cProfile`` slows Python by a roughly constant factor, so shares are the figure to
   read; ``cpu ms/turn`` beside it is measured without the profiler.

Both tables go to stdout and to ``DIR`` (default ``benchmarks/results/``) as
``<date>-statements.md`` and ``<date>-cpu-breakdown.md``, with the load average.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import datetime as _dt
import os
import pstats
import sqlite3
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from . import minimal as mn
from . import targets as tg
from . import workloads as wl

RESULTS = Path(__file__).parent / "results"


# ---------------------------------------------------------------------------------------------
# counting


class _Counts:
    """Counts of the current unit, from every thread (LangGraph puts in the background)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.counter: Counter[str] = Counter()

    def add(self, what: str, n: int = 1) -> None:
        with self.lock:
            self.counter[what] += n

    def take(self) -> Counter[str]:
        with self.lock:
            found, self.counter = self.counter, Counter()
        return found


COUNTS = _Counts()
_INSTALLED: list[bool] = []
_UNDO: list[Callable[[], None]] = []


def _patch(owner: Any, name: str, value: Any) -> None:
    """``setattr``, remembered for :func:`uninstall`."""
    original = getattr(owner, name)
    setattr(owner, name, value)
    _UNDO.append(lambda: setattr(owner, name, original))


def uninstall() -> None:
    """Undo :func:`install` (the smoke test runs beside other tests)."""
    while _UNDO:
        _UNDO.pop()()
    _INSTALLED.clear()


def install() -> None:
    """Wrap psycopg, sqlite3 and redis-py so that they count into :data:`COUNTS`."""
    if _INSTALLED:
        return
    _INSTALLED.append(True)
    _install_psycopg()
    _install_sqlite()
    _install_redis()


def _install_psycopg() -> None:
    import psycopg
    from psycopg import _connection_base as base
    from psycopg import _pipeline_base as pipeline_base

    wait = psycopg.Connection.wait

    def counted_wait(self: Any, gen: Any, *args: Any, **kwargs: Any) -> Any:
        if getattr(gen, "__name__", "") == "_fetch_gen":  # a fetch that flushes a pipeline
            COUNTS.add("pg round trips")
        return wait(self, gen, *args, **kwargs)

    exec_command = base.BaseConnection._exec_command

    def counted_command(self: Any, command: Any, *args: Any, **kwargs: Any) -> Any:
        COUNTS.add("pg statements")  # BEGIN, COMMIT, ROLLBACK, SAVEPOINT...
        if self._pipeline is None:
            COUNTS.add("pg round trips")
        return (yield from exec_command(self, command, *args, **kwargs))

    enqueue_sync = pipeline_base.BasePipeline._enqueue_sync

    def counted_sync(self: Any, *args: Any, **kwargs: Any) -> Any:
        COUNTS.add("pg round trips")  # a pipeline's Sync: what it sent is answered
        return enqueue_sync(self, *args, **kwargs)

    execute = psycopg.Cursor.execute
    executemany = psycopg.Cursor.executemany

    def counted_execute(self: Any, *args: Any, **kwargs: Any) -> Any:
        COUNTS.add("pg statements")
        if self._conn._pipeline is None:
            COUNTS.add("pg round trips")
        return execute(self, *args, **kwargs)

    def counted_executemany(self: Any, query: Any, params_seq: Any, **kwargs: Any) -> Any:
        params = list(params_seq)  # psycopg pipelines these (its Sync counts)
        COUNTS.add("pg statements", len(params))
        return executemany(self, query, params, **kwargs)

    _patch(psycopg.Connection, "wait", counted_wait)
    _patch(base.BaseConnection, "_exec_command", counted_command)
    _patch(pipeline_base.BasePipeline, "_enqueue_sync", counted_sync)
    _patch(psycopg.Cursor, "execute", counted_execute)
    _patch(psycopg.Cursor, "executemany", counted_executemany)


_TRACED = threading.local()


class _CallCursor(sqlite3.Cursor):
    """Marks where each statement the caller sends starts (see :func:`_install_sqlite`)."""

    def execute(self, sql: str, parameters: Any = (), /) -> sqlite3.Cursor:
        _TRACED.previous = None
        return super().execute(sql, parameters)

    def executemany(self, sql: str, parameters: Any, /) -> sqlite3.Cursor:
        _TRACED.previous = None
        return super().executemany(sql, parameters)


class _CallConnection(sqlite3.Connection):
    def cursor(self, factory: Any = _CallCursor) -> Any:
        return super().cursor(factory)

    def execute(self, sql: str, parameters: Any = (), /) -> sqlite3.Cursor:
        return self.cursor().execute(sql, parameters)

    def executemany(self, sql: str, parameters: Any, /) -> sqlite3.Cursor:
        return self.cursor().executemany(sql, parameters)


def _install_sqlite() -> None:
    """Count what SQLite's trace callback reports, once per statement run.

    Here (Python 3.11, SQLite 3.40) the callback reports a trigger program, and an
    upsert's update path, with the text of the statement that ran them (not a ``--``
    comment, as the legacy trace did): our thread index's upsert, whose metadata
    triggers keep its key columns, read as two statements a put. An event
    equal to the one before it within one ``execute`` is that statement's own
    sub-program; connections are opened with a factory that marks where each call
    starts (an ``executemany``'s parameter sets differ, so each counts)."""
    connect = sqlite3.connect

    def trace(statement: str) -> None:
        if statement.startswith("--"):  # a trigger's body, as older SQLite reported it
            return
        if statement == getattr(_TRACED, "previous", None):
            return
        _TRACED.previous = statement
        COUNTS.add("sqlite statements")
        if statement.lstrip().upper().startswith(("COMMIT", "END")):
            COUNTS.add("sqlite commits")

    def counted_connect(*args: Any, **kwargs: Any) -> sqlite3.Connection:
        kwargs.setdefault("factory", _CallConnection)
        conn = connect(*args, **kwargs)
        conn.set_trace_callback(trace)
        return conn

    _patch(sqlite3, "connect", counted_connect)


def _install_redis() -> None:
    """Count what goes on the wire: every packed send is a round trip, and each command
    in it (a RESP array) a command. Our runner packs its own commands (hiredis) and sends
    them as redis-py's pipelines do, so the counts are read from the bytes sent."""
    import redis.connection as rc

    lua = {b"EVALSHA", b"EVAL", b"FCALL", b"EVALSHA_RO", b"EVAL_RO", b"FCALL_RO"}
    send = rc.AbstractConnection.send_packed_command

    def counted_send(self: Any, command: Any, *args: Any, **kwargs: Any) -> Any:
        COUNTS.add("redis round trips")
        chunks = [command] if isinstance(command, (bytes, str)) else command
        for name in _command_names(
            b"".join(bytes(c, "utf-8") if isinstance(c, str) else bytes(c) for c in chunks)
        ):
            COUNTS.add("redis commands")
            if name.upper() in lua:
                COUNTS.add("redis Lua calls")
        return send(self, command, *args, **kwargs)

    _patch(rc.AbstractConnection, "send_packed_command", counted_send)


def _command_names(data: bytes) -> Iterator[bytes]:
    """The name of each command (a RESP array of bulk strings) in ``data``."""
    pos = 0
    while pos < len(data) and data[pos : pos + 1] == b"*":
        end = data.index(b"\r\n", pos)
        count, pos = int(data[pos + 1 : end]), end + 2
        for i in range(count):
            end = data.index(b"\r\n", pos)
            size = int(data[pos + 1 : end])
            if i == 0:
                yield data[end + 2 : end + 2 + size]
            pos = end + 2 + size + 2


def count_turns(target: tg.Target, env: tg.Env, length: int, sample: int, warmup: int) -> dict:
    """Per-turn counts @T=``length``: fresh threads of ``length`` turns until ``sample``
    turns ran (after ``warmup`` untimed turns: connections, setup, caches)."""
    with mn.open_saver(target, env) as (saver, marker):
        graph = wl.chat_graph().compile(checkpointer=saver)
        for i in range(warmup):
            mn._turn(graph, f"{marker}-warm{i}")
        COUNTS.take()
        turns = thread = 0
        while turns < sample:
            for turn in range(1, length + 1):
                mn._turn(graph, f"{marker}-t{thread}", turn)
                turns += 1
            thread += 1
        found = COUNTS.take()
    return {what: n / turns for what, n in found.items()}


# ---------------------------------------------------------------------------------------------
# the CPU breakdown

# (component, test on (filename, function name)), first match wins
_Rule = tuple[str, Callable[[str, str], bool]]
COMPONENTS: list[_Rule] = [
    ("title (thread index)", lambda f, n: "threads" in f and "title" in n),
    ("index record (threads/)", lambda f, n: "langgraph_memory_plus/threads/" in f),
    ("compression", lambda f, n: "checkpoint/compression.py" in f or "zlib" in n or "zstd" in n),
    ("codec (ours)", lambda f, n: "checkpoint/codec.py" in f),
    ("list memory", lambda f, n: "checkpoint/lists.py" in f),
    ("plans (ours)", lambda f, n: "langgraph_memory_plus/checkpoint/" in f and "plans" in f),
    ("saver API (ours)", lambda f, n: "langgraph_memory_plus/checkpoint/" in f),
    ("driver (ours)", lambda f, n: "langgraph_memory_plus/drivers/" in f),
    ("observability (ours)", lambda f, n: "langgraph_memory_plus/observability/" in f),
    ("other (ours)", lambda f, n: "langgraph_memory_plus/" in f),
    ("featureless saver", lambda f, n: "benchmarks/minimal.py" in f),
    ("workload (the graph's nodes)", lambda f, n: "benchmarks/workloads.py" in f),
    ("serde (LangGraph)", lambda f, n: "langgraph/checkpoint/serde" in f or "ormsgpack" in n),
    ("official saver", lambda f, n: "langgraph/checkpoint/" in f and "serde" not in f),
    ("psycopg + pool", lambda f, n: "psycopg" in f or "psycopg" in n),
    ("redis-py", lambda f, n: "/redis/" in f or "hiredis" in n),
    ("sqlite3", lambda f, n: "sqlite3" in f or "sqlite3" in n),
    ("LangGraph runtime", lambda f, n: "/langgraph/" in f or "langchain" in f),
    ("json / pydantic", lambda f, n: "json" in f or "pydantic" in f or "json" in n),
    ("threads, executors", lambda f, n: "threading" in f or "concurrent/futures" in f),
]


OTHER = "other (stdlib, builtins)"


def component(filename: str, name: str) -> str:
    filename = filename.replace("\\", "/")
    for label, test in COMPONENTS:
        if test(filename, name):
            return label
    return OTHER


def profile_turns(target: tg.Target, env: tg.Env, length: int, turns: int, warmup: int) -> dict:
    """Self time by component (share of the profiled total), and the unprofiled CPU per
    turn, over ``turns`` turns @T=``length`` (the graph's thread and LangGraph's
    background threads, see :func:`_profiled_threads`)."""
    with mn.open_saver(target, env) as (saver, marker):
        graph = wl.chat_graph().compile(checkpointer=saver)
        for i in range(warmup):
            mn._turn(graph, f"{marker}-warm{i}")
        cpu = time.process_time()
        n = thread = 0
        while n < turns:
            for turn in range(1, length + 1):
                mn._turn(graph, f"{marker}-c{thread}", turn)
                n += 1
            thread += 1
        cpu_ms = (time.process_time() - cpu) / n * 1000.0
        profilers: list[cProfile.Profile] = []
        n = thread = 0
        with _profiled_threads(profilers):
            while n < turns:
                for turn in range(1, length + 1):
                    mn._turn(graph, f"{marker}-p{thread}", turn)
                    n += 1
                thread += 1
    stats = pstats.Stats(profilers[0])
    for more in profilers[1:]:
        with contextlib.suppress(TypeError):  # a work item that profiled nothing
            stats.add(more)
    return {"cpu ms/turn": cpu_ms, "shares": _shares(stats.stats)}  # type: ignore[attr-defined]


def _shares(raw: dict[Any, Any]) -> dict[str, float]:
    """Self time by component, as shares. Builtins and the standard library (``len``,
    ``isinstance``, ``contextlib``...) are charged to the component that called them, in
    proportion to each caller's part of their time (one level up: a builtin called from
    psycopg is psycopg's cost)."""
    own = {func: component(func[0], func[2]) for func in raw}
    by: Counter[str] = Counter()
    for func, (_cc, _nc, tottime, _ct, callers) in raw.items():
        label = own[func]
        if label != OTHER or not callers:
            by[label] += tottime
            continue
        edges = {caller: edge[2] for caller, edge in callers.items()}
        spent = sum(edges.values())
        if spent <= 0:
            by[label] += tottime
            continue
        for caller, part in edges.items():
            by[own.get(caller, OTHER)] += tottime * part / spent
    total = sum(by.values()) or 1.0
    return {k: v / total for k, v in by.most_common()}


@contextlib.contextmanager
def _profiled_threads(profilers: list[cProfile.Profile]) -> Iterator[None]:
    """Profile the calling thread, and each work item LangGraph's executor threads run
    meanwhile (its background puts), each with a profiler of its own (one profiler per
    thread: a profiler shared by two threads at once mixes their call stacks)."""
    import concurrent.futures.thread as cft

    original = cft._WorkItem.run
    lock = threading.Lock()

    def run(self: Any) -> None:
        own = cProfile.Profile(time.thread_time)
        with lock:
            profilers.append(own)
        own.enable()
        try:
            original(self)
        finally:
            own.disable()

    cft._WorkItem.run = run  # type: ignore[method-assign]
    main = cProfile.Profile(time.thread_time)
    profilers.append(main)
    main.enable()
    try:
        yield
    finally:
        main.disable()
        cft._WorkItem.run = original  # type: ignore[method-assign]


# ---------------------------------------------------------------------------------------------
# the run


COUNTED = [
    "pg statements",
    "pg round trips",
    "sqlite statements",
    "sqlite commits",
    "redis commands",
    "redis Lua calls",
    "redis round trips",
]


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.statements",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--pg", default="postgresql://postgres@127.0.0.1:5432/test")
    p.add_argument("--redis", default="redis://127.0.0.1:6379/0")
    p.add_argument("--turns", default="1,10,50", help="thread lengths T")
    p.add_argument("--sample", type=int, default=60, help="counted turns per saver and T")
    p.add_argument("--warmup", type=int, default=6, help="uncounted turns first")
    p.add_argument("--profile-turns", type=int, default=200, help="profiled turns per unit")
    p.add_argument("--profile-lengths", default="1,10", help="T of the CPU breakdown")
    p.add_argument("--no-profile", action="store_true", help="counts only")
    p.add_argument("--no-counts", action="store_true", help="the CPU breakdown only")
    p.add_argument("--savers", default="", help="slugs to keep, e.g. ours_pg,min_pg")
    p.add_argument("--out", type=Path, default=RESULTS, help="where the tables go")
    p.add_argument("--label", default="", help="added to the file names")
    return p.parse_args(argv)


def _commit() -> str:
    with contextlib.suppress(Exception):
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            cwd=Path(__file__).parent,
            check=True,
        ).stdout.strip()
    return "?"


def _counts_table(counts: dict[int, dict[str, dict[str, float]]]) -> str:
    lines = [
        "| saver | @T | " + " | ".join(COUNTED) + " |",
        "|---|---:|" + "---:|" * len(COUNTED),
    ]
    for length, by_saver in counts.items():
        for name, found in by_saver.items():
            cells = [f"{found[c]:.2f}" if found.get(c) else "-" for c in COUNTED]
            lines.append(f"| {name} | {length} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _profile_table(profiles: dict[int, dict[str, dict[str, Any]]]) -> str:
    parts = []
    for length, by_saver in profiles.items():
        names = list(by_saver)
        comps = sorted(
            {c for p in by_saver.values() for c in p["shares"]},
            key=lambda c: -max(p["shares"].get(c, 0.0) for p in by_saver.values()),
        )
        head = "| component @T=" + str(length) + " | " + " | ".join(names) + " |"
        lines = [head, "|---|" + "---:|" * len(names)]
        lines.append(
            "| **cpu ms/turn (no profiler)** | "
            + " | ".join(f"**{by_saver[n]['cpu ms/turn']:.3f}**" for n in names)
            + " |"
        )
        for comp in comps:
            cells = []
            for n in names:
                share = by_saver[n]["shares"].get(comp, 0.0)
                ms = share * by_saver[n]["cpu ms/turn"]
                cells.append(f"{share * 100:.1f}% ({ms:.3f} ms)" if share >= 0.0005 else "-")
            lines.append(f"| {comp} | " + " | ".join(cells) + " |")
        parts.append("\n".join(lines))
    return "\n\n".join(parts)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    tg.check_pg_url(args.pg)
    tg.check_redis_url(args.redis)
    install()
    env = tg.Env(pg=args.pg, redis=args.redis)
    keep = {slug for slug in args.savers.split(",") if slug}
    savers = [t for t in mn.SAVERS if not keep or t.slug in keep]
    lengths = [int(t) for t in str(args.turns).split(",") if t.strip()]
    load_before = os.getloadavg()
    started = time.perf_counter()
    counts: dict[int, dict[str, dict[str, float]]] = {}
    for length in [] if args.no_counts else lengths:
        counts[length] = {}
        for target in savers:
            counts[length][target.name] = count_turns(
                target, env, length, max(args.sample, length), args.warmup
            )
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d")
    label = f"-{args.label}" if args.label else ""
    header = (
        f"Source commit {_commit()}; {os.cpu_count()} CPUs; load average "
        f"{' '.join(f'{x:.2f}' for x in load_before)} -> "
        f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}; "
        f"`python -m benchmarks.statements --turns {args.turns} --sample {args.sample}`"
    )
    args.out.mkdir(parents=True, exist_ok=True)
    if counts:
        counted = (
            "# Statements, round trips and Lua calls per short turn (issue 39)\n\n"
            f"{header}\n\nPer turn, averaged over at least {args.sample} turns of fresh "
            "T-turn threads of the chat graph after "
            f"{args.warmup} warm-up turns. Counted in the client (see the module docstring "
            "for what each column counts).\n\n" + _counts_table(counts) + "\n"
        )
        print(counted)
        (args.out / f"{stamp}-statements{label}.md").write_text(counted)
    out: dict[str, Any] = {"counts": counts}
    if not args.no_profile:
        plens = [int(t) for t in str(args.profile_lengths).split(",") if t.strip()]
        profiled = savers
        profiles: dict[int, dict[str, dict[str, Any]]] = {}
        load_profile = os.getloadavg()
        for length in plens:
            profiles[length] = {
                target.name: profile_turns(target, env, length, args.profile_turns, args.warmup)
                for target in profiled
            }
        body = (
            "# Client CPU per short turn, by component (issue 39)\n\n"
            f"Source commit {_commit()}; {os.cpu_count()} CPUs; load average "
            f"{' '.join(f'{x:.2f}' for x in load_profile)} -> "
            f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}; "
            f"`python -m benchmarks.statements --profile-turns {args.profile_turns}`\n\n"
            "Self time of every function (cProfile, every thread of the turn) summed by "
            "component, as a share of the profiled total, and that share of the "
            "unprofiled client CPU per turn (`time.process_time`, this process only: the "
            "database servers' CPU is not in it). TTL fences and tombstone checks run in "
            "SQL and Lua inside the put: they cost no client CPU (see the statements "
            "table). One run, shared machine: read shares, not milliseconds.\n\n"
            + _profile_table(profiles)
            + "\n"
        )
        print(body)
        (args.out / f"{stamp}-cpu-breakdown{label}.md").write_text(body)
        out["profiles"] = profiles
    out["seconds"] = time.perf_counter() - started
    return out


if __name__ == "__main__":
    main()
