"""The thread index's upkeep: the user key from the runtime context, the backfill of
threads written without a record, and the status index, on every backend."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Annotated, Any

import pytest
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langgraph.graph import END, START, StateGraph, add_messages
from pydantic import BaseModel
from typing_extensions import TypedDict

from langgraph_memory_plus.threads.context import with_context_keys


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
        mine = {"configurable": {"thread_id": tid + "-2", "user_id": user + "-given"}}
        graph.invoke(_turn("hi", "h2"), mine, context=context(user_id=user))
        assert saver.threads.get(tid + "-2", user_id=user + "-given") is not None
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
