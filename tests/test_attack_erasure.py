"""An adversary's attack on erasure and ownership (issue 34, round 3).

Each test is one find, kept on every backend it concerns:

1. Components disagreed on whose run it is (the index: config ``metadata`` over
   ``configurable`` over the runtime context; the memory nodes: the context first; the
   draft tools: ``configurable`` first): a run naming two users filed its thread under one
   and its memories under the other. One rule now (``checkpoint.context.run_value``).
2. ``copy_threads`` re-run with ``user_id=`` left the threads a first run had copied
   without attribution unowned.
3. Redis: a user's sets took the expiry of the last thread that joined them (a saver with
   a shorter TTL, or none), so the user's other threads left ``sessions()`` and erasure.
4. A user id with NUL was accepted by runs (LangGraph strips it: ``"a\\x00b"`` became
   ``"ab"``, another user) and by some calls, refused by others.
5. A run still going for a user while ``erase_user`` ran stored a new thread (its
   checkpoints, transcript lines) after the erasure: the user was back. The saver now
   keeps an erased-user hold (``lift_erasure`` ends it).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Annotated, Any

import pytest
from chat_support import chat_graph
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph, add_messages
from langgraph.store.memory import InMemoryStore
from test_copy_threads import official
from test_erasure import Target, mentions, target
from typing_extensions import TypedDict

from langgraph_memory_plus import InvalidConfigError
from langgraph_memory_plus.approvals import Approvals, TaskDrafts
from langgraph_memory_plus.nodes import create_memory_tools
from langgraph_memory_plus.privacy.erasure import (
    aerase_user,
    alift_erasure,
    erase_user,
    lift_erasure,
)
from langgraph_memory_plus.store.namespaces import user_namespace
from langgraph_memory_plus.transfer.migration import copy_threads

pytestmark = pytest.mark.storage
__all__ = ["target"]

MEMORIES = ("memories", "{user_id}")
DRAFT_SCHEMA = {"type": "object", "properties": {"iban": {"type": "string"}}}


class State(TypedDict, total=False):
    messages: Annotated[list[AnyMessage], add_messages]


def remembering_graph() -> StateGraph:
    """One node that stores a memory with the package's tool, then answers."""
    tools = {t.name: t for t in create_memory_tools()}

    def node(state: State) -> dict[str, Any]:
        last = state["messages"][-1]
        tools["add_memory"].invoke({"content": f"memo of {last.content}", "key": "k"})
        return {"messages": [AIMessage(f"re: {last.content}", id=f"ai-{last.id}")]}

    builder = StateGraph(State)
    builder.add_node("node", node)
    builder.add_edge(START, "node")
    builder.add_edge("node", END)
    return builder


def say(text: str) -> dict[str, Any]:
    return {"messages": [HumanMessage(text, id=f"h-{uuid.uuid4().hex[:8]}")]}


def memories(memory: Any, user: str) -> list[Any]:
    return list(memory.store.search(user_namespace(MEMORIES, user)))


# -- 1. one rule for whose run it is -------------------------------------------------------


def test_a_run_naming_two_users_is_refused_before_anything_is_stored(target: Target) -> None:
    alice, bob = f"alice.{uuid.uuid4().hex[:6]}@x.org", f"鲍勃/{uuid.uuid4().hex[:6]}"
    with target.open() as memory:
        app = remembering_graph().compile(checkpointer=memory.checkpointer, store=memory.store)
        conflicts = [
            ({"configurable": {"thread_id": "c1", "user_id": alice}}, {"user_id": bob}),
            (
                {
                    "configurable": {"thread_id": "c2", "user_id": alice},
                    "metadata": {"user_id": bob},
                },
                None,
            ),
        ]
        for config, context in conflicts:
            with pytest.raises(InvalidConfigError, match="different users"):
                app.invoke(say("secret"), config, context=context)
            assert memory.checkpointer.get_tuple(config) is None
        for user in (alice, bob):
            assert memory.checkpointer.threads.sessions(user) == []
            assert memories(memory, user) == []


def test_every_component_takes_the_user_from_where_the_run_gives_it(target: Target) -> None:
    """Partial: the user only in the context, only in ``configurable``, or in both (the
    same): the thread, its transcript lines and the memories are that user's, and
    ``erase_user`` removes them all."""
    users = {
        f"ctx-{uuid.uuid4().hex[:6]}": "context",
        f"cfg-{uuid.uuid4().hex[:6]}": "configurable",
        f"both-{uuid.uuid4().hex[:6]}": "both",
    }
    with target.open() as memory:
        saver = memory.checkpointer
        app = remembering_graph().compile(checkpointer=saver, store=memory.store)
        for user, where in users.items():
            configurable = {"thread_id": f"t-{user}"}
            if where != "context":
                configurable["user_id"] = user
            context = None if where == "configurable" else {"user_id": user}
            app.invoke(say(f"hello {user}"), {"configurable": configurable}, context=context)
            # a reviewer's resume with only the thread id keeps the owner
            app.invoke(say("more"), {"configurable": {"thread_id": f"t-{user}"}})
        for user in users:
            assert [s["thread_id"] for s in saver.threads.sessions(user)] == [f"t-{user}"]
            lines = saver.threads.transcript(f"t-{user}", user_id=user)
            assert [m["content"] for m in lines][:2] == [f"hello {user}", f"re: hello {user}"]
            assert len(memories(memory, user)) == 1
        gone = next(iter(users))
        report = erase_user(gone, memory=memory)
        assert report.thread_ids == [f"t-{gone}"]
        assert memories(memory, gone) == []
        assert saver.threads.transcript(f"t-{gone}") == []
        for user in list(users)[1:]:
            assert len(memories(memory, user)) == 1
            assert len(saver.threads.sessions(user)) == 1


# -- 2. copy re-run attributes what an earlier run copied -----------------------------------


@pytest.mark.parametrize("source_kind", ["official-sqlite", "official-postgres"])
def test_a_copy_rerun_with_user_id_attributes_threads_copied_before(
    source_kind: str, saver_factory: Any, tmp_path: Path
) -> None:
    tag = uuid.uuid4().hex[:8]
    user = f"张三.{tag}@example.com"
    with official(source_kind, tmp_path) as source, saver_factory() as target_saver:
        chat = chat_graph(lambda text: f"re: {text}").compile(checkpointer=source)
        for turn in range(2):
            chat.invoke(
                say(f"q{turn}"), {"configurable": {"thread_id": tag}}, context={"user_id": user}
            )
        first = copy_threads(source, target_saver, [tag])  # no attribution: unowned
        assert first.checkpoints_copied > 0
        assert target_saver.threads.sessions(user) == []
        again = copy_threads(source, target_saver, [tag], user_id=user, verify=True)
        assert again.differences == []
        assert [s["thread_id"] for s in target_saver.threads.sessions(user)] == [tag]
        copied = list(target_saver.list({"configurable": {"thread_id": tag}}))
        assert copied and all(t.metadata.get("user_id") == user for t in copied)
        # a third run changes nothing
        third = copy_threads(source, target_saver, [tag], user_id=user)
        assert third.checkpoints_copied == 0 and third.writes_copied == 0
        assert erase_user(user, checkpointer=target_saver).thread_ids == [tag]
        assert target_saver.get_tuple({"configurable": {"thread_id": tag}}) is None


@pytest.mark.parametrize("source_kind", ["official-sqlite", "official-postgres"])
def test_a_copy_keeps_the_user_of_a_thread_resumed_without_it(
    source_kind: str, saver_factory: Any, tmp_path: Path
) -> None:
    """A reviewer service resumed alice's thread with only its id: the latest checkpoint
    does not name her. ``copy_threads(user_id=fallback)`` gave the thread to the fallback
    (the copy's latest checkpoint got that user), where alice's erasure missed it."""
    tag = uuid.uuid4().hex[:8]
    alice, fallback = f"alice.{tag}", f"unknown.{tag}"
    with official(source_kind, tmp_path) as source, saver_factory() as target_saver:
        chat = chat_graph(lambda text: f"re: {text}").compile(checkpointer=source)
        chat.invoke(say("mine"), {"configurable": {"thread_id": tag, "user_id": alice}})
        chat.invoke(say("reviewed"), {"configurable": {"thread_id": tag}})
        latest = source.get_tuple({"configurable": {"thread_id": tag}})
        assert "user_id" not in latest.metadata
        report = copy_threads(source, target_saver, [tag], user_id=fallback, verify=True)
        assert report.differences == []
        assert [s["thread_id"] for s in target_saver.threads.sessions(alice)] == [tag]
        assert target_saver.threads.sessions(fallback) == []
        assert erase_user(alice, checkpointer=target_saver).thread_ids == [tag]


# -- 3. Redis: a user's sets never expire before one of their threads -----------------------


@pytest.mark.parametrize("backend", ["redis", "redis-cluster"], indirect=True)
def test_redis_user_sets_outlive_every_thread_of_the_user(saver_factory: Any, storage: Any) -> None:
    from langgraph_memory_plus.drivers.redis import sync_client_from_url

    user = f"u-{uuid.uuid4().hex[:8]}"
    chat = chat_graph(lambda text: f"re: {text}")

    def run(saver: Any, tid: str) -> None:
        chat.compile(checkpointer=saver).invoke(
            say("hi"), {"configurable": {"thread_id": tid, "user_id": user}}
        )

    client: Any = sync_client_from_url(storage.url)
    with (
        saver_factory() as forever,
        saver_factory(ttl={"default_ttl": 60}) as hour,
        saver_factory(ttl={"default_ttl": 1}) as minute,
    ):
        key = forever._plans.threads.set_key("user_id", f'"{user}"')
        try:
            run(hour, f"{user}-1")
            assert 59 * 60_000 < client.pttl(key) <= 61 * 60_000
            run(minute, f"{user}-2")  # a shorter TTL does not shorten the set's
            assert client.pttl(key) > 59 * 60_000
            run(forever, f"{user}-3")  # a thread without TTL makes it persistent
            assert client.pttl(key) == -1
            run(minute, f"{user}-4")  # and a TTL does not bring an expiry back
            assert client.pttl(key) == -1
            assert len(forever.threads.sessions(user)) == 4
        finally:
            client.close()


# -- 4. a NUL in a user id: one clear refusal everywhere ------------------------------------


def test_a_user_id_with_nul_is_refused_everywhere(target: Target) -> None:
    bad = "a\x00b"
    with target.open() as memory:
        saver, store = memory.checkpointer, memory.store
        app = remembering_graph().compile(checkpointer=saver, store=store)
        for config, context in (
            ({"configurable": {"thread_id": "n1", "user_id": bad}}, None),
            ({"configurable": {"thread_id": "n2"}}, {"user_id": bad}),
        ):
            with pytest.raises(InvalidConfigError, match="NUL"):
                app.invoke(say("hi"), config, context=context)
            assert saver.get_tuple(config) is None
        calls = [
            lambda: saver.threads.sessions(bad),
            lambda: saver.threads.get("n1", user_id=bad),
            lambda: saver.threads.transcript("n1", user_id=bad),
            lambda: erase_user(bad, memory=memory),
            lambda: TaskDrafts(store, DRAFT_SCHEMA).create(bad, "refund", {}),
            lambda: Approvals(saver, store).list(user_id=bad),
            lambda: copy_threads(saver, InMemorySaver(), user_id=bad),
        ]
        for call in calls:
            with pytest.raises(InvalidConfigError, match="NUL"):
                call()
        # the memory tools answer the model with the reason and store nothing
        add = next(t for t in create_memory_tools(store=store) if t.name == "add_memory")
        answer = add.invoke({"content": "x"}, {"configurable": {"user_id": bad}})
        assert "NUL" in str(answer)
        # "ab" is another user, who has nothing
        assert saver.threads.sessions("ab") == []
        assert memories(memory, "ab") == []


# -- 5. a run still going for an erased user cannot bring them back ------------------------


class Marked:
    """A user id and the texts seeded for it: what the dump must not show after erasure."""

    def __init__(self, prefix: str) -> None:
        self.id = f"{prefix}.{uuid.uuid4().hex[:8]}@例子.org"
        self.texts: list[str] = []

    def text(self, what: str) -> str:
        out = f"{what}-{uuid.uuid4().hex}"
        self.texts.append(out)
        return out

    @property
    def markers(self) -> list[bytes]:
        return [t.encode() for t in self.texts] + [self.id.encode()]


def _runs_until(app: Any, user: Marked, stop: threading.Event, started: threading.Event) -> int:
    """New threads of ``user``, one run each, until ``stop``; how many."""
    n = 0
    while not stop.is_set() or n < 3:
        app.invoke(
            say(user.text("late")),
            {"configurable": {"thread_id": f"{user.id}-{n}", "user_id": user.id}},
        )
        n += 1
        started.set()
    return n


def test_runs_in_flight_during_erasure_store_nothing_of_the_user(target: Target) -> None:
    """Threads: a worker starts new threads for the user, with memories, before, while and
    after ``erase_user`` runs; once both are done nothing of the user is stored. Then
    ``lift_erasure`` lets the returning user write again."""
    alice, bob = Marked("alice"), Marked("bob")
    with target.open() as memory:
        saver = memory.checkpointer
        app = remembering_graph().compile(checkpointer=saver, store=memory.store)
        app.invoke(
            say(bob.text("bob")), {"configurable": {"thread_id": "bob-1", "user_id": bob.id}}
        )
        stop, started = threading.Event(), threading.Event()
        with ThreadPoolExecutor(1) as pool:
            worker = pool.submit(_runs_until, app, alice, stop, started)
            assert started.wait(30)
            erase_user(alice.id, memory=memory)
            stop.set()
            assert worker.result(60) >= 3
        assert saver.threads.sessions(alice.id) == []
        assert memories(memory, alice.id) == []
        assert mentions(target.dump(), alice.markers) == []
        assert [s["thread_id"] for s in saver.threads.sessions(bob.id)] == ["bob-1"]
        assert len(memories(memory, bob.id)) == 1
        # a returning user: writes work again once the product says so
        assert lift_erasure(alice.id, memory=memory) is True
        config = {"configurable": {"thread_id": "back", "user_id": alice.id}}
        app.invoke(say("hello again"), config)
        assert [s["thread_id"] for s in saver.threads.sessions(alice.id)] == ["back"]
        assert len(memories(memory, alice.id)) == 1
        assert lift_erasure(alice.id, memory=memory) is False


WORKER = textwrap.dedent(
    """
    import json, sys, uuid
    from pathlib import Path
    from langchain_core.messages import AIMessage, HumanMessage
    from langgraph.graph import END, START, StateGraph, MessagesState
    from langgraph_memory_plus import from_url

    url, options, user, tag, ready, stop = sys.argv[1:7]

    def node(state):
        return {"messages": [AIMessage("re", id=f"ai-{uuid.uuid4().hex}")]}

    builder = StateGraph(MessagesState)
    builder.add_node("node", node)
    builder.add_edge(START, "node")
    builder.add_edge("node", END)
    n = 0
    with from_url(url, transcripts=True, **json.loads(options)) as memory:
        app = builder.compile(checkpointer=memory.checkpointer)
        while not Path(stop).exists() or n < 3:
            said = HumanMessage(f"{tag}-{n}", id=f"h-{n}")
            app.invoke({"messages": [said]}, {"configurable": {"thread_id": f"{user}-p{n}"}},
                       context={"user_id": user})
            n += 1
            Path(ready).write_text(str(n))
    print(n)
    """
)


def test_another_process_running_the_user_during_erasure_stores_nothing(
    target: Target, tmp_path: Path
) -> None:
    """Two processes: one keeps starting new threads of the user (the user in the runtime
    context), the other erases the user meanwhile; nothing of the user is left."""
    alice = Marked("alice")
    tag = alice.text("proc")
    ready, stop = tmp_path / "ready", tmp_path / "stop"
    args = [target.url, json.dumps(target.options), alice.id, tag, str(ready), str(stop)]
    worker = subprocess.Popen(
        [sys.executable, "-c", WORKER, *args],
        env={**os.environ, "PYTHONPATH": os.getcwd()},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        for _ in range(600):
            if ready.exists() or worker.poll() is not None:
                break
            time.sleep(0.05)
        with target.open() as memory:
            erase_user(alice.id, memory=memory)
            after = int(ready.read_text() or 0)
            for _ in range(600):  # two runs of the user that start after the erasure
                if int(ready.read_text() or 0) >= after + 2 or worker.poll() is not None:
                    break
                time.sleep(0.05)
            stop.touch()
            out, err = worker.communicate(timeout=120)
            assert worker.returncode == 0, err.decode()[-2000:]
            assert int(out) >= 3
            assert memory.checkpointer.threads.sessions(alice.id) == []
    finally:
        if worker.poll() is None:
            worker.kill()
    assert mentions(target.dump(), alice.markers) == []


def test_a_copy_during_the_hold_stores_nothing_of_the_erased_user(target: Target) -> None:
    """A migration running while the user is erased: ``copy_threads`` into the saver
    stores neither the user's checkpoints nor their pending writes (the writes name the
    user too), and the other user's threads are copied."""
    alice, bob = Marked("alice"), Marked("bob")
    source = InMemorySaver()
    app = remembering_graph().compile(checkpointer=source, store=InMemoryStore())
    for who in (alice, bob):
        config = {"configurable": {"thread_id": f"{who.id}-c", "user_id": who.id}}
        app.invoke(say(who.text("copied")), config)
        app.invoke(say(who.text("copied")), config, interrupt_before=["node"])
    with target.open() as memory:
        erase_user(alice.id, memory=memory)
        report = copy_threads(source, memory.checkpointer)
        assert sorted(report.threads) == sorted([f"{alice.id}-c", f"{bob.id}-c"])
        assert memory.checkpointer.threads.sessions(alice.id) == []
        assert [s["thread_id"] for s in memory.checkpointer.threads.sessions(bob.id)] == [
            f"{bob.id}-c"
        ]
    assert mentions(target.dump(), alice.markers) == []


def test_async_runs_in_flight_during_erasure_store_nothing_of_the_user(target: Target) -> None:
    """asyncio: runs of the user awaiting in a node while ``aerase_user`` runs, one in an
    existing thread and one starting a new thread after the erasure (a hand-off): neither
    stores anything of the user."""
    alice = Marked("alice")

    async def go() -> None:
        async with target.open() as memory:
            saver = memory.checkpointer
            ready, release = asyncio.Event(), asyncio.Event()
            tools = {t.name: t for t in create_memory_tools()}
            plain = remembering_graph().compile(checkpointer=saver, store=memory.store)

            async def slow(state: State, config: RunnableConfig) -> dict[str, Any]:
                ready.set()
                await release.wait()
                await tools["add_memory"].ainvoke({"content": alice.text("memo"), "key": "m"})
                handoff = {
                    "configurable": {"thread_id": f"{alice.id}-handoff", "user_id": alice.id}
                }
                await plain.ainvoke(say(alice.text("handoff")), handoff)
                return {"messages": [AIMessage(alice.text("reply"), id="ai-late")]}

            builder = StateGraph(State)
            builder.add_node("slow", slow)
            builder.add_edge(START, "slow")
            builder.add_edge("slow", END)
            app = builder.compile(checkpointer=saver, store=memory.store)
            config = {"configurable": {"thread_id": f"{alice.id}-1"}}
            run = asyncio.create_task(
                app.ainvoke(
                    say(alice.text("first")),
                    config,
                    context={"user_id": alice.id},
                    durability="sync",  # its input is stored when the node starts
                )
            )
            await asyncio.wait_for(ready.wait(), 20)
            report = await aerase_user(alice.id, memory=memory)
            assert report.thread_ids == [f"{alice.id}-1"]
            release.set()
            await asyncio.wait_for(run, 30)
            assert await saver.threads.asessions(alice.id) == []
            assert await saver.aget_tuple(config) is None
            assert await alift_erasure(alice.id, memory=memory) is True

    asyncio.run(go())
    assert mentions(target.dump(), alice.markers) == []


def test_an_integer_user_id_is_erased_by_its_text(target: Target) -> None:
    """A run given ``user_id=<int>`` is indexed with the number (as LangGraph keeps it in
    the metadata): ``erase_user`` (which takes text) missed its threads, and then its
    held writes, while its memories (labels are text) were erased."""
    number = int(uuid.uuid4().int % 10**12) + 10**12
    with target.open() as memory:
        saver = memory.checkpointer
        app = remembering_graph().compile(checkpointer=saver, store=memory.store)
        config = {"configurable": {"thread_id": f"int-{number}", "user_id": number}}
        app.invoke(say("hello"), config)
        assert [s["thread_id"] for s in saver.threads.sessions(number)] == [f"int-{number}"]
        report = erase_user(str(number), memory=memory)
        assert report.thread_ids == [f"int-{number}"]
        assert saver.get_tuple(config) is None and saver.threads.sessions(number) == []
        assert memories(memory, str(number)) == []
        app.invoke(say("late"), config)  # held, in both forms
        assert saver.get_tuple(config) is None
        assert lift_erasure(str(number), memory=memory) is True


def test_a_thread_dropped_by_the_hold_is_whole_when_the_user_comes_back(target: Target) -> None:
    """A put dropped by the hold must not count as stored in the saver's memory (list
    items, transcript lines already recorded): the returning user's run of the same
    thread, in the same process, with the same messages, stores them all (read back by
    this saver and by a new one), its transcript included."""
    alice = Marked("alice")
    with target.open() as memory:
        saver = memory.checkpointer
        app = chat_graph(lambda text: f"re: {text}").compile(checkpointer=saver)
        erase_user(alice.id, memory=memory)
        config = {"configurable": {"thread_id": f"{alice.id}-same", "user_id": alice.id}}
        said = [HumanMessage(f"line {n}", id=f"h{n}") for n in range(30)]
        app.invoke({"messages": said}, config)  # held: dropped
        assert saver.get_tuple(config) is None
        assert lift_erasure(alice.id, memory=memory)
        app.invoke({"messages": said}, config)
        assert len(app.get_state(config).values["messages"]) == 31
        lines = saver.threads.transcript(f"{alice.id}-same", user_id=alice.id)
        assert len(lines) == 31  # the dropped put's lines were not taken as recorded
    with target.open() as memory:
        again = chat_graph(lambda text: text).compile(checkpointer=memory.checkpointer)
        assert len(again.get_state(config).values["messages"]) == 31


def _writes_then_put(
    saver: Any, config: dict[str, Any], checkpoint: Any, text: str, task: str
) -> tuple[Any, Any]:
    """A put and the writes LangGraph makes on its checkpoint, as two calls (it runs them
    side by side: the writes may land first)."""
    on = {"configurable": {**config["configurable"], "checkpoint_id": checkpoint["id"]}}

    def put() -> Any:
        return saver.put(config, checkpoint, {"source": "input", "step": -1, "parents": {}}, {})

    def writes() -> None:
        saver.put_writes(on, [("messages", [HumanMessage(text, id=f"h-{task}")])], task)

    return put, writes


@pytest.mark.parametrize("dropped", ["put", "writes"])
def test_writes_that_land_before_their_put_is_dropped_by_the_hold_are_erased(
    target: Target, dropped: str
) -> None:
    """A new thread's first checkpoint and its writes race (LangGraph runs them side by
    side): the writes land before the erasure begins, the erasure cannot see the thread
    (no checkpoint, so no index record), and the hold drops the put. The writes must not
    stay behind, nameless and unerasable (a 1-in-50 find of the two-process test above,
    on Redis). ``dropped="writes"``: another task's writes on that checkpoint are what
    the hold drops (the put is dropped after)."""
    from langgraph.checkpoint.base import empty_checkpoint

    alice = Marked("alice")
    with target.open() as memory:
        saver = memory.checkpointer
        config = {"configurable": {"thread_id": f"{alice.id}-w", "user_id": alice.id}}
        checkpoint = empty_checkpoint()
        put, writes = _writes_then_put(saver, config, checkpoint, alice.text("early"), "t1")
        writes()  # lands: no hold yet
        erase_user(alice.id, memory=memory)
        if dropped == "writes":
            _writes_then_put(saver, config, checkpoint, alice.text("late"), "t2")[1]()
        put()  # dropped by the hold
        assert saver.get_tuple(config) is None
        assert saver.threads.sessions(alice.id) == []
    assert mentions(target.dump(), alice.markers) == []


@pytest.mark.parametrize("hours", [None, 1e-5])
def test_a_thread_written_again_during_the_erasure_is_deleted_again(
    target: Target, hours: float | None
) -> None:
    """With no hold (``tombstone_hours=None``) or one shorter than the erasure, a run of
    the user still going writes a deleted thread again before the erasure's next page:
    the index lists it again. That raised ``RuntimeError("the thread index still lists
    threads erasure deleted")`` midway (a PostgreSQL remover beside puts, in CI, with a
    36 ms hold); it is the user's thread, so it goes again."""
    alice = Marked("alice")
    with target.open() as memory:
        saver = memory.checkpointer
        app = chat_graph(lambda text: f"re: {text}").compile(checkpointer=saver)

        def run(n: int) -> None:
            config = {"configurable": {"thread_id": f"{alice.id}-{n}", "user_id": alice.id}}
            app.invoke(say(alice.text(f"say{n}")), config)

        for n in range(3):
            run(n)
        revived: list[int] = []

        def progress(step: Any) -> None:
            if step.kind == "threads" and not revived:
                time.sleep(0.1)  # a 36 ms hold (and the tombstone) lapse
                run(0)  # the first page's thread, written again
                revived.append(0)

        report = erase_user(
            alice.id, memory=memory, batch_size=1, progress=progress, tombstone_hours=hours
        )
        assert revived and sorted(report.thread_ids) == sorted(f"{alice.id}-{n}" for n in range(3))
        assert saver.threads.sessions(alice.id) == []
    assert mentions(target.dump(), alice.markers) == []


def test_a_dry_run_lists_a_thread_written_meanwhile_once(target: Target) -> None:
    """A dry run pages by offset over threads sorted by update: one written during it
    moves to the end and was met twice (``RuntimeError`` before); it is reported once."""
    alice = Marked("alice")
    with target.open() as memory:
        app = chat_graph(lambda text: text).compile(checkpointer=memory.checkpointer)

        def run(n: int) -> None:
            config = {"configurable": {"thread_id": f"{alice.id}-{n}", "user_id": alice.id}}
            app.invoke(say(f"say{n}"), config)

        for n in range(3):
            run(n)
        moved: list[int] = []

        def progress(step: Any) -> None:
            if step.kind == "threads" and not moved:
                run(0)
                moved.append(0)

        report = erase_user(alice.id, memory=memory, batch_size=1, progress=progress, dry_run=True)
        assert sorted(report.thread_ids) == sorted(f"{alice.id}-{n}" for n in range(3))
        assert report.counts["threads"] == 3
        assert len(memory.checkpointer.threads.sessions(alice.id)) == 3


def test_a_thread_that_keeps_coming_back_stops_the_erasure_with_a_clear_error(
    target: Target,
) -> None:
    """A run rewriting the thread after every deletion (no hold) would keep the erasure
    going forever: it deletes the thread three times and, listed a fourth time (stored
    again), says why it stops."""
    alice = Marked("alice")
    with target.open() as memory:
        app = chat_graph(lambda text: text).compile(checkpointer=memory.checkpointer)
        config = {"configurable": {"thread_id": f"{alice.id}-0", "user_id": alice.id}}
        app.invoke(say("hi"), config)
        with pytest.raises(RuntimeError, match="still writing them"):
            erase_user(
                alice.id,
                memory=memory,
                batch_size=1,
                progress=lambda step: app.invoke(say("again"), config),
                tombstone_hours=None,
            )
