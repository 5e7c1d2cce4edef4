"""Attacks on the promises of approvals and task drafts (exactly once, erasure wins,
copies apart, drafts under concurrency), each on every backend it concerns.

Each test interleaves another feature or a failure with a decision at one precise point:
the store a queue writes through can run a step (``erase_user``, ``delete_thread``) just
before a chosen write reaches the real store; everything else is the real thing.
"""

from __future__ import annotations

import json
import operator
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import pytest
from approvals_support import _interrupt, booking_agent, runs, store_factory
from langgraph.graph import END, START, StateGraph
from langgraph.store.base import SearchOp
from langgraph.types import Send, interrupt
from typing_extensions import TypedDict

from langgraph_memory_plus.approvals import (
    ApprovalNotFoundError,
    Approvals,
)
from langgraph_memory_plus.approvals import queue as queue_module
from langgraph_memory_plus.erasure import erase_user
from langgraph_memory_plus.store.base import ConditionalPutOp

NAMESPACE = ("approvals", "decisions")


@pytest.fixture
def open_store(backend: str, request: pytest.FixtureRequest) -> Any:
    return store_factory(backend, request)


def _records(store: Any) -> list[Any]:
    (items,) = store.batch([SearchOp(NAMESPACE, None, 1000, 0)])
    return list(items)


class BeforeCreate:
    """The real store; ``step`` runs once, just before the first create-only write of a
    decision record reaches it (between ``decide`` reading the thread and recording)."""

    def __init__(self, store: Any, step: Callable[[], Any]) -> None:
        self.store = store
        self.step: Callable[[], Any] | None = step

    def batch(self, ops: list[Any]) -> list[Any]:
        create = any(
            isinstance(op, ConditionalPutOp)
            and op.expected_version == 0
            and tuple(op.op.namespace) == NAMESPACE
            for op in ops
        )
        if create and self.step is not None:
            step, self.step = self.step, None
            step()
        return list(self.store.batch(ops))


# -- erasure between reading the thread and recording the decision ------------------------


def test_erasure_just_before_the_record_is_created_leaves_nothing_of_the_user(
    backend: str, saver_factory: Any, open_store: Any, tmp_path: Path
) -> None:
    """``erase_user`` runs after ``decide`` read the thread, before it records: the record
    would be written after erasure anonymized the user's records (none yet), with the
    user id, the thread id and the edited arguments in it."""
    user, thread = f"u-{uuid.uuid4().hex[:8]}@example.com", f"t-{uuid.uuid4().hex[:8]}"
    iban = "DE89370400440532013000"
    with saver_factory() as saver, open_store() as store:
        agent = booking_agent(saver, tmp_path / "runs")
        approval_id = _interrupt(agent, thread, user)

        def erase() -> None:
            erase_user(user, checkpointer=saver, store=store, namespaces=(), tombstone_hours=None)

        queue = Approvals(saver, BeforeCreate(store, erase))  # type: ignore[arg-type]
        outcome: Any = None
        try:
            outcome = queue.decide(
                approval_id,
                "edit",
                by="r",
                args={"flight": iban, "seat": "1A"},
                graph=agent,
                thread_id=thread,
            )
        except ApprovalNotFoundError as exc:  # the thread went first: nothing was decided
            outcome = exc
        dumped = json.dumps([(r.key, r.value) for r in _records(store)], ensure_ascii=False)
        for secret in (user, thread, iban):
            assert secret not in dumped
        assert isinstance(outcome, ApprovalNotFoundError), outcome
        assert runs(tmp_path / "runs") == []


def test_thread_deleted_just_before_the_record_is_created_is_not_found(
    backend: str, saver_factory: Any, open_store: Any, tmp_path: Path
) -> None:
    """A thread deleted under a decision: nothing was resumed, so nothing is recorded as
    decided and resumed (the record would claim a resume that never happened)."""
    user, thread = f"u-{uuid.uuid4().hex[:8]}", f"t-{uuid.uuid4().hex[:8]}"
    with saver_factory() as saver, open_store() as store:
        agent = booking_agent(saver, tmp_path / "runs")
        approval_id = _interrupt(agent, thread, user)
        queue = Approvals(
            saver,
            BeforeCreate(store, lambda: saver.delete_thread(thread)),  # type: ignore[arg-type]
        )
        with pytest.raises(ApprovalNotFoundError):
            queue.decide(approval_id, "approve", by="r", graph=agent, thread_id=thread)
        assert _records(store) == []
        assert queue.recover(agent) == 0


# -- several interrupts of one step (Send), decided at once --------------------------------


class Fan(TypedDict):
    done: Annotated[list[str], operator.add]


def fan_graph(saver: Any, runs_file: Path, items: tuple[str, ...], delay: float) -> Any:
    """Each item goes to ``ask`` with ``Send``: one interrupt per item in the same step."""

    def ask(arg: dict[str, Any]) -> dict[str, Any]:
        answer = interrupt({"item": arg["item"]})
        time.sleep(delay)
        with open(runs_file, "a", encoding="utf-8") as out:
            out.write(json.dumps({"item": arg["item"], "answer": answer}) + "\n")
        return {"done": [arg["item"]]}

    builder = StateGraph(Fan)
    builder.add_node("ask", ask)  # type: ignore[arg-type]
    builder.add_conditional_edges(
        START, lambda _: [Send("ask", {"item": i}) for i in items], ["ask"]
    )
    builder.add_edge("ask", END)
    return builder.compile(checkpointer=saver)


def test_interrupts_of_one_step_decided_at_once_all_resume(
    backend: str, saver_factory: Any, open_store: Any, tmp_path: Path
) -> None:
    """Two interrupts of one step (two ``Send`` s), each decided by its own reviewer at the
    same time: each tool runs once, and the thread finishes with both answers."""
    user, thread = f"u-{uuid.uuid4().hex[:8]}", f"t-{uuid.uuid4().hex[:8]}"
    runs_file = tmp_path / "runs"
    items = ("a", "b")
    with saver_factory() as saver, open_store() as store:
        graph = fan_graph(saver, runs_file, items, delay=0.5)
        config = {"configurable": {"thread_id": thread, "user_id": user}}
        graph.invoke({"done": []}, config)
        queue = Approvals(saver, store)
        pending = queue.list(user_id=user)
        assert sorted(a.value["item"] for a in pending) == list(items)
        barrier = threading.Barrier(len(pending))
        errors: list[BaseException] = []

        def decide(approval_id: str) -> None:
            barrier.wait()
            try:
                queue.decide(approval_id, "approve", by="r", graph=graph, thread_id=thread)
            except Exception as exc:
                errors.append(exc)

        workers = [threading.Thread(target=decide, args=(a.id,)) for a in pending]
        for w in workers:
            w.start()
        for w in workers:
            w.join(30)
        assert errors == []
        assert sorted(r["item"] for r in runs(runs_file)) == list(items)  # once each
        state = graph.get_state(config)
        assert sorted(state.values["done"]) == list(items)
        assert state.next == ()
        assert queue.list(user_id=user, status=None) == []


# -- recover finds every record left unresumed --------------------------------------------


class Broken:
    """A graph whose resume fails (a deploy gone wrong): the decision is recorded, the
    lease given back, the thread still waits."""

    def invoke(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("the resume failed")


def test_recover_resumes_every_record_left_unresumed(
    backend: str,
    saver_factory: Any,
    open_store: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``recover`` pages through the records waiting for a resume; those it resumes leave
    the filter, so paging by offset skips as many others. (Pages of 5 here stand for the
    500 of a real run with more than 500 records to recover.)"""
    monkeypatch.setattr(queue_module, "CHUNK", 5)
    user = f"u-{uuid.uuid4().hex[:8]}"
    runs_file = tmp_path / "runs"
    with saver_factory() as saver, open_store() as store:
        agent = booking_agent(saver, runs_file)
        queue = Approvals(saver, store)
        count = 12
        for n in range(count):
            thread = f"{user}-{n}"
            approval_id = _interrupt(agent, thread, user, f"LH{n}")
            with pytest.raises(RuntimeError):
                queue.decide(approval_id, "approve", by="r", graph=Broken(), thread_id=thread)
        assert runs(runs_file) == []
        assert queue.recover(agent, limit=100) == count
        assert len(runs(runs_file)) == count
        assert queue.recover(agent) == 0
