"""A booking agent behind ``HumanInTheLoopMiddleware``, for the approval tests.

``BookingModel`` asks to book the flight named in the last human message (one
``book_flight`` tool call), and once it sees the tool's answer, says what happened. The
tool appends a line to the file named by ``runs_file``, so a test (in another process)
can count how often it really ran.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from langchain.agents import create_agent
from langchain.agents.middleware import HumanInTheLoopMiddleware
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from messages_support import ScriptedModel


class BookingModel(ScriptedModel):
    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> BookingModel:  # type: ignore[override]
        return self

    def reply(self, messages: list[BaseMessage]) -> AIMessage:
        last = messages[-1]
        if isinstance(last, ToolMessage):
            return AIMessage(content=f"done: {last.content}", id=f"answer-{last.tool_call_id}")
        human = next(m for m in reversed(messages) if isinstance(m, HumanMessage))
        flight = str(human.content).split()[-1]
        return AIMessage(
            content="",
            id=f"call-{human.id}",
            tool_calls=[
                {
                    "name": "book_flight",
                    "args": {"flight": flight, "seat": "12A"},
                    "id": f"tc-{human.id}",
                }
            ],
        )


def booking_agent(
    saver: Any,
    runs_file: Path,
    *,
    allowed: Sequence[str] = ("approve", "edit", "reject"),
    mode: str = "batched",
) -> Any:
    @tool
    def book_flight(flight: str, seat: str) -> str:
        """Book a flight."""
        with open(runs_file, "a", encoding="utf-8") as out:
            out.write(json.dumps({"flight": flight, "seat": seat}) + "\n")
        return f"booked {flight} seat {seat}"

    hitl = HumanInTheLoopMiddleware(
        {"book_flight": {"allowed_decisions": list(allowed)}},  # type: ignore[dict-item]
        interrupt_mode=mode,  # type: ignore[arg-type]
    )
    return create_agent(BookingModel(), [book_flight], middleware=[hitl], checkpointer=saver)


def runs(runs_file: Path) -> list[dict[str, Any]]:
    if not runs_file.exists():
        return []
    return [json.loads(line) for line in runs_file.read_text().splitlines()]


def process_a() -> None:
    """Run the agent until it interrupts, print the interrupt id, die with SIGKILL."""
    backend, url, options, runs_file, thread, user = sys.argv[1:7]
    from langgraph_memory_plus import PostgresSaver, RedisSaver
    from langgraph_memory_plus.checkpoint.sqlite import SqliteSaver

    cls = {"postgres": PostgresSaver, "sqlite": SqliteSaver}.get(backend, RedisSaver)
    with cls.from_conn_string(url, **json.loads(options)) as saver:
        saver.setup()
        agent = booking_agent(saver, Path(runs_file))
        config = {"configurable": {"thread_id": thread, "user_id": user}}
        result = agent.invoke({"messages": [HumanMessage("book LH123", id="h1")]}, config)
        print(result["__interrupt__"][0].id, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)


if __name__ == "__main__":
    process_a()
