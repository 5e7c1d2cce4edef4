"""Copied threads keep their user, so ``sessions()`` and ``erase_user`` find them.

The sources are LangGraph's own SQLite and PostgreSQL savers: a run given the user in
``configurable`` leaves it in every checkpoint's metadata (carried over as it is), a run
given ``context={"user_id": ...}`` leaves no trace of it (attributed with ``user_id=``),
and a state with a ``user_id`` channel shows it there (carried over from the state).
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Annotated, Any

import pytest
from chat_support import chat_graph
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langgraph.graph import END, START, StateGraph, add_messages
from test_copy_threads import official, official_async
from typing_extensions import TypedDict

from langgraph_memory_plus import InvalidConfigError
from langgraph_memory_plus.privacy.erasure import erase_user
from langgraph_memory_plus.transfer.migration import acopy_threads, copy_threads

pytestmark = pytest.mark.storage

SOURCES = ["official-sqlite", "official-postgres"]


class Owned(TypedDict, total=False):
    messages: Annotated[list[AnyMessage], add_messages]
    user_id: str


def owned_graph() -> StateGraph:
    """A state that names its user (``user_id`` channel)."""

    def answer(state: Owned) -> dict[str, Any]:
        return {"messages": [AIMessage("ok", id=f"ai-{state['messages'][-1].id}")]}

    builder = StateGraph(Owned)
    builder.add_node("answer", answer)
    builder.add_edge(START, "answer")
    builder.add_edge("answer", END)
    return builder


def say(text: str) -> dict[str, Any]:
    return {"messages": [HumanMessage(text, id=f"h-{uuid.uuid4().hex[:6]}")]}


def populate(source: Any, tag: str) -> dict[str, str]:
    """Four threads; returns thread id -> its user."""
    chat = chat_graph(lambda text: f"re: {text}").compile(checkpointer=source)
    users = {  # the storage is shared by the tests of a run: ids of this test's own
        f"{tag}-meta": f"alice.{tag}@example.com",
        f"{tag}-ctx": f"张三{tag}",
        f"{tag}-state": f"a/b.c/{tag}",
        f"{tag}-fn": f"+86 138 0000 0000 {tag}",
    }
    for turn in range(2):
        chat.invoke(
            say(f"hello {turn}"),
            {"configurable": {"thread_id": f"{tag}-meta", "user_id": users[f"{tag}-meta"]}},
        )
        for kind in ("ctx", "fn"):
            tid = f"{tag}-{kind}"
            chat.invoke(
                say(f"for {users[tid]}"),
                {"configurable": {"thread_id": tid}},
                context={"user_id": users[tid]},
            )
    owned = owned_graph().compile(checkpointer=source)
    owned.invoke(
        {**say("mine"), "user_id": users[f"{tag}-state"]},
        {"configurable": {"thread_id": f"{tag}-state"}},
    )
    # LangGraph's savers keep nothing of a runtime context: the copy must be told.
    ctx = source.get_tuple({"configurable": {"thread_id": f"{tag}-ctx"}})
    assert "user_id" not in ctx.metadata and "user_id" not in ctx.checkpoint["channel_values"]
    return users


def by_text(thread_id: str, latest: Any) -> str | None:
    """An attribution function: the user named in the thread's first message."""
    first = latest.checkpoint["channel_values"]["messages"][0].content
    return str(first).removeprefix("for ")


@pytest.mark.parametrize("source_kind", SOURCES)
def test_copied_threads_keep_or_get_their_user(
    source_kind: str, saver_factory: Any, tmp_path: Path
) -> None:
    tag = f"own-{uuid.uuid4().hex[:8]}"
    with official(source_kind, tmp_path) as source, saver_factory() as target:
        users = populate(source, tag)
        given = {f"{tag}-ctx": users[f"{tag}-ctx"], f"{tag}-meta": "not-the-source-user"}
        first = [f"{tag}-meta", f"{tag}-ctx", f"{tag}-state"]
        report = copy_threads(source, target, first, verify=True, user_id=given)
        assert report.differences == []  # the added user key is not a difference
        fn = copy_threads(source, target, [f"{tag}-fn"], verify=True, user_id=by_text)
        assert fn.differences == []
        for tid, user in users.items():
            assert [s["thread_id"] for s in target.threads.sessions(user)] == [tid], tid
            root = [t for t in target.list({"configurable": {"thread_id": tid}})]
            assert all(t.metadata.get("user_id") == user for t in root), tid
        # Erasure finds every copied thread of its user.
        for tid, user in users.items():
            assert erase_user(user, checkpointer=target).thread_ids == [tid]
            assert target.get_tuple({"configurable": {"thread_id": tid}}) is None


@pytest.mark.parametrize("source_kind", SOURCES)
async def test_acopy_attributes_context_runs(
    source_kind: str, async_saver_factory: Any, tmp_path: Path
) -> None:
    tag = f"aown-{uuid.uuid4().hex[:8]}"
    async with official_async(source_kind, tmp_path) as source, async_saver_factory() as target:
        chat = chat_graph(lambda text: f"re: {text}").compile(checkpointer=source)
        user = f"张三.{tag}"
        await chat.ainvoke(
            say("hi"), {"configurable": {"thread_id": tag}}, context={"user_id": user}
        )
        report = await acopy_threads(source, target, [tag], verify=True, user_id=user)
        assert report.differences == []
        assert [s["thread_id"] for s in await target.threads.asessions(user)] == [tag]


def test_bad_attribution_is_refused(tmp_path: Path) -> None:
    with official("official-sqlite", tmp_path) as source:
        chat = chat_graph(lambda text: text).compile(checkpointer=source)
        chat.invoke(say("hi"), {"configurable": {"thread_id": "t"}})
        from langgraph_memory_plus.checkpoint.sqlite import SqliteSaver

        with SqliteSaver.from_conn_string(str(tmp_path / "t.db")) as target:
            target.setup()
            for bad in ("", 3):
                with pytest.raises(InvalidConfigError, match="user_id"):
                    copy_threads(source, target, user_id=bad)  # type: ignore[arg-type]
            with pytest.raises(InvalidConfigError, match="non-empty string"):
                copy_threads(source, target, user_id=lambda tid, latest: 42)  # type: ignore[arg-type]
            assert target.get_tuple({"configurable": {"thread_id": "t"}}) is None


def test_cli_migrate_user_attributes_the_threads(tmp_path: Path) -> None:
    from test_cli import ok

    from langgraph_memory_plus import from_url

    tag = f"cli-{uuid.uuid4().hex[:8]}"
    with official("official-sqlite", tmp_path) as source:
        chat = chat_graph(lambda text: text).compile(checkpointer=source)
        chat.invoke(say("hi"), {"configurable": {"thread_id": tag}}, context={"user_id": "张三"})
    target = f"sqlite:///{tmp_path / 'ours.db'}"
    source_url = f"langgraph+sqlite:///{tmp_path / 'official.db'}"
    ok("migrate", "--from", source_url, "--to", target, "--thread", tag, "--user", "张三")
    with from_url(target) as memory:
        assert [s["thread_id"] for s in memory.checkpointer.threads.sessions("张三")] == [tag]
