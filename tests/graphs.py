"""Deterministic LangGraph graphs for the end-to-end checkpointer tests.

No LLMs: every "model" node derives its answer from its input, and every message carries a
fixed id, so two runs of the same scenario (one on our saver, one on ``InMemorySaver``) produce
exactly the same values and can be compared field by field.

Builders return an uncompiled ``StateGraph``; the tests compile it with the saver under test.
Nodes that count their calls take a ``calls`` ``Counter`` so a test can tell whether a node was
re-run after a failure or a resume.
"""

from __future__ import annotations

import operator
from collections import Counter
from collections.abc import Sequence
from datetime import datetime, timezone
from typing import Annotated, Any

from langchain_core.messages import AIMessage, AnyMessage, BaseMessage, HumanMessage
from langgraph.channels.delta import DeltaChannel
from langgraph.checkpoint.base import Checkpoint
from langgraph.checkpoint.base.id import uuid6
from langgraph.graph import END, START, StateGraph, add_messages
from langgraph.types import interrupt
from typing_extensions import TypedDict

# ---------------------------------------------------------------------------------------------
# messages


def checkpoint_of(values: dict[str, Any], versions: dict[str, Any]) -> Checkpoint:
    """A checkpoint of ``values`` at ``versions``, with a fresh id, for direct puts."""
    return Checkpoint(
        v=4,
        id=str(uuid6(clock_seq=-1)),
        ts=datetime.now(timezone.utc).isoformat(),
        channel_values=values,
        channel_versions=versions,
        versions_seen={},
        updated_channels=None,
    )


def human(text: str, msg_id: str) -> HumanMessage:
    """A user message with a fixed id (``add_messages`` would otherwise assign a random one)."""
    return HumanMessage(content=text, id=msg_id)


def reply(messages: Sequence[BaseMessage], prefix: str = "model") -> AIMessage:
    """The deterministic "model": answers the last message, numbered by the history length."""
    last = messages[-1]
    position = len(messages)
    content = f"{prefix}#{position}: {str(last.content).upper()}"
    return AIMessage(
        content=content,
        id=f"{prefix}-{position}",
        response_metadata={"model_name": "echo", "position": position},
        usage_metadata={"input_tokens": position, "output_tokens": 1, "total_tokens": position + 1},
    )


# ---------------------------------------------------------------------------------------------
# 1. chat: START -> model -> tally -> END


class ChatState(TypedDict, total=False):
    messages: Annotated[list[AnyMessage], add_messages]
    turns: Annotated[int, operator.add]
    last_reply: str


def chat_graph(calls: Counter[str] | None = None) -> StateGraph:
    calls = Counter() if calls is None else calls

    def model(state: ChatState) -> dict[str, Any]:
        calls["model"] += 1
        answer = reply(state["messages"])
        return {"messages": [answer], "last_reply": answer.content}

    def tally(state: ChatState) -> dict[str, Any]:
        calls["tally"] += 1
        return {"turns": 1}

    builder = StateGraph(ChatState)
    builder.add_node("model", model)
    builder.add_node("tally", tally)
    builder.add_edge(START, "model")
    builder.add_edge("model", "tally")
    builder.add_edge("tally", END)
    return builder


# ---------------------------------------------------------------------------------------------
# 2. human review: START -> model -> review (interrupt) -> END


class ReviewState(TypedDict, total=False):
    messages: Annotated[list[AnyMessage], add_messages]
    decisions: Annotated[list[str], operator.add]


def review_graph(calls: Counter[str] | None = None) -> StateGraph:
    calls = Counter() if calls is None else calls

    def model(state: ReviewState) -> dict[str, Any]:
        calls["model"] += 1
        return {"messages": [reply(state["messages"], prefix="draft")]}

    def review(state: ReviewState) -> dict[str, Any]:
        calls["review"] += 1
        draft = state["messages"][-1]
        decision = interrupt({"question": "approve?", "draft": draft.content, "id": draft.id})
        note = AIMessage(content=f"{draft.content} [{decision}]", id=f"review-{draft.id}")
        return {"messages": [note], "decisions": [str(decision)]}

    builder = StateGraph(ReviewState)
    builder.add_node("model", model)
    builder.add_node("review", review)
    builder.add_edge(START, "model")
    builder.add_edge("model", "review")
    builder.add_edge("review", END)
    return builder


# ---------------------------------------------------------------------------------------------
# 3. subgraphs: parent(prepare -> sub -> finish); sub(draft -> approve | inner); inner(approve)


class TeamState(TypedDict, total=False):
    messages: Annotated[list[AnyMessage], add_messages]
    log: Annotated[list[str], operator.add]  # the parent's own; the subgraphs do not have it
    report: str  # written by the subgraph, read by the parent


class SubState(TypedDict, total=False):
    messages: Annotated[list[AnyMessage], add_messages]
    report: str
    trail: Annotated[list[str], operator.add]  # private to the subgraph
    notes: str  # private to the subgraph


def _approve_node(calls: Counter[str], where: str) -> Any:
    def approve(state: SubState) -> dict[str, Any]:
        calls[f"approve@{where}"] += 1
        draft = state["messages"][-1]
        answer = interrupt({"where": where, "draft": draft.content})
        report = " / ".join([*state.get("trail", []), f"{where}:approved={answer}"])
        return {"report": report, "notes": f"{where} saw {answer}"}

    return approve


def team_graph(calls: Counter[str] | None = None, *, nested: bool = False) -> StateGraph:
    """Parent graph whose ``sub`` node is a compiled subgraph that interrupts for approval.

    With ``nested`` the interrupt sits one level deeper, in a subgraph of the subgraph, so the
    interrupted task lives in a namespace like ``sub:<id>|inner:<id>``.
    """
    calls = Counter() if calls is None else calls

    def draft(state: SubState) -> dict[str, Any]:
        calls["draft"] += 1
        return {"messages": [reply(state["messages"], prefix="sub")], "trail": ["draft"]}

    sub = StateGraph(SubState)
    sub.add_node("draft", draft)
    if nested:
        inner = StateGraph(SubState)
        inner.add_node("approve", _approve_node(calls, "inner"))
        inner.add_edge(START, "approve")
        inner.add_edge("approve", END)
        sub.add_node("inner", inner.compile())
        sub.add_edge("draft", "inner")
        sub.add_edge("inner", END)
    else:
        sub.add_node("approve", _approve_node(calls, "sub"))
        sub.add_edge("draft", "approve")
        sub.add_edge("approve", END)
    sub.add_edge(START, "draft")

    def prepare(state: TeamState) -> dict[str, Any]:
        calls["prepare"] += 1
        return {"log": [f"prepare:{len(state['messages'])}"]}

    def finish(state: TeamState) -> dict[str, Any]:
        calls["finish"] += 1
        summary = AIMessage(content=state["report"], id=f"finish-{len(state['messages'])}")
        return {"messages": [summary], "log": ["finish"]}

    parent = StateGraph(TeamState)
    parent.add_node("prepare", prepare)
    parent.add_node("sub", sub.compile())
    parent.add_node("finish", finish)
    parent.add_edge(START, "prepare")
    parent.add_edge("prepare", "sub")
    parent.add_edge("sub", "finish")
    parent.add_edge("finish", END)
    return parent


# ---------------------------------------------------------------------------------------------
# 4. a superstep where one node fails and its sibling succeeds: START -> (fetch, flaky) -> join


class FanState(TypedDict, total=False):
    request: str
    results: Annotated[list[str], operator.add]


def fan_graph(calls: Counter[str], failing: dict[str, bool]) -> StateGraph:
    """``flaky`` raises ``ValueError`` while ``failing["flaky"]`` is true; ``fetch`` always works.

    LangGraph starts the tasks of a superstep in node-name order, so with ``max_concurrency=1``
    ``fetch`` has finished (and its writes were handed to the saver) before ``flaky`` fails.
    """

    def fetch(state: FanState) -> dict[str, Any]:
        calls["fetch"] += 1
        return {"results": [f"fetch({state['request']})"]}

    def flaky(state: FanState) -> dict[str, Any]:
        calls["flaky"] += 1
        if failing.get("flaky"):
            raise ValueError(f"flaky failed on {state['request']}")
        return {"results": [f"flaky({state['request']})"]}

    def join(state: FanState) -> dict[str, Any]:
        calls["join"] += 1
        return {"results": [f"join({len(state['results'])})"]}

    builder = StateGraph(FanState)
    builder.add_node("fetch", fetch)
    builder.add_node("flaky", flaky)
    builder.add_node("join", join)
    builder.add_edge(START, "fetch")
    builder.add_edge(START, "flaky")
    builder.add_edge(["fetch", "flaky"], "join")
    builder.add_edge("join", END)
    return builder


# ---------------------------------------------------------------------------------------------
# 5. DeltaChannel state: only writes are checkpointed, values are rebuilt by replaying them


def extend_items(state: list[Any], writes: Sequence[Any]) -> list[Any]:
    """Batching-invariant reducer: ``extend(extend(s, a), b) == extend(s, a + b)``."""
    out = list(state)
    for write in writes:
        out.extend(write if isinstance(write, list) else [write])
    return out


def fold_messages(state: list[Any], writes: Sequence[Any]) -> list[Any]:
    """``add_messages`` folded over a batch of writes (batching-invariant: it is a left fold)."""
    out: list[Any] = list(state)
    for write in writes:
        out = add_messages(out, write)
    return out


class DeltaState(TypedDict, total=False):
    messages: Annotated[list, DeltaChannel(fold_messages, snapshot_frequency=3)]
    items: Annotated[list, DeltaChannel(extend_items, snapshot_frequency=3)]
    turns: Annotated[int, operator.add]


def delta_graph() -> StateGraph:
    def model(state: DeltaState) -> dict[str, Any]:
        answer = reply(state["messages"], prefix="delta")
        return {"messages": [answer], "items": [f"item-{len(state['items'])}"]}

    def tally(state: DeltaState) -> dict[str, Any]:
        return {"turns": 1}

    builder = StateGraph(DeltaState)
    builder.add_node("model", model)
    builder.add_node("tally", tally)
    builder.add_edge(START, "model")
    builder.add_edge("model", "tally")
    builder.add_edge("tally", END)
    return builder
