"""Erasure covers what the package writes, by construction, for any user id.

One user is seeded through every public API of the package that writes user data (a graph
run with a subgraph: checkpoints in two namespaces, the thread index, transcripts; the
memory tools; preference learning; task drafts; an approval decided), with ids that
LangGraph's namespace rules would refuse as they are (``.``) or that test the encoding
(``/``, Chinese, ``@``). ``erase_user`` with its defaults is then called, and every table
(every column) or every key (every element, compressed values inflated) is scanned for
the user's id, in every form a writer could store it, and their distinctive texts: none
may be left, and the other user's data is untouched.

The declared writers (``declared_user_data``) must be those this test exercises: a new
writer fails here until it declares where it writes and this test seeds through it; a
writer that writes outside its declaration leaves traces the scan finds.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import string
import subprocess
import sys
import textwrap
import threading
import uuid
from pathlib import Path
from typing import Annotated, Any

import pytest
from approvals_support import booking_agent
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langgraph.graph import END, START, StateGraph, add_messages
from langgraph.prebuilt import ToolNode
from test_erasure import Target, mentions, owned_by, target
from typing_extensions import TypedDict

from langgraph_memory_plus.approvals import Approvals, TaskDrafts
from langgraph_memory_plus.nodes import PreferenceLearner, create_memory_tools
from langgraph_memory_plus.privacy.erasure import (
    aerase_user,
    declared_templates,
    erase_user,
    lift_erasure,
)
from langgraph_memory_plus.store.namespaces import declared_user_data, label_value, user_namespace

pytestmark = pytest.mark.storage
__all__ = ["target"]  # the fixture, shared with test_erasure

IDS = ("alice@example.com", "张三", "a/b.c")
EXERCISED = {"create_memory_tools", "PreferenceLearner", "TaskDrafts"}
"""The declared store writers :func:`seed` goes through (checkpoints, the index,
transcripts and approvals are exercised too; they are erased through the thread index and
anonymized, not by namespace)."""
DRAFT_SCHEMA = {
    "type": "object",
    "properties": {"flight": {"type": "string"}, "note": {"type": "string"}},
    "required": ["flight", "note"],
}


class State(TypedDict, total=False):
    messages: Annotated[list[AnyMessage], add_messages]


class Person:
    """A user id and the distinctive texts seeded for it: what the scan looks for."""

    def __init__(self, user_id: str) -> None:
        self.id = user_id
        self.tag = uuid.uuid4().hex[:12]
        self.threads: list[str] = []
        self.texts: list[str] = []
        self.name = "Q" + "".join(random.choices(string.ascii_lowercase, k=10))
        self.texts.append(self.name)

    def text(self, what: str) -> str:
        out = f"{what} {uuid.uuid4().hex}"
        self.texts.append(out)
        return out

    def thread(self, what: str) -> str:
        out = f"{what}-{self.tag}-{len(self.threads)}"
        self.threads.append(out)
        return out

    @property
    def markers(self) -> list[bytes]:
        """The id as stored raw, as a label, and JSON-escaped (``\\u5f20``), with the texts."""
        forms = {self.id, label_value(self.id)}
        forms |= {json.dumps(f)[1:-1] for f in list(forms)}
        return [m.encode() for m in (*forms, self.tag, *self.texts)]


def chat_with_subgraph() -> Any:
    """Parent graph -> subgraph ``agent``: preference learning, then the memory tools."""
    learner = PreferenceLearner()

    def learn(state: State) -> dict[str, Any]:
        learner.apply(state["messages"])
        return {}

    sub = StateGraph(State)
    sub.add_node("learn", learn)
    sub.add_node("tools", ToolNode(create_memory_tools()))
    sub.add_edge(START, "learn")
    sub.add_edge("learn", "tools")
    sub.add_edge("tools", END)
    parent = StateGraph(State)
    parent.add_node("agent", sub.compile())
    parent.add_edge(START, "agent")
    parent.add_edge("agent", END)
    return parent


def seed(memory: Any, person: Person, tmp: Path) -> None:
    """``person``'s data, written only through the package's public APIs."""
    saver, store = memory.checkpointer, memory.store
    app = chat_with_subgraph().compile(checkpointer=saver, store=store)
    for n, by_context in enumerate((True, False)):
        thread = person.thread("chat")
        said = HumanMessage(
            f"Hi, my name is {person.name}. {person.text('note')}", id=f"h-{thread}"
        )
        call = {
            "name": "add_memory",
            "args": {"content": person.text("likes trains"), "key": f"k{n}-{person.tag}"},
            "id": f"call-{thread}",
        }
        inputs = {"messages": [said, AIMessage("", tool_calls=[call], id=f"ai-{thread}")]}
        if by_context:  # the user key only in the runtime context
            app.invoke(
                inputs, {"configurable": {"thread_id": thread}}, context={"user_id": person.id}
            )
        else:
            app.invoke(inputs, {"configurable": {"thread_id": thread, "user_id": person.id}})
        namespaces = {t.config["configurable"]["checkpoint_ns"] for t in saver.list(
            {"configurable": {"thread_id": thread}})}  # fmt: skip
        assert "" in namespaces and len(namespaces) > 1, "checkpoints in a subgraph too"
    TaskDrafts(store, DRAFT_SCHEMA).create(
        person.id,
        "trip",
        {"flight": person.text("flight")},
        draft_id=f"d-{person.tag}-{len(person.threads)}",
    )
    # An approval, decided: the decision record outlives the thread, anonymized.
    thread = person.thread("booking")
    agent = booking_agent(saver, tmp / f"runs-{person.tag}.jsonl")
    config = {"configurable": {"thread_id": thread, "user_id": person.id}}
    flight = person.text("LH").replace(" ", "")
    out = agent.invoke({"messages": [HumanMessage(f"book {flight}", id=f"h-{thread}")]}, config)
    approvals = Approvals(saver, store)
    approvals.decide(
        str(out["__interrupt__"][0].id),
        "edit",
        by="reviewer-1",
        args={"flight": flight, "seat": person.text("seat")},
        graph=agent,
    )
    assert memory.checkpointer.threads.sessions(person.id), "the index attributes the threads"
    assert store.search(user_namespace(("memories", "{user_id}"), person.id))


def test_the_label_encoding_is_one_to_one_and_accepted_by_langgraph() -> None:
    from langgraph.store.memory import InMemoryStore

    from langgraph_memory_plus.store.namespaces import check_writable, label_value_of

    ids = [*IDS, "a.b", "a%2Eb", "a%252Eb", "%", "x\x00y", "+86 138", "🙂.", "{user_id}", "."]
    labels = [label_value(i) for i in ids]
    assert len(set(labels)) == len(ids)
    assert [label_value_of(label) for label in labels] == ids
    store = InMemoryStore()
    for i in ids:
        ns = user_namespace(("users", "{user_id}"), i)
        check_writable(ns)  # this package's rules
        store.put(ns, "k", {"v": i})  # LangGraph's own
        assert store.get(ns, "k").value == {"v": i}  # type: ignore[union-attr]


def test_the_declared_writers_are_those_exercised_and_the_default_covers_them() -> None:
    declared_templates()  # imports every writer module
    declared = {d.writer for d in declared_user_data()}
    assert declared == EXERCISED, "seed() must write through every declared writer"
    covered = declared_templates()
    for d in declared_user_data():
        assert any(d.template[: len(t)] == t for t in covered), d


def test_every_trace_of_the_user_goes_on_every_backend(target: Target, tmp_path: Path) -> None:
    people = [Person(uid) for uid in IDS]
    bob = Person("bob@example.com")
    with target.open() as memory:
        for person in [*people, bob]:
            seed(memory, person, tmp_path)
    before = target.dump()
    for person in people:
        assert mentions(before, [person.id.encode()]), "the scan finds the raw id"
        assert mentions(before, [label_value(person.id).encode()]), "and the label"
    bob_before = owned_by(before, bob.markers)

    with target.open() as memory:
        reports = [erase_user(p.id, memory=memory, batch_size=2) for p in people]
    for person, report in zip(people, reports, strict=True):
        assert sorted(report.thread_ids) == sorted(person.threads)
        assert report.counts["store_items"] == 3  # the profile and two memories
        assert report.counts["drafts"] == 1 and report.counts["approvals_anonymized"] == 1
        assert report.namespaces == [user_namespace(t, person.id) for t in declared_templates()]

    after = target.dump()
    for person in people:
        assert mentions(after, person.markers) == [], person.id
    assert owned_by(after, bob.markers) == bob_before
    with target.open() as memory:
        for person in people:
            assert memory.checkpointer.threads.sessions(person.id) == []
            assert (
                Approvals(memory.checkpointer, memory.store).list(user_id=person.id, status=None)
                == []
            )
        assert len(memory.checkpointer.threads.sessions(bob.id)) == 3
        assert len(TaskDrafts(memory.store, DRAFT_SCHEMA).list(bob.id)) == 1


def test_erasure_during_an_async_run_of_the_user(target: Target, tmp_path: Path) -> None:
    """``aerase_user`` while the user's run awaits in a node that then writes memories and
    answers: neither its checkpoint nor its store writes come back."""
    zhang = Person("张三")
    with target.open() as memory:
        seed(memory, zhang, tmp_path)

    async def go() -> Any:
        async with target.open() as memory:
            ready, release = asyncio.Event(), asyncio.Event()
            tools = {t.name: t for t in create_memory_tools()}

            async def slow(state: State) -> dict[str, Any]:
                ready.set()
                await release.wait()
                await tools["add_memory"].ainvoke(
                    {"content": zhang.text("late memory"), "key": "late"}
                )
                return {"messages": [AIMessage(zhang.text("late reply"), id="ai-late")]}

            builder = StateGraph(State)
            builder.add_node("slow", slow)
            builder.add_edge(START, "slow")
            builder.add_edge("slow", END)
            app = builder.compile(checkpointer=memory.checkpointer, store=memory.store)
            thread = zhang.thread("late")
            config = {"configurable": {"thread_id": thread, "user_id": zhang.id}}
            run = asyncio.create_task(
                app.ainvoke({"messages": [HumanMessage(zhang.text("q"), id="h-late")]}, config)
            )
            await asyncio.wait_for(ready.wait(), 20)
            report = await aerase_user(zhang.id, memory=memory)
            release.set()
            await asyncio.wait_for(run, 30)
            assert await memory.checkpointer.aget_tuple(config) is None
            return report, thread

    report, late = asyncio.run(go())
    listed, every = set(report.thread_ids), set(zhang.threads)
    if "key_prefix" in target.options:
        # Redis: the run's first checkpoint starts the thread as the erasure begins; when it
        # lands after the erasure looked, its own second hold check deletes it instead, and
        # the report does not list it (it is gone either way: the scan below).
        assert listed in (every, every - {late})
    else:
        assert listed == every
    assert mentions(target.dump(), zhang.markers) == []


def test_concurrent_erasures_of_one_user_both_finish(target: Target, tmp_path: Path) -> None:
    """Two ``erase_user`` in threads, then two ``aerase_user`` in one loop, on the same
    user: no error, every thread deleted once by one of them, nothing left."""
    first, second = Person("a/b.c"), Person("a/b.c")
    with target.open() as memory:
        seed(memory, first, tmp_path)
        errors: list[BaseException] = []
        reports: list[Any] = []
        barrier = threading.Barrier(2)

        def erase() -> None:
            try:
                barrier.wait(10)
                reports.append(erase_user(first.id, memory=memory, batch_size=1))
            except BaseException as exc:
                errors.append(exc)

        workers = [threading.Thread(target=erase) for _ in range(2)]
        for w in workers:
            w.start()
        for w in workers:
            w.join(60)
        assert not errors and len(reports) == 2
        assert {t for r in reports for t in r.thread_ids} == set(first.threads)
    assert mentions(target.dump(), first.markers) == []

    with target.open() as memory:
        assert lift_erasure(second.id, memory=memory)  # the same id signs up again
        seed(memory, second, tmp_path)

    async def both() -> list[Any]:
        async with target.open() as memory:
            return list(
                await asyncio.gather(
                    aerase_user(second.id, memory=memory, batch_size=1),
                    aerase_user(second.id, memory=memory, batch_size=1),
                )
            )

    reports = asyncio.run(both())
    assert set(second.threads) <= {t for r in reports for t in r.thread_ids}
    assert mentions(target.dump(), second.markers) == []


KILLED = textwrap.dedent(
    """
    import json, os, signal, sys
    from langgraph_memory_plus import from_url
    from langgraph_memory_plus.privacy.erasure import erase_user
    url, options, user, kind = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3], sys.argv[4]

    def progress(p):
        if p.kind == kind and p.done >= 4:
            os.kill(os.getpid(), signal.SIGKILL)

    with from_url(url, transcripts=True, **options) as memory:
        erase_user(user, memory=memory, progress=progress, batch_size=2)
    """
)


@pytest.mark.parametrize("phase", ["threads", "store_items"])
def test_an_erasure_killed_between_batches_is_finished_by_the_next(
    target: Target, tmp_path: Path, phase: str
) -> None:
    alice = Person("alice@example.com")
    with target.open() as memory:
        seed(memory, alice, tmp_path)
        seed(memory, alice, tmp_path)  # 6 threads, 6 items under the user's namespaces
    done = subprocess.run(
        [sys.executable, "-c", KILLED, target.url, json.dumps(target.options), alice.id, phase],
        env={**os.environ, "PYTHONPATH": os.getcwd()},
        capture_output=True,
        timeout=120,
    )
    assert done.returncode == -signal.SIGKILL, done.stderr.decode()[-2000:]
    assert mentions(target.dump(), alice.markers), "killed before the end"
    with target.open() as memory:
        report = erase_user(alice.id, memory=memory)
        assert report.counts["threads"] == (6 - 4 if phase == "threads" else 0)
    assert mentions(target.dump(), alice.markers) == []


def test_cli_erase_user_takes_any_id_and_fails_in_one_line(target: Target, tmp_path: Path) -> None:
    from test_cli import as_json, run

    zhang = Person("张三")
    with target.open() as memory:
        seed(memory, zhang, tmp_path)
    url = target.url
    if "key_prefix" in target.options:
        url += f"?key_prefix={target.options['key_prefix']}"
    done = as_json("erase-user", zhang.id, "--yes", "-u", url)
    assert done["user_id"] == zhang.id and done["counts"]["threads"] == 3
    assert done["counts"]["store_items"] == 3 and done["counts"]["drafts"] == 1
    assert mentions(target.dump(), zhang.markers) == []
    # the user comes back: --lift ends the hold, once
    assert as_json("erase-user", zhang.id, "--lift", "-u", url) == {
        "user_id": zhang.id,
        "lifted": True,
    }
    assert as_json("erase-user", zhang.id, "--lift", "-u", url)["lifted"] is False
    if not url.startswith("sqlite"):
        return
    # A failure midway (here: the database locked by another process) is one line on
    # stderr, not a traceback, and says that a re-run finishes.
    import sqlite3

    lock = sqlite3.connect(url.removeprefix("sqlite:///"), isolation_level=None)
    try:
        lock.execute("BEGIN EXCLUSIVE")
        failed = run("erase-user", "alice@example.com", "--yes", "-u", f"{url}?busy_timeout=0.2")
    finally:
        lock.close()
    assert failed.returncode != 0 and failed.stdout == ""
    assert failed.stderr.count("\n") == 1 and "Traceback" not in failed.stderr
    assert "database is locked" in failed.stderr and "run it again" in failed.stderr
