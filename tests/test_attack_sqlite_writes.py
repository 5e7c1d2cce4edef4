"""Attacks on SQLite's one-statement ``put_writes`` (issue 39).

In the common case (TTL off, a named thread without tombstone, no interrupt or error
writes, rows that fit one statement) a SQLite ``put_writes`` is one autocommit
``INSERT ... SELECT ... WHERE EXISTS (thread row)``; anything it does not store takes the
full path (``BEGIN IMMEDIATE``, the admission read, the ``INSERT``s, ``COMMIT``). These
tests hold it to what the full path promised: the same pending writes as InMemorySaver
(order, idx, a batch sent twice, one (task, idx) with another value), deletion is final
against writers of other threads and processes, a writer killed mid-loop leaves whole
batches only, callers' connections are left without an open transaction, TTL and fences
keep their full path, sealed values stay bound to their location.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.memory import InMemorySaver
from test_postgres_saver import cfg, make_checkpoint

from langgraph_memory_plus.checkpoint.config import thread_key
from langgraph_memory_plus.checkpoint.sqlite import AsyncSqliteSaver, SqliteSaver
from langgraph_memory_plus.checkpoint.sqlite.plans import MAX_PARAMS
from langgraph_memory_plus.encryption import Encryption, EncryptionError
from langgraph_memory_plus.errors import PoolTimeoutError

WAIT_SECONDS = 60.0
ROOT = Path(__file__).resolve().parents[1]
# Channels of every kind: regular, the special ones LangGraph maps to negative idx (two of
# them, errors and interrupts, take the full path; two do not), and odd text.
CHANNELS = [
    "a",
    "b",
    "__error__",
    "__scheduled__",
    "__interrupt__",
    "__resume__",
    "x/y.z",
    "频道",
    "nul\x00ch",
]
TASKS = ["t1", "t.2/三", "task\x00nul", "四"]


def traced(path: Path) -> tuple[sqlite3.Connection, list[str]]:
    """A connection in autocommit mode whose statements' first words are recorded."""
    conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
    seen: list[str] = []
    conn.set_trace_callback(lambda sql: seen.append(sql.split()[0].upper()))
    return conn, seen


def raw(path: Path, sql: str, *params: Any) -> list[tuple[Any, ...]]:
    with closing(sqlite3.connect(path)) as conn:
        return conn.execute(sql, params).fetchall()


def invariants(path: Path) -> list[str]:
    """What must never be on the file whatever raced: rows of an unnamed (deleted) thread,
    writes of a checkpoint that is not there (every test workload writes to stored
    checkpoints only), checkpoints of a thread without a row."""
    faults = []
    orphan = raw(
        path,
        """SELECT count(*) FROM lgmp_writes w WHERE NOT EXISTS (SELECT 1 FROM lgmp_checkpoints c
        WHERE c.thread_key = w.thread_key AND c.checkpoint_ns = w.checkpoint_ns
            AND c.checkpoint_id = w.checkpoint_id)""",
    )[0][0]
    if orphan:
        faults.append(f"{orphan} writes without their checkpoint")
    for table in ("lgmp_writes", "lgmp_checkpoints", "lgmp_blobs"):
        left = raw(
            path,
            f"""SELECT count(*) FROM {table} x WHERE NOT EXISTS (SELECT 1 FROM lgmp_threads t
            WHERE t.thread_key = x.thread_key AND t.thread_id IS NOT NULL)""",
        )[0][0]
        if left:
            faults.append(f"{left} rows of {table} on a deleted or missing thread")
    return faults


# -- the same pending writes as InMemorySaver ------------------------------------------------


def _random_batches(rnd: random.Random, n: int) -> Iterator[tuple[str, list[tuple[str, Any]]]]:
    for _ in range(n):
        size = rnd.choice([1, 1, 2, 3, 5])
        yield (
            rnd.choice(TASKS),
            [(rnd.choice(CHANNELS), rnd.randint(0, 4)) for _ in range(size)],
        )


@pytest.mark.parametrize("ns", ["", "sub:1|inner.二/x"])
def test_random_write_batches_read_back_as_in_memory(tmp_path: Path, ns: str) -> None:
    """Random batches (repeats of a (task, idx) with another value, special channels that
    take one statement or the full path, a batch sent twice, NUL, ``.``/``/`` and Chinese
    in ids, a subgraph namespace) give InMemorySaver's pending writes: the first value for
    a regular channel, the last for a special one, in the same order."""
    rnd = random.Random(39)
    for trial in range(12):
        ref = InMemorySaver()
        with SqliteSaver.from_conn_string(tmp_path / f"r{trial}.db") as ours:
            tid = f"t.{trial}/线程\x00"
            ck = make_checkpoint({"a": 1})
            configs = [s.put(cfg(tid, ns), ck, {"step": 0}, {"a": 1}) for s in (ref, ours)]
            for task, writes in _random_batches(rnd, 15):
                for saver, config in zip((ref, ours), configs, strict=True):
                    saver.put_writes(config, writes, task, "path|" + task)
                    if rnd.random() < 0.2:  # the same call again
                        saver.put_writes(config, writes, task, "path|" + task)
            want, got = (s.get_tuple(c) for s, c in zip((ref, ours), configs, strict=True))
            assert want is not None and got is not None
            assert got.pending_writes == want.pending_writes, trial


def test_the_largest_one_statement_batch_and_one_row_over(tmp_path: Path) -> None:
    """The code assumes SQLite's oldest parameter limit (999; this SQLite allows more):
    110 writes of 9 values and the thread key fit one statement, 111 do not and take the
    full path in one statement of 999 values, thousands several; each reads back as
    InMemorySaver's, sent once or twice."""
    conn, seen = traced(tmp_path / "big.db")
    try:
        assert conn.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER) >= MAX_PARAMS
        saver, ref = SqliteSaver(conn), InMemorySaver()
        widest = (MAX_PARAMS - 1) // 9
        for n in (widest, widest + 1, 4000):
            ck = make_checkpoint({"a": n})
            config = saver.put(cfg(f"t{n}"), ck, {"step": 0}, {"a": 1})
            ref.put(cfg(f"t{n}"), ck, {"step": 0}, {"a": 1})
            writes = [(f"c{i % 7}", i) for i in range(n)]
            for _ in range(2):
                seen.clear()
                saver.put_writes(config, writes, "task")
                ref.put_writes(config, writes, "task")
            seen.clear()
            saver.put_writes(config, [(ch, -v) for ch, v in writes], "task")  # other values
            ref.put_writes(config, [(ch, -v) for ch, v in writes], "task")
            assert conn.in_transaction is False
            found, want = saver.get_tuple(config), ref.get_tuple(config)
            assert found is not None and want is not None
            assert found.pending_writes == want.pending_writes
            assert len(found.pending_writes or []) == n
        # a fresh batch of exactly the widest size is one statement, one over is not
        for n, one_statement in ((widest, True), (widest + 1, False)):
            config = saver.put(cfg(f"u{n}"), make_checkpoint({"a": 1}), {"step": 0}, {"a": 1})
            seen.clear()
            saver.put_writes(config, [(f"c{i}", i) for i in range(n)], "task")
            assert (seen == ["INSERT"]) is one_statement, seen
    finally:
        conn.close()


# -- the full path stays where it must ---------------------------------------------------------


def test_ttl_on_takes_the_full_path_and_expiry_still_purges(tmp_path: Path) -> None:
    """With TTL on a write moves the thread's expiry: never the one statement. An expired
    thread is not read, and the sweep takes every row of it."""
    path = tmp_path / "ttl.db"
    conn, seen = traced(path)
    try:
        saver = SqliteSaver(conn, ttl={"default_ttl": 0.02})  # 1.2 seconds
        config = saver.put(cfg("t"), make_checkpoint({"a": 1}), {"step": 0}, {"a": 1})
        seen.clear()
        saver.put_writes(config, [("a", 1)], "task")
        assert "BEGIN" in seen and "UPDATE" in seen, seen
        time.sleep(1.5)
        assert saver.get_tuple(cfg("t")) is None
        saver.sweep_expired()
        assert raw(path, "SELECT count(*) FROM lgmp_writes")[0][0] == 0
        assert raw(path, "SELECT count(*) FROM lgmp_threads")[0][0] == 0
    finally:
        conn.close()


def test_a_thread_expiring_under_another_savers_ttl_is_not_written_by_one_statement(
    tmp_path: Path,
) -> None:
    """A thread whose row carries an expiry (a TTL saver wrote it) is written by a saver
    without TTL through the full path, which clears the expiry as before; after an expiry
    its old rows go, as with the full path."""
    path = tmp_path / "mixed.db"
    with SqliteSaver.from_conn_string(path, ttl={"default_ttl": 0.02}) as ttl_saver:
        config = ttl_saver.put(cfg("t"), make_checkpoint({"a": 1}), {"step": 0}, {"a": 1})
    conn, seen = traced(path)
    try:
        saver = SqliteSaver(conn)
        seen.clear()
        saver.put_writes(config, [("a", 1)], "task")
        assert "BEGIN" in seen, seen
        assert raw(path, "SELECT expires_at FROM lgmp_threads") == [(None,)]
        seen.clear()
        saver.put_writes(config, [("a", 2)], "task-2")
        assert seen == ["INSERT"], seen
        found = saver.get_tuple(config)
        assert found is not None and [w[2] for w in found.pending_writes or []] == [1, 2]
    finally:
        conn.close()


def test_interrupts_errors_and_a_deleted_threads_writes_take_the_full_path(
    tmp_path: Path,
) -> None:
    """Interrupt and error writes update the thread index (full path; its status says
    interrupted), a deleted run's writes are refused (its tombstone has ``live_after``),
    and a fresh run on the deleted id is written again through the full path."""
    path = tmp_path / "full.db"
    conn, seen = traced(path)
    try:
        saver = SqliteSaver(conn)
        config = saver.put(cfg("t"), make_checkpoint({"a": 1}), {"step": 0}, {"a": 1})
        seen.clear()
        saver.put_writes(config, [("a", 1), ("__interrupt__", ["stop"])], "task")
        assert "BEGIN" in seen, seen
        record = saver.threads.get("t")
        assert record is not None and record["status"] == "interrupted"
        saver.delete_thread("t")
        seen.clear()
        saver.put_writes(config, [("a", 2)], "late")
        assert "BEGIN" in seen and invariants(path) == [], seen
        assert saver.get_tuple(cfg("t")) is None and saver.threads.get("t") is None
        fresh = saver.put(cfg("t"), make_checkpoint({"a": 3}), {"step": 0}, {"a": 2})
        seen.clear()
        saver.put_writes(fresh, [("a", 4)], "new")
        assert "BEGIN" in seen, seen  # the tombstone's bound stays: full path
        found = saver.get_tuple(fresh)
        assert found is not None and [w[2] for w in found.pending_writes or []] == [4]
    finally:
        conn.close()


def test_a_fenced_write_is_checked_and_runs_in_the_fence_checks_transaction(
    tmp_path: Path,
) -> None:
    """With a lease the fence check opens the transaction: a superseded owner's writes are
    refused and nothing is stored; the current owner's are one ``INSERT`` inside it."""
    from langgraph_memory_plus import FencedWriteError

    path = tmp_path / "fence.db"
    conn, seen = traced(path)
    try:
        saver = SqliteSaver(conn)
        a = saver.fence.acquire("t", owner="a", lease_s=60)
        base = saver.put(a.config(), make_checkpoint({"a": 1}), {"step": 0}, {"a": 1})
        b = saver.fence.acquire("t", owner="b", lease_s=60, force=True)

        def leased(lease: Any) -> Any:
            return {"configurable": {**base["configurable"], **lease.config()["configurable"]}}

        with pytest.raises(FencedWriteError):
            saver.put_writes(leased(a), [("a", 1)], "task-a")
        assert not conn.in_transaction
        seen.clear()
        saver.put_writes(leased(b), [("a", 2)], "task-b")
        assert seen[0] == "BEGIN" and seen.count("INSERT") == 1 and seen[-1] == "COMMIT", seen
        found = saver.get_tuple(base)
        assert found is not None and [w[:2] for w in found.pending_writes or []] == [
            ("task-b", "a")
        ]
    finally:
        conn.close()


def test_sealed_writes_are_bound_to_their_location(tmp_path: Path) -> None:
    """Encryption on: the one statement stores the sealed bytes (no plaintext on disk),
    they read back, and a sealed write moved to another task or idx is refused."""
    path = tmp_path / "sealed.db"
    secret = "geheim-秘密-value"
    with SqliteSaver.from_conn_string(path, encryption=Encryption({"k1": b"1" * 32})) as saver:
        config = saver.put(cfg("t"), make_checkpoint({"a": 1}), {"step": 0}, {"a": 1})
        saver.put_writes(config, [("a", secret), ("b", secret + "2")], "task")
        found = saver.get_tuple(config)
        assert found is not None
        assert [w[2] for w in found.pending_writes or []] == [secret, secret + "2"]
        blobs = [bytes(b) for (b,) in raw(path, "SELECT blob FROM lgmp_writes")]
        assert len(blobs) == 2 and not any(secret.encode() in b for b in blobs)
        with closing(sqlite3.connect(path)) as db:  # swap the two values' places
            db.execute(
                "UPDATE lgmp_writes SET blob = (SELECT w.blob FROM lgmp_writes w "
                "WHERE w.idx = 1 - lgmp_writes.idx)"
            )
            db.commit()
        with pytest.raises(EncryptionError):
            saver.get_tuple(config)


# -- callers' connections ----------------------------------------------------------------------


@pytest.mark.parametrize("isolation", [None, "", "DEFERRED", "IMMEDIATE", "EXCLUSIVE"])
def test_a_callers_connection_in_any_mode_is_left_committed(
    tmp_path: Path, isolation: str | None
) -> None:
    """Whatever ``isolation_level`` a caller's connection has, writes are committed (seen by
    another connection) and no transaction is left open."""
    path = tmp_path / "caller.db"
    conn = sqlite3.connect(path, check_same_thread=False, isolation_level=isolation)
    try:
        saver = SqliteSaver(conn)
        config = saver.put(cfg("t"), make_checkpoint({"a": 1}), {"step": 0}, {"a": 1})
        saver.put_writes(config, [("a", 1), ("b", 2)], "task")
        saver.put_writes(config, [("a", 1), ("b", 2)], "task")  # again: full path
        assert not conn.in_transaction
        assert raw(path, "SELECT count(*) FROM lgmp_writes") == [(2,)]
        found = saver.get_tuple(config)
        assert found is not None and len(found.pending_writes or []) == 2
    finally:
        conn.close()


@pytest.mark.parametrize("isolation", [None, ""])
def test_writes_inside_a_callers_open_transaction_are_the_callers(
    tmp_path: Path, isolation: str | None
) -> None:
    """Inside the caller's open transaction writes run in a savepoint: the caller's
    rollback takes them back, its commit keeps them; the transaction stays the caller's."""
    path = tmp_path / "open.db"
    conn = sqlite3.connect(path, check_same_thread=False, isolation_level=isolation)
    try:
        saver = SqliteSaver(conn)
        config = saver.put(cfg("t"), make_checkpoint({"a": 1}), {"step": 0}, {"a": 1})
        for keep in (False, True):
            conn.execute("BEGIN")
            saver.put_writes(config, [("a", int(keep))], f"task-{keep}")
            assert conn.in_transaction
            assert raw(path, "SELECT count(*) FROM lgmp_writes") == [(0,)]
            conn.commit() if keep else conn.rollback()
        assert raw(path, "SELECT task_id FROM lgmp_writes") == [("task-True",)]
    finally:
        conn.close()


# -- concurrency: threads, asyncio, processes, a crash -------------------------------------------


def test_threads_writing_and_deleting_one_thread_leave_nothing_behind(tmp_path: Path) -> None:
    """Writer threads (Send: many tasks of one step) race ``delete_thread`` and fresh
    runs on one thread id: no write is left on a deleted thread or without its
    checkpoint; the writes of a thread no one deleted all land."""
    path = tmp_path / "race.db"
    errors: list[BaseException] = []
    with SqliteSaver.from_conn_string(path, pool_max_size=4) as saver:
        keep = saver.put(cfg("kept"), make_checkpoint({"a": 1}), {"step": 0}, {"a": 1})
        stop = time.monotonic() + 3.0

        def writer(k: int) -> None:
            try:
                i = 0
                while time.monotonic() < stop:
                    i += 1
                    found = saver.get_tuple(cfg("raced"))
                    if found is not None:
                        saver.put_writes(found.config, [("a", i), ("b", k)], f"w{k}-{i}")
                    saver.put_writes(keep, [("a", i)], f"w{k}-{i}")
            except BaseException as exc:
                errors.append(exc)

        def churn() -> None:
            try:
                while time.monotonic() < stop:
                    saver.put(cfg("raced"), make_checkpoint({"a": 1}), {"step": 0}, {"a": 1})
                    time.sleep(0.002)
                    saver.delete_thread("raced")
            except BaseException as exc:
                errors.append(exc)

        workers = [threading.Thread(target=writer, args=(k,)) for k in range(4)]
        workers.append(threading.Thread(target=churn))
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        assert not errors, errors
        saver.delete_thread("raced")
        assert saver.get_tuple(cfg("raced")) is None
        found = saver.get_tuple(keep)
        assert found is not None
        tasks = {w[0] for w in found.pending_writes or []}
    assert invariants(path) == []
    assert raw(path, "SELECT count(DISTINCT task_id) FROM lgmp_writes")[0][0] == len(tasks)


def test_a_call_is_not_starved_by_as_many_writers_as_connections(tmp_path: Path) -> None:
    """Writer threads as many as the pool's connections, each writing in a loop (a step's
    Send tasks), hold every connection while they queue for the write mutex: another
    call waits its turn and gets a connection. The pool used to leave a returned
    connection idle, the thread that returned it took it back at once, and the other
    call failed with ``PoolTimeoutError`` however short the writes."""
    done = threading.Event()
    errors: list[BaseException] = []
    with SqliteSaver.from_conn_string(
        tmp_path / "fair.db", pool_max_size=4, pool_timeout=10
    ) as saver:
        config = saver.put(cfg("t"), make_checkpoint({"a": 1}), {"step": 0}, {"a": 1})

        def writer(k: int) -> None:
            try:
                i = 0
                while not done.is_set():
                    i += 1
                    saver.put_writes(config, [("a", i)], f"w{k}-{i}")
            except BaseException as exc:
                errors.append(exc)

        workers = [threading.Thread(target=writer, args=(k,)) for k in range(4)]
        for w in workers:
            w.start()
        try:
            time.sleep(0.2)
            for n in range(3):
                saver.delete_thread(f"other-{n}")
                assert saver.get_tuple(config) is not None
        finally:
            done.set()
            for w in workers:
                w.join()
        assert not errors, errors


def test_a_pool_serves_waiting_borrowers_in_turn(tmp_path: Path) -> None:
    """Borrowers waiting on a full pool get connections in the order they came, and a
    thread that returns one and asks again at once queues behind them; one that gives
    up (timeout) leaves the line without taking a connection from the others."""
    from langgraph_memory_plus.drivers.sqlite import SqlitePool

    with SqlitePool(tmp_path / "turns.db", max_size=1, pool_timeout=WAIT_SECONDS) as pool:
        held = pool.acquire()
        order: list[str] = []

        def borrow(name: str) -> None:
            conn = pool.acquire()
            order.append(name)
            pool.release(conn)

        def queued(n: int) -> None:
            deadline = time.monotonic() + WAIT_SECONDS
            while len(pool._line) < n and time.monotonic() < deadline:
                time.sleep(0.001)
            assert len(pool._line) == n

        waiters = []
        for n, name in enumerate("abc", start=1):
            waiters.append(threading.Thread(target=borrow, args=(name,)))
            waiters[-1].start()
            queued(n)
        pool.release(held)
        order.append("returned")
        borrow("again")  # the returning thread asks again: after a, b and c
        for w in waiters:
            w.join()
        assert order[-1] == "again" and sorted(order[:-1]) == ["a", "b", "c", "returned"]
        assert [x for x in order if x in "abc"] == ["a", "b", "c"]
        quick = SqlitePool(tmp_path / "turns.db", max_size=1, pool_timeout=0.05)
        with quick:
            kept = quick.acquire()
            with pytest.raises(PoolTimeoutError):
                quick.acquire()
            assert not quick._line
            quick.release(kept)
            quick.release(quick.acquire())


async def test_many_concurrent_async_writes_match_in_memory(tmp_path: Path) -> None:
    """Hundreds of gathered ``aput_writes`` (tasks of a step, each sent twice, a subgraph
    among them) on the async saver's worker threads: InMemorySaver's pending writes."""
    ref = InMemorySaver()
    async with AsyncSqliteSaver.from_conn_string(tmp_path / "async.db") as saver:
        ck, sub = make_checkpoint({"a": 1}), make_checkpoint({"a": 2})
        root = await saver.aput(cfg("t"), ck, {"step": 0}, {"a": 1})
        inner = await saver.aput(cfg("t", "child:1"), sub, {"step": 0}, {"a": 1})
        ref.put(cfg("t"), ck, {"step": 0}, {"a": 1})
        ref.put(cfg("t", "child:1"), sub, {"step": 0}, {"a": 1})
        calls = [
            (config, [("a", k), (f"ch{k % 3}", str(k))], f"task-{k}")
            for k in range(150)
            for config in (root, inner)
        ]
        await asyncio.gather(*(saver.aput_writes(c, w, t) for c, w, t in calls * 2))
        for c, w, t in calls:
            ref.put_writes(c, w, t)
        for config in (root, inner):
            got, want = await saver.aget_tuple(config), ref.get_tuple(config)
            assert got is not None and want is not None
            assert got.pending_writes == want.pending_writes


CHILD = textwrap.dedent(
    """
    import json, random, sys
    sys.path[:0] = [sys.argv[5], sys.argv[5] + "/tests"]
    from langgraph_memory_plus.checkpoint.sqlite import SqliteSaver
    from test_postgres_saver import cfg, make_checkpoint
    path, name, n, seed = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    rnd = random.Random(seed)
    with SqliteSaver.from_conn_string(path, pool_max_size=2) as s:
        mine = None
        for i in range(n):
            shared = f"shared-{rnd.randint(0, 2)}"
            r = rnd.random()
            if r < 0.1:
                s.delete_thread(shared)
            elif r < 0.35:
                found = s.get_tuple(cfg(shared))
                s.put(found.config if found else cfg(shared), make_checkpoint({"a": i}),
                      {"step": i}, {"a": 1})
            else:
                found = s.get_tuple(cfg(shared))
                if found:
                    s.put_writes(found.config, [("a", i), ("b", name)], f"{name}-{i}")
            if mine is None or rnd.random() < 0.2:
                mine = s.put(mine or cfg("own-" + name), make_checkpoint({"a": i}),
                             {"step": i}, {"a": 1})
            size = rnd.choice([1, 3, 110, 111, 200])  # one statement or the full path
            s.put_writes(mine, [("c%d" % k, i) for k in range(size)], f"{name}-{i}")
            print(json.dumps([mine["configurable"]["checkpoint_id"], f"{name}-{i}", size]),
                  flush=True)
    """
)


def _children(path: Path, n: int, names: str) -> list[subprocess.Popen[str]]:
    return [
        subprocess.Popen(
            [sys.executable, "-c", CHILD, str(path), name, str(n), str(k), str(ROOT)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for k, name in enumerate(names)
    ]


def _acked(out: str) -> list[tuple[str, str, int]]:
    rows = []
    for line in out.splitlines():
        try:
            cid, task, size = json.loads(line)
        except ValueError:  # a line cut by the kill
            continue
        rows.append((cid, task, size))
    return rows


def _batches(path: Path, name: str) -> dict[tuple[str, str], int]:
    rows = raw(
        path,
        "SELECT checkpoint_id, task_id, count(*) FROM lgmp_writes WHERE thread_key = ? "
        "GROUP BY checkpoint_id, task_id",
        thread_key("own-" + name),
    )
    return {(cid, task): n for cid, task, n in rows}


def test_processes_writing_putting_and_deleting_one_file_keep_every_invariant(
    tmp_path: Path,
) -> None:
    """Three processes (each with its own write mutex) put, write and delete the same
    threads of one file, and write batches of every size to threads of their own: no
    process fails on a lock, no write is left on a deleted thread or without its
    checkpoint, and every acknowledged write of a thread no one deleted is there, whole."""
    path = tmp_path / "shared.db"
    with SqliteSaver.from_conn_string(path) as saver:
        saver.setup()
    children = _children(path, 150, "abc")
    outs = [child.communicate(timeout=WAIT_SECONDS * 3) for child in children]
    for child, (_, err) in zip(children, outs, strict=True):
        assert child.returncode == 0, err[-3000:]
    assert invariants(path) == []
    for name, (out, _) in zip("abc", outs, strict=True):
        acked, stored = _acked(out), _batches(path, name)
        assert len(acked) == 150
        assert {(cid, task): size for cid, task, size in acked} == stored


def test_a_writer_killed_mid_loop_leaves_whole_batches_only(tmp_path: Path) -> None:
    """SIGKILL a process writing batches (one statement and full path alike) in a loop:
    every batch on the file is whole, every acknowledged one is there, and the file's
    invariants hold for the next writer."""
    path = tmp_path / "crash.db"
    with SqliteSaver.from_conn_string(path) as saver:
        saver.setup()
    acked: list[tuple[str, str, int]] = []
    for round_ in range(3):
        [child] = _children(path, 100_000, "k")
        assert child.stdout is not None
        deadline = time.monotonic() + WAIT_SECONDS
        lines: list[str] = []
        while len(lines) < 20 + 15 * round_ and time.monotonic() < deadline:
            line = child.stdout.readline()
            if line:
                lines.append(line)
        os.kill(child.pid, signal.SIGKILL)
        out, _ = child.communicate(timeout=WAIT_SECONDS)
        assert child.returncode == -signal.SIGKILL
        acked.extend(_acked("".join(lines) + out))
    stored = _batches(path, "k")
    assert all(n in {1, 3, 110, 111, 200} for n in stored.values()), sorted(stored.values())
    assert all(stored.get((cid, task)) == size for cid, task, size in acked)
    assert invariants(path) == []
    with SqliteSaver.from_conn_string(path) as saver:
        found = saver.get_tuple(cfg("own-k"))
        assert found is not None
        config = saver.put(found.config, make_checkpoint({"a": 0}), {"step": 0}, {"a": 1})
        saver.put_writes(config, [("a", 1)], "after")
        found = saver.get_tuple(config)
        assert found is not None and [w[0] for w in found.pending_writes or []] == ["after"]


def test_writes_racing_erase_user_leave_nothing_of_the_user(tmp_path: Path) -> None:
    """Writer threads keep writing to a user's threads, with the user in their config (the
    erasure check opens the transaction) and without (the one statement), while
    ``erase_user`` runs: after it nothing of theirs is readable or stored, every such
    thread is a bare tombstone, another user's thread keeps its writes."""
    from langgraph_memory_plus.privacy.erasure import erase_user

    path = tmp_path / "erase.db"
    errors: list[BaseException] = []
    with SqliteSaver.from_conn_string(path, pool_max_size=4) as saver:

        def start(tid: str, user: str) -> Any:
            config = {"configurable": {"thread_id": tid, "checkpoint_ns": "", "user_id": user}}
            return saver.put(config, make_checkpoint({"a": 1}), {"step": 0}, {"a": 1})

        alice = [start(f"alice-{k}", "alice") for k in range(4)]
        bob = start("bob-0", "bob")
        done = threading.Event()

        def writer(k: int) -> None:
            try:
                i = 0
                while not done.is_set():
                    i += 1
                    config = alice[i % len(alice)]
                    if k % 2:  # the user named: the erasure hold refuses
                        config = {"configurable": {**config["configurable"], "user_id": "alice"}}
                    saver.put_writes(config, [("a", i)], f"w{k}-{i}")
                    saver.put_writes(bob, [("a", i)], f"w{k}-{i}")
            except BaseException as exc:
                errors.append(exc)

        workers = [threading.Thread(target=writer, args=(k,)) for k in range(4)]
        for w in workers:
            w.start()
        time.sleep(0.2)
        erase_user("alice", checkpointer=saver)
        time.sleep(0.2)
        done.set()
        for w in workers:
            w.join()
        assert not errors, errors
        for config in alice:
            assert saver.get_tuple(config) is None
            assert saver.threads.get(config["configurable"]["thread_id"]) is None
        found = saver.get_tuple(bob)
        assert found is not None and found.pending_writes
    assert invariants(path) == []
    named = raw(path, "SELECT count(*) FROM lgmp_threads WHERE thread_id IS NOT NULL")
    assert named == [(1,)]


def test_nul_in_a_namespace_is_refused_before_any_statement(tmp_path: Path) -> None:
    """A namespace with NUL is refused on write (SQLite's JSON functions would cut it),
    on the one-statement path as on the full one: no statement is sent, nothing stored."""
    from langgraph_memory_plus.errors import InvalidConfigError

    path = tmp_path / "nul.db"
    conn, seen = traced(path)
    try:
        saver = SqliteSaver(conn)
        config = saver.put(cfg("t"), make_checkpoint({"a": 1}), {"step": 0}, {"a": 1})
        bad = {"configurable": {**config["configurable"], "checkpoint_ns": "sub\x00x"}}
        for writes in ([("a", 1)], [("__interrupt__", 1)]):
            seen.clear()
            with pytest.raises(InvalidConfigError, match="NUL"):
                saver.put_writes(bad, writes, "task")
            assert seen == [] and not conn.in_transaction
        assert raw(path, "SELECT count(*) FROM lgmp_writes") == [(0,)]
    finally:
        conn.close()
