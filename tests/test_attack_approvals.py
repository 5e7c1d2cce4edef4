"""Attacks on the promises of approvals and task drafts (exactly once, erasure wins,
copies apart, drafts under concurrency), each on every backend it concerns.

Each test interleaves another feature or a failure with a decision at one precise point:
the store a queue writes through can run a step (``erase_user``, ``delete_thread``) just
before a chosen write reaches the real store; everything else is the real thing.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import operator
import threading
import time
import uuid
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Annotated, Any

import pytest
from approvals_support import Clock, _interrupt, booking_agent, runs, store_factory
from langgraph.graph import END, START, StateGraph
from langgraph.store.base import SearchOp
from langgraph.types import Send, interrupt
from typing_extensions import TypedDict

from langgraph_memory_plus.approvals import (
    Approval,
    ApprovalConflictError,
    ApprovalExpiredError,
    ApprovalNotFoundError,
    Approvals,
    DraftConflictError,
    DraftNotFoundError,
    TaskDrafts,
)
from langgraph_memory_plus.approvals import queue as queue_module
from langgraph_memory_plus.privacy.erasure import erase_user
from langgraph_memory_plus.store.base import ConditionalPutOp

NAMESPACE = ("approvals", "decisions")
FLIGHT = {"flight": "LH123", "seat": "12A"}


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


# -- racing decisions, copies, odd ids -----------------------------------------------------


def test_approve_reject_edit_racing_one_wins(
    backend: str, saver_factory: Any, open_store: Any, tmp_path: Path
) -> None:
    """Nine reviewers at once, three of each decision: one decision is recorded, its
    senders all get it back, every other sender gets ``ApprovalConflictError``."""
    user, thread = f"u-{uuid.uuid4().hex[:8]}", f"t-{uuid.uuid4().hex[:8]}"
    runs_file = tmp_path / "runs"
    with saver_factory() as saver, open_store() as store:
        agent = booking_agent(saver, runs_file, delay=0.3)
        approval_id = _interrupt(agent, thread, user)
        queue = Approvals(saver, store)
        calls = [
            ("approve", None, None),
            ("reject", None, "no"),
            ("edit", {"flight": "AF9", "seat": "2B"}, None),
        ] * 3
        barrier = threading.Barrier(len(calls))
        outcomes: list[Any] = [None] * len(calls)

        def call(n: int) -> None:
            decision, args, message = calls[n]
            barrier.wait()
            try:
                outcomes[n] = queue.decide(
                    approval_id,
                    decision,
                    by=f"r-{decision}",
                    args=args,
                    message=message,
                    graph=agent,
                    thread_id=thread,
                )
            except ApprovalConflictError as exc:
                outcomes[n] = exc

        workers = [threading.Thread(target=call, args=(n,)) for n in range(len(calls))]
        for w in workers:
            w.start()
        for w in workers:
            w.join(30)
        won = {o.decision.decision for o in outcomes if not isinstance(o, BaseException)}
        assert len(won) == 1, outcomes
        (decision,) = won
        assert sum(not isinstance(o, BaseException) for o in outcomes) == 3
        assert all(isinstance(o, (Approval, ApprovalConflictError)) for o in outcomes)
        done = queue.get(approval_id, thread_id=thread)
        assert done.decision is not None and done.decision.decision == decision
        assert done.decision.resumed_at is not None
        expected = {"approve": [FLIGHT], "edit": [{"flight": "AF9", "seat": "2B"}], "reject": []}
        assert runs(runs_file) == expected[decision]


def test_original_and_copy_decided_at_once_each_on_its_own(
    backend: str, saver_factory: Any, open_store: Any, tmp_path: Path
) -> None:
    user, thread = f"u-{uuid.uuid4().hex[:8]}", f"t-{uuid.uuid4().hex[:8]}"
    copy = f"{thread}-copy"
    runs_file = tmp_path / "runs"
    with saver_factory() as saver, open_store() as store:
        agent = booking_agent(saver, runs_file, delay=0.3)
        approval_id = _interrupt(agent, thread, user)
        saver.copy_thread(thread, copy)
        queue = Approvals(saver, store)
        barrier = threading.Barrier(4)
        outcomes: dict[str, list[Any]] = {thread: [], copy: []}

        def call(on: str, decision: str) -> None:
            barrier.wait()
            message = "no" if decision == "reject" else None
            out = queue.decide(
                approval_id, decision, by="r", message=message, graph=agent, thread_id=on
            )
            outcomes[on].append(out.status)

        workers = [
            threading.Thread(target=call, args=args)
            for args in [
                (thread, "approve"),
                (thread, "approve"),
                (copy, "reject"),
                (copy, "reject"),
            ]
        ]
        for w in workers:
            w.start()
        for w in workers:
            w.join(30)
        assert outcomes == {thread: ["approved"] * 2, copy: ["rejected"] * 2}
        assert runs(runs_file) == [FLIGHT]
        assert queue.list(user_id=user, status=None) == []
        assert queue.get(approval_id, thread_id=copy).decision.resumed_at  # type: ignore[union-attr]
        assert queue.get(approval_id, thread_id=thread).decision.resumed_at  # type: ignore[union-attr]


ODD_THREAD_IDS = ["a.b/c%2E", "线程/张三.1", "with space & quote'\"", "x" * 200]


def test_odd_thread_and_user_ids_decide_and_recover(
    backend: str, saver_factory: Any, open_store: Any, tmp_path: Path
) -> None:
    tag = uuid.uuid4().hex[:6]
    runs_file = tmp_path / "runs"
    with saver_factory() as saver, open_store() as store:
        agent = booking_agent(saver, runs_file)
        queue = Approvals(saver, store)
        for n, odd in enumerate(ODD_THREAD_IDS):
            thread, user = f"{odd}-{tag}", f"{odd}.{n}@{tag}"
            approval_id = _interrupt(agent, thread, user, f"LH{n}")
            (listed,) = queue.list(user_id=user)
            assert (listed.thread_id, listed.user_id) == (thread, user)
            with pytest.raises(RuntimeError):
                queue.decide(approval_id, "approve", by="r", graph=Broken(), thread_id=thread)
            assert queue.recover(agent) == 1
            assert queue.get(approval_id, thread_id=thread).decision.resumed_at  # type: ignore[union-attr]
            assert queue.decide(approval_id, "approve", by="r", graph=agent).thread_id == thread
        assert len(runs(runs_file)) == len(ODD_THREAD_IDS)


# -- a subgraph that interrupts -------------------------------------------------------------


class Inner(TypedDict):
    done: Annotated[list[str], operator.add]


def nested_graph(saver: Any, runs_file: Path) -> Any:
    def ask(state: Inner) -> dict[str, Any]:
        answer = interrupt({"item": "inner"})
        with open(runs_file, "a", encoding="utf-8") as out:
            out.write(json.dumps({"item": "inner", "answer": answer}) + "\n")
        return {"done": ["inner"]}

    inner = StateGraph(Inner)
    inner.add_node("ask", ask)
    inner.add_edge(START, "ask")
    inner.add_edge("ask", END)
    outer = StateGraph(Inner)
    outer.add_node("sub", inner.compile())
    outer.add_node("after", lambda s: {"done": ["after"]})
    outer.add_edge(START, "sub")
    outer.add_edge("sub", "after")
    outer.add_edge("after", END)
    return outer.compile(checkpointer=saver)


def test_subgraph_interrupt_is_decided_once(
    backend: str, saver_factory: Any, open_store: Any, tmp_path: Path
) -> None:
    user, thread = f"u-{uuid.uuid4().hex[:8]}", f"t-{uuid.uuid4().hex[:8]}"
    runs_file = tmp_path / "runs"
    with saver_factory() as saver, open_store() as store:
        graph = nested_graph(saver, runs_file)
        config = {"configurable": {"thread_id": thread, "user_id": user}}
        graph.invoke({"done": []}, config)
        queue = Approvals(saver, store)
        (pending,) = queue.list(user_id=user)
        barrier = threading.Barrier(4)

        def call() -> None:
            barrier.wait()
            queue.decide(pending.id, "approve", by="r", graph=graph, thread_id=thread)

        workers = [threading.Thread(target=call) for _ in range(4)]
        for w in workers:
            w.start()
        for w in workers:
            w.join(30)
        assert len(runs(runs_file)) == 1
        assert graph.get_state(config).values["done"] == ["inner", "after"]
        assert queue.list(user_id=user, status=None) == []


# -- task drafts ----------------------------------------------------------------------------

FIELDS = [f"f{i}" for i in range(4)]
SCHEMA = {
    "type": "object",
    "required": FIELDS,
    "properties": {**{f: {"type": "string"} for f in FIELDS}, "note": {"type": "string"}},
}


def test_draft_update_racing_submit_is_in_the_submitted_draft_or_refused(
    backend: str, open_store: Any
) -> None:
    """An update that returns was merged into the draft as stored: if the draft was
    submitted too, the submitted draft carries it; otherwise the update was refused."""
    user = f"u-{uuid.uuid4().hex[:8]}/张三"
    with open_store() as store:
        drafts = TaskDrafts(store, SCHEMA)
        for trial in range(6):
            draft = drafts.create(user, "form", {f: "x" for f in FIELDS})
            barrier = threading.Barrier(2)
            out: dict[str, Any] = {}

            def submit(draft_id: str = draft.id, barrier: Any = barrier, out: Any = out) -> None:
                barrier.wait()
                try:
                    out["submit"] = drafts.submit(user, draft_id)
                except (DraftConflictError, DraftNotFoundError) as exc:
                    out["submit"] = exc

            def update(
                draft_id: str = draft.id, barrier: Any = barrier, out: Any = out, trial: int = trial
            ) -> None:
                barrier.wait()
                if trial % 2:
                    time.sleep(0.002 * trial)
                try:
                    out["update"] = drafts.update(user, draft_id, {"note": f"n{trial}"})
                except (DraftConflictError, DraftNotFoundError) as exc:
                    out["update"] = exc

            workers = [threading.Thread(target=submit), threading.Thread(target=update)]
            for w in workers:
                w.start()
            for w in workers:
                w.join(30)
            submitted, updated = out["submit"], out["update"]
            assert not isinstance(submitted, BaseException), submitted  # nobody else submits
            if not isinstance(updated, BaseException):
                assert submitted.fields.get("note") == f"n{trial}", (submitted, updated)
            assert drafts.get(user, draft.id) is None
            assert drafts.list(user) == []


def test_draft_update_after_its_ttl_is_not_found_and_revives_nothing(
    backend: str, open_store: Any
) -> None:
    user = f"u-{uuid.uuid4().hex[:8]}.%00"
    clock = Clock()
    with open_store() as store:
        drafts = TaskDrafts(store, SCHEMA, ttl=timedelta(hours=1), clock=clock)
        draft = drafts.create(user, "form", {"f0": "a"})
        clock.now += timedelta(hours=1, seconds=1)
        with pytest.raises(DraftNotFoundError):
            drafts.update(user, draft.id, {"f1": "b"})
        with pytest.raises(DraftNotFoundError):
            drafts.submit(user, draft.id)
        assert drafts.get(user, draft.id) is None
        assert drafts.list(user) == []
        clock.now -= timedelta(seconds=2)  # a replica whose clock is a little behind
        assert drafts.get(user, draft.id) is not None  # nothing was written meanwhile
        assert drafts.get(user, draft.id).fields == {"f0": "a"}  # type: ignore[union-attr]


def test_draft_create_retried_with_its_id_keeps_what_was_added(
    backend: str, open_store: Any
) -> None:
    """``create(..., draft_id=...)`` sent again (a client retry) after an update: the
    update is not wiped by the second create."""
    user = f"u-{uuid.uuid4().hex[:8]}"
    with open_store() as store:
        drafts = TaskDrafts(store, SCHEMA)
        drafts.create(user, "form", {"f0": "a"}, draft_id="cancel-LH123")
        drafts.update(user, "cancel-LH123", {"f1": "b"})
        with contextlib.suppress(DraftConflictError):  # refusing it is fine too
            drafts.create(user, "form", {"f0": "a"}, draft_id="cancel-LH123")
        got = drafts.get(user, "cancel-LH123")
        assert got is not None and got.fields == {"f0": "a", "f1": "b"}
        again = drafts.create(user, "form", {"f0": "a"}, draft_id="cancel-LH123")
        assert again.fields == {"f0": "a", "f1": "b"}  # the retry gets the draft as it is
        with pytest.raises(DraftConflictError, match="cancel-LH123"):
            drafts.create(user, "form", {"f0": "other"}, draft_id="cancel-LH123")
        assert drafts.get(user, "cancel-LH123").fields == {"f0": "a", "f1": "b"}  # type: ignore[union-attr]


# -- a claimant that dies at other points ---------------------------------------------------


class Crash(BaseException):
    """The process dies here: no cleanup runs (the driver throws only ``Exception`` s)."""


class DiesAt:
    """The real store; the process "dies" just after (or before) one chosen write."""

    def __init__(self, store: Any, when: Callable[[Any], bool], after: bool) -> None:
        self.store, self.when, self.after = store, when, after

    def batch(self, ops: list[Any]) -> list[Any]:
        hit = any(isinstance(op, ConditionalPutOp) and self.when(op) for op in ops)
        if hit and not self.after:
            raise Crash
        out = list(self.store.batch(ops))
        if hit:
            raise Crash
        return out


@pytest.mark.parametrize(
    "point",
    ["after the claim", "after the resume, before resumed_at"],
)
def test_claimant_dying_elsewhere_is_finished_once_by_recover(
    backend: str, saver_factory: Any, open_store: Any, tmp_path: Path, point: str
) -> None:
    user, thread = f"u-{uuid.uuid4().hex[:8]}", f"t-{uuid.uuid4().hex[:8]}"
    runs_file = tmp_path / "runs"
    if point == "after the claim":

        def when(op: Any) -> bool:
            return bool(op.expected_version == 0)

        after = True
    else:

        def when(op: Any) -> bool:
            return op.op.value is not None and op.op.value.get("resumed_at") is not None

        after = False
    with saver_factory() as saver, open_store() as store:
        agent = booking_agent(saver, runs_file)
        approval_id = _interrupt(agent, thread, user)
        dying = Approvals(saver, DiesAt(store, when, after), lease=30)  # type: ignore[arg-type]
        with pytest.raises(Crash):
            dying.decide(approval_id, "approve", by="r", graph=agent, thread_id=thread)
        ran = runs(runs_file)
        assert ran == ([] if point == "after the claim" else [FLIGHT])
        clock = Clock()
        queue = Approvals(saver, store, lease=30, clock=clock)
        assert queue.recover(agent) == 0  # its lease is live
        clock.now += timedelta(seconds=31)
        assert queue.recover(agent) == 1
        assert runs(runs_file) == [FLIGHT]
        done = queue.get(approval_id, thread_id=thread)
        assert done.status == "approved" and done.decision and done.decision.resumed_at
        assert queue.recover(agent) == 0
        assert queue.list(user_id=user, status=None) == []


# -- the expiry sweep racing decisions ------------------------------------------------------


def test_expiry_sweep_racing_decisions_one_outcome(
    backend: str, saver_factory: Any, open_store: Any, tmp_path: Path
) -> None:
    """Reviewers decide just before the window closes while a sweep (on a replica whose
    clock is just past it) marks it expired: either the decision holds and the sweep
    skips it, or it is expired, nothing ran and every reviewer is told so."""
    runs_file = tmp_path / "runs"
    with saver_factory() as saver, open_store() as store:
        agent = booking_agent(saver, runs_file)
        for trial in range(4):
            user, thread = f"u-{uuid.uuid4().hex[:8]}", f"t-{uuid.uuid4().hex[:8]}"
            approval_id = _interrupt(agent, thread, user, f"LH{trial}")
            created = Approvals(saver, store).get(approval_id, thread_id=thread).created_at
            early, late = Clock(), Clock()
            early.now = created + timedelta(seconds=59)
            late.now = created + timedelta(seconds=61)
            deciding = Approvals(saver, store, window=60, clock=early)
            sweeping = Approvals(saver, store, window=60, clock=late)
            barrier = threading.Barrier(5)
            outcomes: list[Any] = []

            def decide(
                barrier: Any = barrier,
                outcomes: Any = outcomes,
                approval_id: str = approval_id,
                deciding: Approvals = deciding,
            ) -> None:
                barrier.wait()
                try:
                    outcomes.append(
                        deciding.decide(approval_id, "approve", by="r", graph=agent).status
                    )
                except ApprovalExpiredError as exc:
                    outcomes.append(exc)

            def sweep(
                barrier: Any = barrier,
                outcomes: Any = outcomes,
                sweeping: Approvals = sweeping,
                approval_id: str = approval_id,
            ) -> None:
                barrier.wait()
                marked: list[str] = []  # the server's other tests' threads may be swept too
                sweeping.expire_overdue(on_expired=lambda a: marked.append(a.id))
                outcomes.append(("swept", approval_id in marked))

            workers = [threading.Thread(target=decide) for _ in range(4)]
            workers.append(threading.Thread(target=sweep))
            for w in workers:
                w.start()
            for w in workers:
                w.join(30)
            (swept,) = [o[1] for o in outcomes if isinstance(o, tuple)]
            decided = [o for o in outcomes if not isinstance(o, tuple)]
            status = deciding.get(approval_id, thread_id=thread).status
            if swept:
                assert status == "expired"
                assert all(isinstance(o, ApprovalExpiredError) for o in decided), decided
            else:
                assert status == "approved" and decided == ["approved"] * 4
        approved = Approvals(saver, store).count(status="approved")  # this store's only
        assert len(runs(runs_file)) == approved


def test_decided_between_record_lookup_and_queue_scan_is_found(
    backend: str,
    saver_factory: Any,
    open_store: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The same decision sent twice by id alone (a retry, a second tab): the first call
    found no record yet, the other's record and resume land before its queue scan, so the
    thread no longer waits. It is that decision, not "no such approval" (CI found this
    once in the sweep race above)."""
    runs_file = tmp_path / "runs"
    with saver_factory() as saver, open_store() as store:
        agent = booking_agent(saver, runs_file)
        user, thread = f"u-{uuid.uuid4().hex[:8]}", f"t-{uuid.uuid4().hex[:8]}"
        approval_id = _interrupt(agent, thread, user, "LH1")
        other = Approvals(saver, store)
        scan = queue_module.Approvals._scan
        interleaved: list[str] = []

        def scan_after_the_other(self: Any, *args: Any) -> Any:
            if self is not other and not interleaved:
                interleaved.append(other.decide(approval_id, "approve", by="r", graph=agent).status)
            return (yield from scan(self, *args))

        monkeypatch.setattr(queue_module.Approvals, "_scan", scan_after_the_other)
        decided = Approvals(saver, store).decide(approval_id, "approve", by="r", graph=agent)
        assert interleaved == ["approved"]
        assert decided.status == "approved"
        assert len(runs(runs_file)) == 1


def test_same_edit_sent_twice_with_tuples_is_the_same_decision(
    backend: str, saver_factory: Any, open_store: Any, tmp_path: Path
) -> None:
    """The record stores JSON: ``("1A",)`` comes back as ``["1A"]``. The same edit sent
    again is still the same decision, not a conflict with itself."""
    user, thread = f"u-{uuid.uuid4().hex[:8]}", f"t-{uuid.uuid4().hex[:8]}"
    with saver_factory() as saver, open_store() as store:
        agent = booking_agent(saver, tmp_path / "runs")
        approval_id = _interrupt(agent, thread, user)
        queue = Approvals(saver, store)
        args = {"flight": "AF9", "seat": "2B", "extras": ("meal", 1)}
        first = queue.decide(approval_id, "edit", by="r", args=args, graph=agent, thread_id=thread)
        again = queue.decide(approval_id, "edit", by="r", args=args, graph=agent, thread_id=thread)
        assert first.status == again.status == "edited"


def test_interrupts_of_one_step_decided_by_tasks_all_resume(
    backend: str, async_saver_factory: Any, open_store: Any, tmp_path: Path
) -> None:
    """The same with asyncio: three interrupts, each decided twice, and two recovers."""
    user, thread = f"u-{uuid.uuid4().hex[:8]}", f"t-{uuid.uuid4().hex[:8]}"
    runs_file = tmp_path / "runs"
    items = ("a", "b", "c")
    cls = open_store.classes[1]
    url, options = open_store.target

    async def main() -> None:
        async with async_saver_factory() as saver, cls.from_conn_string(url, **options) as store:
            await store.setup()
            graph = fan_graph(saver, runs_file, items, delay=0.3)
            config = {"configurable": {"thread_id": thread, "user_id": user}}
            await graph.ainvoke({"done": []}, config)
            queue = Approvals(saver, store)
            pending = await queue.alist(user_id=user)
            assert len(pending) == len(items)
            calls = [
                queue.adecide(a.id, "approve", by="r", graph=graph, thread_id=thread)
                for a in pending * 2
            ]
            results = await asyncio.gather(*calls, queue.arecover(graph), queue.arecover(graph))
            assert [r.status for r in results[:-2]] == ["approved"] * 2 * len(items)
            state = await graph.aget_state(config)
            assert sorted(state.values["done"]) == list(items) and state.next == ()
            assert await queue.alist(user_id=user, status=None) == []
            assert await queue.arecover(graph) == 0

    asyncio.run(main())
    assert sorted(r["item"] for r in runs(runs_file)) == list(items)


def test_a_dead_resume_holds_its_threads_other_interrupts_one_lease_at_most(
    backend: str, saver_factory: Any, open_store: Any, tmp_path: Path
) -> None:
    """A claimant dies after resuming one interrupt of a step (before ``resumed_at``):
    the decision of the step's other interrupt waits for its lease (1 s), then resumes;
    ``recover`` then closes the dead one's record; each tool ran once."""
    user, thread = f"u-{uuid.uuid4().hex[:8]}", f"t-{uuid.uuid4().hex[:8]}"
    runs_file = tmp_path / "runs"
    with saver_factory() as saver, open_store() as store:
        graph = fan_graph(saver, runs_file, ("a", "b"), delay=0)
        config = {"configurable": {"thread_id": thread, "user_id": user}}
        graph.invoke({"done": []}, config)
        queue = Approvals(saver, store, lease=1)
        first, second = sorted(queue.list(user_id=user), key=lambda a: a.value["item"])

        def resumed(op: Any) -> bool:
            return op.op.value is not None and op.op.value.get("resumed_at") is not None

        dying = Approvals(saver, DiesAt(store, resumed, after=False), lease=1)  # type: ignore[arg-type]
        with pytest.raises(Crash):
            dying.decide(first.id, "approve", by="r", graph=graph, thread_id=thread)
        started = time.monotonic()
        out = queue.decide(second.id, "approve", by="r", graph=graph, thread_id=thread)
        assert out.decision is not None and out.decision.resumed_at is not None
        assert time.monotonic() - started < 10
        time.sleep(1.1)
        assert queue.recover(graph) == 1
        state = graph.get_state(config)
        assert sorted(state.values["done"]) == ["a", "b"] and state.next == ()
        assert sorted(r["item"] for r in runs(runs_file)) == ["a", "b"]
        assert queue.list(user_id=user, status=None) == []
