"""Human approvals read from the thread index: the restart test and every decision path.

Every test runs on every backend (PostgreSQL, Redis, Redis Cluster, SQLite) with real
savers, real stores and a real ``create_agent`` behind ``HumanInTheLoopMiddleware``.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from approvals_support import Clock, _interrupt, booking_agent, runs, store_factory
from conftest import _saver_target
from langchain_core.messages import HumanMessage, ToolMessage

from langgraph_memory_plus import InvalidConfigError
from langgraph_memory_plus.approvals import (
    ApprovalConflictError,
    ApprovalExpiredError,
    Approvals,
    DecisionNotAllowedError,
    parse_request,
)

HERE = Path(__file__).parent


@pytest.fixture
def open_store(backend: str, request: pytest.FixtureRequest) -> Any:
    return store_factory(backend, request)


def _messages(agent: Any, thread: str, user: str) -> list[Any]:
    config = {"configurable": {"thread_id": thread, "user_id": user}}
    return list(agent.get_state(config).values["messages"])


def test_restart_approve_runs_the_tool_exactly_once(
    backend: str,
    saver_factory: Any,
    open_store: Any,
    request: pytest.FixtureRequest,
    tmp_path: Path,
) -> None:
    storage = request.getfixturevalue("storage")
    url, options = _saver_target(storage), dict(storage.options)
    user, thread = f"u-{uuid.uuid4().hex[:8]}", f"t-{uuid.uuid4().hex[:8]}"
    runs_file = tmp_path / "runs.jsonl"
    proc = subprocess.run(
        [
            sys.executable,
            str(HERE / "approvals_support.py"),
            backend,
            url,
            json.dumps(options),
            str(runs_file),
            thread,
            user,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=HERE,
    )
    assert proc.returncode == -9, proc.stderr  # died with SIGKILL after the interrupt
    interrupt_id = proc.stdout.strip()
    assert runs(runs_file) == []

    # Process B: a new saver and store, nothing carried over but the storage.
    with saver_factory() as saver, open_store() as store:
        queue = Approvals(saver, store)
        pending = queue.list(user_id=user)
        assert [(a.id, a.thread_id, a.user_id, a.status) for a in pending] == [
            (interrupt_id, thread, user, "pending")
        ]
        (approval,) = pending
        assert (approval.kind, approval.action, approval.args) == (
            "hitl",
            "book_flight",
            {"flight": "LH123", "seat": "12A"},
        )
        assert approval.allowed_decisions == ("approve", "reject", "edit")
        assert approval.expires_at - approval.created_at == timedelta(hours=24)
        assert queue.count(user_id=user) == 1
        assert queue.count(user_id=user, action="other_tool") == 0

        agent = booking_agent(saver, runs_file)
        done = queue.decide(approval.id, "approve", by="reviewer-1", graph=agent)
        assert done.status == "approved" and done.decision is not None
        assert done.decision.by == "reviewer-1" and done.decision.resumed_at is not None
        assert runs(runs_file) == [{"flight": "LH123", "seat": "12A"}]
        messages = _messages(agent, thread, user)
        assert messages[-1].content == "done: booked LH123 seat 12A"
        assert [m.id for m in messages].count("h1") == 1  # continued, not started over
        assert queue.list(user_id=user) == []
        record = saver.threads.get(thread)
        assert record is not None and record["status"] == "idle"

        # Deciding again (a retry, a second click) changes nothing and runs nothing.
        again = queue.decide(approval.id, "approve", by="reviewer-1", graph=agent, thread_id=thread)
        assert again.status == "approved"
        with pytest.raises(ApprovalConflictError, match="reviewer-1"):
            queue.decide(approval.id, "reject", by="reviewer-2", graph=agent, thread_id=thread)
        assert len(runs(runs_file)) == 1

        # The decision record outlives the thread (audit).
        saver.delete_thread(thread)
        audit = queue.list(user_id=user, status="approved")
        assert [(a.id, a.decision.by, a.action) for a in audit if a.decision] == [
            (interrupt_id, "reviewer-1", "book_flight")
        ]


def test_reject_and_edit(backend: str, saver_factory: Any, open_store: Any, tmp_path: Path) -> None:
    user = f"u-{uuid.uuid4().hex[:8]}"
    runs_file = tmp_path / "runs.jsonl"
    with saver_factory() as saver, open_store() as store:
        agent = booking_agent(saver, runs_file)
        queue = Approvals(saver, store)
        rejected = _interrupt(agent, f"{user}-r", user, "LH1")
        edited = _interrupt(agent, f"{user}-e", user, "LH2")
        listed = queue.list(user_id=user)
        assert [a.id for a in listed] == [rejected, edited]  # oldest first
        assert [a.id for a in queue.list(user_id=user, limit=1, offset=1)] == [edited]

        with pytest.raises(DecisionNotAllowedError, match="edit needs the new arguments"):
            queue.decide(edited, "edit", by="r", graph=agent, thread_id=f"{user}-e")
        with pytest.raises(DecisionNotAllowedError, match="unknown decision"):
            queue.decide(edited, "maybe", by="r", graph=agent, thread_id=f"{user}-e")

        out = queue.decide(rejected, "reject", by="r", message="too expensive", graph=agent)
        assert out.status == "rejected"
        last = _messages(agent, f"{user}-r", user)
        tool_message = next(m for m in last if isinstance(m, ToolMessage))
        assert "too expensive" in str(tool_message.content)

        out = queue.decide(
            edited, "edit", by="r", args={"flight": "LH2", "seat": "1A"}, graph=agent
        )
        assert out.status == "edited"
        assert runs(runs_file) == [{"flight": "LH2", "seat": "1A"}]
        assert queue.count(user_id=user) == 0
        assert {a.id for a in queue.list(user_id=user, status="rejected")} == {rejected}


def test_decision_not_allowed_by_the_review_config(
    backend: str, saver_factory: Any, open_store: Any, tmp_path: Path
) -> None:
    user = f"u-{uuid.uuid4().hex[:8]}"
    with saver_factory() as saver, open_store() as store:
        agent = booking_agent(saver, tmp_path / "runs", allowed=("approve", "reject"))
        queue = Approvals(saver, store)
        approval_id = _interrupt(agent, f"{user}-t", user)
        with pytest.raises(DecisionNotAllowedError, match=r"allows \['approve', 'reject'\]"):
            queue.decide(
                approval_id, "edit", by="r", args={"flight": "X", "seat": "1"}, graph=agent
            )
        assert queue.get(approval_id).status == "pending"  # nothing recorded


def test_expiry(backend: str, saver_factory: Any, open_store: Any, tmp_path: Path) -> None:
    user = f"u-{uuid.uuid4().hex[:8]}"
    clock = Clock()
    with saver_factory() as saver, open_store() as store:
        agent = booking_agent(saver, tmp_path / "runs")
        queue = Approvals(saver, store, window=timedelta(hours=2), clock=clock)
        old = [_interrupt(agent, f"{user}-{i}", user) for i in range(3)]
        clock.now += timedelta(hours=3)
        assert [a.status for a in queue.list(user_id=user, status=None)] == ["expired"] * 3
        assert queue.count(user_id=user) == 0
        assert queue.count(user_id=user, status="expired") == 3
        with pytest.raises(ApprovalExpiredError):
            queue.decide(old[0], "approve", by="r", graph=agent)
        fresh = _interrupt(agent, f"{user}-new", user)
        fresh_at = queue.get(fresh, thread_id=f"{user}-new").created_at
        # Just before the fresh one's end: the three older ones are overdue, it is not.
        clock.now = fresh_at + timedelta(hours=2) - timedelta(milliseconds=1)
        told: list[str] = []
        progress: list[int] = []
        marked = queue.expire_overdue(
            batch_size=2, on_expired=lambda a: told.append(a.id), progress=progress.append
        )
        # Other tests' interrupted threads on this storage may be marked too (in this
        # test's own store); this test's are the ones checked.
        assert set(old) <= set(told) and fresh not in told and marked == len(told)
        assert progress and progress == sorted(progress) and progress[-1] == marked
        assert queue.expire_overdue() == 0  # resumable: a second run finds nothing left
        assert queue.get(fresh, thread_id=f"{user}-new").status == "pending"
        clock.now += timedelta(milliseconds=2)
        assert queue.expire_overdue(on_expired=lambda a: told.append(a.id)) >= 1
        assert fresh in told
        # Marked expired for good: even a clock back within the window refuses it now.
        clock.now = fresh_at
        with pytest.raises(ApprovalExpiredError):
            queue.decide(fresh, "approve", by="r", graph=agent)
        assert [a.status for a in queue.list(user_id=user, status="expired")] == ["expired"] * 4
        assert runs(tmp_path / "runs") == []


def test_concurrent_decisions_one_wins(
    backend: str, saver_factory: Any, open_store: Any, tmp_path: Path
) -> None:
    user = f"u-{uuid.uuid4().hex[:8]}"
    runs_file = tmp_path / "runs"
    with saver_factory() as saver:
        approval_id = _interrupt(booking_agent(saver, runs_file), f"{user}-t", user)
    barrier = threading.Barrier(2)
    outcomes: list[Any] = []

    def reviewer(name: str, decision: str) -> None:
        with saver_factory() as saver, open_store() as store:
            queue = Approvals(saver, store)
            agent = booking_agent(saver, runs_file)
            approval = queue.get(approval_id, thread_id=f"{user}-t")
            barrier.wait()
            try:
                outcomes.append(queue.decide(approval, decision, by=name, graph=agent).status)
            except ApprovalConflictError as exc:
                outcomes.append(exc)

    threads = [
        threading.Thread(target=reviewer, args=a) for a in (("a", "approve"), ("b", "reject"))
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(outcomes) == 2
    won = [o for o in outcomes if isinstance(o, str)]
    lost = [o for o in outcomes if isinstance(o, ApprovalConflictError)]
    assert len(won) == 1 and len(lost) == 1
    assert len(runs(runs_file)) == (1 if won == ["approved"] else 0)


def test_crash_between_decision_and_resume(
    backend: str, saver_factory: Any, open_store: Any, tmp_path: Path
) -> None:
    user = f"u-{uuid.uuid4().hex[:8]}"
    runs_file = tmp_path / "runs"
    with saver_factory() as saver, open_store() as store:
        agent = booking_agent(saver, runs_file)
        approval_id = _interrupt(agent, f"{user}-t", user)

        class Crash(Exception):
            pass

        class Dying:
            def invoke(self, *args: Any) -> Any:
                raise Crash  # the process dies right after the record is written

        queue = Approvals(saver, store)
        with pytest.raises(Crash):
            queue.decide(approval_id, "approve", by="r", graph=Dying())
        assert runs(runs_file) == []
        state = queue.get(approval_id, thread_id=f"{user}-t")
        assert state.status == "approved" and state.decision and state.decision.resumed_at is None
        # Another reviewer cannot overturn it; the recovery finishes it.
        with pytest.raises(ApprovalConflictError):
            queue.decide(approval_id, "reject", by="other", graph=agent)
    with saver_factory() as saver, open_store() as store:
        agent = booking_agent(saver, runs_file)
        queue = Approvals(saver, store)
        assert queue.recover(agent) >= 1
        assert runs(runs_file) == [{"flight": "LH123", "seat": "12A"}]
        # Re-applying it once more (say both recovery and the reviewer retried): still once.
        queue.decide(approval_id, "approve", by="r", graph=agent, thread_id=f"{user}-t")
        assert queue.recover(agent) == 0
        assert len(runs(runs_file)) == 1


def test_ttl_shorter_than_the_window_is_a_configuration_error(
    saver_factory: Any, open_store: Any
) -> None:
    with saver_factory(ttl={"default_ttl": 60 * 30}) as saver, open_store() as store:
        with pytest.raises(
            InvalidConfigError, match=r"TTL \(1800 minutes\).*window \(1440 minutes\)"
        ):
            Approvals(saver, store)
        Approvals(saver, store, window=timedelta(hours=20))  # 30 h >= 1.5 x 20 h
    with saver_factory(ttl={"default_ttl": 60 * 36}) as saver, open_store() as store:
        Approvals(saver, store)  # exactly 1.5 x 24 h


def test_async_restart_free_path(
    backend: str, async_saver_factory: Any, open_store: Any, tmp_path: Path
) -> None:
    user = f"u-{uuid.uuid4().hex[:8]}"
    runs_file = tmp_path / "runs"
    cls = open_store.classes[1]
    url, options = open_store.target

    async def main() -> None:
        async with async_saver_factory() as saver, cls.from_conn_string(url, **options) as store:
            await store.setup()
            agent = booking_agent(saver, runs_file, mode="per_call")
            config = {"configurable": {"thread_id": f"{user}-t", "user_id": user}}
            await agent.ainvoke({"messages": [HumanMessage("book AF9", id="h1")]}, config)
            queue = Approvals(saver, store)
            (approval,) = await queue.alist(user_id=user)
            assert (approval.kind, approval.action) == ("tool_approval", "book_flight")
            assert await queue.acount(user_id=user, action="book_flight") == 1
            out = await queue.adecide(approval, "approve", by="r", graph=agent)
            assert out.status == "approved"
            assert await queue.alist(user_id=user) == []
            assert await queue.aexpire_overdue() >= 0

    asyncio.run(main())
    assert runs(runs_file) == [{"flight": "AF9", "seat": "12A"}]


def test_request_shapes() -> None:
    kind, actions = parse_request(
        [
            {
                "action_request": {"action": "send_email", "args": {"to": "a@b"}},
                "config": {
                    "allow_accept": True,
                    "allow_edit": False,
                    "allow_ignore": True,
                    "allow_respond": False,
                },
                "description": "check",
            }
        ]
    )
    assert kind == "agent_inbox"
    assert (actions[0].name, actions[0].args, actions[0].allowed_decisions) == (
        "send_email",
        {"to": "a@b"},
        ("approve", "reject"),
    )
    assert parse_request({"question": "why?"}) == ("raw", ())


# -- task drafts ----------------------------------------------------------------------

import re  # noqa: E402

from langchain.agents import create_agent  # noqa: E402
from langchain_core.messages import AIMessage, BaseMessage, SystemMessage  # noqa: E402
from messages_support import ScriptedModel  # noqa: E402
from pydantic import BaseModel, Field  # noqa: E402

from langgraph_memory_plus.approvals.drafts import (  # noqa: E402
    DraftIncompleteError,
    TaskDrafts,
)
from langgraph_memory_plus.nodes.drafts import create_draft_tools, drafts_source  # noqa: E402
from langgraph_memory_plus.nodes.profile import ProfileInjector  # noqa: E402


class Cancellation(BaseModel):
    flight: str
    passport_number: str
    refund_method: str = Field(pattern="^(card|voucher)$")
    note: str | None = None


class DraftModel(ScriptedModel):
    """Starts a cancellation draft, fills it over later conversations, submits it."""

    inputs: list[list[BaseMessage]] = Field(default_factory=list)

    def bind_tools(self, tools: Any, **kwargs: Any) -> DraftModel:  # type: ignore[override]
        return self

    def reply(self, messages: list[BaseMessage]) -> AIMessage:
        self.inputs.append(list(messages))
        human = next(m for m in reversed(messages) if isinstance(m, HumanMessage))
        text = str(human.content)
        shown = " ".join(str(m.content) for m in messages if isinstance(m, SystemMessage))
        draft = (re.findall(r"\((draft-[0-9a-f]+)\)", shown) or [""])[0]
        last = messages[-1]
        done = [m.name for m in messages[messages.index(human) :] if isinstance(m, ToolMessage)]

        def call(name: str, args: dict[str, Any]) -> AIMessage:
            return AIMessage(
                "",
                id=f"{human.id}-{name}",
                tool_calls=[{"name": name, "args": args, "id": f"{human.id}-{name}"}],
            )

        if text.startswith("cancel") and not done:
            return call(
                "start_task_draft", {"kind": "cancellation", "fields": {"flight": text.split()[-1]}}
            )
        if text.startswith("passport") and not done:
            return call(
                "update_task_draft",
                {"draft_id": draft, "fields": {"passport_number": text.split()[-1]}},
            )
        if text.startswith("refund") and not done:
            return call(
                "update_task_draft",
                {"draft_id": draft, "fields": {"refund_method": text.split()[-1]}},
            )
        if text.startswith("refund") and done == ["update_task_draft"]:
            return call("submit_task_draft", {"draft_id": draft})
        return AIMessage(f"noted: {last.content}", id=f"{human.id}-answer")


def test_three_conversation_cancellation(backend: str, saver_factory: Any, open_store: Any) -> None:
    user = f"u-{uuid.uuid4().hex[:8]}"
    clock = Clock()
    with saver_factory() as saver, open_store() as store:
        drafts = TaskDrafts(store, {"cancellation": Cancellation}, clock=clock)
        injector = ProfileInjector(sources=[drafts_source(drafts)])
        model = DraftModel()
        agent = create_agent(
            model,
            create_draft_tools(drafts),
            system_prompt="You help.",
            middleware=[injector.middleware("frozen")],
            checkpointer=saver,
            store=store,
        )

        def talk(day: int, text: str) -> list[Any]:
            clock.now += timedelta(hours=20)
            config = {"configurable": {"thread_id": f"{user}-day{day}", "user_id": user}}
            model.inputs.clear()
            out = agent.invoke({"messages": [HumanMessage(text, id=f"h{day}")]}, config)
            return list(out["messages"])

        talk(1, "cancel LH123")
        (draft,) = drafts.list(user)
        assert (draft.kind, draft.fields, draft.missing_labels) == (
            "cancellation",
            {"flight": "LH123"},
            ["passport number", "refund method"],
        )

        talk(2, "passport X1234")
        # The open draft was shown once per model call, with what it still needs.
        for seen in model.inputs:
            shown = [
                m for m in seen if isinstance(m, SystemMessage) and "still needed" in str(m.content)
            ]
            assert len(shown) == 1
            assert (
                f"cancellation ({draft.id}): flight: LH123; "
                "still needed: passport number, refund method" in str(shown[0].content)
            )
        assert drafts.get(user, draft.id).missing_labels == ["refund method"]  # type: ignore[union-attr]

        with pytest.raises(DraftIncompleteError, match="refund method"):
            drafts.submit(user, draft.id)
        messages = talk(3, "refund card")
        tool_results = [str(m.content) for m in messages if isinstance(m, ToolMessage)]
        assert tool_results[-1] == f"Submitted draft {draft.id!r} (cancellation)."
        assert drafts.list(user) == []  # submitted: no longer pending, never shown again
        assert "still needed" not in str(talk(4, "hello")[-1].content)
        assert all("Open tasks" not in str(m.content) for seen in model.inputs for m in seen)


def test_drafts_expire_and_tools_report_errors(saver_factory: Any, open_store: Any) -> None:
    user = f"u-{uuid.uuid4().hex[:8]}"
    clock = Clock()
    with open_store() as store:
        drafts = TaskDrafts(store, {"cancellation": Cancellation}, clock=clock)
        old = drafts.create(user, "cancellation", {"flight": "LH1"})
        with pytest.raises(InvalidConfigError, match="no field"):
            drafts.update(user, old.id, {"colour": "red"})
        with pytest.raises(InvalidConfigError, match="unknown draft kind"):
            drafts.create(user, "refund")
        bad = drafts.create(
            user, "cancellation", {"flight": "A", "passport_number": "P", "refund_method": "cash"}
        )
        with pytest.raises(DraftIncompleteError, match="refund_method"):
            drafts.submit(user, bad.id)
        drafts.cancel(user, bad.id)
        clock.now += timedelta(hours=71)
        assert [d.id for d in drafts.list(user)] == [old.id]
        clock.now += timedelta(hours=2)  # 73 h: gone, and never shown
        assert drafts.list(user) == [] and drafts.get(user, old.id) is None
        source = drafts_source(drafts)
        (items,) = store.batch(
            [
                __import__("langgraph.store.base").store.base.SearchOp(
                    drafts.namespace_for(user), None, 10, 0, refresh_ttl=False
                )
            ]
        )
        assert source.entries is not None and source.entries(items) == []
        update = create_draft_tools(drafts)[1]
        message = update.invoke(
            {
                "type": "tool_call",
                "id": "c1",
                "name": "update_task_draft",
                "args": {"draft_id": old.id, "fields": {"flight": "X"}},
            },
            {"configurable": {"user_id": user}},
        )
        assert message.status == "error" and "no open draft" in str(message.content)
        # A JSON schema works as well as a pydantic model.
        json_drafts = TaskDrafts(
            store,
            {"type": "object", "required": ["iban"], "properties": {"iban": {"type": "string"}}},
        )
        draft = json_drafts.create(user, "refund")
        assert draft.missing_labels == ["iban"]
        assert (
            json_drafts.submit(user, json_drafts.update(user, draft.id, {"iban": "DE1"}).id).status
            == "submitted"
        )
