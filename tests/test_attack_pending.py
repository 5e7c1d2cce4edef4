"""Attacks on the erasure of threads of pending writes only (their put never came).

``tests/test_erasure_pending.py`` covers chat writes named in ``configurable``; these
are the other ways a user's writes reach such a thread: interrupt and error writes (the
thread index's own path), a user named only in ``metadata`` or the runtime context, two
writers on one thread, and a real LangGraph run (``context=``, durability "async")
killed while its first put is stuck. Every backend; the storage is dumped whole and
searched for the erased user's texts afterwards.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from typing import Any

import pytest
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.runtime import Runtime
from langgraph.types import Interrupt
from test_attack_erasure import Marked
from test_erasure import Target, mentions, target

from langgraph_memory_plus.privacy.erasure import erase_user

pytestmark = pytest.mark.storage
__all__ = ["target"]


def _config(thread_id: str, user: Any, checkpoint: Any, where: str = "configurable") -> Any:
    configurable: dict[str, Any] = {
        "thread_id": thread_id,
        "checkpoint_ns": "",
        "checkpoint_id": checkpoint["id"],
    }
    config: dict[str, Any] = {"configurable": configurable}
    if user is None:
        return config
    if where == "configurable":
        configurable["user_id"] = user
    elif where == "metadata":
        config["metadata"] = {"user_id": user}
    else:  # how LangGraph hands a put the run's ``context=`` (see checkpoint/context.py)
        configurable["__pregel_runtime"] = Runtime(context={"user_id": user})
    return config


def _chat(saver: Any, config: Any, text: str) -> None:
    saver.put_writes(
        config, [("messages", [HumanMessage(text, id=f"h-{uuid.uuid4().hex[:6]}")])], "t1"
    )


# -- interrupt and error writes: the thread index's own path ---------------------------------


@pytest.mark.parametrize("channel", ["__interrupt__", "__error__"])
def test_interrupt_or_error_writes_of_a_run_that_died_before_its_put_are_erased(
    target: Target, channel: str
) -> None:
    """A new thread's first step interrupts (or fails) and the process dies before the
    put: its writes hold the question (the error). SQL wrote a thread index row for
    them (status, interrupts) with no metadata, which made ``pending_threads`` take the
    thread for an indexed one while the index search (by user) could not list it."""
    alice = Marked("alice")
    tid = f"t-{uuid.uuid4().hex[:10]}"
    secret = alice.text("asked")
    value: Any = [Interrupt(value=secret, id="i1")] if channel == "__interrupt__" else secret
    with target.open() as memory:
        saver = memory.checkpointer
        saver.put_writes(_config(tid, alice.id, empty_checkpoint()), [(channel, value)], "t1")
        assert mentions(target.dump(), [secret.encode()]), "the writes are stored"
        dry = erase_user(alice.id, memory=memory, dry_run=True)
        report = erase_user(alice.id, memory=memory)
    assert dry.thread_ids == report.thread_ids == [tid]
    assert report.counts["threads"] == 1
    assert mentions(target.dump(), alice.markers) == []


# -- where the run names its user ----------------------------------------------------------


@pytest.mark.parametrize("where", ["metadata", "context"])
def test_a_user_named_in_metadata_or_the_runtime_context(target: Target, where: str) -> None:
    alice = Marked("alice")
    tid = f"t-{uuid.uuid4().hex[:10]}"
    with target.open() as memory:
        _chat(
            memory.checkpointer, _config(tid, alice.id, empty_checkpoint(), where), alice.text("w")
        )
        report = erase_user(alice.id, memory=memory)
    assert report.thread_ids == [tid]
    assert mentions(target.dump(), alice.markers) == []


# -- two writers on one thread of writes only -----------------------------------------------


@pytest.mark.parametrize("erased", ["first", "second"])
def test_each_of_two_users_writing_one_writes_only_thread_is_erased(
    target: Target, backend: str, erased: str, request: pytest.FixtureRequest
) -> None:
    """Alice's writes land first, then bob's on the same thread id (no put yet): the
    thread has one owner in waiting, so the erasure of one of the two leaves that user's
    texts. SQL keeps the first writer (bob's erasure leaves his), Redis the last
    (alice's erasure leaves hers: ``w`` now names bob, her set entry is found stale)."""
    sql = backend in ("sqlite", "postgres")
    if (erased == "second") == sql:
        request.applymarker(
            pytest.mark.xfail(
                strict=True,
                reason="one owner in waiting per thread: the other writer's texts stay",
            )
        )
    alice, bob = Marked("alice"), Marked("bob")
    tid = f"t-{uuid.uuid4().hex[:10]}"
    cp = empty_checkpoint()
    with target.open() as memory:
        saver = memory.checkpointer
        _chat(saver, _config(tid, alice.id, cp), alice.text("hers"))
        _chat(saver, _config(tid, bob.id, cp), bob.text("his"))
        who = alice if erased == "first" else bob
        report = erase_user(who.id, memory=memory)
    assert report.thread_ids == [tid]
    assert mentions(target.dump(), who.markers) == []


def test_a_copy_onto_another_users_writes_only_thread_leaves_him_his_owner(
    target: Target, backend: str, request: pytest.FixtureRequest
) -> None:
    """``copy_thread`` of alice's writes-only thread onto bob's writes-only thread: SQL
    gives the target the source's owner in waiting (``coalesce(source's, target's)``),
    so bob's erasure no longer finds his own thread and his texts stay. (Redis copies
    no thread without checkpoints: nothing changes there.)"""
    if backend in ("sqlite", "postgres"):
        request.applymarker(
            pytest.mark.xfail(
                strict=True, reason="SQL: a copy replaces the target's owner in waiting"
            )
        )
    alice, bob = Marked("alice"), Marked("bob")
    src, dst = f"s-{uuid.uuid4().hex[:10]}", f"d-{uuid.uuid4().hex[:10]}"
    with target.open() as memory:
        saver = memory.checkpointer
        _chat(saver, _config(src, alice.id, empty_checkpoint()), alice.text("hers"))
        _chat(saver, _config(dst, bob.id, empty_checkpoint()), bob.text("his"))
        saver.copy_thread(src, dst)
        report = erase_user(bob.id, memory=memory)
    assert report.thread_ids == [dst]
    assert mentions(target.dump(), bob.markers) == []


def test_the_erased_users_mark_on_a_thread_another_users_put_filed_goes(
    target: Target,
) -> None:
    """Alice's writes land first, then bob's put files the thread under bob: it is his
    (the index's), but the owner in waiting still named alice; her erasure left her id
    stored there (SQL: the row's ``owner``; Redis: the thread hash's ``w``)."""
    alice, bob = Marked("alice"), Marked("bob")
    tid = f"t-{uuid.uuid4().hex[:10]}"
    cp = empty_checkpoint()
    with target.open() as memory:
        saver = memory.checkpointer
        _chat(saver, _config(tid, alice.id, cp), f"neutral-{uuid.uuid4().hex}")
        config = {"configurable": {"thread_id": tid, "checkpoint_ns": "", "user_id": bob.id}}
        saver.put(config, cp, {"source": "input", "step": -1}, {})
        assert mentions(target.dump(), [alice.id.encode()]), "her mark is stored"
        assert erase_user(alice.id, memory=memory, dry_run=True).thread_ids == []
        assert erase_user(alice.id, memory=memory).thread_ids == []
        assert erase_user(bob.id, memory=memory, dry_run=True).thread_ids == [tid]
    assert mentions(target.dump(), [alice.id.encode()]) == []


def test_writes_naming_the_user_after_writes_naming_none(
    target: Target, backend: str, request: pytest.FixtureRequest
) -> None:
    """A writer that knows only the thread id writes first (not covered, by the README),
    then the user's own run writes on the same thread: the user's writes name her, yet on
    SQL the row made by the first writes keeps no owner, so her texts stay."""
    if backend in ("sqlite", "postgres"):
        request.applymarker(
            pytest.mark.xfail(
                strict=True, reason="SQL: the owner is set only by the writes creating the row"
            )
        )
    alice = Marked("alice")
    tid = f"t-{uuid.uuid4().hex[:10]}"
    cp = empty_checkpoint()
    with target.open() as memory:
        saver = memory.checkpointer
        _chat(saver, _config(tid, None, cp), f"anonymous-{uuid.uuid4().hex}")
        _chat(saver, _config(tid, alice.id, cp), alice.text("hers"))
        report = erase_user(alice.id, memory=memory)
    assert report.thread_ids == [tid]
    assert mentions(target.dump(), alice.markers) == []


# -- an erasure while the user's writes land ------------------------------------------------


def test_an_erasure_while_a_run_keeps_writing_new_threads_of_writes_only(target: Target) -> None:
    """A writer keeps starting writes-only threads of alice while she is erased: what
    landed before the hold is found and deleted, what comes after is refused; nothing of
    her is left once both are done."""
    alice = Marked("alice")
    stop, started = threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def writer(saver: Any) -> None:
        n = 0
        try:
            while not stop.is_set() or n < 5:
                tid = f"t-{uuid.uuid4().hex[:10]}"
                _chat(saver, _config(tid, alice.id, empty_checkpoint()), alice.text(f"w{n}"))
                n += 1
                if n == 5:
                    started.set()
        except BaseException as error:  # pragma: no cover - shown by the assert below
            errors.append(error)
            started.set()

    with target.open() as memory:
        saver = memory.checkpointer
        thread = threading.Thread(target=writer, args=(saver,))
        thread.start()
        try:
            assert started.wait(20)
            report = erase_user(alice.id, memory=memory, batch_size=3)
            time.sleep(0.2)  # writes go on under the hold
        finally:
            stop.set()
            thread.join(30)
        assert not errors, errors
        assert report.counts["threads"] >= 5
        assert len(report.thread_ids) == len(set(report.thread_ids))
    assert mentions(target.dump(), alice.markers) == []


# -- an expired thread's id written again -------------------------------------------------


@pytest.mark.parametrize("before", ["put", "writes only"])
def test_writes_reviving_an_expired_thread_name_their_own_user(target: Target, before: str) -> None:
    """Bob's thread (with a put, or of writes only) expires, unswept; alice's run writes
    on the same id, writes only. The thread starts over: SQL kept the row's old owner in
    waiting (none after a put, bob after writes only), so alice's erasure missed her
    writes, and bob's erasure deleted them."""
    alice, bob = Marked("alice"), Marked("bob")
    tid = f"t-{uuid.uuid4().hex[:10]}"
    with target.open(ttl=0.01) as memory:  # minutes: 0.6 s
        saver = memory.checkpointer
        if before == "put":
            config = {"configurable": {"thread_id": tid, "checkpoint_ns": "", "user_id": bob.id}}
            saver.put(config, empty_checkpoint(), {"source": "input", "step": -1}, {})
        else:
            _chat(saver, _config(tid, bob.id, empty_checkpoint()), bob.text("his"))
        time.sleep(1.2)
        _chat(saver, _config(tid, alice.id, empty_checkpoint()), alice.text("hers"))
        assert erase_user(bob.id, memory=memory).thread_ids == []
        assert mentions(target.dump(), alice.markers[:1]), "bob's erasure left her writes"
        report = erase_user(alice.id, memory=memory)
    assert report.thread_ids == [tid]
    dump = target.dump()
    assert mentions(dump, alice.markers) == []
    assert mentions(dump, bob.markers) == []


# -- a real run killed while its first put is stuck -----------------------------------------

RUN = textwrap.dedent(
    """
    import json, sys, threading
    from typing import Annotated, TypedDict
    from langchain_core.messages import AIMessage
    from langgraph.graph import START, StateGraph
    from langgraph.graph.message import add_messages
    from langgraph.types import interrupt
    from langgraph_memory_plus import from_url
    url, options, user, tid, text = sys.argv[1:6]

    class State(TypedDict):
        messages: Annotated[list, add_messages]

    def answer(state):
        return {"messages": [AIMessage(text + "-answer", id="a1")]}

    def ask(state):
        interrupt(text + "-question")
        return {}

    with from_url(url, transcripts=True, **json.loads(options)) as memory:
        saver = memory.checkpointer
        stuck = threading.Event()
        put = saver.put

        def stuck_put(config, *args, **kwargs):  # the root's put never lands: killed first
            if config["configurable"].get("checkpoint_ns", ""):
                return put(config, *args, **kwargs)  # a subgraph's does
            stuck.wait()

        saver.put = stuck_put
        graph = StateGraph(State)
        inner = StateGraph(State)
        inner.add_node("answer", answer)
        inner.add_edge(START, "answer")
        graph.add_node("answer", inner.compile())
        graph.add_node("ask", ask)
        graph.add_edge(START, "answer")
        graph.add_edge(START, "ask")
        app = graph.compile(checkpointer=saver)
        print("running", flush=True)
        app.invoke({"messages": []}, {"configurable": {"thread_id": tid}},
                   context={"user_id": user}, durability="async")
    """
)


def test_a_graph_run_with_a_context_user_killed_before_its_first_put(target: Target) -> None:
    """``graph.invoke(..., context={"user_id": ...}, durability="async")`` on a new
    thread: one node answers (in a subgraph, whose own puts land), one interrupts; their
    writes land, the root's first put never does (stuck, then SIGKILL). Another
    process's erasure leaves nothing of the user."""
    alice = Marked("alice")
    tid = f"t-{uuid.uuid4().hex[:10]}"
    text = alice.text("run")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([os.getcwd(), *sys.path])}
    args = [target.url, json.dumps(target.options), alice.id, tid, text]
    worker = subprocess.Popen(
        [sys.executable, "-c", RUN, *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    want = [f"{text}-answer".encode(), f"{text}-question".encode()]
    try:
        assert worker.stdout is not None
        line = worker.stdout.readline()
        assert line.strip() == b"running", line or worker.stderr.read().decode()[-2000:]  # type: ignore[union-attr]
        deadline = time.monotonic() + 20
        while True:
            dump = target.dump()
            if all(mentions(dump, [w]) for w in want):
                break
            assert worker.poll() is None, worker.stderr.read().decode()[-2000:]  # type: ignore[union-attr]
            assert time.monotonic() < deadline, "the run's writes never landed"
            time.sleep(0.1)
    finally:
        worker.send_signal(signal.SIGKILL)
        worker.wait(timeout=60)
    # the subgraph's checkpoints landed (namespace "answer:<task>"), the root's did not
    assert mentions(target.dump(), [b"answer:"]), "the subgraph's puts are stored"
    with target.open() as memory:
        assert memory.checkpointer.get_tuple({"configurable": {"thread_id": tid}}) is None
        dry = erase_user(alice.id, memory=memory, dry_run=True)
        report = erase_user(alice.id, memory=memory)
    assert dry.thread_ids == report.thread_ids == [tid]
    assert mentions(target.dump(), alice.markers) == []
