"""Promises of the thread index that hold on every backend (issue 34).

- A thread belongs to its first user: a later checkpoint without the user key (a service
  resuming with only ``thread_id``) or with another user leaves it in its owner's
  sessions, where erasure finds it.
- A transcript line is its writer's: on a thread id that is deleted and reused by
  another user, each reads only their own lines, also while both write at once, and
  erasing a user removes exactly their lines.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from chat_support import chat_graph, run_config
from langchain_core.messages import HumanMessage
from langgraph.types import Command

from langgraph_memory_plus.erasure import erase_user


def _graph() -> Any:
    return chat_graph(str.upper)


def _mine(lines: list[Any], user: str) -> bool:
    """Whether every line is one of ``user``'s (ids ``<user>-n`` and ``ai-<user>-n``)."""
    return all(m["id"].removeprefix("ai-").startswith(f"{user}-") for m in lines)


# -- 7: attribution does not depend on the last writer repeating the user key ------------


def test_thread_resumed_without_user_key_stays_its_owners(saver_factory: Any) -> None:
    with saver_factory() as saver:
        graph = _graph().compile(checkpointer=saver)
        graph.invoke(
            {"messages": [HumanMessage("ask passport 123", id="p1")]}, run_config("rv", "alice")
        )
        bare = {"configurable": {"thread_id": "rv"}}  # a reviewer service: no user key
        graph.invoke(Command(resume="approved"), bare)
        latest = saver.get_tuple(bare)
        assert latest is not None and "user_id" not in latest.metadata  # the premise
        assert [t["thread_id"] for t in saver.threads.sessions("alice")] == ["rv"]
        assert saver.threads.count(metadata={"user_id": "alice"}) == 1
        record = saver.threads.get("rv", user_id="alice")
        assert record is not None and record["metadata"]["user_id"] == "alice"
        # another user writing later does not take the thread over (the first owner keeps it)
        graph.invoke({"messages": [HumanMessage("hello", id="p2")]}, run_config("rv", "mallory"))
        assert [t["thread_id"] for t in saver.threads.sessions("alice")] == ["rv"]
        assert saver.threads.sessions("mallory") == []
        report = erase_user("alice", checkpointer=saver, tombstone_hours=None)
        assert report.counts["threads"] == 1
        assert list(saver.list(None, filter={"user_id": "alice"})) == []
        assert saver.threads.get("rv") is None


async def test_async_thread_resumed_without_user_key(async_saver_factory: Any) -> None:
    async with async_saver_factory() as saver:
        graph = _graph().compile(checkpointer=saver)
        await graph.ainvoke(
            {"messages": [HumanMessage("ask id", id="a1")]}, run_config("rva", "al")
        )
        await graph.ainvoke(Command(resume="ok"), {"configurable": {"thread_id": "rva"}})
        assert [t["thread_id"] for t in await saver.threads.asessions("al")] == ["rva"]
        assert await saver.threads.acount(metadata={"user_id": "al"}) == 1


# -- 5: each transcript line has its owner -------------------------------------------------


def _say(graph: Any, thread_id: str, user: str, n: int) -> None:
    graph.invoke(
        {"messages": [HumanMessage(f"hi {n}", id=f"{user}-{n}")]}, run_config(thread_id, user)
    )


def test_reused_thread_id_shows_each_user_their_lines(saver_factory: Any) -> None:
    with saver_factory(transcripts=True) as saver:
        graph = _graph().compile(checkpointer=saver)
        _say(graph, "support-17", "alice", 1)
        saver.delete_thread("support-17")
        _say(graph, "support-17", "bob", 1)
        read = saver.threads.transcript
        assert [m["id"] for m in read("support-17", user_id="alice")] == ["alice-1", "ai-alice-1"]
        assert [m["id"] for m in read("support-17", user_id="bob")] == ["bob-1", "ai-bob-1"]
        assert [m["id"] for m in read("support-17", user_id="bob", offset=1)] == ["ai-bob-1"]
        assert len(read("support-17")) == 4  # without user_id: every line, in order
        report = erase_user("alice", checkpointer=saver, tombstone_hours=None)
        assert report.counts["transcript_messages"] == 2
        assert read("support-17", user_id="alice") == []
        assert [m["id"] for m in read("support-17")] == ["bob-1", "ai-bob-1"]


def test_lines_of_a_resume_without_user_key_are_the_owners(saver_factory: Any) -> None:
    with saver_factory(transcripts=True) as saver:
        graph = _graph().compile(checkpointer=saver)
        config = run_config("rv-tx", "carol")
        graph.invoke({"messages": [HumanMessage("ask me", id="carol-1")]}, config)
        graph.invoke(Command(resume="yes"), {"configurable": {"thread_id": "rv-tx"}})
        lines = saver.threads.transcript("rv-tx", user_id="carol")
        assert [m["id"] for m in lines] == ["carol-1", "ai-carol-1"]


ROUNDS = 6


def test_only_its_owner_reads_a_line_under_concurrency(saver_factory: Any) -> None:
    """Two users write one thread id at once while readers read it; between rounds the
    thread is deleted and both reuse its id. No reader ever sees the other user's line."""
    with saver_factory(transcripts=True) as saver:
        graph = _graph().compile(checkpointer=saver)
        errors: list[BaseException] = []
        done = threading.Event()

        def write(user: str, first: int) -> None:
            try:
                for n in range(first, first + ROUNDS):
                    _say(graph, "shared", user, n)
            except BaseException as exc:
                errors.append(exc)

        def read() -> None:
            try:
                while not done.is_set():
                    for user in ("alice", "bob"):
                        assert _mine(saver.threads.transcript("shared", user_id=user), user)
            except BaseException as exc:
                errors.append(exc)

        for first in (0, ROUNDS):  # the second round reuses the deleted thread's id
            done.clear()
            workers = [threading.Thread(target=write, args=(u, first)) for u in ("alice", "bob")]
            workers += [threading.Thread(target=read) for _ in range(2)]
            for t in workers:
                t.start()
            for t in workers[:2]:
                t.join()
            done.set()
            for t in workers[2:]:
                t.join()
            assert not errors, errors
            saver.delete_thread("shared")
        for user in ("alice", "bob"):
            lines = saver.threads.transcript("shared", user_id=user, limit=1000)
            assert {m["id"] for m in lines} == {
                f"{p}{user}-{n}" for n in range(2 * ROUNDS) for p in ("", "ai-")
            }


async def test_only_its_owner_reads_a_line_async(async_saver_factory: Any) -> None:
    async with async_saver_factory(transcripts=True) as saver:
        graph = _graph().compile(checkpointer=saver)

        async def write(user: str, first: int) -> None:
            for n in range(first, first + ROUNDS):
                config = run_config("shared-a", user)
                await graph.ainvoke({"messages": [HumanMessage("x", id=f"{user}-{n}")]}, config)
                for who in ("alice", "bob"):
                    assert _mine(await saver.threads.atranscript("shared-a", user_id=who), who)

        for first in (0, ROUNDS):
            await asyncio.gather(write("alice", first), write("bob", first))
            await saver.adelete_thread("shared-a")
        for user in ("alice", "bob"):
            lines = await saver.threads.atranscript("shared-a", user_id=user, limit=1000)
            assert len(lines) == 4 * ROUNDS and _mine(lines, user)
