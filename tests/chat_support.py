"""The one-node chat graph that the thread index and erasure tests run on every backend.

No LLM: the node answers each human message with ``answer(text)``, asks a human
(``interrupt``) when the text starts with "ask", and fails when it starts with "boom",
so a test can leave threads idle, waiting or failed at will.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from langchain_core.messages import AIMessage, AnyMessage
from langgraph.graph import END, START, StateGraph, add_messages
from langgraph.types import interrupt
from typing_extensions import TypedDict


class State(TypedDict, total=False):
    messages: Annotated[list[AnyMessage], add_messages]


def chat_graph(answer: Callable[[str], str]) -> StateGraph:
    """An uncompiled graph of one node, ``chat`` (see the module docstring)."""

    def chat(state: State) -> dict[str, Any]:
        last = state["messages"][-1]
        text = str(last.content)
        if text.startswith("ask"):
            reply = interrupt({"question": text})
            return {"messages": [AIMessage(content=f"ok {reply}", id=f"ai-{last.id}")]}
        if text.startswith("boom"):
            raise ValueError("boom")
        return {"messages": [AIMessage(content=answer(text), id=f"ai-{last.id}")]}

    builder = StateGraph(State)
    builder.add_node("chat", chat)
    builder.add_edge(START, "chat")
    builder.add_edge("chat", END)
    return builder


def run_config(thread_id: str, user: str) -> dict[str, Any]:
    """A run's config: the thread, and the user the thread index attributes it to."""
    return {"configurable": {"thread_id": thread_id, "user_id": user}}
