"""The thread index's upkeep: the user key from the runtime context, the backfill of
threads written without a record, and the status index, on every backend."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Annotated, Any

import pytest
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langgraph.graph import END, START, StateGraph, add_messages
from langgraph.types import Command, interrupt
from pydantic import BaseModel
from typing_extensions import TypedDict

from langgraph_memory_plus import InvalidConfigError
from langgraph_memory_plus.checkpoint.config import thread_key
from langgraph_memory_plus.checkpoint.context import with_context_keys
from langgraph_memory_plus.drivers.postgres import Query as PgQuery
from langgraph_memory_plus.drivers.redis import Batch
from langgraph_memory_plus.drivers.sqlite import Query as SqliteQuery
from langgraph_memory_plus.threads.core import ReindexProgress, index_value
from langgraph_memory_plus.threads.postgres import key_column
from langgraph_memory_plus.threads.sqlite import key_column as sqlite_key_column


class State(TypedDict, total=False):
    messages: Annotated[list[AnyMessage], add_messages]


@dataclass
class DataContext:
    user_id: str


class DictContext(TypedDict):
    user_id: str


class ModelContext(BaseModel):
    user_id: str


def _graph(context_schema: Any = None) -> StateGraph:
    def chat(state: State) -> dict[str, Any]:
        last = state["messages"][-1]
        if str(last.content).startswith("ask"):
            answer = interrupt({"question": last.content})
            return {"messages": [AIMessage(content=f"ok {answer}", id=f"ai-{last.id}")]}
        return {"messages": [AIMessage(content=str(last.content).upper(), id=f"ai-{last.id}")]}

    builder = StateGraph(State, context_schema=context_schema)
    builder.add_node("chat", chat)
    builder.add_edge(START, "chat")
    builder.add_edge("chat", END)
    return builder


def _turn(text: str, mid: str) -> dict[str, Any]:
    return {"messages": [HumanMessage(content=text, id=mid)]}


CONTEXTS = [
    (DataContext, DataContext),
    (DictContext, lambda user_id: {"user_id": user_id}),
    (ModelContext, ModelContext),
    (None, lambda user_id: {"user_id": user_id}),
]


@pytest.mark.parametrize(
    "schema, context", CONTEXTS, ids=["dataclass", "typeddict", "pydantic", "none"]
)
def test_user_key_from_the_runtime_context(saver_factory: Any, schema: Any, context: Any) -> None:
    """A thread run with only ``context=Context(user_id=...)`` is that user's."""
    user, tid = f"cu-{uuid.uuid4()}", f"ctx-{uuid.uuid4()}"
    with saver_factory() as saver:
        graph = _graph(schema).compile(checkpointer=saver)
        config = {"configurable": {"thread_id": tid}}
        graph.invoke(_turn("hello", "h1"), config, context=context(user_id=user))
        assert [r["thread_id"] for r in saver.threads.sessions(user)] == [tid]
        record = saver.threads.get(tid, user_id=user)
        assert record is not None and record["metadata"]["user_id"] == user
        assert saver.threads.get(tid, user_id="other") is None
        # The checkpoints say so too: list() and the index agree on the owner.
        listed = list(saver.list(config, filter={"user_id": user}))
        assert listed and all(t.metadata["user_id"] == user for t in listed)
        # configurable wins over the context, as it does for LangGraph's metadata.
        # configurable naming another user: the run is refused, nothing stored (one rule
        # for whose run it is, checkpoint.context.run_value)
        mine = {"configurable": {"thread_id": tid + "-2", "user_id": user + "-given"}}
        with pytest.raises(InvalidConfigError, match="different users"):
            graph.invoke(_turn("hi", "h2"), mine, context=context(user_id=user))
        assert saver.get_tuple(mine) is None
        assert saver.threads.sessions(user + "-given") == []
        assert [r["thread_id"] for r in saver.threads.sessions(user)] == [tid]


async def test_async_user_key_from_the_runtime_context(async_saver_factory: Any) -> None:
    async with async_saver_factory() as saver:
        graph = _graph(DataContext).compile(checkpointer=saver)
        user, tid = f"acu-{uuid.uuid4()}", f"actx-{uuid.uuid4()}"
        config = {"configurable": {"thread_id": tid}}
        await graph.ainvoke(_turn("hello", "h1"), config, context=DataContext(user_id=user))
        assert [r["thread_id"] for r in await saver.threads.asessions(user)] == [tid]


def test_context_keys_lift_only_what_is_missing() -> None:
    class Runtime:
        context = {"user_id": "c", "tenant": ["not", "scalar"]}

    base: dict[str, Any] = {"configurable": {"thread_id": "t", "__pregel_runtime": Runtime()}}
    lifted = with_context_keys(base, ("user_id", "tenant"))  # type: ignore[arg-type]
    assert lifted["configurable"]["user_id"] == "c"
    assert "tenant" not in lifted["configurable"]
    assert "user_id" not in base["configurable"]  # the caller's config is not changed
    given = {**base, "metadata": {"user_id": "m"}}
    assert with_context_keys(given, ("user_id",)) is given  # type: ignore[arg-type]
    plain = {"configurable": {"thread_id": "t"}}
    assert with_context_keys(plain, ("user_id",)) is plain  # type: ignore[arg-type]


# -- the backfill ---------------------------------------------------------------------


def _forget_records(saver: Any, thread_ids: list[str], user_of: dict[str, str]) -> Any:
    """The plan that leaves these threads as a saver from before the index wrote them:
    checkpoints, no record (Redis: no record hash and no set entries either)."""
    index = saver.threads._plans
    kind = type(saver).__name__
    if "Postgres" in kind:
        tks = [thread_key(t) for t in thread_ids]
        yield PgQuery(f"DELETE FROM {index._ix} WHERE thread_key = ANY(%s)", (tks,))
    elif "Sqlite" in kind:
        for tid in thread_ids:
            yield SqliteQuery(
                "DELETE FROM lgmp_thread_index WHERE thread_key = ?", (thread_key(tid),), write=True
            )
    else:
        commands: list[tuple[Any, ...]] = []
        for tid in thread_ids:
            member = tid.encode()
            user_set = index.set_key("user_id", index_value(user_of[tid]))
            commands += [("DEL", index._record_key(tid)), ("ZREM", index.all_key, member)]
            commands.append(("ZREM", user_set, member))
        yield Batch(commands)


def _write_threads(saver: Any, tag: str) -> tuple[list[str], dict[str, str]]:
    graph = _graph().compile(checkpointer=saver)
    thread_ids = [f"bf-{tag}-{i}" for i in range(5)]
    users = {t: f"bfu-{tag}-{i % 2}" for i, t in enumerate(thread_ids)}
    for i, tid in enumerate(thread_ids):
        config = {"configurable": {"thread_id": tid, "user_id": users[tid]}}
        graph.invoke(_turn("hello", f"{tid}-1"), config)
        graph.invoke(_turn("ask me" if i % 2 else "more", f"{tid}-2"), config)
    return thread_ids, users


def _comparable(record: dict[str, Any] | None) -> Any:
    assert record is not None
    return (
        record["metadata"],
        record["status"],
        record["interrupts"],
        record["size"]["checkpoints"],
    )


def test_reindex_backfills_threads_without_a_record(saver_factory: Any) -> None:
    tag = uuid.uuid4().hex[:8]
    with saver_factory() as saver:
        thread_ids, users = _write_threads(saver, tag)
        before = {t: saver.threads.get(t) for t in thread_ids}
        order = {
            u: [r["thread_id"] for r in saver.threads.sessions(u)] for u in set(users.values())
        }
        saver._run(_forget_records(saver, thread_ids, users))
        assert all(saver.threads.get(t) is None for t in thread_ids)
        assert saver.threads.sessions(users[thread_ids[0]]) == []

        # A crash after the first batch: the next run takes up where it stopped.
        crashed: list[ReindexProgress] = []

        def crash(progress: ReindexProgress) -> None:
            crashed.append(progress)
            raise RuntimeError("killed")

        with pytest.raises(RuntimeError):
            saver.threads.reindex(batch_size=2, progress=crash)
        seen: list[ReindexProgress] = []
        done = saver.threads.reindex(batch_size=2, progress=seen.append)
        assert seen[-1] == done and len(seen) >= 2  # bounded batches, each reported
        # each thread once: the crashed run's first batch, the rest now (the storage may
        # hold other tests' threads, which have records)
        assert crashed[0].indexed + done.indexed == 5

        # Same records as the saver wrote, as list() says, in the same order per user.
        for tid in thread_ids:
            record = saver.threads.get(tid)
            assert _comparable(record) == _comparable(before[tid]), tid
            listed = list(saver.list({"configurable": {"thread_id": tid}}))
            assert record is not None and record["size"]["checkpoints"] == len(listed)
            assert record["status"] == ("interrupted" if listed[0].pending_writes else "idle")
            assert abs((record["updated_at"] - before[tid]["updated_at"]).total_seconds()) < 5
        for user, expected in order.items():
            assert [r["thread_id"] for r in saver.threads.sessions(user)] == expected
        assert {
            r["thread_id"] for r in saver.threads.search(status="interrupted", ids=thread_ids)
        } == {t for t in thread_ids if before[t]["status"] == "interrupted"}
        # Idempotent: nothing left to do; and a thread written meanwhile keeps its record.
        assert saver.threads.reindex().indexed == 0


async def test_async_reindex(async_saver_factory: Any) -> None:
    tag = uuid.uuid4().hex[:8]
    async with async_saver_factory() as saver:
        graph = _graph().compile(checkpointer=saver)
        config = {"configurable": {"thread_id": f"abf-{tag}", "user_id": f"abu-{tag}"}}
        await graph.ainvoke(_turn("hello", "a1"), config)
        before = await saver.threads.aget(f"abf-{tag}")
        await saver._arun(_forget_records(saver, [f"abf-{tag}"], {f"abf-{tag}": f"abu-{tag}"}))
        assert await saver.threads.aget(f"abf-{tag}") is None
        done = await saver.threads.areindex(batch_size=1)
        assert done.indexed == 1
        assert _comparable(await saver.threads.aget(f"abf-{tag}")) == _comparable(before)
        assert [r["thread_id"] for r in await saver.threads.asessions(f"abu-{tag}")] == [
            f"abf-{tag}"
        ]


def test_reindex_refuses_a_bad_batch_size(saver_factory: Any) -> None:
    with saver_factory() as saver:
        for bad in (0, -1, 1.5, True):
            with pytest.raises(InvalidConfigError, match="batch_size"):
                saver.threads.reindex(batch_size=bad)


# -- the status index -----------------------------------------------------------------


def test_search_by_status_follows_every_transition(saver_factory: Any) -> None:
    """Interrupt, resume, interrupt again, fail: ``search(status=...)`` (with and without a
    user, every page) says what each thread's latest checkpoint says."""
    tag = uuid.uuid4().hex[:8]
    user = f"su-{tag}"
    with saver_factory() as saver:
        graph = _graph().compile(checkpointer=saver)
        tids = [f"st-{tag}-{i}" for i in range(6)]

        def config(tid: str) -> dict[str, Any]:
            return {"configurable": {"thread_id": tid, "user_id": user}}

        for n, tid in enumerate(tids):
            graph.invoke(_turn("ask first" if n < 4 else "hello", f"{tid}-1"), config(tid))
        for tid in tids[:2]:  # resumed: they leave the interrupted sets' entries behind
            graph.invoke(Command(resume="yes"), config(tid))
        graph.invoke(_turn("ask again", f"{tids[0]}-2"), config(tids[0]))  # and back
        for status in ("interrupted", "idle"):
            truth = [r for r in saver.threads.sessions(user) if r["status"] == status]
            for order in ("desc", "asc"):
                expected = [r["thread_id"] for r in truth]
                if order == "asc":
                    expected.reverse()
                mine = {"metadata": {"user_id": user}, "status": status, "sort_order": order}
                pages = [
                    r["thread_id"]
                    for offset in range(len(expected) + 1)
                    for r in saver.threads.search(**mine, limit=1, offset=offset)
                ]
                assert pages == expected, (status, order)
                assert saver.threads.count(metadata={"user_id": user}, status=status) == len(
                    expected
                )
                everyone = saver.threads.search(status=status, sort_order=order, limit=10_000)
                assert [r["thread_id"] for r in everyone if r["thread_id"] in tids] == expected
        assert {
            r["thread_id"] for r in saver.threads.search(status="interrupted", limit=10_000)
        } >= {
            tids[0],
            tids[2],
            tids[3],
        }
        saver.delete_thread(tids[2])
        found = saver.threads.search(metadata={"user_id": user}, status="interrupted")
        assert {r["thread_id"] for r in found} == {tids[0], tids[3]}


def test_status_index_exists(saver_factory: Any, storage: Any) -> None:
    """The migration and ``setup()`` create the status indexes (SQL) / the writes fill
    the per-status sets, in the index's order, and reads drop entries left behind."""
    tag = uuid.uuid4().hex[:8]
    with saver_factory() as saver:
        graph = _graph().compile(checkpointer=saver)
        config = {"configurable": {"thread_id": f"sx-{tag}", "user_id": f"sxu-{tag}"}}
        graph.invoke(_turn("ask", "x1"), config)
        index = saver.threads._plans
        if storage.kind == "redis":
            member = f"sx-{tag}".encode()
            form = index_value(f"sxu-{tag}")
            waiting = [
                index.status_key("interrupted"),
                index.status_key("interrupted", ("user_id", form)),
            ]
            scores = saver._run(_commands(Batch([("ZSCORE", k, member) for k in waiting])))
            assert all(s is not None for s in scores)
            graph.invoke(Command(resume="ok"), config)
            assert (
                saver.threads.search(status="interrupted", metadata={"user_id": f"sxu-{tag}"}) == []
            )
            scores = saver._run(_commands(Batch([("ZSCORE", k, member) for k in waiting])))
            assert scores[1] is None  # the read removed the entry the resume left behind
            idle = index.status_key("idle", ("user_id", form))
            [score] = saver._run(_commands(Batch([("ZSCORE", idle, member)])))
            assert score is not None
        elif storage.kind == "postgres":
            rows = saver._run(
                _commands(
                    PgQuery(
                        "SELECT indexdef FROM pg_indexes WHERE tablename = 'lgmp_thread_index'",
                        fetch=True,
                    )
                )
            )
            defs = " ".join(r[0] for r in rows)
            column = key_column("user_id")
            # covering: a search by user and status is an index-only scan
            assert "(status, updated_at, thread_key) INCLUDE (expires_at)" in defs
            assert f"({column}, status, updated_at, thread_key) INCLUDE (expires_at)" in defs
        else:
            rows = saver._run(
                _commands(
                    SqliteQuery(
                        "SELECT sql FROM sqlite_master WHERE tbl_name = 'lgmp_thread_index'",
                        fetch=True,
                    )
                )
            )
            defs = " ".join(r[0] or "" for r in rows)
            column = sqlite_key_column("user_id")
            assert "(status, updated_at, thread_key, expires_at)" in defs
            assert f"({column}, status, updated_at, thread_key, expires_at)" in defs


def _commands(*commands: Any) -> Any:
    """A plan of these commands; returns the last one's reply."""
    reply = None
    for command in commands:
        reply = yield command
    return reply


# -- copies ---------------------------------------------------------------------------


def test_copy_thread_copies_the_transcript(saver_factory: Any) -> None:
    tag = uuid.uuid4().hex[:8]
    user = f"cpu-{tag}"
    src, dst = f"cps-{tag}", f"cpd-{tag}"
    with saver_factory(transcripts=True) as saver:
        graph = _graph().compile(checkpointer=saver)
        config = {"configurable": {"thread_id": src, "user_id": user}}
        graph.invoke(_turn("hello", f"{tag}-1"), config)
        graph.invoke(_turn("more", f"{tag}-2"), config)
        saver.copy_thread(src, dst)
        source = saver.threads.transcript(src, user_id=user)
        assert [m["content"] for m in source] == ["hello", "HELLO", "more", "MORE"]
        assert saver.threads.transcript(dst, user_id=user) == source  # same lines, owner
        assert saver.threads.transcript(dst, user_id="someone-else") == []
        # The copy goes on on its own; copying again adds nothing twice.
        graph.invoke(
            _turn("next", f"{tag}-3"), {"configurable": {"thread_id": dst, "user_id": user}}
        )
        saver.copy_thread(src, dst)
        contents = [m["content"] for m in saver.threads.transcript(dst, user_id=user)]
        assert contents == ["hello", "HELLO", "more", "MORE", "next", "NEXT"]
        assert len(saver.threads.transcript(src)) == 4
        saver.copy_thread(f"missing-{tag}", f"cpx-{tag}")
        assert saver.threads.transcript(f"cpx-{tag}") == []
