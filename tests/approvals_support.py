"""A booking agent behind ``HumanInTheLoopMiddleware``, for the approval tests.

``BookingModel`` asks to book the flight named in the last human message (one
``book_flight`` tool call), and once it sees the tool's answer, says what happened. The
tool appends a line to the file named by ``runs_file``, so a test (in another process)
can count how often it really ran; with ``delay`` it first appends to ``runs_file`` +
``.started`` and sleeps (a slow tool, or one a test kills midway).

Run as a script: ``interrupt`` (the default) runs the agent to its interrupt and dies;
``decide`` applies one decision from a process of its own and prints the outcome.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain.agents.middleware import HumanInTheLoopMiddleware
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from messages_support import ScriptedModel

__all__ = ["Clock", "booking_agent", "runs", "started", "store_factory"]


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
    delay: float = 0.0,
) -> Any:
    @tool
    def book_flight(flight: str, seat: str) -> str:
        """Book a flight."""
        if delay:
            with open(f"{runs_file}.started", "a", encoding="utf-8") as out:
                out.write(f"{os.getpid()}\n")
            time.sleep(delay)
        with open(runs_file, "a", encoding="utf-8") as out:
            out.write(json.dumps({"flight": flight, "seat": seat}) + "\n")
        return f"booked {flight} seat {seat}"

    hitl = HumanInTheLoopMiddleware(
        {"book_flight": {"allowed_decisions": list(allowed)}},  # type: ignore[dict-item]
        interrupt_mode=mode,  # type: ignore[arg-type]
    )
    return create_agent(BookingModel(), [book_flight], middleware=[hitl], checkpointer=saver)


def store_factory(backend: str, request: pytest.FixtureRequest) -> Any:
    """A store on the saver's backend, on this test's own schema / key prefix / file."""
    from conftest import _saver_target

    from langgraph_memory_plus import (
        AsyncPostgresStore,
        AsyncRedisStore,
        AsyncSqliteStore,
        PostgresStore,
        RedisStore,
        SqliteStore,
    )

    url = _saver_target(request.getfixturevalue("storage"))
    tag = uuid.uuid4().hex[:10]
    if backend == "postgres":
        classes, options = (PostgresStore, AsyncPostgresStore), {"schema": f"appr_{tag}"}
    elif backend == "sqlite":
        classes, options = (SqliteStore, AsyncSqliteStore), {}
    else:
        prefix = (
            "lgmp-test" if backend == "redis-cluster" else request.getfixturevalue("redis_prefix")
        )
        classes, options = (RedisStore, AsyncRedisStore), {"key_prefix": f"{prefix}-appr-{tag}"}

    @contextmanager
    def factory(is_async: bool = False) -> Iterator[Any]:
        with classes[0].from_conn_string(url, **options) as store:
            store.setup()
            yield store

    factory.classes = classes  # type: ignore[attr-defined]
    factory.target = (url, options)  # type: ignore[attr-defined]
    return factory


class Clock:
    def __init__(self) -> None:
        self.now = datetime.now(timezone.utc)

    def __call__(self) -> datetime:
        return self.now


def _interrupt(agent: Any, thread: str, user: str, flight: str = "LH123") -> str:
    config = {"configurable": {"thread_id": thread, "user_id": user}}
    result = agent.invoke({"messages": [HumanMessage(f"book {flight}", id=f"h-{thread}")]}, config)
    return str(result["__interrupt__"][0].id)


def runs(runs_file: Path) -> list[dict[str, Any]]:
    if not runs_file.exists():
        return []
    return [json.loads(line) for line in runs_file.read_text().splitlines()]


def started(runs_file: Path) -> list[str]:
    """Pids of the processes whose slow tool started."""
    path = Path(f"{runs_file}.started")
    return path.read_text().split() if path.exists() else []


def _saver_class(backend: str) -> Any:
    from langgraph_memory_plus import PostgresSaver, RedisSaver
    from langgraph_memory_plus.checkpoint.sqlite import SqliteSaver

    return {"postgres": PostgresSaver, "sqlite": SqliteSaver}.get(backend, RedisSaver)


def process_decide() -> None:
    """Approve ``approval_id`` on ``thread`` from this process; print the outcome."""
    backend, url, options, store_options, runs_file, thread, approval_id = sys.argv[2:9]
    delay, lease = float(sys.argv[9]), float(sys.argv[10])
    from langgraph_memory_plus import PostgresStore, RedisStore, SqliteStore
    from langgraph_memory_plus.approvals import Approvals

    store_cls = {"postgres": PostgresStore, "sqlite": SqliteStore}.get(backend, RedisStore)
    with (
        _saver_class(backend).from_conn_string(url, **json.loads(options)) as saver,
        store_cls.from_conn_string(url, **json.loads(store_options)) as store,
    ):
        queue = Approvals(saver, store, lease=lease)
        agent = booking_agent(saver, Path(runs_file), delay=delay)
        print("ready", flush=True)
        sys.stdin.readline()  # the test starts every decider at once
        out = queue.decide(approval_id, "approve", by="r", graph=agent, thread_id=thread)
        assert out.decision is not None
        print(json.dumps([out.status, out.decision.resumed_at is not None]), flush=True)


def process_a() -> None:
    """Run the agent until it interrupts, print the interrupt id, die with SIGKILL."""
    backend, url, options, runs_file, thread, user = sys.argv[1:7]
    with _saver_class(backend).from_conn_string(url, **json.loads(options)) as saver:
        saver.setup()
        agent = booking_agent(saver, Path(runs_file))
        config = {"configurable": {"thread_id": thread, "user_id": user}}
        result = agent.invoke({"messages": [HumanMessage("book LH123", id="h1")]}, config)
        print(result["__interrupt__"][0].id, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)


if __name__ == "__main__":
    process_decide() if sys.argv[1] == "decide" else process_a()
