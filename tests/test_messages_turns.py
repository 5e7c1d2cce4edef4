"""TurnWindow: the life of a streamed turn, thread safety, and persistence in a real graph."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Annotated, Any

import pytest
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    HumanMessage,
    SystemMessage,
)
from langgraph.graph import END, START, StateGraph, add_messages
from langgraph.types import Command, interrupt
from messages_support import StreamingModel
from typing_extensions import TypedDict

from langgraph_memory_plus.messages import TurnError, TurnHistory, TurnWindow, abbreviate


def test_a_turn_streams_finishes_and_is_abbreviated() -> None:
    window = TurnWindow(max_turns=2, max_chars=40)
    turn_id = window.begin("What is the capital of France, and why is it there?")
    for chunk in ["Paris", AIMessageChunk(content=", because "), "of the river " * 10, "Seine."]:
        assert window.append(chunk)
    assert window.current is not None and window.current["id"] == turn_id
    record = window.finish()
    assert record["answer"].startswith("Paris, because of th") and record["answer"].endswith(
        "Seine."
    )
    assert " […] " in record["answer"] and len(record["answer"]) <= 40
    assert len(record["question"]) <= 40
    assert window.current is None and window.turns == [record]


def test_window_is_bounded_and_renders_oldest_first() -> None:
    window = TurnWindow(max_turns=2)
    assert window.render() == "" and window.as_message() is None
    for k in range(4):
        window.begin(f"q{k}")
        window.append(f"a{k}")
        window.finish()
    assert [t["question"] for t in window.turns] == ["q2", "q3"]
    text = window.render()
    assert text.index("User: q2\nAssistant: a2") < text.index("User: q3\nAssistant: a3")
    message = window.as_message()
    assert isinstance(message, SystemMessage) and message.id == "lgmp-turns"


def test_abort_discards_and_late_chunks_are_dropped() -> None:
    window = TurnWindow()
    window.begin("q")
    window.append("partial")
    assert window.abort() is True
    assert window.append("late chunk") is False
    assert window.turns == [] and window.current is None
    assert window.abort() is False
    with pytest.raises(TurnError):
        window.finish()


def test_restart_after_feedback_reopens_the_full_question() -> None:
    window = TurnWindow(max_chars=12)
    long_question = "a question much longer than twelve characters"
    window.begin(long_question, turn_id="t1")
    window.append("bad answer")
    window.finish()
    assert window.restart("too vague") == long_question, "the full question, not the abbreviation"
    assert window.turns == [], "the rejected answer left the window"
    assert window.current == {
        "id": "t1",
        "question": long_question,
        "answer": "",
        "feedback": ["too vague"],
    }
    window.append("first try again")
    assert window.restart("still vague") == long_question  # while open: the stream restarts
    assert window.current is not None and window.current["answer"] == ""
    assert window.current["feedback"] == ["too vague", "still vague"]
    window.finish("good answer")
    assert [t["answer"] for t in window.turns] == ["good answer"]
    window.restart()
    window.finish("again")
    with pytest.raises(TurnError):
        TurnWindow().restart()


def test_begin_discards_an_abandoned_turn_and_snapshot_round_trips() -> None:
    window = TurnWindow(max_turns=3)
    window.begin("q1")
    window.append("a1")
    window.finish()
    window.begin("abandoned")
    window.append("half")
    snapshot = window.snapshot()
    restored = TurnWindow(snapshot, max_turns=3)
    assert restored.snapshot() == snapshot
    assert restored.current is not None and restored.current["answer"] == "half"
    restored.begin("q2")
    assert restored.current is not None and restored.current["question"] == "q2"
    assert snapshot["open"] is not None and snapshot["open"]["question"] == "abandoned"


def test_abbreviate() -> None:
    assert abbreviate("short", 10) == "short"
    assert abbreviate("0123456789abcdef", 11, "..") == "012345..def"  # 2/3 of the room first
    assert abbreviate("0123456789", 3, " [...] ") == "012"


def test_concurrent_appends_and_an_abort_from_another_thread() -> None:
    window = TurnWindow(max_chars=100_000)
    window.begin("q")
    start = threading.Barrier(9)
    accepted = [0] * 8

    def stream(n: int) -> None:
        start.wait()
        for _ in range(300):
            accepted[n] += window.append("x")
            window.render()

    threads = [threading.Thread(target=stream, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    start.wait()
    for thread in threads:
        thread.join()
    assert window.current is not None and len(window.current["answer"]) == sum(accepted) == 2400
    assert len(window.finish()["answer"]) == 2400

    window.begin("q2")
    gate = threading.Barrier(2)

    def abort_midway() -> None:
        gate.wait()
        window.abort()

    aborter = threading.Thread(target=abort_midway)
    aborter.start()
    results = []
    for n in range(200):
        if n == 100:
            gate.wait()
            aborter.join()
        results.append(window.append("y"))
    assert results[:100] == [True] * 100 and results[100:] == [False] * 100
    assert [t["question"] for t in window.turns] == ["q"]


# ---------------------------------------------------------------------------------------------
# persisted through the checkpoint of a real streaming graph


class ChatState(TypedDict, total=False):
    messages: Annotated[list[BaseMessage], add_messages]
    turns: TurnHistory


WINDOW = {"max_turns": 2, "max_chars": 80}


def chat_graph(model: StreamingModel) -> StateGraph:
    def answer(state: ChatState) -> dict[str, Any]:
        window = TurnWindow(state.get("turns"), **WINDOW)
        current = window.current
        if current is None:
            last = state["messages"][-1]
            window.begin(last.text, turn_id=last.id)
            current = window.current
        assert current is not None
        prompt: list[BaseMessage] = [SystemMessage(window.render() or "No history.")]
        feedback = "".join(f" (Not like before: {f})" for f in current["feedback"])
        prompt.append(HumanMessage(current["question"] + feedback))
        try:
            for chunk in model.stream(prompt):
                window.append(chunk)
        except ConnectionError:
            window.abort()
            return {"turns": window.snapshot(), "messages": [AIMessage("(interrupted)")]}
        full = window.current["answer"] if window.current else ""
        record = window.finish()
        reply = AIMessage(full, id=f"{record['id']}-a{len(current['feedback'])}")
        return {"messages": [reply], "turns": window.snapshot()}

    def review(state: ChatState) -> Command[Any]:
        verdict = interrupt("Is this answer fine?")
        if verdict == "ok":
            return Command(goto=END)
        window = TurnWindow(state.get("turns"), **WINDOW)
        window.restart(feedback=str(verdict))
        return Command(goto="answer", update={"turns": window.snapshot()})

    builder = StateGraph(ChatState)
    builder.add_node("answer", answer)
    builder.add_node("review", review, destinations=("answer", END))
    builder.add_edge(START, "answer")
    builder.add_edge("answer", "review")
    return builder


@pytest.mark.storage
def test_turn_window_lives_in_the_checkpoint(saver_factory: Callable[..., Any]) -> None:
    model = StreamingModel()
    config = {"configurable": {"thread_id": "turns"}}
    with saver_factory() as saver:
        graph = chat_graph(model).compile(checkpointer=saver)
        streamed = []
        for k in range(3):
            for chunk, _ in graph.stream(
                {"messages": [HumanMessage(f"topic {k}", id=f"q{k}")]},
                config,
                stream_mode="messages",
            ):
                if isinstance(chunk, AIMessageChunk):  # not the node's final message
                    streamed.append(chunk.content)
            graph.invoke(Command(resume="ok"), config)
        assert "".join(streamed).count("Here is what I know about topic") == 3

    with saver_factory() as saver:  # a new process: the window comes from the checkpoint
        graph = chat_graph(model).compile(checkpointer=saver)
        turns = graph.get_state(config).values["turns"]
        assert [t["id"] for t in turns["turns"]] == ["q1", "q2"], "bounded to max_turns"
        assert all(len(t["answer"]) <= 80 for t in turns["turns"])
        assert "topic 1" in str(model.prompts[-1][0].content), "earlier turns were in the prompt"

        graph.invoke({"messages": [HumanMessage("topic 3", id="q3")]}, config)
        graph.invoke(Command(resume="too long"), config)  # feedback: answer again
        last_prompt = str(model.prompts[-1][-1].content)
        assert last_prompt == "topic 3 (Not like before: too long)"
        assert "topic 3" not in str(model.prompts[-1][0].content), "rejected turn left the window"
        graph.invoke(Command(resume="ok"), config)
        turns = graph.get_state(config).values["turns"]
        assert [t["id"] for t in turns["turns"]] == ["q2", "q3"]

        model.fail_after_words = 5  # the stream breaks: the turn is discarded, not archived
        graph.invoke({"messages": [HumanMessage("topic 4", id="q4")]}, config)
        graph.invoke(Command(resume="ok"), config)
        turns = graph.get_state(config).values["turns"]
        assert [t["id"] for t in turns["turns"]] == ["q2", "q3"] and turns["open"] is None
