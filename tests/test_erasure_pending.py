"""``erase_user`` finds a thread of pending writes only: its put never came.

LangGraph stores a step's writes beside its put (with durability "async" the writes of
a new thread's first checkpoint can land first); a process that dies between the two
leaves a thread with writes and no checkpoint, so no thread index record. The writes
name the run's user, which the saver keeps as the thread's owner in waiting (SQL: the
thread row's ``owner``; Redis: the user's set of such threads, checked against the
thread hash's ``w``), and the erasure deletes those threads too. Every backend; the
storage is dumped whole and searched for the user's texts and id afterwards.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from typing import Any

import pytest
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.base import empty_checkpoint
from test_attack_erasure import Marked
from test_erasure import Target, mentions, target

from langgraph_memory_plus.privacy.erasure import aerase_user, erase_user, lift_erasure

pytestmark = pytest.mark.storage
__all__ = ["target"]

INPUT = {"source": "input", "step": -1, "parents": {}}


class User(Marked):
    """A user id with ``.``, ``/`` and Chinese in it."""

    def __init__(self, prefix: str) -> None:
        super().__init__(prefix)
        self.id = f"{prefix}/用户.{uuid.uuid4().hex[:8]}/名"


def _config(thread_id: str, user: Any, checkpoint: Any = None) -> dict[str, Any]:
    configurable: dict[str, Any] = {"thread_id": thread_id, "checkpoint_ns": "", "user_id": user}
    if checkpoint is not None:
        configurable["checkpoint_id"] = checkpoint["id"]
    return {"configurable": configurable}


def _writes(saver: Any, thread_id: str, user: Any, checkpoint: Any, text: str) -> None:
    """A task's writes on ``checkpoint`` (not stored: its put has not come)."""
    saver.put_writes(
        _config(thread_id, user, checkpoint),
        [("messages", [HumanMessage(text, id=f"h-{uuid.uuid4().hex[:6]}")])],
        f"task-{uuid.uuid4().hex[:6]}",
    )


def _stored_writes(saver: Any, thread_id: str, checkpoint: Any) -> int:
    """How many pending writes the backend holds for ``checkpoint`` (a read of the
    plans' own storage: no checkpoint is stored, so ``get_tuple`` sees nothing)."""
    kind = type(saver).__name__.lower()
    if "sqlite" in kind:
        rows = saver._run(_sql(saver, "lgmp_writes", thread_id))
    elif "postgres" in kind:
        rows = saver._run(_sql(saver, "lgmp_task_writes", thread_id))
    else:
        from langgraph_memory_plus.drivers.redis import Batch

        def plan() -> Any:
            widx = saver._plans.keys(thread_id)[6]
            [n] = yield Batch([("ZCARD", widx)])
            return n

        return int(saver._run(plan()))
    return int(rows[0][0])


def _sql(saver: Any, table: str, thread_id: str) -> Any:
    from langgraph_memory_plus.checkpoint.config import thread_key

    plans = saver._plans
    schema = getattr(plans, "_s", None)
    name = table if schema is None else f"{schema}.{table}"
    mark = "?" if schema is None else "%s"
    if schema is None:
        from langgraph_memory_plus.drivers.sqlite import Query
    else:
        from langgraph_memory_plus.drivers.postgres import Query  # type: ignore[assignment]
    rows = yield Query(
        f"SELECT count(*) FROM {name} WHERE thread_key = {mark}",
        (thread_key(thread_id),),
        fetch=True,
    )
    return rows


# -- the writes of a run whose put never came -------------------------------------------


def test_a_writes_only_thread_is_erased_and_reported(target: Target) -> None:
    alice, bob = User("alice"), User("bob")
    with target.open() as memory:
        saver = memory.checkpointer
        cp = empty_checkpoint()
        tid = f"{alice.id}-dead"
        _writes(saver, tid, alice.id, cp, alice.text("early"))
        _writes(saver, tid, alice.id, cp, alice.text("second task"))
        assert _stored_writes(saver, tid, cp) == 2
        # bob's writes-only thread, and one of his with a put: neither is alice's
        bob_cp = empty_checkpoint()
        _writes(saver, f"{bob.id}-dead", bob.id, bob_cp, bob.text("his early"))
        saver.put(_config(f"{bob.id}-live", bob.id), empty_checkpoint(), INPUT, {})
        dry = erase_user(alice.id, memory=memory, dry_run=True)
        assert dry.thread_ids == [tid]
        assert dry.counts["threads"] == 1 and dry.counts["checkpoints"] == 0
        assert _stored_writes(saver, tid, cp) == 2, "a dry run changes nothing"
        report = erase_user(alice.id, memory=memory)
        assert report.thread_ids == [tid] and report.counts == dry.counts
        assert _stored_writes(saver, tid, cp) == 0
        assert _stored_writes(saver, f"{bob.id}-dead", bob_cp) == 1
        again = erase_user(alice.id, memory=memory)
        assert again.thread_ids == [] and again.counts["threads"] == 0
    dump = target.dump()
    assert mentions(dump, alice.markers) == []
    assert mentions(dump, [t.encode() for t in bob.texts])


def test_the_async_erasure_finds_it_too(target: Target) -> None:
    alice = User("alice")
    tids = [f"{alice.id}-a{i}" for i in range(5)]

    async def go() -> tuple[Any, Any]:
        async with target.open() as memory:
            saver = memory.checkpointer
            for tid in tids:
                await saver.aput_writes(
                    _config(tid, alice.id, empty_checkpoint()),
                    [("messages", [HumanMessage(alice.text(tid), id="h1")])],
                    "t1",
                )
            dry = await aerase_user(alice.id, memory=memory, dry_run=True, batch_size=2)
            return dry, await aerase_user(alice.id, memory=memory, batch_size=2)

    dry, report = asyncio.run(go())
    assert sorted(dry.thread_ids) == sorted(report.thread_ids) == sorted(tids)
    assert report.counts["threads"] == dry.counts["threads"] == len(tids)
    assert mentions(target.dump(), alice.markers) == []


@pytest.mark.parametrize("given", ["text", "number"])
def test_a_numeric_user_id_in_either_form(target: Target, given: str) -> None:
    """A run given ``user_id=5`` stores the number; ``erase_user("5")`` covers both."""
    number = int(uuid.uuid4().int % 10**12) + 10**12
    user: Any = str(number) if given == "text" else number
    texts = [f"said-{uuid.uuid4().hex}" for _ in range(2)]
    with target.open() as memory:
        saver = memory.checkpointer
        tids = [f"n-{number}-{i}" for i in range(2)]
        for tid, text in zip(tids, texts, strict=True):
            saver.put_writes(
                _config(tid, user, empty_checkpoint()),
                [("messages", [HumanMessage(text, id="h1")])],
                "t1",
            )
        # the other form's thread too: one user
        other: Any = number if given == "text" else str(number)
        saver.put_writes(
            _config(f"n-{number}-other", other, empty_checkpoint()),
            [("messages", [HumanMessage(texts[0] + "-other", id="h1")])],
            "t1",
        )
        dry = erase_user(str(number), memory=memory, dry_run=True)
        report = erase_user(str(number), memory=memory)
    assert (
        sorted(report.thread_ids) == sorted(dry.thread_ids) == sorted([*tids, f"n-{number}-other"])
    )
    assert report.counts["threads"] == 3
    assert mentions(target.dump(), [t.encode() for t in texts]) == []


def test_a_thread_that_got_its_put_is_erased_and_reported_once(target: Target) -> None:
    """Writes first (the owner in waiting is recorded), then the put comes: the index
    files the thread, the erasure deletes it once and reports it once."""
    alice = User("alice")
    with target.open() as memory:
        saver = memory.checkpointer
        tid = f"{alice.id}-late-put"
        cp = empty_checkpoint()
        _writes(saver, tid, alice.id, cp, alice.text("early"))
        saver.put(_config(tid, alice.id), cp, INPUT, {})
        assert saver.get_tuple(_config(tid, alice.id)) is not None
        only = f"{alice.id}-only"
        _writes(saver, only, alice.id, empty_checkpoint(), alice.text("only"))
        dry = erase_user(alice.id, memory=memory, dry_run=True, batch_size=1)
        report = erase_user(alice.id, memory=memory, batch_size=1)
        assert sorted(dry.thread_ids) == sorted(report.thread_ids) == sorted([tid, only])
        assert dry.counts == report.counts
        assert report.counts["threads"] == 2 and report.counts["checkpoints"] == 1
        assert saver.get_tuple(_config(tid, alice.id)) is None
    assert mentions(target.dump(), alice.markers) == []


def test_another_users_writes_on_a_thread_id_alice_wrote_first_are_not_hers(
    target: Target,
) -> None:
    """Alice's writes-only thread is deleted (``delete_thread``: its mark goes with it),
    then bob writes on the same id, writes only: alice's erasure leaves his thread."""
    alice, bob = User("alice"), User("bob")
    with target.open() as memory:
        saver = memory.checkpointer
        tid = f"shared-{uuid.uuid4().hex[:8]}"
        _writes(saver, tid, alice.id, empty_checkpoint(), alice.text("hers"))
        saver.delete_thread(tid)
        time.sleep(0.002)  # a checkpoint id after the deletion's
        bobs = empty_checkpoint()
        _writes(saver, tid, bob.id, bobs, bob.text("his"))
        assert _stored_writes(saver, tid, bobs) == 1
        report = erase_user(alice.id, memory=memory)
        assert report.thread_ids == [] and report.counts["threads"] == 0
        assert _stored_writes(saver, tid, bobs) == 1
        assert erase_user(bob.id, memory=memory).thread_ids == [tid]
        assert _stored_writes(saver, tid, bobs) == 0
    dump = target.dump()
    assert mentions(dump, alice.markers) == []
    assert mentions(dump, bob.markers) == []


def test_an_erased_users_writes_under_the_hold_and_after_lift_erasure(target: Target) -> None:
    """Under the hold the writes are dropped (nothing is marked); after ``lift_erasure``
    a new writes-only thread of the returning user is marked and erased again."""
    alice = User("alice")
    with target.open() as memory:
        saver = memory.checkpointer
        erase_user(alice.id, memory=memory)
        held = empty_checkpoint()
        _writes(saver, f"{alice.id}-held", alice.id, held, alice.text("held"))
        assert _stored_writes(saver, f"{alice.id}-held", held) == 0
        assert lift_erasure(alice.id, memory=memory)
        back = empty_checkpoint()
        _writes(saver, f"{alice.id}-back", alice.id, back, alice.text("back"))
        assert _stored_writes(saver, f"{alice.id}-back", back) == 1
        assert erase_user(alice.id, memory=memory).thread_ids == [f"{alice.id}-back"]
    assert mentions(target.dump(), alice.markers) == []


def test_a_copy_and_a_ttl_sweep_leave_no_stale_mark(target: Target) -> None:
    """A writes-only thread swept by its TTL goes with its mark (the erasure then
    reports nothing); the index-filed copy of a thread is erased by the index, the copy
    of a writes-only thread by its owner in waiting."""
    alice = User("alice")
    with target.open(ttl=0.01) as memory:  # minutes: 0.6 s
        saver = memory.checkpointer
        gone = empty_checkpoint()
        _writes(saver, f"{alice.id}-ttl", alice.id, gone, alice.text("expiring"))
        time.sleep(1.2)
        saver.sweep_expired()
        report = erase_user(alice.id, memory=memory, dry_run=True)
        assert report.thread_ids == []
    with target.open() as memory:
        saver = memory.checkpointer
        src = f"{alice.id}-src"
        cp = empty_checkpoint()
        _writes(saver, src, alice.id, cp, alice.text("early"))
        saver.put(_config(src, alice.id), cp, INPUT, {})
        saver.copy_thread(src, f"{alice.id}-copy")
        # a copy of a thread of writes only (SQL copies its writes, and their owner in
        # waiting; Redis copies no thread without checkpoints)
        only = f"{alice.id}-only"
        _writes(saver, only, alice.id, empty_checkpoint(), alice.text("only"))
        saver.copy_thread(only, f"{alice.id}-only-copy")
        report = erase_user(alice.id, memory=memory)
        assert {src, f"{alice.id}-copy", only} <= set(report.thread_ids)
        assert len(report.thread_ids) == len(set(report.thread_ids))
    assert mentions(target.dump(), alice.markers) == []


# -- a process killed between its writes and its put --------------------------------------

WRITER = textwrap.dedent(
    """
    import json, sys, time
    from langchain_core.messages import HumanMessage
    from langgraph.checkpoint.base import empty_checkpoint
    from langgraph_memory_plus import from_url
    url, options, user, tids, text = sys.argv[1:6]
    with from_url(url, transcripts=True, **json.loads(options)) as memory:
        saver = memory.checkpointer
        for tid in json.loads(tids):
            checkpoint = empty_checkpoint()
            config = {"configurable": {"thread_id": tid, "checkpoint_ns": "",
                      "user_id": user, "checkpoint_id": checkpoint["id"]}}
            saver.put_writes(config, [("messages", [HumanMessage(text + tid, id="h1")])], "t1")
        print("written", flush=True)
        time.sleep(600)  # the put would come next: killed before it
    """
)


def test_a_process_killed_before_its_put_leaves_nothing_after_the_erasure(
    target: Target,
) -> None:
    alice = User("alice")
    tids = [f"{alice.id}-killed-{i}" for i in range(3)]
    text = alice.text("from the killed process")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([os.getcwd(), *sys.path])}
    worker = subprocess.Popen(
        [
            sys.executable,
            "-c",
            WRITER,
            target.url,
            json.dumps(target.options),
            alice.id,
            json.dumps(tids),
            text,
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert worker.stdout is not None
        line = worker.stdout.readline()
        assert line.strip() == b"written", line or worker.stderr.read().decode()[-2000:]
    finally:
        worker.send_signal(signal.SIGKILL)
        worker.wait(timeout=60)
    assert worker.returncode == -signal.SIGKILL
    assert mentions(target.dump(), [text.encode()]), "the killed process's writes are stored"
    with target.open() as memory:
        dry = erase_user(alice.id, memory=memory, dry_run=True)
        report = erase_user(alice.id, memory=memory, batch_size=2)
    assert sorted(dry.thread_ids) == sorted(report.thread_ids) == sorted(tids)
    assert report.counts["threads"] == 3
    assert mentions(target.dump(), alice.markers) == []


# -- a database of the previous release -------------------------------------------------


def test_a_database_of_the_previous_release_is_migrated_and_its_threads_found(
    target: Target, backend: str
) -> None:
    """The column and its index dropped and the version unrecorded, as the previous
    release left a database: ``setup()`` (``from_url`` runs it) adds them back, and a
    writes-only thread written after is erased. Redis keys need no migration."""
    alice = User("alice")
    with target.open() as memory:
        memory.checkpointer.put(_config("other", "someone"), empty_checkpoint(), INPUT, {})
    if backend == "sqlite":
        import sqlite3

        from langgraph_memory_plus.checkpoint.sqlite.plans import CHECKPOINT_MIGRATIONS

        path = target.url.removeprefix("sqlite:///")
        conn = sqlite3.connect(path)
        conn.execute("DROP INDEX lgmp_threads_owner_idx")
        conn.execute("ALTER TABLE lgmp_threads DROP COLUMN owner")
        latest = len(CHECKPOINT_MIGRATIONS) - 1
        conn.execute("DELETE FROM lgmp_checkpoint_migrations WHERE v = ?", (latest,))
        conn.commit()
        columns = [row[1] for row in conn.execute("PRAGMA table_info(lgmp_threads)")]
        conn.close()
        assert "owner" not in columns
    elif backend == "postgres":
        import psycopg

        from langgraph_memory_plus.checkpoint.postgres.plans import (
            CHECKPOINT_MIGRATIONS as PG_MIGRATIONS,
        )

        with psycopg.connect(target.url, autocommit=True) as conn:
            conn.execute("DROP INDEX lgmp_threads_owner_idx")
            conn.execute("ALTER TABLE lgmp_threads DROP COLUMN owner")
            conn.execute(
                "DELETE FROM lgmp_checkpoint_migrations WHERE v = %s", (len(PG_MIGRATIONS) - 1,)
            )
    with target.open() as memory:
        saver = memory.checkpointer
        cp = empty_checkpoint()
        tid = f"{alice.id}-after-migration"
        _writes(saver, tid, alice.id, cp, alice.text("after the upgrade"))
        assert erase_user(alice.id, memory=memory).thread_ids == [tid]
        assert _stored_writes(saver, tid, cp) == 0
        assert saver.get_tuple(_config("other", "someone")) is not None
    assert mentions(target.dump(), alice.markers) == []


# -- what it costs ---------------------------------------------------------------------------


def _commands(saver: Any, thread_id: str, checkpoint: Any, owner: str | None) -> list[Any]:
    """The commands the backend's ``put_writes`` plan sends for one task's writes."""
    from langgraph_memory_plus.checkpoint.config import read_checkpoint_target

    target = read_checkpoint_target(_config(thread_id, "x", checkpoint))
    writes = [("messages", [HumanMessage(f"w-{uuid.uuid4().hex}", id="h1")])]
    encoded = saver._codec.encode_writes(target, writes, f"t-{uuid.uuid4().hex[:6]}", "", None)
    sent: list[Any] = []

    def counted() -> Any:
        plan = saver._plans.put_writes(target, encoded, None, owner)
        reply: Any = None
        try:
            while True:
                command = plan.send(reply)
                sent.append(command)
                reply = yield command
        except StopIteration as stop:
            return stop.value

    saver._run(counted())
    return sent


def test_writes_on_a_thread_the_index_files_send_nothing_more(target: Target, backend: str) -> None:
    """The run's user costs a write on a filed thread nothing (SQLite: the one-statement
    path); on a thread of writes only, SQL records it in the same statements and Redis
    sends one step more (the user's set), once per call."""
    from langgraph_memory_plus.threads.core import index_value

    owner = index_value("alice")
    with target.open() as memory:
        saver = memory.checkpointer
        filed, cp = f"filed-{uuid.uuid4().hex[:8]}", empty_checkpoint()
        saver.put(_config(filed, "alice"), cp, INPUT, {})
        _commands(saver, filed, cp, None)  # PostgreSQL: the thread row's expiry settles
        plain = _commands(saver, filed, cp, None)
        named = _commands(saver, filed, cp, owner)
        assert len(named) == len(plain)
        if backend == "sqlite":
            assert len(named) == 1
        fresh = [f"new-{uuid.uuid4().hex[:8]}" for _ in range(2)]
        unnamed = _commands(saver, fresh[0], empty_checkpoint(), None)
        waiting = _commands(saver, fresh[1], empty_checkpoint(), owner)
        more = 1 if backend.startswith("redis") else 0
        assert len(waiting) == len(unnamed) + more
