"""Overdue approvals are answered, and their window survives a copy (issue 35).

``expire_overdue(graph=...)`` resumes each overdue thread with a rejection saying it
expired: the tool never runs, the agent is told, and the thread no longer waits in the
index; exactly once with any number of sweeps at once. An approval's window counts from
the checkpoint its interrupt is pending on, so ``copy_threads`` into another saver does
not restart it. Every test runs on every backend, each on savers of its own (a sweep
answers every overdue thread it sees, and other tests leave theirs waiting).
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from approvals_support import Clock, _interrupt, booking_agent, runs, store_factory
from langchain_core.messages import ToolMessage
from langgraph.checkpoint.memory import InMemorySaver

from langgraph_memory_plus.approvals import Approvals
from langgraph_memory_plus.approvals.queue import EXPIRED_MESSAGE
from langgraph_memory_plus.migration import copy_threads

WINDOW = timedelta(hours=2)


@pytest.fixture
def open_store(backend: str, request: pytest.FixtureRequest) -> Any:
    return store_factory(backend, request)


@pytest.fixture
def own(storage: Any) -> dict[str, Any]:
    """Saver options of this test's own: a schema / key prefix (SQLite: the test's file)."""
    tag = uuid.uuid4().hex[:10]
    if storage.kind == "postgres":
        return {"schema": f"expiry_{tag}"}
    if storage.kind == "redis":
        return {"key_prefix": f"{storage.options.get('key_prefix', 'lgmp-test')}-exp-{tag}"}
    return {}


@pytest.fixture
def own_saver(own: dict[str, Any], saver_factory: Any) -> Callable[[], Any]:
    return lambda: saver_factory(**own)


def _tool_messages(agent: Any, thread: str) -> list[ToolMessage]:
    state = agent.get_state({"configurable": {"thread_id": thread}})
    return [m for m in state.values["messages"] if isinstance(m, ToolMessage)]


def _waiting(saver: Any) -> set[str]:
    return {t["thread_id"] for t in saver.threads.search(status="interrupted", limit=1000)}


def test_expire_overdue_answers_the_thread(own_saver: Any, open_store: Any, tmp_path: Path) -> None:
    user = f"u-{uuid.uuid4().hex[:8]}"
    runs_file = tmp_path / "runs"
    clock = Clock()
    with own_saver() as saver, open_store() as store:
        agent = booking_agent(saver, runs_file)
        queue = Approvals(saver, store, window=WINDOW, clock=clock)
        threads = [f"{user}-{i}" for i in range(3)]
        ids = [_interrupt(agent, t, user) for t in threads]
        clock.now += WINDOW + timedelta(minutes=1)
        told: list[Any] = []
        assert queue.expire_overdue(graph=agent, batch_size=2, on_expired=told.append) == 3
        assert sorted(a.id for a in told) == sorted(ids)
        assert all(a.decision.resumed_at for a in told)
        assert runs(runs_file) == []  # the tool never ran
        assert _waiting(saver) == set()
        for thread in threads:
            record = saver.threads.get(thread)
            assert record is not None and record["status"] == "idle"
            (answer,) = _tool_messages(agent, thread)  # the agent was told, once
            assert EXPIRED_MESSAGE in str(answer.content)
        expired = queue.list(user_id=user, status="expired")
        assert sorted(a.id for a in expired) == sorted(ids)
        assert queue.expire_overdue(graph=agent) == 0  # a second sweep answers nothing

        # Marked without a graph (the CLI's sweep): waiting until one answers it.
        late = f"{user}-late"
        _interrupt(agent, late, user)
        clock.now += WINDOW + timedelta(minutes=1)
        assert queue.expire_overdue() == 1
        assert _waiting(saver) == {late}
        assert queue.recover(agent) == 1
        assert _waiting(saver) == set() and runs(runs_file) == []
        assert len(_tool_messages(agent, late)) == 1


def test_concurrent_sweeps_answer_each_thread_once(
    own_saver: Any, open_store: Any, tmp_path: Path
) -> None:
    user = f"u-{uuid.uuid4().hex[:8]}"
    runs_file = tmp_path / "runs"
    clock = Clock()
    with own_saver() as saver:
        agent = booking_agent(saver, runs_file)
        threads = [f"{user}-{i}" for i in range(4)]
        for thread in threads:
            _interrupt(agent, thread, user)
    clock.now += WINDOW + timedelta(minutes=1)
    barrier = threading.Barrier(4)
    marked: list[int] = []

    def sweep() -> None:
        with own_saver() as saver, open_store() as store:
            queue = Approvals(saver, store, window=WINDOW, clock=clock)
            graph = booking_agent(saver, runs_file)
            barrier.wait()
            marked.append(queue.expire_overdue(graph=graph, batch_size=2))

    workers = [threading.Thread(target=sweep) for _ in range(4)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(60)
    assert sum(marked) == 4 and len(marked) == 4
    with own_saver() as saver:
        agent = booking_agent(saver, runs_file)
        assert _waiting(saver) == set()
        assert [len(_tool_messages(agent, t)) for t in threads] == [1] * 4
    assert runs(runs_file) == []


def test_async_sweeps_answer_each_thread_once(
    own: dict[str, Any],
    own_saver: Any,
    async_saver_factory: Any,
    open_store: Any,
    tmp_path: Path,
) -> None:
    user = f"u-{uuid.uuid4().hex[:8]}"
    runs_file = tmp_path / "runs"
    clock = Clock()
    threads = [f"{user}-{i}" for i in range(3)]
    with own_saver() as saver:
        agent = booking_agent(saver, runs_file)
        for thread in threads:
            _interrupt(agent, thread, user)
    clock.now += WINDOW + timedelta(minutes=1)
    cls = open_store.classes[1]
    url, store_options = open_store.target

    async def main() -> list[int]:
        async with (
            async_saver_factory(**own) as saver,
            cls.from_conn_string(url, **store_options) as store,
        ):
            await store.setup()
            queue = Approvals(saver, store, window=WINDOW, clock=clock)
            graph = booking_agent(saver, runs_file)
            sweeps = [queue.aexpire_overdue(graph=graph, batch_size=2) for _ in range(4)]
            return list(await asyncio.gather(*sweeps))

    marked = asyncio.run(main())
    assert sum(marked) == 3
    with own_saver() as saver:
        agent = booking_agent(saver, runs_file)
        assert _waiting(saver) == set()
        assert [len(_tool_messages(agent, t)) for t in threads] == [1] * 3
    assert runs(runs_file) == []


def test_copy_threads_keeps_the_approval_window(
    own_saver: Any, open_store: Any, tmp_path: Path
) -> None:
    """A thread waiting for approval, copied from LangGraph's own saver: its approval
    was asked when its interrupt was made, not when the copy ran."""
    user, thread = f"u-{uuid.uuid4().hex[:8]}", f"t-{uuid.uuid4().hex[:8]}"
    runs_file = tmp_path / "runs"
    source = InMemorySaver()
    approval_id = _interrupt(booking_agent(source, runs_file), thread, user)
    latest = source.get_tuple({"configurable": {"thread_id": thread}})
    assert latest is not None
    asked = latest.checkpoint["ts"]
    time.sleep(0.2)  # the copy runs later
    clock = Clock()
    with own_saver() as target, open_store() as store:
        copy_threads(source, target, [thread])
        queue = Approvals(target, store, window=WINDOW, clock=clock)
        approval = queue.get(approval_id, thread_id=thread)
        assert abs((approval.created_at - _iso(asked)).total_seconds()) < 0.01
        assert approval.created_at < target.threads.get(thread)["updated_at"]
        # Just past the window counted from the interrupt: overdue, though the copy is new.
        clock.now = approval.created_at + WINDOW + timedelta(milliseconds=1)
        assert queue.get(approval_id, thread_id=thread).status == "expired"
        agent = booking_agent(target, runs_file)
        assert queue.expire_overdue(graph=agent) == 1
        assert _waiting(target) == set() and runs(runs_file) == []


def _iso(value: str) -> datetime:
    return datetime.fromisoformat(value)
