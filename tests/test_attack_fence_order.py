"""Attacks on the PostgreSQL fence's lock order (commit 5266ca1), by someone who did not
write it.

The change share-locks the fence row only with the thread row held (its first version
also inserted a new thread's row on the claim as read, unlocked; since aa545a9 a new
thread's first fenced write takes the locked path). These tests interleave what it
promises: a takeover or a deletion landing before the locked check (the superseded
write must leave nothing, not even the thread row), a fence taken
or renewed in a caller's transaction before a write of it (thread row first, fence row
second, everywhere), and many callers mixing fenced writes with takeovers, deletions,
prunes, sweeps and erasures.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from langgraph.checkpoint.base import empty_checkpoint
from test_attack_speed2 import _wait_for_lock_wait

pytestmark = pytest.mark.storage


@contextlib.contextmanager
def _schema(pg_url: str) -> Iterator[tuple[str, psycopg.Connection[Any]]]:
    """A schema of this test's own (sweep_expired sweeps every expired thread it sees)."""
    schema = f"lgmp_fence_order_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(pg_url, autocommit=True) as other:
        try:
            yield schema, other
        finally:
            other.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def _left(other: psycopg.Connection[Any], schema: str, tk: bytes) -> dict[str, Any]:
    """What a thread has in storage; ``named``: its row as the CLI's ``info`` counts it
    (``thread_id IS NOT NULL``)."""
    s = f'"{schema}"'
    row = other.execute(
        f"""SELECT
            (SELECT count(*) FROM {s}.lgmp_threads WHERE thread_key = %(tk)s
                AND thread_id IS NOT NULL),
            (SELECT count(*) FROM {s}.lgmp_checkpoints WHERE thread_key = %(tk)s),
            (SELECT count(*) FROM {s}.lgmp_task_writes WHERE thread_key = %(tk)s),
            (SELECT count(*) FROM {s}.lgmp_thread_index WHERE thread_key = %(tk)s)""",
        {"tk": tk},
    ).fetchone()
    assert row is not None
    return dict(zip(("named", "checkpoints", "writes", "index"), row, strict=True))


# -- a takeover or a deletion between the unlocked claim and the locked check ------------


_MODES = {
    "standalone": {},
    # the write's statements in one transaction: its failure rolls the row back
    "pipeline": {"pipeline": True},
    "retention": {"keep_last": 2},
    "ttl": {"ttl": {"default_ttl": 5}},
}


@pytest.mark.parametrize(
    ("call", "by", "thread_id", "mode"),
    [
        (call, by, thread_id, "standalone")
        for call in ["put", "put_writes"]
        for by in ["takeover", "delete_thread", "prune"]
        for thread_id in ["order-{}", "a.b/../{}", "线程-{}"]
    ]
    + [
        (call, "takeover", "order-{}", mode)
        for call in ["put", "put_writes"]
        for mode in ["pipeline", "retention", "ttl", "user", "async"]
    ],
)
def test_pg_superseded_first_write_leaves_no_thread_row(
    pg_url: str, call: str, by: str, thread_id: str, mode: str
) -> None:
    """The first fenced write of a new thread inserts the thread row, then share-locks
    the fence row, which a takeover (another owner's ``acquire(force=True)``) or a
    deletion holds meanwhile; once that commits the write is refused
    (``FencedWriteError``). It must leave nothing: no checkpoint, no
    writes, no index row, and no thread row either, which the CLI's ``info`` counts as a
    thread (``thread_id IS NOT NULL``) and which, without a TTL, nothing ever sweeps.
    After a deletion that is a thread named again after ``delete_thread`` returned.

    Before the fix (5266ca1: the row inserted on the claim as read, unlocked, by the
    fast statement) the autocommitted statement kept the row it inserted (21 cases:
    every one whose write is one standalone statement, put_writes with retention
    included); in a transaction (pipeline mode, a put with retention, a run with a
    user, the async saver's) the refusal rolled it back already (7 cases). Now a fenced
    fast statement inserts no row: a new thread's first write takes the locked path,
    in a transaction the refusal rolls back."""
    from langgraph_memory_plus.checkpoint.config import thread_key
    from langgraph_memory_plus.checkpoint.postgres import AsyncPostgresSaver, PostgresSaver
    from langgraph_memory_plus.errors import FencedWriteError

    thread_id = thread_id.format(uuid.uuid4().hex[:8])
    tk = thread_key(thread_id)
    checkpoint = empty_checkpoint()
    outcome: dict[str, BaseException | None] = {}
    with (
        _schema(pg_url) as (schema, other),
        PostgresSaver.from_conn_string(
            pg_url, schema=schema, pool_max_size=2, fence=True, **_MODES.get(mode, {})
        ) as saver,
        psycopg.connect(pg_url) as holder,
    ):
        saver.setup()
        lease = saver.fence.acquire(thread_id, owner="w1")
        configurable = {
            "thread_id": thread_id,
            "checkpoint_ns": "",
            "checkpoint_id": checkpoint["id"],
        }
        if mode == "user":
            configurable["user_id"] = "u1"
        config = lease.config({"configurable": configurable})
        # The other side runs in a caller's open transaction: its locks stay held
        # (fence row updated or deleted, not committed) until ``holder`` commits.
        holder.execute("SELECT 1")
        other_side = PostgresSaver(holder, schema=schema, fence=True)
        if by == "takeover":
            other_side.fence.acquire(thread_id, owner="w2", force=True)
        elif by == "prune":
            other_side.prune([thread_id], strategy="delete")
        else:
            other_side.delete_thread(thread_id)

        async def awrite() -> None:
            async with AsyncPostgresSaver.from_conn_string(
                pg_url, schema=schema, pool_max_size=1, fence=True
            ) as asaver:
                if call == "put_writes":
                    await asaver.aput_writes(config, [("ch", 1)], "task-1")
                else:
                    await asaver.aput(config, checkpoint, {"source": "loop", "step": 0}, {})

        def write() -> None:
            try:
                if mode == "async":
                    asyncio.run(awrite())
                elif call == "put_writes":
                    saver.put_writes(config, [("ch", 1)], "task-1")
                else:
                    saver.put(config, checkpoint, {"source": "loop", "step": 0}, {})
                outcome["write"] = None
            except BaseException as exc:  # reported below
                outcome["write"] = exc

        writer = threading.Thread(target=write, daemon=True)
        writer.start()
        # the write waits at the fence row (with the thread row it inserted, in the
        # locked path's transaction)
        _wait_for_lock_wait(other, "WITH %")
        holder.commit()
        writer.join(30)
        assert not writer.is_alive()
        left = _left(other, schema, tk)
        listed = list(saver.list({"configurable": {"thread_id": thread_id}}))
    assert isinstance(outcome["write"], FencedWriteError), repr(outcome["write"])
    assert left == {"named": 0, "checkpoints": 0, "writes": 0, "index": 0}
    assert listed == []


# -- a fence taken in a caller's transaction, then a write of it ------------------------


@pytest.mark.parametrize("step", ["acquire", "takeover", "renew", "release"])
@pytest.mark.parametrize("deletion", ["delete_thread", "prune"])
def test_pg_fence_step_then_write_in_a_callers_transaction_against_a_deletion(
    pg_url: str, step: str, deletion: str
) -> None:
    """On a caller's connection with its transaction open (``PostgresSaver(conn)``), a
    run takes the fence (``acquire``, as a run's start does, or another owner's
    takeover, a renew, a release) and then writes: the fence row stays locked to the
    commit. A deletion that comes between locks the thread row and waits for the fence
    row; the write then waits for the thread row: crosswise, ``DeadlockDetected`` after
    1 s for one of them (every case before the fix). With the thread row taken first by
    the fence's statements too, as everywhere, the deletion waits for the caller's
    transaction, and runs after it: nothing of the thread stays, the write landed or
    was refused (released), and neither fails otherwise."""
    from langgraph_memory_plus.checkpoint.config import thread_key
    from langgraph_memory_plus.checkpoint.postgres import PostgresSaver
    from langgraph_memory_plus.errors import FencedWriteError

    thread_id = f"order-tx-{uuid.uuid4().hex[:8]}"
    tk = thread_key(thread_id)
    outcome: dict[str, BaseException | None] = {}
    with (
        _schema(pg_url) as (schema, other),
        PostgresSaver.from_conn_string(pg_url, schema=schema, pool_max_size=2, fence=True) as saver,
        psycopg.connect(pg_url) as own,
    ):
        saver.setup()
        first = saver.fence.acquire(thread_id, owner="w0")
        saver.put(
            first.config({"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}),
            empty_checkpoint(),
            {"source": "loop", "step": 0},
            {},
        )
        own.execute("SELECT 1")  # the caller's transaction
        mine = PostgresSaver(own, schema=schema, fence=True)
        if step == "acquire":
            saver.fence.release(first)
            lease = mine.fence.acquire(thread_id, owner="w1")
        elif step == "takeover":
            lease = mine.fence.acquire(thread_id, owner="w1", force=True)
        elif step == "renew":
            lease = mine.fence.renew(first)
        else:
            lease = first
            mine.fence.release(first)

        def delete() -> None:
            try:
                if deletion == "prune":
                    saver.prune([thread_id], strategy="delete")
                else:
                    saver.delete_thread(thread_id)
                outcome["delete"] = None
            except BaseException as exc:  # reported below
                outcome["delete"] = exc

        deleter = threading.Thread(target=delete, daemon=True)
        deleter.start()
        _wait_for_lock_wait(other, "%")
        try:
            mine.put(
                lease.config({"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}),
                empty_checkpoint(),
                {"source": "loop", "step": 1},
                {},
            )
            own.commit()
            outcome["write"] = None
        except BaseException as exc:  # reported below
            own.rollback()
            outcome["write"] = exc
        deleter.join(30)
        assert not deleter.is_alive()
        left = _left(other, schema, tk)
    assert outcome["delete"] is None, repr(outcome["delete"])
    if step == "release":
        assert isinstance(outcome["write"], FencedWriteError), repr(outcome["write"])
    else:
        assert outcome["write"] is None, repr(outcome["write"])
    assert left == {"named": 0, "checkpoints": 0, "writes": 0, "index": 0}


@pytest.mark.xfail(
    strict=True,
    reason="a fence taken in a caller's transaction before the thread has a row locks "
    "the fence row first: a superseded owner's first write then inserts the row and "
    "waits for the fence, and the caller's write waits for that row (DeadlockDetected); "
    "the take cannot lock a row that does not exist yet",
)
def test_pg_fence_taken_in_a_callers_transaction_before_the_thread_row_exists(
    pg_url: str,
) -> None:
    """The caller's transaction takes over a thread that has no row yet (no write so
    far), then writes; the superseded owner's first write comes between: its claim (read
    unlocked, the takeover not committed) holds, it inserts the thread row and waits for
    the fence row the transaction holds. The transaction's write then meets that row:
    crosswise. Wanted: the superseded write refused, the caller's write landed."""
    from langgraph_memory_plus.checkpoint.postgres import PostgresSaver
    from langgraph_memory_plus.errors import FencedWriteError

    thread_id = f"order-new-tx-{uuid.uuid4().hex[:8]}"
    outcome: dict[str, BaseException | None] = {}
    with (
        _schema(pg_url) as (schema, other),
        PostgresSaver.from_conn_string(pg_url, schema=schema, pool_max_size=2, fence=True) as saver,
        psycopg.connect(pg_url) as own,
    ):
        saver.setup()
        stale = saver.fence.acquire(thread_id, owner="w0")
        own.execute("SELECT 1")
        mine = PostgresSaver(own, schema=schema, fence=True)
        lease = mine.fence.acquire(thread_id, owner="w1", force=True)

        def stale_write() -> None:
            try:
                saver.put(
                    stale.config({"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}),
                    empty_checkpoint(),
                    {"source": "loop", "step": 0},
                    {},
                )
                outcome["stale"] = None
            except BaseException as exc:  # reported below
                outcome["stale"] = exc

        writer = threading.Thread(target=stale_write, daemon=True)
        writer.start()
        _wait_for_lock_wait(other, "WITH prior AS%")
        try:
            mine.put(
                lease.config({"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}),
                empty_checkpoint(),
                {"source": "loop", "step": 0},
                {},
            )
            own.commit()
            outcome["mine"] = None
        except BaseException as exc:  # reported below
            own.rollback()
            outcome["mine"] = exc
        writer.join(30)
        assert not writer.is_alive()
    assert outcome["mine"] is None, repr(outcome["mine"])
    assert isinstance(outcome["stale"], FencedWriteError), repr(outcome["stale"])


# -- many callers at once ----------------------------------------------------------------

_IDS = ["load.{}", "load/{}", "负载-{}", "load-{}"]


@pytest.mark.parametrize("ttl", [None, 0.02], ids=["no-ttl", "ttl"])
def test_pg_fenced_writers_takeovers_and_deletions_at_once(pg_url: str, ttl: float | None) -> None:
    """Writers (sync, async, with retention, with a user, in pipeline mode, in
    subgraph namespaces) take threads from each other (``acquire(force=True)``) and write
    put/put_writes chains, while others delete (``delete_thread``, ``prune``,
    ``erase_user``) and sweep, with a TTL (threads expire, are swept and revived) or
    without. Nothing may fail but ``FencedWriteError``, nothing may hang, and after:

    - no write was accepted whose lease another owner took (a larger number) before it
      began, nor one whose thread was deleted between its lease and its start;
    - nothing stored came from a run (lease) taken before a deletion of its thread began;
    - stored checkpoints and writes are those of accepted calls only;
    - no thread row is named (``thread_id``) without a checkpoint or a write of it;
    - without a TTL: an accepted put that no deletion followed is stored.
    """
    from langgraph.checkpoint.base.id import uuid6

    from langgraph_memory_plus.checkpoint.postgres import AsyncPostgresSaver, PostgresSaver
    from langgraph_memory_plus.errors import FencedWriteError
    from langgraph_memory_plus.privacy.erasure import erase_user

    run = uuid.uuid4().hex[:6]
    tids = [name.format(f"{run}-{n}") for name in _IDS for n in range(2)]
    user_of = {tid: f"user-{i % 2}-{run}" for i, tid in enumerate(tids)}
    seconds = 3.5
    lock = threading.Lock()
    acquired: list[tuple[str, str, int, float]] = []  # thread, owner, token, when (done)
    deletions: list[tuple[str, float, float, str]] = []  # thread, began, ended, how
    calls: list[dict[str, Any]] = []
    unexpected: list[BaseException] = []
    options: dict[str, Any] = {"pool_max_size": 2, "fence": True}
    if ttl is not None:
        options["ttl"] = {"default_ttl": ttl}

    def record_call(**call: Any) -> None:
        with lock:
            calls.append(call)

    def chain(saver: Any, worker: str, rng: Any, user: bool) -> None:
        tid = rng.choice(tids)
        lease = saver.fence.acquire(tid, owner=worker, force=True)
        with lock:
            acquired.append((tid, worker, lease.token, time.monotonic()))
        got = lease.token, time.monotonic()
        ns = rng.choice(["", "", "sub:1"])
        configurable: dict[str, Any] = {"thread_id": tid, "checkpoint_ns": ns}
        if user:
            configurable["user_id"] = user_of[tid]
        config = lease.config({"configurable": configurable})
        for step in range(3):
            # a run's calls all carry its config (put returns the ids alone)
            config = lease.config({"configurable": {**configurable, **config["configurable"]}})
            cp = empty_checkpoint()
            cp["id"] = str(uuid6())
            uid = uuid.uuid4().hex
            began = time.monotonic()
            try:
                config = saver.put(config, cp, {"source": "loop", "step": step, "uid": uid}, {})
                config = lease.config({"configurable": {**configurable, **config["configurable"]}})
                ok = True
            except FencedWriteError:
                ok = False
            record_call(
                kind="put",
                tid=tid,
                ns=ns,
                uid=uid,
                owner=worker,
                token=got[0],
                leased=got[1],
                began=began,
                ended=time.monotonic(),
                ok=ok,
                worker=worker,
            )
            if not ok:
                return
            task = uuid.uuid4().hex
            began = time.monotonic()
            try:
                saver.put_writes(config, [("ch", step)], task)
                ok = True
            except FencedWriteError:
                ok = False
            record_call(
                kind="writes",
                tid=tid,
                ns=ns,
                uid=task,
                owner=worker,
                token=got[0],
                leased=got[1],
                began=began,
                ended=time.monotonic(),
                ok=ok,
                worker=worker,
            )
            if not ok:
                return

    def guarded(body: Any) -> Any:
        def run_it() -> None:
            try:
                body()
            except BaseException as exc:  # reported below
                unexpected.append(exc)

        return run_it

    def writer(worker: str, extra: dict[str, Any], user: bool) -> None:
        rng = random.Random(worker)
        with PostgresSaver.from_conn_string(pg_url, schema=schema, **options, **extra) as saver:
            deadline = time.monotonic() + seconds
            while time.monotonic() < deadline:
                chain(saver, worker, rng, user)

    def async_writer(worker: str) -> None:
        rng = random.Random(worker)

        async def main() -> None:
            async with AsyncPostgresSaver.from_conn_string(
                pg_url, schema=schema, **options
            ) as asaver:
                deadline = time.monotonic() + seconds
                while time.monotonic() < deadline:
                    # the sync API of the async saver from a worker thread
                    await asyncio.to_thread(chain, asaver, worker, rng, False)

        asyncio.run(main())

    def remover() -> None:
        rng = random.Random("remover")
        with PostgresSaver.from_conn_string(pg_url, schema=schema, **options) as saver:
            deadline = time.monotonic() + seconds
            while time.monotonic() < deadline:
                what = rng.choice(["delete", "prune", "sweep", "erase", "none"])
                tid = rng.choice(tids)
                began = time.monotonic()
                gone = [tid]
                if what == "delete":
                    saver.delete_thread(tid)
                elif what == "prune":
                    saver.prune([tid], strategy="delete")
                elif what == "sweep":
                    saver.sweep_expired()
                    gone = []
                elif what == "none":
                    gone = []
                elif what == "erase":
                    user = user_of[tid]
                    # its hold drops the user's writes for 2 s (accepted, not stored)
                    erase_user(user, checkpointer=saver, tombstone_hours=2 / 3600)
                    gone = [t for t in tids if user_of[t] == user]
                with lock:
                    deletions.extend((t, began, time.monotonic(), what) for t in gone)
                time.sleep(rng.random() * 0.05)

    with _schema(pg_url) as (schema, other):
        with PostgresSaver.from_conn_string(pg_url, schema=schema, **options) as saver:
            saver.setup()
        workers = [
            threading.Thread(target=guarded(lambda: writer("w-plain", {}, False))),
            threading.Thread(target=guarded(lambda: writer("w-keep", {"keep_last": 2}, False))),
            threading.Thread(target=guarded(lambda: writer("w-user", {}, True))),
            threading.Thread(target=guarded(lambda: writer("w-pipe", {"pipeline": True}, True))),
            threading.Thread(target=guarded(lambda: async_writer("w-async"))),
            threading.Thread(target=guarded(remover)),
        ]
        for w in workers:
            w.daemon = True
            w.start()
        for w in workers:
            w.join(seconds + 60)
        assert not any(w.is_alive() for w in workers), "a caller hangs"
        assert not unexpected, repr(unexpected)
        s = f'"{schema}"'
        stored_cps = {
            uid
            for (uid,) in other.execute(
                f"SELECT c.metadata_json ->> 'uid' FROM {s}.lgmp_checkpoints c "
                f"JOIN {s}.lgmp_threads t ON t.thread_key = c.thread_key "
                "WHERE t.thread_id IS NOT NULL AND (t.expires_at IS NULL OR t.expires_at > now())"
            ).fetchall()
        }
        stored_writes = {
            task for (task,) in other.execute(f"SELECT task_id FROM {s}.lgmp_task_writes")
        }
        named_empty = other.execute(
            f"""SELECT t.thread_id FROM {s}.lgmp_threads t WHERE t.thread_id IS NOT NULL
            AND NOT EXISTS (SELECT 1 FROM {s}.lgmp_checkpoints c WHERE c.thread_key = t.thread_key)
            AND NOT EXISTS (SELECT 1 FROM {s}.lgmp_task_writes w
                WHERE w.thread_key = t.thread_key)"""
        ).fetchall()
        all_stored = {
            uid
            for (uid,) in other.execute(
                f"SELECT metadata_json ->> 'uid' FROM {s}.lgmp_checkpoints"
            ).fetchall()
        } | stored_writes
    problems: list[str] = []
    by_uid = {c["uid"]: c for c in calls}
    for uid in all_stored:
        call = by_uid.get(uid)
        if call is None or not call["ok"]:
            problems.append(f"stored but refused or unknown: {call}")
    for call in calls:
        if not call["ok"]:
            continue
        if call["worker"] in ("w-user", "w-pipe") and call["uid"] not in all_stored:
            continue  # maybe dropped while its user's erasure held: accepted, not stored
        # a takeover's number is larger (the order acquires return in is not theirs)
        taken = [
            when
            for tid, owner, token, when in acquired
            if tid == call["tid"] and token > call["token"] and when < call["began"]
        ]
        if taken:
            problems.append(f"accepted after a takeover: {call}")
        deleted = [
            end
            for tid, began, end, how in deletions
            if tid == call["tid"]
            and call["leased"] < began
            and end < call["began"]
            and how != "erase"  # an erased user's writes are dropped, not refused
        ]
        if deleted:
            problems.append(f"accepted after a deletion: {call}")
    for uid in all_stored:
        call = by_uid.get(uid)
        if call is None:
            continue
        # erasure deletes the threads its user's writes are indexed under, no others
        if any(
            tid == call["tid"]
            and call["leased"] < began
            and (how != "erase" or call["worker"] in ("w-user", "w-pipe"))
            for tid, began, _, how in deletions
        ):
            problems.append(f"stored from a run that started before a deletion: {call}")
    if ttl is None:
        for call in calls:
            if call["kind"] != "put" or not call["ok"] or call["worker"] == "w-keep":
                continue
            if call["uid"] in stored_cps:
                continue
            if any(tid == call["tid"] and end > call["began"] for tid, _, end, _ in deletions):
                continue
            if call["worker"] in ("w-user", "w-pipe") and any(
                how == "erase" and user_of[tid] == user_of[call["tid"]]
                for tid, _, _, how in deletions
            ):
                continue  # dropped while its user's erasure held
            if any(
                other["worker"] == "w-keep"
                and other["tid"] == call["tid"]
                and other["ns"] == call["ns"]
                and other["ended"] > call["began"]
                for other in calls
            ):
                continue  # retention (keep_last=2) trims the namespace, whoever wrote it
            problems.append(f"accepted, not deleted, not stored: {call}")
    assert not named_empty, named_empty
    assert not problems, problems[:5]
    assert sum(c["ok"] for c in calls) > 20 and any(not c["ok"] for c in calls)
