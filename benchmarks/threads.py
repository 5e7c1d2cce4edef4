"""The thread index at scale: search by user among 100,000 threads, and its cost per turn.

``python -m benchmarks.threads --pg URL --redis URL [--redis-cluster URL] [--threads N]``

Two parts, one run:

1. **Search.** Each backend gets ``--threads`` threads (default 100,000), one user owning
   ``--user-threads`` of them (1,000), the others spread over other users. The first
   thread of each user is written by the saver; the rest are copies of those rows made in
   bulk (SQL ``generate_series`` / a Redis pipeline), changing only the thread id, user
   and time: the rows are what the saver writes. Then p50 over ``--reps`` of
   ``threads.search(metadata={"user_id": u}, limit=10)`` at offset 0 (page 1) and 490
   (page 50), and of ``count``; and of "which threads wait for a human" (every 37th
   thread is ``interrupted``): ``search(status="interrupted")`` newest and oldest first
   (the approvals queue's first page) and for the big user. Side by side: what users
   do today without an index, the official ``PostgresSaver``
   (langgraph-checkpoint-postgres) seeded alike (one checkpoint per thread), scanning
   ``list(None, filter={"user_id": u})`` for the same pages of distinct threads
   (``--no-official`` skips it, for short runs).
2. **Turn cost.** A chat turn (``graph.invoke`` of :mod:`.workloads`' chat graph) with the
   index on and off (:func:`index_off`), and off again (the control: two identical modes
   show the noise floor), on one storage per backend, the modes taking turns one chat turn
   at a time for ``--rounds`` rounds; the overhead is the median of the paired ratios.

Loopback servers only; every unit uses storage of its own (a fresh database, a unique
Redis key prefix, a temporary SQLite file) and removes it afterwards.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Annotated, Any

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langgraph.graph import END, START, StateGraph, add_messages
from typing_extensions import TypedDict

from .targets import check_pg_url, check_redis_url


def _p50_ms(fn: Callable[[], Any], reps: int) -> float:
    fn()  # warm: plans, prepared statements, scripts
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


class State(TypedDict, total=False):
    messages: Annotated[list[AnyMessage], add_messages]


def _chat_graph() -> Any:
    def model(state: State) -> dict[str, Any]:
        last = state["messages"][-1]
        return {"messages": [AIMessage(content=f"re: {last.content}", id=f"ai-{last.id}")]}

    builder = StateGraph(State)
    builder.add_node("model", model)
    builder.add_edge(START, "model")
    builder.add_edge("model", END)
    return builder


def _seed_message(i: int) -> Any:
    return HumanMessage(content=f"hello, this is conversation {i}", id=f"h-{i}")


# -- storage of one unit -------------------------------------------------------------


@contextmanager
def _pg_database(admin_url: str) -> Iterator[str]:
    import psycopg

    name = f"lgmp_bench_threads_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    base, _, _ = admin_url.rpartition("/")
    try:
        yield f"{base}/{name}"
    finally:
        with psycopg.connect(admin_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


WAITING_EVERY = 37
"""Every 37th thread waits for a human (``interrupted``): about 2.7 % of all threads and
of the big user's (whose threads are every ``total // user_threads``-th)."""


def _status(i: int) -> str | None:
    """Thread i's status in the copies (``None``: its template's, ``idle``)."""
    return "interrupted" if i % WAITING_EVERY == 0 else None


def _users(total: int, user_threads: int) -> list[str]:
    """Thread i's user: the first ``user_threads`` threads (spread evenly) are "u-big"."""
    step = max(1, total // user_threads)
    return [
        "u-big" if i % step == 0 and i // step < user_threads else f"u-{i % 997}"
        for i in range(total)
    ]


def _seed_templates(saver: Any, users: list[str]) -> None:
    """One thread per distinct user, written by the saver (thread id ``seed-<user>``)."""
    graph = _chat_graph().compile(checkpointer=saver)
    for n, user in enumerate(sorted(set(users))):
        config = {"configurable": {"thread_id": f"seed-{user}", "user_id": user}}
        graph.invoke({"messages": [_seed_message(n)]}, config)


def _pg_clone(url: str, total: int, users: list[str], official: bool) -> None:
    """Copies of each user's template thread, in bulk, as the saver's own rows."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE TEMP TABLE u (i int, user_id text)")
        with conn.cursor().copy("COPY u (i, user_id) FROM STDIN") as copy:
            for i, user in enumerate(users):
                copy.write_row((i, user))
        if official:  # langgraph-checkpoint-postgres: one checkpoint per thread
            conn.execute(
                """INSERT INTO checkpoints (thread_id, checkpoint_ns, checkpoint_id,
                    parent_checkpoint_id, type, checkpoint, metadata)
                SELECT 'th-' || u.i, c.checkpoint_ns, c.checkpoint_id, c.parent_checkpoint_id,
                    c.type, c.checkpoint, jsonb_set(c.metadata, '{user_id}', to_jsonb(u.user_id))
                FROM u JOIN checkpoints c ON c.thread_id = 'seed-' || u.user_id"""
            )
            conn.execute(
                """INSERT INTO checkpoint_blobs (thread_id, checkpoint_ns, channel, version,
                    type, blob)
                SELECT 'th-' || u.i, b.checkpoint_ns, b.channel, b.version, b.type, b.blob
                FROM u JOIN checkpoint_blobs b ON b.thread_id = 'seed-' || u.user_id"""
            )
            conn.execute("ANALYZE")
            return
        conn.execute(
            """INSERT INTO lgmp_threads (thread_key, thread_id, expires_at)
            SELECT substring(sha256(convert_to('th-' || u.i, 'UTF8')) FROM 1 FOR 16),
                convert_to('th-' || u.i, 'UTF8'), NULL FROM u"""
        )
        conn.execute(
            """INSERT INTO lgmp_thread_index (thread_key, thread_id, created_at, updated_at,
                latest_id, metadata, status, interrupts, title, checkpoints, bytes)
            SELECT substring(sha256(convert_to('th-' || u.i, 'UTF8')) FROM 1 FOR 16),
                convert_to('th-' || u.i, 'UTF8'),
                now() - make_interval(secs => %s - u.i), now() - make_interval(secs => %s - u.i),
                s.latest_id, s.metadata,
                CASE WHEN u.i %% %s = 0 THEN 'interrupted' ELSE s.status END,
                s.interrupts, s.title, s.checkpoints, s.bytes
            FROM u JOIN lgmp_thread_index s
                ON s.thread_id = convert_to('seed-' || u.user_id, 'UTF8')""",
            (total, total, WAITING_EVERY),
        )
        # What autovacuum soon does to a bulk load: the visibility map that lets a count
        # or a page by user scan the index alone (rows a write changed since are read).
        conn.execute("VACUUM ANALYZE lgmp_thread_index")
        conn.execute("ANALYZE")


def _sqlite_clone(path: str, total: int, users: list[str]) -> None:
    import hashlib
    import sqlite3

    conn = sqlite3.connect(path)
    now = time.time()
    templates = {
        bytes(r[0]).decode(): r[1:]
        for r in conn.execute(
            "SELECT thread_id, latest_id, metadata, status, interrupts, title, checkpoints, "
            "bytes FROM lgmp_thread_index"
        )
    }
    rows = []
    for i, user in enumerate(users):
        tid = f"th-{i}".encode()
        tk = hashlib.sha256(tid).digest()[:16]
        latest, meta, status, *rest = templates[f"seed-{user}"]
        status = _status(i) or status
        rows.append((tk, tid, now - total + i, now - total + i, latest, meta, status, *rest))
    with conn:
        conn.executemany(
            "INSERT INTO lgmp_threads (thread_key, thread_id, expires_at) VALUES (?, ?, NULL)",
            [(r[0], r[1]) for r in rows],
        )
        conn.executemany(
            "INSERT INTO lgmp_thread_index (thread_key, thread_id, created_at, updated_at, "
            "latest_id, metadata, status, interrupts, title, checkpoints, bytes) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            rows,
        )
    conn.execute("ANALYZE")
    conn.close()


def _redis_clone(saver: Any, total: int, users: list[str]) -> None:
    """Records (copied from the templates) and sorted-set entries, pipelined."""
    index = saver._plans.threads
    client = saver.client
    templates = {}
    for user in set(users):
        templates[user] = client.hgetall(index._record_key(f"seed-{user}"))
    now = int(time.time() * 1000)
    for start in range(0, total, 5000):
        pipe = client.pipeline(transaction=False)
        for i in range(start, min(total, start + 5000)):
            user, tid = users[i], f"th-{i}"
            record = dict(templates[user])
            ts = now - (total - i) * 1000
            record.update({b"id": tid.encode(), b"c": ts, b"u": ts})
            status = _status(i) or record.get(b"s", b"idle").decode()
            record[b"s"] = status
            pipe.hset(index._record_key(tid), mapping=record)
            for key in _redis_sets(index, user, status):
                pipe.zadd(key, {tid: ts})
        pipe.execute()


def _redis_sets(index: Any, user: str, status: str) -> list[Any]:
    """The sorted sets a thread of ``user`` in ``status`` is in."""
    form = json.dumps(user)
    keys = [index.all_key, index.set_key("user_id", form)]
    if hasattr(index, "status_key"):  # the status index (absent before it was added)
        keys += [index.status_key(status), index.status_key(status, ("user_id", form))]
    return keys


# -- part 1: search ------------------------------------------------------------------


def _search_row(name: str, saver: Any, reps: int) -> dict[str, Any]:
    threads = saver.threads
    first = threads.search(metadata={"user_id": "u-big"}, limit=10)
    page50 = threads.search(metadata={"user_id": "u-big"}, limit=10, offset=490)
    assert len(first) == 10 and len(page50) == 10, (name, len(first), len(page50))
    return {
        "backend": name,
        "page 1 ms": _p50_ms(lambda: threads.search(metadata={"user_id": "u-big"}), reps),
        "page 50 ms": _p50_ms(
            lambda: threads.search(metadata={"user_id": "u-big"}, offset=490), reps
        ),
        "count ms": _p50_ms(lambda: threads.count(metadata={"user_id": "u-big"}), reps),
        "count": threads.count(metadata={"user_id": "u-big"}),
        # which threads wait for a human: the approvals queue's first page (oldest first)
        "waiting ms": _p50_ms(lambda: threads.search(status="interrupted"), reps),
        "waiting, oldest ms": _p50_ms(
            lambda: threads.search(status="interrupted", sort_order="asc"), reps
        ),
        "waiting, user ms": _p50_ms(
            lambda: threads.search(status="interrupted", metadata={"user_id": "u-big"}), reps
        ),
    }


def _official_row(url: str, total: int, users: list[str], reps: int) -> dict[str, Any]:
    from langgraph.checkpoint.postgres import PostgresSaver as OfficialSaver

    with _pg_database(url) as db, OfficialSaver.from_conn_string(db) as saver:
        saver.setup()
        _seed_templates(saver, users)
        _pg_clone(db, total, users, official=True)

        def page(offset: int) -> list[str]:
            seen: dict[str, None] = {}
            for t in saver.list(None, filter={"user_id": "u-big"}):
                seen.setdefault(t.config["configurable"]["thread_id"], None)
                if len(seen) >= offset + 10:
                    break
            return list(seen)[offset : offset + 10]

        assert len(page(490)) == 10
        slow_reps = max(3, reps // 20)
        return {
            "backend": "official PostgresSaver, list(None, filter=...)",
            "page 1 ms": _p50_ms(lambda: page(0), slow_reps),
            "page 50 ms": _p50_ms(lambda: page(490), slow_reps),
            "count ms": float("nan"),
            "count": None,
            "waiting ms": float("nan"),
            "waiting, oldest ms": float("nan"),
            "waiting, user ms": float("nan"),
        }


def search_part(args: argparse.Namespace) -> list[dict[str, Any]]:
    from langgraph_memory_plus import PostgresSaver, RedisSaver, SqliteSaver

    users = _users(args.threads, args.user_threads)
    rows = []
    with _pg_database(args.pg) as db, PostgresSaver.from_conn_string(db) as saver:
        saver.setup()
        _seed_templates(saver, users)
        _pg_clone(db, args.threads, users, official=False)
        rows.append(_search_row("ours PostgreSQL", saver, args.reps))
        _progress(rows[-1])
    redis_urls = [("ours Redis", args.redis)]
    if args.redis_cluster:
        redis_urls.append(("ours Redis Cluster", args.redis_cluster))
    for name, url in redis_urls:
        prefix = f"lgmpbt{uuid.uuid4().hex[:8]}"
        with RedisSaver.from_conn_string(url, key_prefix=prefix) as saver:
            try:
                _seed_templates(saver, users)
                _redis_clone(saver, args.threads, users)
                rows.append(_search_row(name, saver, args.reps))
                _progress(rows[-1])
            finally:
                for node_key in saver.client.scan_iter(match=f"{prefix}:*", count=5000):
                    saver.client.unlink(node_key)
    with tempfile.TemporaryDirectory() as tmp:
        path = str(Path(tmp) / "threads.db")
        with SqliteSaver.from_conn_string(path) as saver:
            saver.setup()
            _seed_templates(saver, users)
            _sqlite_clone(path, args.threads, users)
            rows.append(_search_row("ours SQLite", saver, args.reps))
            _progress(rows[-1])
    if args.official:
        rows.append(_official_row(args.pg, args.threads, users, args.reps))
        _progress(rows[-1])
    return rows


# -- part 2: the cost per turn -------------------------------------------------------

TURN_MODES = ("off", "off_again", "on")
"""``on``: the saver as shipped. ``off``: the same saver with the index's part of every
write taken out (see :func:`index_off`). ``off_again``: ``off`` once more, on threads of
its own: the control, whose "overhead" is the machine's noise alone."""


class _NoIndex:
    """SQLite's thread index with every write step a no-op (``exists`` says no)."""

    def __getattr__(self, name: str) -> Callable[..., Iterator[Any]]:
        def step(*_: Any, **__: Any) -> Iterator[Any]:
            return
            yield

        return step


def _redis_off_scripts() -> dict[str, str]:
    """The checkpoint scripts without the record's update in ``put`` / ``put_writes``."""
    from langgraph_memory_plus.checkpoint.redis import lua

    cuts = {
        "put": [
            "rec_put(thread_id, ns, cid, ARGV[10], ARGV[11], tonumber(ARGV[12]), ARGV[13], "
            "ARGV[15])",
            "if ns == '' and redis.call('HGET', K_REC, 's') ~= 'idle' then return 2 end",
        ],
        "put_writes": ["if ARGV[8] == '1' then rec_writes(thread_id, ns, cid, ARGV[9]) end"],
    }
    scripts = dict(lua.SCRIPTS)
    for name, lines in cuts.items():
        for line in lines:
            assert line in scripts[name], f"the {name} script changed: update index_off"
            scripts[name] = scripts[name].replace(line, "")
    return scripts


def index_off(backend: str, saver: Any) -> Any:
    """``saver`` with the thread index's work taken out of its writes (benchmark only).

    PostgreSQL: the put statement without its ``ix`` CTE (the trigger that copies a new
    thread's expiry stays: it fires once per thread). SQLite: a no-op index. Redis: no
    sorted-set step before the script, and scripts without the record's update (the put
    script keeps its check of a reused step 1, which reads nothing when none is).
    """
    plans = saver._plans
    if backend == "postgres":
        cte = f", {plans.threads.put_cte}"
        assert cte in plans._put_payload, "the put statement changed: update index_off"
        plans._put_payload = plans._put_payload.replace(cte, "")
    elif backend == "sqlite":
        plans.threads = _NoIndex()
    else:
        index = plans.threads
        index.intent = lambda thread_id, record, ts, then=None: then
        index.put = _script_only
    return saver


def _script_only(thread_id: str, ns: str, checkpoint_id: str, record: Any, write: Any) -> Any:
    """A Redis put with no index step: its script, run once (nothing is reused)."""
    return (yield write)


@contextmanager
def _turn_savers(backend: str, url: str) -> Iterator[dict[str, Any]]:
    """One saver per mode, all on the same fresh storage (a database, a key prefix, a
    file), the ``off`` ones with :func:`index_off`."""
    import langgraph_memory_plus as lgmp

    with ExitStack() as stack:
        if backend == "postgres":
            db = stack.enter_context(_pg_database(url))

            def make(off: bool) -> Any:
                return stack.enter_context(lgmp.PostgresSaver.from_conn_string(db))
        elif backend == "sqlite":
            path = str(Path(stack.enter_context(tempfile.TemporaryDirectory())) / "t.db")

            def make(off: bool) -> Any:
                return stack.enter_context(lgmp.SqliteSaver.from_conn_string(path))
        else:
            prefix = f"lgmpbt{uuid.uuid4().hex[:8]}"
            off_class = type("OffRedisSaver", (lgmp.RedisSaver,), {})
            off_class._scripts = _redis_off_scripts()

            def make(off: bool) -> Any:
                cls = off_class if off else lgmp.RedisSaver
                return stack.enter_context(cls.from_conn_string(url, key_prefix=prefix))

        savers = {mode: make(mode != "on") for mode in TURN_MODES}
        if not backend.startswith("redis"):
            savers["on"].setup()
        for mode, saver in savers.items():
            if mode != "on":
                index_off(backend.split("-")[0], saver)
        try:
            yield savers
        finally:
            if backend.startswith("redis"):
                client = savers["on"].client
                for key in client.scan_iter(match=f"{prefix}:*", count=5000):
                    client.unlink(key)


def turn_row(backend: str, url: str, rounds: int, turns: int) -> dict[str, Any]:
    """Chat turns of the three modes, one each per round, the order rotating; each mode
    writes threads of its own, ``turns`` turns long. Paired: each round's ``on`` (and
    ``off_again``) turn over the ``off`` turn of the same round (same thread length, a
    few ms apart), so the drift of a shared machine cancels out."""
    from .workloads import chat_graph, user_message

    times: dict[str, list[float]] = {mode: [] for mode in TURN_MODES}
    with _turn_savers(backend, url) as savers:
        graphs = {m: chat_graph().compile(checkpointer=s) for m, s in savers.items()}
        for n in range(-len(TURN_MODES), rounds):  # the first rounds warm up, untimed
            shift = n % len(TURN_MODES)
            for mode in TURN_MODES[shift:] + TURN_MODES[:shift]:
                thread = max(n, 0) // turns
                config = {"configurable": {"thread_id": f"{mode}-{thread}", "user_id": "u"}}
                start = time.perf_counter()
                graphs[mode].invoke({"messages": [user_message(n)]}, config)
                if n >= 0:
                    times[mode].append(time.perf_counter() - start)
        listed = savers["on"].threads.count(metadata={"user_id": "u"})
        assert listed == -(-rounds // turns), listed  # only the "on" threads are indexed
    p50 = {mode: statistics.median(values) * 1000 for mode, values in times.items()}
    row: dict[str, Any] = {"backend": backend, "rounds": rounds}
    for mode in TURN_MODES:
        row[f"{mode} p50 ms"] = p50[mode]
    for mode in ("off_again", "on"):
        paired = [x / y for x, y in zip(times[mode], times["off"], strict=True)]
        row[f"{mode} paired"] = f"{(statistics.median(paired) - 1) * 100:+.1f}%"
    return row


def turn_part(args: argparse.Namespace) -> list[dict[str, Any]]:
    targets = [("postgres", args.pg), ("redis", args.redis), ("sqlite", "")]
    if args.redis_cluster:
        targets.insert(2, ("redis-cluster", args.redis_cluster))
    rows = []
    for backend, url in targets:
        rows.append(turn_row(backend, url, args.rounds, args.turns))
        _progress(rows[-1])
    return rows


# -- report --------------------------------------------------------------------------


def _progress(row: dict[str, Any]) -> None:
    print(json.dumps(row), file=sys.stderr, flush=True)


def _table(rows: list[dict[str, Any]]) -> str:
    heads = list(rows[0])

    def cell(v: Any) -> str:
        if isinstance(v, float):
            return "-" if v != v else f"{v:.2f}"
        return "-" if v is None else str(v)

    lines = ["| " + " | ".join(heads) + " |", "|" + "---|" * len(heads)]
    lines += ["| " + " | ".join(cell(r[h]) for h in heads) + " |" for r in rows]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pg", required=True)
    parser.add_argument("--redis", required=True)
    parser.add_argument("--redis-cluster", default=None, help="redis+cluster://127.0.0.1:PORT")
    parser.add_argument("--threads", type=int, default=100_000)
    parser.add_argument("--user-threads", type=int, default=1_000)
    parser.add_argument("--reps", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=300, help="turns per mode (part 2)")
    parser.add_argument("--turns", type=int, default=20, help="turns per thread (part 2)")
    parser.add_argument("--parts", default="search,turns")
    parser.add_argument(
        "--no-official", dest="official", action="store_false", help="skip the official saver"
    )
    args = parser.parse_args()
    check_pg_url(args.pg)
    check_redis_url(args.redis)
    if args.redis_cluster:
        check_redis_url(args.redis_cluster.replace("+cluster", ""))
    parts = set(args.parts.split(","))
    load = os.getloadavg()
    print(f"threads={args.threads} user_threads={args.user_threads} reps={args.reps} "
          f"load={load[0]:.2f}\n")  # fmt: skip
    if "search" in parts:
        print("Search by user_id (p50, ms)\n")
        print(_table(search_part(args)) + "\n")
    if "turns" in parts:
        print("Chat turn (p50, ms; paired: median of each round's turn over its off turn)\n")
        print(_table(turn_part(args)) + "\n")
    print(f"load at end={os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
