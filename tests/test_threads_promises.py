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
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from chat_support import chat_graph, run_config
from langchain_core.messages import HumanMessage
from langgraph.types import Command

from langgraph_memory_plus.privacy.erasure import erase_user


def _sorted_sets(keys: list[bytes]) -> list[bytes]:
    """The index's sorted sets among ``keys``: the sets of threads of pending writes only
    (``...:pending:<user digest>``, plain sets) live in the index's slot too."""
    return [k for k in keys if b":pending:" not in k]


def _graph() -> Any:
    return chat_graph(str.upper)


def _mine(lines: list[Any], user: str) -> bool:
    """Whether every line is one of ``user``'s (ids ``<user>-n`` and ``ai-<user>-n``)."""
    return all(m["id"].removeprefix("ai-").startswith(f"{user}-") for m in lines)


def _say(graph: Any, thread_id: str, user: str, n: int) -> None:
    graph.invoke(
        {"messages": [HumanMessage(f"hi {n}", id=f"{user}-{n}")]}, run_config(thread_id, user)
    )


# -- 7: attribution does not depend on the last writer repeating the user key ------------


def test_thread_resumed_without_user_key_stays_its_owners(saver_factory: Any) -> None:
    with saver_factory() as saver:
        graph = _graph().compile(checkpointer=saver)
        config = run_config("rv", "alice")
        graph.invoke({"messages": [HumanMessage("ask passport 123", id="p1")]}, config)
        bare = {"configurable": {"thread_id": "rv"}}  # a reviewer service: no user key
        graph.invoke(Command(resume="approved"), bare)
        latest = saver.get_tuple(bare)
        assert latest is not None and "user_id" not in latest.metadata  # the premise
        assert [t["thread_id"] for t in saver.threads.sessions("alice")] == ["rv"]
        assert saver.threads.count(metadata={"user_id": "alice"}) == 1
        assert saver.threads.count(metadata={"user_id": "alice"}, status="idle") == 1
        record = saver.threads.get("rv", user_id="alice")
        assert record is not None and record["metadata"]["user_id"] == "alice"
        saver.prune(["rv"])  # the record derived again from the remaining checkpoint
        assert [t["thread_id"] for t in saver.threads.sessions("alice")] == ["rv"]
        report = erase_user("alice", checkpointer=saver, tombstone_hours=None)
        assert report.counts["threads"] == 1
        assert list(saver.list(None, filter={"user_id": "alice"})) == []
        assert saver.threads.get("rv") is None


def test_thread_written_by_another_user_moves_to_them(saver_factory: Any) -> None:
    """A checkpoint naming another user moves the thread (a guest who signs in): the
    former user's transcript lines stay theirs."""
    with saver_factory(transcripts=True) as saver:
        graph = _graph().compile(checkpointer=saver)
        _say(graph, "mv", "gus", 1)
        graph.invoke(Command(resume="x"), {"configurable": {"thread_id": "mv"}})
        _say(graph, "mv", "bea", 1)
        graph.invoke(
            {"messages": [HumanMessage("more", id="bea-2")]}, {"configurable": {"thread_id": "mv"}}
        )
        assert [t["thread_id"] for t in saver.threads.sessions("bea")] == ["mv"]
        assert saver.threads.sessions("gus") == []
        lines = saver.threads.transcript("mv", user_id="gus")
        assert [m["id"] for m in lines] == ["gus-1", "ai-gus-1"]
        lines = saver.threads.transcript("mv", user_id="bea")
        assert [m["id"] for m in lines] == ["bea-1", "ai-bea-1", "bea-2", "ai-bea-2"]


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


def test_reused_thread_id_shows_each_user_their_lines(saver_factory: Any) -> None:
    with saver_factory(transcripts=True) as saver:
        graph = _graph().compile(checkpointer=saver)
        _say(graph, "support-17", "ann", 1)
        saver.delete_thread("support-17")
        _say(graph, "support-17", "ben", 1)
        read = saver.threads.transcript
        assert [m["id"] for m in read("support-17", user_id="ann")] == ["ann-1", "ai-ann-1"]
        assert [m["id"] for m in read("support-17", user_id="ben")] == ["ben-1", "ai-ben-1"]
        assert [m["id"] for m in read("support-17", user_id="ben", offset=1)] == ["ai-ben-1"]
        assert len(read("support-17")) == 4  # without user_id: every line, in order
        # erasing the thread's current owner leaves the former owner's lines, and back
        dry = erase_user("ben", checkpointer=saver, tombstone_hours=None, dry_run=True)
        assert dry.counts["transcript_messages"] == 2
        report = erase_user("ben", checkpointer=saver, tombstone_hours=None)
        assert (report.counts["threads"], report.counts["transcript_messages"]) == (1, 2)
        assert [m["id"] for m in read("support-17")] == ["ann-1", "ai-ann-1"]
        _say(graph, "support-18", "ben", 2)
        report = erase_user("ann", checkpointer=saver, tombstone_hours=None)
        assert (report.counts["threads"], report.counts["transcript_messages"]) == (0, 2)
        assert read("support-17") == []
        assert [m["id"] for m in read("support-18")] == ["ben-2", "ai-ben-2"]


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
    shared = f"shared-{uuid.uuid4().hex[:8]}"  # the server is shared with other tests
    with saver_factory(transcripts=True) as saver:
        graph = _graph().compile(checkpointer=saver)
        errors: list[BaseException] = []
        done = threading.Event()

        def write(user: str, first: int) -> None:
            try:
                for n in range(first, first + ROUNDS):
                    _say(graph, shared, user, n)
            except BaseException as exc:
                errors.append(exc)

        def read() -> None:
            try:
                while not done.is_set():
                    for user in ("alice", "bob"):
                        assert _mine(saver.threads.transcript(shared, user_id=user), user)
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
            saver.delete_thread(shared)
        for user in ("alice", "bob"):
            lines = saver.threads.transcript(shared, user_id=user, limit=1000)
            assert {m["id"] for m in lines} == {
                f"{p}{user}-{n}" for n in range(2 * ROUNDS) for p in ("", "ai-")
            }


async def test_only_its_owner_reads_a_line_async(async_saver_factory: Any) -> None:
    shared = f"shared-a-{uuid.uuid4().hex[:8]}"
    async with async_saver_factory(transcripts=True) as saver:
        graph = _graph().compile(checkpointer=saver)

        async def write(user: str, first: int) -> None:
            for n in range(first, first + ROUNDS):
                config = run_config(shared, user)
                await graph.ainvoke({"messages": [HumanMessage("x", id=f"{user}-{n}")]}, config)
                for who in ("alice", "bob"):
                    assert _mine(await saver.threads.atranscript(shared, user_id=who), who)

        for first in (0, ROUNDS):
            await asyncio.gather(write("alice", first), write("bob", first))
            await saver.adelete_thread(shared)
        for user in ("alice", "bob"):
            lines = await saver.threads.atranscript(shared, user_id=user, limit=1000)
            assert len(lines) == 4 * ROUNDS and _mine(lines, user)


# -- 14: a NUL in anything the index stores from user content ----------------------------


def test_nul_in_every_index_text_field(saver_factory: Any, tmp_path: Any) -> None:
    """Title, transcript, interrupt, metadata and user id with a NUL: the turn is stored
    and read back on every backend (PostgreSQL ``text`` and ``jsonb`` hold no NUL), and
    the thread copies within the saver and to another."""
    from langgraph.checkpoint.base import empty_checkpoint

    from langgraph_memory_plus import InvalidConfigError
    from langgraph_memory_plus.checkpoint.sqlite import SqliteSaver
    from langgraph_memory_plus.transfer.migration import copy_threads

    with saver_factory(transcripts=True) as saver:
        graph = _graph().compile(checkpointer=saver)
        config = {
            "configurable": {"thread_id": "nul", "user_id": "nu"},
            "metadata": {"n": "a\x00b"},
        }
        graph.invoke({"messages": [HumanMessage("hi\x00there", id="n\x001")]}, config)
        graph.invoke({"messages": [HumanMessage("ask q\x00", id="n2")]}, config)
        record = saver.threads.get("nul", user_id="nu")
        assert record is not None and record["title"] == "hi\ufffdthere"
        assert record["status"] == "interrupted"
        [[pending]] = record["interrupts"].values()
        assert pending.value == {"question": "ask q\x00"}  # interrupts are kept exactly
        lines = saver.threads.transcript("nul", user_id="nu")
        assert [m["content"] for m in lines] == ["hi\ufffdthere", "HI\ufffdTHERE", "ask q\ufffd"]
        assert [t["thread_id"] for t in saver.threads.search(metadata={"n": "ab"})] == ["nul"]
        assert record["metadata"]["n"] == "ab"  # LangGraph strips NUL from metadata
        # A user id with a NUL is refused wherever it enters (LangGraph would strip it from
        # the metadata: "u\x00x" would be filed as "ux", another user)
        direct = {"configurable": {"thread_id": "nul-direct", "checkpoint_ns": ""}}
        for call in (
            lambda: saver.put(direct, empty_checkpoint(), {"user_id": "u\x00x"}, {}),
            lambda: saver.threads.sessions("u\x00x"),
            lambda: saver.threads.get("nul-direct", user_id="u\x00x"),
            lambda: saver.threads.transcript("nul", user_id="n\x00u"),
        ):
            with pytest.raises(InvalidConfigError, match="NUL"):
                call()
        assert saver.get_tuple(direct) is None and saver.threads.sessions("ux") == []
        assert saver.threads.count(metadata={"user_id": "u\x00x"}) == 0
        assert saver.threads.search(metadata={"n": "a\x00b"}) == []
        saver.copy_thread("nul", "nul-copy")
        assert saver.threads.get("nul-copy")["title"] == "hi\ufffdthere"
        with SqliteSaver.from_conn_string(str(tmp_path / "copy.db")) as target:
            target.setup()
            report = copy_threads(saver, target, ["nul"])
            assert report.threads == ["nul"]
            assert target.threads.get("nul")["title"] == "hi\ufffdthere"  # type: ignore[index]


# -- 18: bad input gets a clear error or InMemorySaver's answer, never the driver's --------


def test_bad_paging_and_filters_reach_no_driver(saver_factory: Any, storage: Any) -> None:
    from langgraph.checkpoint.base import empty_checkpoint

    from langgraph_memory_plus import InvalidConfigError

    # list(None, filter=...) reads every thread: on a shared server, only this test's own.
    own = {"key_prefix": f"lgmp-test-{uuid.uuid4().hex[:8]}"} if storage.kind == "redis" else {}
    with saver_factory(transcripts=True, **own) as saver:
        for n, user in enumerate([2**63, 2**64 - 1, -(2**63), "u"]):
            config = {"configurable": {"thread_id": f"big-{n}", "checkpoint_ns": ""}}
            saver.put(config, empty_checkpoint(), {"user_id": user, "source": "input"}, {})
        calls: list[Callable[[], object]] = [
            lambda: saver.threads.search(offset=2**63),
            lambda: saver.threads.sessions("u", offset=2**63),
            lambda: saver.threads.transcript("big-3", offset=2**64),
        ]
        for call in calls:
            with pytest.raises(InvalidConfigError, match="offset"):
                call()
        assert saver.threads.search(offset=2**62) == []
        with pytest.raises(InvalidConfigError, match="NUL"):
            saver.threads.sessions("a\x00")
        # integers past 64 bits: matched as InMemorySaver's list(filter=...) matches them
        for value, expected in [(2**63, ["big-0"]), (2**64 - 1, ["big-1"]), (2**64, [])]:
            for flt in ({"user_id": value}, {"user_id": value, "source": "input"}):
                found = [r["thread_id"] for r in saver.threads.search(metadata=flt)]
                assert found == expected, (flt, found)
                assert saver.threads.count(metadata=flt) == len(expected)
                listed = [
                    t.config["configurable"]["thread_id"] for t in saver.list(None, filter=flt)
                ]
                assert listed == expected
        assert [r["thread_id"] for r in saver.threads.sessions(-(2**63))] == ["big-2"]
        assert saver.threads.sessions(-(2**63) - 1) == []


@pytest.mark.parametrize("schema", ["pg_catalog", "pg_toast", "information_schema"])
def test_system_schema_is_refused(pg_url: str, schema: str) -> None:
    from langgraph_memory_plus import InvalidConfigError, PostgresSaver, PostgresStore

    for cls in (PostgresSaver, PostgresStore):
        with (
            pytest.raises(InvalidConfigError, match=schema),
            cls.from_conn_string(pg_url, schema=schema) as opened,
        ):
            opened.setup()


def test_redis_transcript_of_one_owner_reads_and_erases_as_before(
    redis_url: str, redis_prefix: str
) -> None:
    """A transcript written before lines had owners (one owner for all, ``\\0owner``)
    reads as its owner's and is erased with them."""
    from langgraph_memory_plus import RedisSaver
    from langgraph_memory_plus.threads.core import index_value
    from langgraph_memory_plus.threads.redis import RedisThreadIndex

    prefix = f"{redis_prefix}-legacy-tx"
    with RedisSaver.from_conn_string(redis_url, key_prefix=prefix, transcripts=True) as saver:
        index = saver._plans.threads
        assert isinstance(index, RedisThreadIndex)
        lines, order = index.transcript_keys("old")
        old = index_value("olga") or ""
        saver.client.hset(lines, mapping={"o1": b"5:human2:hi13:1700000000000", "\x00owner": old})
        saver.client.zadd(order, {"o1": 1})
        assert [m["content"] for m in saver.threads.transcript("old", user_id="olga")] == ["hi"]
        assert saver.threads.transcript("old", user_id="other") == []
        report = erase_user("olga", checkpointer=saver, tombstone_hours=None)
        assert report.counts["transcript_messages"] == 1
        assert saver.threads.transcript("old") == []
        assert not saver.client.exists(lines, order)


def test_an_empty_user_id_in_a_run_is_no_user(saver_factory: Any) -> None:
    """The LangGraph server passes ``user_id=""`` for an unauthenticated run (in
    ``configurable`` and so in the metadata): the run is stored as one without a user,
    not refused (the one rule refused it, and every run under ``langgraph dev`` failed)."""
    thread_id = f"anon-{uuid.uuid4().hex[:8]}"
    with saver_factory(transcripts=True) as saver:
        graph = _graph().compile(checkpointer=saver)
        graph.invoke(
            {"messages": [HumanMessage("hi", id="anon-1")]},
            {"configurable": {"thread_id": thread_id, "user_id": ""}, "metadata": {"user_id": ""}},
        )
        assert saver.get_tuple({"configurable": {"thread_id": thread_id}}) is not None
        record = saver.threads.get(thread_id)
        assert record is not None


@pytest.mark.parametrize("backend", ["redis", "redis-cluster"], indirect=True)
def test_a_run_starting_as_its_thread_is_deleted_leaves_no_index_entry(
    saver_factory: Any,
) -> None:
    """Redis: a deletion that read the thread's index record in a step of its own, then
    deleted, left the entries of a new run's first checkpoint that landed in between in
    the index's sets (the record it read was missing: no set to clean). Erasure met it
    (CI, a run's first put deleting its thread as its user was erased): the user's id in
    three sets. The delete script now returns the record it deletes."""
    from langgraph_memory_plus.drivers import redis as driver
    from langgraph_memory_plus.drivers.redis import Batch, Eval, Scan

    thread = f"landing-{uuid.uuid4().hex[:8]}"
    with saver_factory() as saver, saver_factory() as other:
        graph = _graph().compile(checkpointer=other)
        run = driver.RedisRunner._execute
        landed: list[bool] = []

        def execute(self: Any, command: Any) -> Any:
            if isinstance(command, Eval) and command.script == "delete" and not landed:
                landed.append(True)  # the run's first checkpoints land just before
                worker = threading.Thread(target=_say, args=(graph, thread, "lana", 1))
                worker.start()
                worker.join()
            return run(self, command)

        def entries() -> Any:
            prefix = saver._plans.threads.prefix
            keys = _sorted_sets((yield Scan(f"{prefix}:{{{prefix}:tix}}:*".encode())))
            scores = yield Batch([("ZSCORE", key, thread.encode()) for key in keys])
            return sorted(k for k, s in zip(keys, scores, strict=True) if s is not None)

        driver.RedisRunner._execute = execute  # type: ignore[method-assign]
        try:
            saver.delete_thread(thread)
        finally:
            driver.RedisRunner._execute = run  # type: ignore[method-assign]
        assert landed
        assert saver.get_tuple({"configurable": {"thread_id": thread}}) is None
        assert saver._run(entries()) == []
        assert saver.threads.sessions("lana") == []


def _between_steps(script: str, read: Any, before: Any = None) -> tuple[Any, list[Any]]:
    """Redis: an ``_execute`` that runs ``read()`` between step 1 of the ``script`` write
    and the write itself (once), after the command ``before()``, if given, ahead of both."""
    from langgraph_memory_plus.drivers import redis as driver
    from langgraph_memory_plus.drivers.redis import Batch

    run = driver.RedisRunner._execute
    seen: list[Any] = []

    def execute(self: Any, command: Any) -> Any:
        then = command.then if isinstance(command, Batch) else None
        if then is not None and then.script == script and not seen:
            if before is not None:
                run(self, before())
            run(self, Batch(command.commands))  # step 1 alone, then the read
            worker = threading.Thread(target=lambda: seen.append(read()))
            worker.start()
            worker.join()
            return run(self, then)
        return run(self, command)

    return execute, seen


@pytest.mark.parametrize("backend", ["redis", "redis-cluster"], indirect=True)
@pytest.mark.parametrize("read", ["sessions", "count", "count_idle"])
def test_a_read_between_a_writes_two_steps_leaves_the_thread_in_its_sets(
    saver_factory: Any, read: str
) -> None:
    """Redis: a put adds the thread to the index's sets, then writes the thread and its
    record. A read in between met entries without a record and removed them as stale: the
    new thread was missing from its user's sessions for the rest of its run (its later
    puts reuse that first step). Entries ahead of their record are now a write in flight
    for ``IN_FLIGHT_MS``: not listed, not removed."""
    from langgraph_memory_plus.drivers import redis as driver

    thread = f"flight-{uuid.uuid4().hex[:8]}"
    reads = {
        "sessions": lambda s: len(s.threads.sessions("fay")),
        "count": lambda s: s.threads.count(metadata={"user_id": "fay"}),
        "count_idle": lambda s: s.threads.count(metadata={"user_id": "fay"}, status="idle"),
    }
    with saver_factory() as saver, saver_factory() as other:
        graph = _graph().compile(checkpointer=saver)
        run = driver.RedisRunner._execute
        execute, seen = _between_steps("put", lambda: reads[read](other))
        driver.RedisRunner._execute = execute  # type: ignore[method-assign]
        try:
            _say(graph, thread, "fay", 1)
        finally:
            driver.RedisRunner._execute = run  # type: ignore[method-assign]
        assert seen == [0]  # not yet there
        assert [t["thread_id"] for t in saver.threads.sessions("fay")] == [thread]
        assert saver.threads.count(metadata={"user_id": "fay"}) == 1
        assert saver.threads.count(metadata={"user_id": "fay"}, status="idle") == 1
        saver.delete_thread(thread)
