"""An adversary's attack on the erasure hold's orphan-writes drop (commit ff012cf).

A write the erasure hold drops removes the pending writes stored for its checkpoint when
that checkpoint is not stored; ``erase_user`` deletes again a thread written during it.
Each test is one attack, on every backend; a find not fixed is a strict xfail.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.graph import END, START, StateGraph
from langgraph.types import Send
from test_attack_erasure import Marked, State, say
from test_erasure import Target, mentions, target

from langgraph_memory_plus import FencedWriteError
from langgraph_memory_plus.privacy.erasure import erase_user, lift_erasure

pytestmark = pytest.mark.storage
__all__ = ["target"]

INPUT = {"source": "input", "step": -1, "parents": {}}


def _config(thread_id: str, user: str, ns: str = "") -> dict[str, Any]:
    return {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "user_id": user}}


def _on(config: dict[str, Any], checkpoint: Any) -> dict[str, Any]:
    return {**config, "configurable": {**config["configurable"], "checkpoint_id": checkpoint["id"]}}


def _write(saver: Any, config: dict[str, Any], checkpoint: Any, text: str, task: str) -> None:
    saver.put_writes(
        _on(config, checkpoint), [("messages", [HumanMessage(text, id=f"h-{task}")])], task
    )


def _interrupt(saver: Any, config: Any, checkpoint: Any, text: str, task: str) -> None:
    """A task's interrupt, stored as LangGraph stores it: a write on ``checkpoint``."""
    from langgraph.types import Interrupt

    saver.put_writes(_on(config, checkpoint), [("__interrupt__", [Interrupt(text, id="i1")])], task)


# -- the orphans the drop cannot see -------------------------------------------------------


def test_writes_of_a_run_that_died_before_its_put_are_erased(target: Target) -> None:
    """A thread of pending writes only (its put never came: the process died; or the
    hold dropped the put and a write of the same step landed after ``lift_erasure``) is
    not in the thread index: ``erase_user`` cannot see it, its texts and id stay."""
    alice = Marked("alice")
    with target.open() as memory:
        saver = memory.checkpointer
        config = _config(f"{alice.id}-dead", alice.id)
        _write(saver, config, empty_checkpoint(), alice.text("early"), "t1")
        erase_user(alice.id, memory=memory)
        assert saver.threads.sessions(alice.id) == []
    assert mentions(target.dump(), alice.markers) == []


def test_subgraph_writes_before_the_subgraph_put_are_erased(target: Target) -> None:
    """Writes in a subgraph's namespace land first (root and child: neither put stored),
    the erasure begins, then the child's put and the root's put are dropped."""
    alice = Marked("alice")
    with target.open() as memory:
        saver = memory.checkpointer
        tid = f"{alice.id}-sub"
        root, child = empty_checkpoint(), empty_checkpoint()
        root_cfg = _config(tid, alice.id)
        child_cfg = _config(tid, alice.id, f"child:{uuid.uuid4()}")
        _write(saver, child_cfg, child, alice.text("child-early"), "c1")
        _write(saver, root_cfg, root, alice.text("root-early"), "r1")
        erase_user(alice.id, memory=memory)
        saver.put(child_cfg, child, INPUT, {})
        saver.put(root_cfg, root, INPUT, {})
        assert saver.get_tuple(root_cfg) is None
    assert mentions(target.dump(), alice.markers) == []


@pytest.mark.parametrize("where", ["root", "subgraph"])
def test_interrupt_writes_before_their_put_are_erased(
    target: Target, request: pytest.FixtureRequest, where: str
) -> None:
    """A new thread's ``__interrupt__`` write (the index records interrupts/status from
    writes on some backends) lands first; the put is dropped by the hold."""
    if where == "subgraph" and request.getfixturevalue("backend").startswith("redis"):
        request.applymarker(
            pytest.mark.xfail(
                strict=True,
                reason="Redis: an interrupt in a subgraph's namespace adds the thread to the "
                "index's shared sets (all, s:interrupted) with no record to date the entry; "
                "the drop cannot tell it from another user's first put on the id in flight "
                "(test_drops_beside_bobs_runs_on_the_same_id_keep_his_thread_listed), so it "
                "is left to the reads: hidden for IN_FLIGHT_MS, then removed by the next read",
            )
        )
    alice = Marked("alice")
    with target.open() as memory:
        saver = memory.checkpointer
        ns = "" if where == "root" else f"child:{uuid.uuid4()}"
        config = _config(f"{alice.id}-int", alice.id, ns)
        checkpoint = empty_checkpoint()
        _interrupt(saver, config, checkpoint, alice.text("question"), "t1")
        _write(saver, config, checkpoint, alice.text("early"), "t2")
        erase_user(alice.id, memory=memory)
        saver.put(config, checkpoint, INPUT, {})
        assert saver.get_tuple(config) is None
        assert saver.threads.sessions(alice.id) == []
    assert mentions(target.dump(), alice.markers) == []


def test_fan_out_writes_some_before_some_dropped_are_erased(target: Target) -> None:
    """``Send`` fan-out: several tasks' writes on one checkpoint, two land before the
    hold, two are dropped by it (each drop retried), then the put is dropped twice."""
    alice = Marked("alice")
    with target.open() as memory:
        saver = memory.checkpointer
        config = _config(f"{alice.id}-fan", alice.id)
        checkpoint = empty_checkpoint()
        for task in ("a", "b"):
            _write(saver, config, checkpoint, alice.text(f"early-{task}"), task)
        erase_user(alice.id, memory=memory)
        for task in ("c", "d", "c"):
            _write(saver, config, checkpoint, alice.text(f"late-{task}"), task)
        saver.put(config, checkpoint, INPUT, {})
        saver.put(config, checkpoint, INPUT, {})
        assert saver.get_tuple(config) is None
    assert mentions(target.dump(), alice.markers) == []


# -- another user's data -------------------------------------------------------------------


def test_a_dropped_write_on_a_thread_id_bob_uses_keeps_bobs_data(target: Target) -> None:
    """Bob's thread, with a stored checkpoint and pending writes on it (an interrupted
    run). Alice, erased, writes on the same thread id: writes naming bob's checkpoint,
    a put of bob's checkpoint id, a put of a new checkpoint. Bob's data stays whole."""
    alice, bob = Marked("alice"), Marked("bob")
    with target.open() as memory:
        saver = memory.checkpointer
        tid = f"shared-{uuid.uuid4().hex[:8]}"
        bobs = empty_checkpoint()
        saver.put(_config(tid, bob.id), bobs, INPUT, {})
        _write(saver, _config(tid, bob.id), bobs, bob.text("pending"), "bt")
        before = saver.get_tuple(_on(_config(tid, bob.id), bobs))
        assert before is not None and len(before.pending_writes) == 1
        erase_user(alice.id, memory=memory)
        _write(saver, _config(tid, alice.id), bobs, alice.text("late"), "at")
        saver.put(_config(tid, alice.id), bobs, INPUT, {})
        fresh = empty_checkpoint()
        saver.put(_on(_config(tid, alice.id), bobs), fresh, {**INPUT, "step": 0}, {})
        _write(saver, _config(tid, alice.id), fresh, alice.text("late2"), "at2")
        after = saver.get_tuple(_on(_config(tid, bob.id), bobs))
        assert after is not None
        assert after.pending_writes == before.pending_writes
        assert [s["thread_id"] for s in saver.threads.sessions(bob.id)] == [tid]
        assert saver.threads.sessions(alice.id) == []
    dump = target.dump()
    assert mentions(dump, alice.markers) == []
    assert mentions(dump, bob.markers)


# -- the returning user --------------------------------------------------------------------


@pytest.mark.parametrize("tid", ["dots.and/slashes", "中文线程", "x" * 300, "nul\x00id"])
def test_the_returning_user_finds_no_orphan_and_stores_all(
    target: Target, tid: str, request: pytest.FixtureRequest
) -> None:
    """Odd thread ids. Writes land, the hold drops the put (twice: a retried call) and a
    late write; ``lift_erasure``; the user's run on the same thread id and checkpoint
    stores its put and writes, and sees none of the dropped ones."""
    alice = Marked("alice")
    with target.open() as memory:
        saver = memory.checkpointer
        config = _config(f"{tid}-{uuid.uuid4().hex[:6]}", alice.id)
        checkpoint = empty_checkpoint()
        _write(saver, config, checkpoint, alice.text("early"), "t1")
        erase_user(alice.id, memory=memory)
        saver.put(config, checkpoint, INPUT, {})
        saver.put(config, checkpoint, INPUT, {})
        _write(saver, config, checkpoint, alice.text("late"), "t2")
        assert saver.get_tuple(config) is None
        assert mentions(target.dump(), alice.markers) == []
        assert lift_erasure(alice.id, memory=memory) is True
        saver.put(config, checkpoint, INPUT, {})
        _write(saver, config, checkpoint, "back", "t3")
        got = saver.get_tuple(_on(config, checkpoint))
        assert got is not None
        assert [(t, c) for t, c, _ in got.pending_writes] == [("t3", "messages")]
        assert [s["thread_id"] for s in saver.threads.sessions(alice.id)] == [
            config["configurable"]["thread_id"]
        ]


# -- the dry run -----------------------------------------------------------------------------


def test_a_dry_run_reports_every_thread_when_one_is_deleted_meanwhile(target: Target) -> None:
    """A dry run pages by thread id with an offset: a thread deleted during it (the user
    deleting a chat) shifted the next page, and a thread that stayed all along was not
    reported (a strict xfail until each window reached a batch back)."""
    alice = Marked("alice")
    with target.open() as memory:
        saver = memory.checkpointer
        for n in range(3):
            config = _config(f"{alice.id}-{n}", alice.id)
            saver.put(config, empty_checkpoint(), INPUT, {})
        deleted: list[str] = []

        def progress(step: Any) -> None:
            if step.kind == "threads" and not deleted:
                deleted.append(f"{alice.id}-0")
                saver.delete_thread(f"{alice.id}-0")

        report = erase_user(alice.id, memory=memory, batch_size=1, progress=progress, dry_run=True)
        assert deleted
        assert {f"{alice.id}-1", f"{alice.id}-2"} <= set(report.thread_ids)


@pytest.mark.parametrize("per_page", [1, 3, 5])
def test_a_dry_run_lists_every_thread_that_stays_however_many_go_meanwhile(
    target: Target, per_page: int
) -> None:
    """Threads of the user deleted during a dry run (batches of 2), ``per_page`` of them
    each time a page is reported, read ones and unread ones, with ids whose bytes and
    characters sort apart (``.``, ``/``, Chinese): every thread that stayed all along is
    reported, once. Five at a time is more than a window reaches back: the cursor starts
    over."""
    alice = Marked("alice")
    suffixes = ["", ".x", "/y", "中", "a"]
    with target.open() as memory:
        saver = memory.checkpointer
        tids = [f"{alice.id}-{n:02d}{suffixes[n % 5]}" for n in range(14)]
        for tid in tids:
            saver.put(_config(tid, alice.id), empty_checkpoint(), INPUT, {})
        victims = tids[::2]
        random.Random(per_page).shuffle(victims)

        def progress(step: Any) -> None:
            if step.kind == "threads":
                for tid in victims[:per_page]:
                    saver.delete_thread(tid)
                del victims[:per_page]

        report = erase_user(alice.id, memory=memory, batch_size=2, progress=progress, dry_run=True)
        assert len(victims) <= 7 - min(7, 2 * per_page)  # deletions happened during the run
        assert len(report.thread_ids) == len(set(report.thread_ids))
        assert set(tids[1::2]) <= set(report.thread_ids)
        assert report.counts["threads"] == len(report.thread_ids)


# -- concurrent runs -------------------------------------------------------------------------


def fan_out_graph() -> StateGraph:
    """A node that fans out with ``Send`` to three workers, each answering."""

    def route(state: State) -> list[Send]:
        return [Send("worker", {"messages": [state["messages"][-1]]}) for _ in range(3)]

    def worker(state: State) -> dict[str, Any]:
        last = state["messages"][-1]
        return {"messages": [AIMessage(f"w: {last.content}", id=f"ai-{uuid.uuid4().hex}")]}

    builder = StateGraph(State)
    builder.add_node("start", lambda state: {})
    builder.add_node("worker", worker)
    builder.add_edge(START, "start")
    builder.add_conditional_edges("start", route, ["worker"])
    builder.add_edge("worker", END)
    return builder


def test_new_fan_out_threads_racing_the_erasure_leave_nothing(target: Target) -> None:
    """A user's run on a new thread (Send fan-out, background writes) started a few
    milliseconds (varied) before ``erase_user``: nothing of the user is left, each of a
    bounded number of tries."""
    rng = random.Random(1234)
    with target.open() as memory:
        app = fan_out_graph().compile(checkpointer=memory.checkpointer)
        left: list[Any] = []
        for attempt in range(12):
            alice = Marked("alice")
            config = {"configurable": {"thread_id": f"{alice.id}-r", "user_id": alice.id}}
            errors: list[BaseException] = []

            def run(alice: Marked = alice, config: Any = config, errors: Any = errors) -> None:
                try:
                    app.invoke(say(alice.text("race")), config, durability="async")
                except BaseException as err:  # reported below
                    errors.append(err)

            worker = threading.Thread(target=run)
            worker.start()
            time.sleep(rng.uniform(0, 0.02))
            erase_user(alice.id, memory=memory)
            worker.join(30)
            assert not errors, errors
            found = mentions(target.dump(), alice.markers)
            if found:
                left.append((attempt, found))
        assert left == []


def test_a_thread_id_emptied_by_the_drop_is_readable_when_bob_writes_it(
    target: Target, request: pytest.FixtureRequest
) -> None:
    """Alice's writes land on a new thread, she is erased, her put is dropped: the thread
    is emptied. Bob then starts a thread with the same id (ids are the product's, e.g. a
    shared channel): his checkpoint must be readable."""
    alice, bob = Marked("alice"), Marked("bob")
    with target.open() as memory:
        saver = memory.checkpointer
        tid = f"shared-{uuid.uuid4().hex[:8]}"
        checkpoint = empty_checkpoint()
        _write(saver, _config(tid, alice.id), checkpoint, alice.text("early"), "t1")
        erase_user(alice.id, memory=memory)
        saver.put(_config(tid, alice.id), checkpoint, INPUT, {})
        bobs = empty_checkpoint()
        saver.put(_config(tid, bob.id), bobs, INPUT, {})
        assert [s["thread_id"] for s in saver.threads.sessions(bob.id)] == [tid]
        got = saver.get_tuple({"configurable": {"thread_id": tid}})
        assert got is not None and got.checkpoint["id"] == bobs["id"]


# -- at rest: encryption, fences, the async API ---------------------------------------------


def _new_rows(before: set[Any], after: list[Any], alice: Marked) -> list[Any]:
    """Rows added since ``before`` other than the hold, the store tombstones, and a thread
    row naming nothing of the user (SQL: a thread key digest with no id; Redis: the thread
    hash of a deletion's tombstone, the erasure having deleted the thread of writes only)."""
    out = []
    for where, data in set(after) - before:
        if "erased" in where or "tomb" in where:
            continue
        thread_row = "lgmp_threads" in where or where.endswith(":thread")
        if thread_row and not mentions([(where, data)], alice.markers):
            continue
        out.append((where, data))
    return out


@pytest.mark.parametrize("option", ["encryption", "fence", "both"])
def test_nothing_of_dropped_orphans_stays_at_rest(target: Target, option: str) -> None:
    """With encryption (texts sealed, so the markers alone would miss them) and fenced
    savers: after the writes landed, the erasure and the put's drop, no row is left that
    was not there before (the hold and the store tombstones aside)."""
    import os

    from langgraph_memory_plus import Encryption

    more: dict[str, Any] = {}
    if option in ("encryption", "both"):
        more["encryption"] = Encryption({"k1": os.urandom(32)})
    if option in ("fence", "both"):
        more["fence"] = True
    alice = Marked("alice")
    with target.open(**more) as memory:
        saver = memory.checkpointer
        erase_user(f"nobody-{uuid.uuid4().hex[:6]}", memory=memory)  # the tables, the keys
        before = set(target.dump())
        config = _config(f"{alice.id}-rest", alice.id)
        checkpoint = empty_checkpoint()
        _write(saver, config, checkpoint, alice.text("early"), "t1")
        _write(saver, config, checkpoint, alice.text("early"), "t2")
        assert _new_rows(before, target.dump(), alice)
        erase_user(alice.id, memory=memory)
        saver.put(config, checkpoint, INPUT, {})
        assert _new_rows(before, target.dump(), alice) == []


def test_async_writes_before_their_put_are_erased(target: Target) -> None:
    """The async API: ``aput_writes`` lands, ``aerase_user``, ``aput`` and a late
    ``aput_writes`` are dropped, concurrently."""
    import asyncio

    from langgraph_memory_plus.privacy.erasure import aerase_user

    alice = Marked("alice")

    async def go() -> None:
        async with target.open() as memory:
            saver = memory.checkpointer
            config = _config(f"{alice.id}-async", alice.id)
            checkpoint = empty_checkpoint()
            on = _on(config, checkpoint)
            msg = [("messages", [HumanMessage(alice.text("early"), id="h1")])]
            await saver.aput_writes(on, msg, "t1")
            await aerase_user(alice.id, memory=memory)
            late = [("messages", [HumanMessage(alice.text("late"), id="h2")])]
            await asyncio.gather(
                saver.aput(config, checkpoint, INPUT, {}),
                saver.aput_writes(on, late, "t2"),
                saver.aput_writes(on, late, "t3"),
            )
            assert await saver.aget_tuple(config) is None

    asyncio.run(go())
    assert mentions(target.dump(), alice.markers) == []


@pytest.mark.parametrize("fence", [False, True])
def test_drops_beside_puts_deletions_and_erasures_of_the_same_thread(
    target: Target, fence: bool
) -> None:
    """Lock order under contention (PostgreSQL: the drop locks the thread row, then the
    index row, then deletes writes): alice's dropped writes and puts on a thread id that
    a service writes too (no user: the thread stays alice's), beside ``delete_thread``
    of it, erasures of alice renewing the hold and lifts between them (so some of
    alice's writes land), for a bounded time; then one erasure. No call fails
    (``DeadlockDetected`` on PostgreSQL, a busy database on SQLite), and nothing of
    alice is left."""
    alice, bob = Marked("alice"), Marked("bob")
    tid = f"contended-{uuid.uuid4().hex[:8]}"
    errors: list[BaseException] = []
    superseded: list[int] = []
    stop = threading.Event()
    run = {"run_id": uuid.uuid4()} if fence else {}  # fenced: each loop is a run
    with target.open(fence=fence) as memory:
        saver = memory.checkpointer
        erase_user(alice.id, memory=memory)

        def guarded(loop: Any) -> Any:
            def run() -> None:
                while not stop.is_set():
                    try:
                        loop()
                    except FencedWriteError:  # a run superseded by the next: as designed
                        superseded.append(1)
                    except BaseException as err:  # reported below
                        errors.append(err)
                        return

            return run

        def alice_writes() -> None:
            checkpoint = empty_checkpoint()
            config = {**_config(tid, alice.id), **run}
            _write(saver, config, checkpoint, alice.text("late"), "a1")
            saver.put(config, checkpoint, INPUT, {})
            _write(saver, config, checkpoint, alice.text("late"), "a2")

        def service_writes() -> None:  # no user: the thread keeps its owner
            checkpoint = empty_checkpoint()
            config = {"configurable": {"thread_id": tid, "checkpoint_ns": ""}, **run}
            _write(saver, config, checkpoint, bob.text("b"), "b1")
            saver.put(config, checkpoint, INPUT, {})
            _write(saver, config, checkpoint, bob.text("b"), "b2")

        turn = threading.Lock()  # a lift between erasures, not during one (see report)

        def erase() -> None:
            with turn:
                erase_user(alice.id, memory=memory, batch_size=1)

        def delete() -> None:
            saver.delete_thread(tid)
            time.sleep(0.02)

        def lift() -> None:  # alice's writes land between erasures too
            with turn:
                lift_erasure(alice.id, memory=memory)
            time.sleep(0.01)

        workers = [
            threading.Thread(target=guarded(f))
            for f in (alice_writes, alice_writes, service_writes, erase, delete, lift)
        ]
        for w in workers:
            w.start()
        time.sleep(2)
        stop.set()
        for w in workers:
            w.join(60)
        assert errors == []
        erase_user(alice.id, memory=memory)  # all stopped: one erasure leaves nothing
        assert saver.threads.sessions(alice.id) == []
    # Pending writes aside: a write of alice's landing after a lift, for a checkpoint
    # whose put the hold dropped, leaves a thread of writes only, which no erasure sees
    # (test_writes_of_a_run_that_died_before_its_put_are_erased, the same gap).
    left = mentions(target.dump(), alice.markers)
    left = [(where, m) for where, m in left if "writes" not in where and "widx" not in where]
    if target.url.startswith("redis"):
        # A put with a parent on a thread filed under the service user, its hold check
        # before an erasure, lands after it (about 1 run in 10 here): the strict xfail
        # test_a_put_on_bobs_thread_checked_before_the_hold_stores_nothing_after_the_erasure
        # (tests/test_attack_orphans2.py). The deadlock and error checks above still hold.
        left = []
    assert left == []


@pytest.mark.xfail(
    strict=True,
    reason="every backend: alice's checkpoints and writes in a thread whose latest checkpoint "
    "is bob's stay after her erasure (the thread is filed under bob; documented)",
)
def test_alice_checkpoints_in_a_thread_bob_wrote_last_are_erased(target: Target) -> None:
    """A thread id both users wrote, bob last: the index files it under bob. Alice's
    erasure must still remove her checkpoints (and writes) in it, bob's staying.

    By design today (README, the thread index: "one naming another user moves the thread
    to that user"; erasure deletes the threads the index attributes to the user), but
    against "nothing of the user is stored anywhere": kept as a strict xfail for the
    maintainers to decide."""
    alice, bob = Marked("alice"), Marked("bob")
    with target.open() as memory:
        saver = memory.checkpointer
        tid = f"mixed-{uuid.uuid4().hex[:8]}"
        mine = empty_checkpoint()
        saver.put(_config(tid, alice.id), mine, INPUT, {})
        _write(saver, _config(tid, alice.id), mine, alice.text("mine"), "a1")
        bobs = empty_checkpoint()
        saver.put(_on(_config(tid, bob.id), mine), bobs, {**INPUT, "step": 0}, {})
        _write(saver, _config(tid, bob.id), bobs, bob.text("his"), "b1")
        erase_user(alice.id, memory=memory)
        assert saver.threads.sessions(alice.id) == []
        got = saver.get_tuple({"configurable": {"thread_id": tid}})
        assert got is not None and got.checkpoint["id"] == bobs["id"]
    dump = target.dump()
    assert mentions(dump, bob.markers)
    assert mentions(dump, alice.markers) == []


def test_a_thread_written_after_the_last_page_under_a_lapsed_hold_stays_findable(
    target: Target, request: pytest.FixtureRequest
) -> None:
    """A hold shorter than the erasure (the case ff012cf renews it per page for): it
    lapses after the last page, a run of the user stores a new thread, then the erasure
    drops the user's own index entries (Redis: their sets, "only under the hold"). The
    thread must stay findable, by ``sessions`` and by the next erasure, which removes it.
    The run's write is placed at that moment by wrapping the index's step (no mock: the
    servers are real; only the timing is forced)."""
    alice = Marked("alice")
    with target.open() as memory:
        saver = memory.checkpointer
        app = fan_out_graph().compile(checkpointer=saver)
        first = {"configurable": {"thread_id": f"{alice.id}-a", "user_id": alice.id}}
        app.invoke(say(alice.text("before")), first)
        late = {"configurable": {"thread_id": f"{alice.id}-late", "user_id": alice.id}}
        index = saver._plans.threads
        original = index.drop_owner_sets

        def drop_owner_sets(owner: str) -> Any:
            time.sleep(0.05)  # the 3.6 ms hold lapsed
            app.invoke(say(alice.text("late")), late)
            return original(owner)

        index.drop_owner_sets = drop_owner_sets
        try:
            erase_user(alice.id, memory=memory, tombstone_hours=1e-6)
        finally:
            del index.drop_owner_sets
        assert saver.get_tuple(late) is not None  # the hold had lapsed: it was stored
        assert [s["thread_id"] for s in saver.threads.sessions(alice.id)] == [
            late["configurable"]["thread_id"]
        ]
        erase_user(alice.id, memory=memory)
    assert mentions(target.dump(), alice.markers) == []


FAN_OUT_WORKER = textwrap.dedent(
    """
    import json, sys, uuid
    from pathlib import Path
    from langchain_core.messages import AIMessage, HumanMessage
    from langgraph.graph import END, START, StateGraph, MessagesState
    from langgraph.types import Send
    from langgraph_memory_plus import from_url

    url, options, who, done, stop = sys.argv[1:6]

    def worker(state):
        return {"messages": [AIMessage("w", id=f"ai-{uuid.uuid4().hex}")]}

    builder = StateGraph(MessagesState)
    builder.add_node("start", lambda state: {})
    builder.add_node("worker", worker)
    builder.add_edge(START, "start")
    builder.add_conditional_edges(
        "start", lambda s: [Send("worker", {"messages": []}) for _ in range(3)], ["worker"]
    )
    builder.add_edge("worker", END)
    n = 0
    with from_url(url, transcripts=True, **json.loads(options)) as memory:
        app = builder.compile(checkpointer=memory.checkpointer)
        while not Path(stop).exists():
            user, tag = Path(who).read_text().split("\\n")
            said = HumanMessage(f"{tag}-{n}", id=f"h-{n}")
            config = {"configurable": {"thread_id": f"{user}-p{n}", "user_id": user}}
            app.invoke({"messages": [said]}, config, durability="async")
            n += 1
            Path(done + ".new").write_text(f"{user}\\n{n}")
            Path(done + ".new").replace(done)
    print(n)
    """
)


def test_another_process_fanning_out_new_threads_leaves_nothing_over_many_erasures(
    target: Target, tmp_path: Path
) -> None:
    """One process keeps starting new threads (``Send`` fan-out, background writes) for
    the current user; this one erases each user after a varied few milliseconds, then
    waits for two more runs: nothing of any erased user is left. Bounded: 8 users."""
    rng = random.Random(99)
    who, done, stop = tmp_path / "who", tmp_path / "done", tmp_path / "stop"
    users = [Marked("alice") for _ in range(8)]
    tags = [u.text("proc") for u in users]

    def tell(i: int) -> None:  # atomically: the worker reads it any time
        (tmp_path / "who.new").write_text(f"{users[i].id}\n{tags[i]}")
        os.replace(tmp_path / "who.new", who)

    tell(0)
    args = [target.url, json.dumps(target.options), str(who), str(done), str(stop)]
    worker = subprocess.Popen(
        [sys.executable, "-c", FAN_OUT_WORKER, *args],
        env={**os.environ, "PYTHONPATH": os.getcwd()},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )

    def runs_of(user: Marked) -> int:
        try:
            name, n = done.read_text().split("\n")
        except (FileNotFoundError, ValueError):
            return 0
        return int(n) if name == user.id else 0

    def wait_for(user: Marked, n: int) -> None:
        for _ in range(600):
            if runs_of(user) >= n or worker.poll() is not None:
                return
            time.sleep(0.01)

    left = []
    try:
        with target.open() as memory:
            for i, user in enumerate(users):
                tell(i)
                wait_for(user, 1)
                time.sleep(rng.uniform(0, 0.03))
                erase_user(user.id, memory=memory)
                after = runs_of(user)
                wait_for(user, after + 2)
                assert worker.poll() is None, worker.communicate()[1].decode()[-2000:]
            stop.touch()
            _, err = worker.communicate(timeout=120)
            assert worker.returncode == 0, err.decode()[-2000:]
            for user in users:
                assert memory.checkpointer.threads.sessions(user.id) == []
    finally:
        if worker.poll() is None:
            worker.kill()
    dump = target.dump()
    for user in users:
        found = mentions(dump, user.markers)
        if found:
            left.append((user.id, found[:3]))
    assert left == []


def test_a_fenced_thread_dropped_before_its_first_row_is_readable_when_written_again(
    target: Target,
) -> None:
    """A worker takes a new thread's fence (no thread row yet), the user is erased, the
    run's first put is dropped, the user comes back (``lift_erasure``) and the worker,
    with the same lease, writes the thread: its checkpoint must be readable."""
    alice = Marked("alice")
    with target.open(fence=True) as memory:
        saver = memory.checkpointer
        tid = f"{alice.id}-fenced"
        lease = saver.fence.acquire(tid, owner="worker-a", lease_s=30)
        config = lease.config(_config(tid, alice.id))
        erase_user(alice.id, memory=memory)
        saver.put(config, empty_checkpoint(), INPUT, {})  # dropped
        assert saver.get_tuple(config) is None
        assert lift_erasure(alice.id, memory=memory) is True
        checkpoint = empty_checkpoint()
        saver.put(config, checkpoint, INPUT, {})
        got = saver.get_tuple({"configurable": {"thread_id": tid}})
        assert got is not None and got.checkpoint["id"] == checkpoint["id"]
        assert [s["thread_id"] for s in saver.threads.sessions(alice.id)] == [tid]


def test_async_fan_out_runs_racing_aerase_user_leave_nothing(target: Target) -> None:
    """asyncio: three tasks start new fan-out threads of the user (async durability)
    while ``aerase_user`` runs after a varied few milliseconds; each of 8 tries leaves
    nothing of that user."""
    import asyncio

    from langgraph_memory_plus.privacy.erasure import aerase_user

    rng = random.Random(7)
    users = [Marked("alice") for _ in range(8)]

    async def go() -> None:
        async with target.open() as memory:
            app = fan_out_graph().compile(checkpointer=memory.checkpointer)
            for user in users:

                async def run(n: int, user: Marked = user) -> None:
                    config = {"configurable": {"thread_id": f"{user.id}-{n}", "user_id": user.id}}
                    await app.ainvoke(say(user.text(f"r{n}")), config, durability="async")

                runs = [asyncio.create_task(run(n)) for n in range(3)]
                await asyncio.sleep(rng.uniform(0, 0.02))
                await aerase_user(user.id, memory=memory)
                await asyncio.gather(*runs)

    asyncio.run(go())
    dump = target.dump()
    left = [(u.id, found[:2]) for u in users if (found := mentions(dump, u.markers))]
    assert left == []


def _erase_inside_the_check(saver: Any, memory: Any, alice: Marked) -> tuple[Any, list[Any]]:
    """Wrap ``unless_erased`` so that ``erase_user(alice)`` runs right after the hold check
    (the first command) and before the write: a check that ran just before the hold."""
    plans = saver._plans
    original = plans.unless_erased
    erased: list[Any] = []

    def unless_erased(owner: Any, write: Any, target_: Any, checkpoint_id: str) -> Any:
        steps = original(owner, write, target_, checkpoint_id)
        reply: Any = None
        try:
            while True:
                command = steps.send(reply)
                reply = yield command
                if not erased:
                    erased.append(erase_user(alice.id, memory=memory))
        except StopIteration as stop:
            return stop.value

    return unless_erased, erased


@pytest.mark.parametrize("backend", ["redis", "redis-cluster"])
def test_a_put_checked_before_the_hold_and_landing_after_the_erasure_stores_nothing(
    target: Target,
) -> None:
    """Two runs of a new thread started together (a double submit) both put with no
    parent; the second's hold check runs before the erasure and its script after it. On
    Redis the check is outside the write's script, so the interleaving is forced here by
    running the erasure inside the put's plan between the two (the servers are real; only
    the timing is forced). PostgreSQL and SQLite check in the write's transaction (the
    erasure's hold waits for it): no such window."""
    alice = Marked("alice")
    with target.open() as memory:
        saver = memory.checkpointer
        tid = f"{alice.id}-double"
        saver.put(_config(tid, alice.id), empty_checkpoint(), INPUT, {})  # the first run's
        wrapped, erased = _erase_inside_the_check(saver, memory, alice)
        saver._plans.unless_erased = wrapped
        try:
            late = {**INPUT, "step": 0}
            saver.put(_config(tid, alice.id), empty_checkpoint(), late, {})  # no parent
        finally:
            del saver._plans.unless_erased
        assert erased and erased[0].thread_ids == [tid]
        assert saver.get_tuple({"configurable": {"thread_id": tid}}) is None
    assert mentions(target.dump(), alice.markers) == []


def test_a_dry_run_counts_what_the_real_run_erases(target: Target) -> None:
    """Threads whose id order differs from their update order, in pages of one: the dry
    run (paged by id) reports what the real run (paged by update) then erases, thread
    for thread, with the same counts."""
    alice = Marked("alice")
    with target.open() as memory:
        app = fan_out_graph().compile(checkpointer=memory.checkpointer)
        for name in ("c", "a", "d", "b"):
            config = {"configurable": {"thread_id": f"{alice.id}-{name}", "user_id": alice.id}}
            app.invoke(say(alice.text(name)), config)
        config = {"configurable": {"thread_id": f"{alice.id}-a", "user_id": alice.id}}
        app.invoke(say(alice.text("again")), config)  # "a" is now the latest updated
        dry = erase_user(alice.id, memory=memory, batch_size=1, dry_run=True)
        real = erase_user(alice.id, memory=memory, batch_size=1)
        assert sorted(dry.thread_ids) == sorted(real.thread_ids)
        assert len(real.thread_ids) == 4
        assert dry.counts == real.counts
    assert mentions(target.dump(), alice.markers) == []


def test_the_hold_is_renewed_for_every_page(target: Target) -> None:
    """A 0.5 s hold and an erasure of three pages that takes longer: after the first page
    the hold lapses (a run's new thread lands, and is erased by a later page); after the
    second page the renewed hold drops a run's new thread at once."""
    alice = Marked("alice")
    with target.open() as memory:
        saver = memory.checkpointer
        app = chat_graph_of(saver)
        for n in range(3):
            run(app, alice, f"{alice.id}-{n}")
        seen: dict[int, Any] = {}

        def progress(step: Any) -> None:
            if step.kind != "threads":
                return
            page = len(seen) + 1
            if page == 1:
                time.sleep(0.7)  # the 0.5 s hold lapses
                seen[page] = run(app, alice, f"{alice.id}-lapsed")
            elif page == 2:
                seen[page] = run(app, alice, f"{alice.id}-renewed")
            else:
                seen[page] = None

        erase_user(
            alice.id, memory=memory, batch_size=1, progress=progress, tombstone_hours=0.5 / 3600
        )
        assert seen[1] is not None, "the lapsed hold let the run's thread land"
        assert seen[2] is None, "the renewed hold dropped the run's thread"
        assert saver.threads.sessions(alice.id) == []
    assert mentions(target.dump(), alice.markers) == []


def chat_graph_of(saver: Any) -> Any:
    from chat_support import chat_graph

    return chat_graph(lambda text: f"re: {text}").compile(checkpointer=saver)


def run(app: Any, user: Marked, thread_id: str) -> Any:
    """One turn of ``user`` in ``thread_id``; the checkpoint stored, or ``None``."""
    config = {"configurable": {"thread_id": thread_id, "user_id": user.id}}
    app.invoke(say(user.text("turn")), config)
    return app.checkpointer.get_tuple(config)
