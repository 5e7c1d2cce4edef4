"""The promises of approvals and task drafts, under concurrency (issue 34).

Exactly once: any number of callers applying one decision (threads, asyncio tasks, two
processes, ``recover()`` beside them) run the tool once; a claimant killed midway is
taken over by ``recover()`` once its lease expired, and not before. A decision finishing
after ``erase_user`` leaves its record anonymized. Copied threads are decided apart.
Task drafts merge concurrent updates and submit once. Every test runs on every backend.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from approvals_support import Clock, _interrupt, booking_agent, runs, started, store_factory
from conftest import _saver_target
from langchain_core.messages import HumanMessage
from langgraph.store.base import PutOp, SearchOp

from langgraph_memory_plus import InvalidConfigError
from langgraph_memory_plus.approvals import (
    ApprovalConflictError,
    Approvals,
    DraftConflictError,
    DraftNotFoundError,
    TaskDrafts,
)
from langgraph_memory_plus.nodes.scope import NamespaceTemplate, Scope
from langgraph_memory_plus.privacy.erasure import erase_user

HERE = Path(__file__).parent
FLIGHT = {"flight": "LH123", "seat": "12A"}


@pytest.fixture
def open_store(backend: str, request: pytest.FixtureRequest) -> Any:
    return store_factory(backend, request)


def _records(store: Any) -> list[Any]:
    (items,) = store.batch([SearchOp(("approvals", "decisions"), None, 1000, 0)])
    return list(items)


def _last_message(agent: Any, thread: str) -> str:
    state = agent.get_state({"configurable": {"thread_id": thread}})
    return str(state.values["messages"][-1].content)


# -- 1. exactly once --------------------------------------------------------------------


def test_one_decision_from_many_threads_resumes_once(
    backend: str, saver_factory: Any, open_store: Any, tmp_path: Path
) -> None:
    user, thread = f"u-{uuid.uuid4().hex[:8]}", f"t-{uuid.uuid4().hex[:8]}"
    runs_file = tmp_path / "runs"
    with saver_factory() as saver, open_store() as store:
        agent = booking_agent(saver, runs_file, delay=0.5)
        approval_id = _interrupt(agent, thread, user)
        queue = Approvals(saver, store)
        barrier = threading.Barrier(8)
        outcomes: list[Any] = []

        def call(what: str) -> None:
            barrier.wait()
            try:
                if what == "recover":
                    outcomes.append(("recovered", queue.recover(agent)))
                elif what == "other":  # a different decision while the tool runs
                    deadline = time.monotonic() + 30
                    while not started(runs_file) and time.monotonic() < deadline:
                        time.sleep(0.01)
                    queue.decide(approval_id, "reject", by="other", graph=agent, thread_id=thread)
                else:
                    out = queue.decide(approval_id, "approve", by="r", graph=agent)
                    outcomes.append(out.status)
            except ApprovalConflictError as exc:
                outcomes.append(exc)

        workers = [
            threading.Thread(target=call, args=(w,))
            for w in ["approve"] * 5 + ["recover"] * 2 + ["other"]
        ]
        for w in workers:
            w.start()
        for w in workers:
            w.join(60)
        assert runs(runs_file) == [FLIGHT]  # the tool ran once
        assert outcomes.count("approved") == 5
        assert sum(isinstance(o, ApprovalConflictError) for o in outcomes) == 1
        done = queue.get(approval_id, thread_id=thread)
        assert done.status == "approved" and done.decision and done.decision.resumed_at
        assert _last_message(agent, thread) == "done: booked LH123 seat 12A"
        assert queue.recover(agent) == 0
        assert runs(runs_file) == [FLIGHT]


def test_one_decision_from_many_tasks_resumes_once(
    backend: str, async_saver_factory: Any, open_store: Any, tmp_path: Path
) -> None:
    user, thread = f"u-{uuid.uuid4().hex[:8]}", f"t-{uuid.uuid4().hex[:8]}"
    runs_file = tmp_path / "runs"
    cls = open_store.classes[1]
    url, options = open_store.target

    async def main() -> None:
        async with async_saver_factory() as saver, cls.from_conn_string(url, **options) as store:
            await store.setup()
            agent = booking_agent(saver, runs_file, delay=0.5)
            config = {"configurable": {"thread_id": thread, "user_id": user}}
            out = await agent.ainvoke({"messages": [HumanMessage("book LH123", id="h1")]}, config)
            approval_id = out["__interrupt__"][0].id
            queue = Approvals(saver, store)
            calls = [
                queue.adecide(approval_id, "approve", by="r", graph=agent, thread_id=thread)
                for _ in range(12)
            ]
            results = await asyncio.gather(
                *calls, queue.arecover(agent), queue.arecover(agent), return_exceptions=True
            )
            assert [getattr(r, "status", r) for r in results[:12]] == ["approved"] * 12
            assert all(isinstance(r, int) for r in results[12:]), results
            assert await queue.arecover(agent) == 0

    asyncio.run(main())
    assert runs(runs_file) == [FLIGHT]


def _decider(
    backend: str, storage: Any, store_options: dict[str, Any], runs_file: Path, thread: str
) -> Any:
    def spawn(approval_id: str, delay: float, lease: float) -> subprocess.Popen[str]:
        args = [
            backend,
            _saver_target(storage),
            json.dumps(storage.options),
            json.dumps(store_options),
            str(runs_file),
            thread,
            approval_id,
            str(delay),
            str(lease),
        ]
        proc = subprocess.Popen(
            [sys.executable, str(HERE / "approvals_support.py"), "decide", *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=HERE,
        )
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready", proc.stderr
        return proc

    return spawn


def test_one_decision_from_two_processes_and_recover_resumes_once(
    backend: str,
    saver_factory: Any,
    open_store: Any,
    request: pytest.FixtureRequest,
    tmp_path: Path,
) -> None:
    user, thread = f"u-{uuid.uuid4().hex[:8]}", f"t-{uuid.uuid4().hex[:8]}"
    runs_file = tmp_path / "runs"
    storage = request.getfixturevalue("storage")
    spawn = _decider(backend, storage, open_store.target[1], runs_file, thread)
    with saver_factory() as saver, open_store() as store:
        agent = booking_agent(saver, runs_file)
        approval_id = _interrupt(agent, thread, user)
        procs = [spawn(approval_id, 1.5, 600) for _ in range(2)]
        for proc in procs:  # both go at once
            assert proc.stdin is not None
            proc.stdin.write("go\n")
            proc.stdin.flush()
        queue = Approvals(saver, store)
        recovered = 0
        deadline = time.monotonic() + 60
        while any(p.poll() is None for p in procs) and time.monotonic() < deadline:
            recovered += queue.recover(agent)  # a replica starting meanwhile
            time.sleep(0.05)
        outs = [p.communicate(timeout=60) for p in procs]
        assert [p.returncode for p in procs] == [0, 0], [err for _, err in outs]
        assert [json.loads(out.splitlines()[-1])[0] for out, _ in outs] == ["approved"] * 2
        assert recovered == 0
        assert runs(runs_file) == [FLIGHT]
        assert len(started(runs_file)) == 1
        assert queue.get(approval_id, thread_id=thread).decision.resumed_at  # type: ignore[union-attr]


def test_claimant_killed_midway_is_recovered_once_after_its_lease(
    backend: str,
    saver_factory: Any,
    open_store: Any,
    request: pytest.FixtureRequest,
    tmp_path: Path,
) -> None:
    user, thread = f"u-{uuid.uuid4().hex[:8]}", f"t-{uuid.uuid4().hex[:8]}"
    runs_file = tmp_path / "runs"
    storage = request.getfixturevalue("storage")
    spawn = _decider(backend, storage, open_store.target[1], runs_file, thread)
    with saver_factory() as saver, open_store() as store:
        agent = booking_agent(saver, runs_file)
        approval_id = _interrupt(agent, thread, user)
        proc = spawn(approval_id, 60, 30)  # a tool that takes a minute; a 30 s lease
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()
        deadline = time.monotonic() + 60
        while not started(runs_file) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert started(runs_file) == [str(proc.pid)]
        os.kill(proc.pid, signal.SIGKILL)  # dies inside the tool
        proc.communicate(timeout=30)

        clock = Clock()
        queue = Approvals(saver, store, clock=clock)
        assert queue.recover(agent) == 0  # its lease is live: not taken over
        again = queue.decide(approval_id, "approve", by="r", graph=agent, thread_id=thread)
        assert again.status == "approved" and again.decision and again.decision.resumed_at is None
        assert runs(runs_file) == []
        clock.now += timedelta(seconds=31)  # the lease has expired
        assert queue.recover(agent) == 1
        assert runs(runs_file) == [FLIGHT]
        assert _last_message(agent, thread) == "done: booked LH123 seat 12A"
        assert queue.recover(agent) == 0
        queue.decide(approval_id, "approve", by="r", graph=agent, thread_id=thread)
        assert runs(runs_file) == [FLIGHT]


# -- 4. erasure while a decision resumes ------------------------------------------------


def test_decision_finishing_after_erasure_stays_anonymized(
    backend: str, saver_factory: Any, open_store: Any, tmp_path: Path
) -> None:
    user, thread = f"u-{uuid.uuid4().hex[:8]}@example.com", f"t-{uuid.uuid4().hex[:8]}"
    iban = "DE89370400440532013000"
    runs_file = tmp_path / "runs"
    with saver_factory() as saver, open_store() as store:
        agent = booking_agent(saver, runs_file, delay=1.5)
        approval_id = _interrupt(agent, thread, user)
        queue = Approvals(saver, store)
        errors: list[BaseException] = []

        def decide() -> None:
            try:
                queue.decide(
                    approval_id, "edit", by="r", args={"flight": iban, "seat": "1A"}, graph=agent
                )
            except Exception as exc:  # the thread is erased under it: whatever it says
                errors.append(exc)

        worker = threading.Thread(target=decide)
        worker.start()
        deadline = time.monotonic() + 30
        while not started(runs_file) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert started(runs_file)  # the tool is running now
        report = erase_user(
            user, checkpointer=saver, store=store, namespaces=(), tombstone_hours=None
        )
        assert report.counts["approvals_anonymized"] == 1
        worker.join(60)
        records = _records(store)
        assert len(records) == 1
        dumped = json.dumps([(r.key, r.value) for r in records], ensure_ascii=False)
        for secret in (user, thread, iban):
            assert secret not in dumped
        assert records[0].value["resumed_at"] is not None  # and still marked done


# -- 6. any string as a user id ---------------------------------------------------------

USER_IDS = ["alice@example.com", "+49 170 1234567", str(uuid.uuid4()), "张三", "a/b.c%2E"]


def test_any_user_id_works_for_drafts_and_approvals(
    backend: str, saver_factory: Any, open_store: Any, tmp_path: Path
) -> None:
    tag = uuid.uuid4().hex[:6]
    schema = {"type": "object", "required": ["iban"], "properties": {"iban": {"type": "string"}}}
    with saver_factory() as saver, open_store() as store:
        drafts = TaskDrafts(store, schema)
        agent = booking_agent(saver, tmp_path / "runs")
        queue = Approvals(saver, store)
        namespaces = set()
        for n, base in enumerate(USER_IDS):
            user = f"{base}-{tag}"
            draft = drafts.create(user, "refund")
            drafts.update(user, draft.id, {"iban": "DE1"})
            assert [d.id for d in drafts.list(user)] == [draft.id]
            namespaces.add(drafts.namespace_for(user))
            # The profile injector's drafts source finds them under the same namespace.
            shown = NamespaceTemplate(drafts.namespace).resolve(
                Scope(None, configurable={"user_id": user})
            )
            assert shown == drafts.namespace_for(user)
            assert drafts.submit(user, draft.id).status == "submitted"
            thread = f"t{n}-{tag}"
            approval_id = _interrupt(agent, thread, user)
            (listed,) = queue.list(user_id=user)
            assert (listed.id, listed.user_id) == (approval_id, user)
            queue.decide(approval_id, "approve", by="r", graph=agent, thread_id=thread)
            report = erase_user(
                user, checkpointer=saver, store=store, namespaces=(), tombstone_hours=None
            )
            assert report.counts["approvals_anonymized"] == 1
            assert queue.list(user_id=user, status="approved") == []
        assert len(namespaces) == len(USER_IDS)  # one-to-one
        assert ("users", f"alice@example%2Ecom-{tag}", "pending_tasks") in namespaces
        dumped = json.dumps([r.value for r in _records(store)], ensure_ascii=False)
        assert not any(f"{base}-{tag}" in dumped for base in USER_IDS)


# -- 9. copied threads ------------------------------------------------------------------


def test_copied_thread_is_decided_on_its_own(
    backend: str, saver_factory: Any, open_store: Any, tmp_path: Path
) -> None:
    user, thread = f"u-{uuid.uuid4().hex[:8]}", f"t-{uuid.uuid4().hex[:8]}"
    runs_file = tmp_path / "runs"
    with saver_factory() as saver, open_store() as store:
        agent = booking_agent(saver, runs_file)
        approval_id = _interrupt(agent, thread, user)
        saver.copy_thread(thread, f"{thread}-copy")
        queue = Approvals(saver, store)
        pending = queue.list(user_id=user)
        assert sorted((a.id, a.thread_id) for a in pending) == [
            (approval_id, thread),
            (approval_id, f"{thread}-copy"),
        ]
        queue.decide(approval_id, "approve", by="r", graph=agent, thread_id=thread)
        copy = queue.get(approval_id, thread_id=f"{thread}-copy")
        assert (copy.status, copy.decision) == ("pending", None)
        assert [a.thread_id for a in queue.list(user_id=user)] == [f"{thread}-copy"]
        out = queue.decide(
            approval_id, "reject", by="r2", message="no", graph=agent, thread_id=f"{thread}-copy"
        )
        assert out.status == "rejected"
        assert runs(runs_file) == [FLIGHT]  # the original's tool only
        assert queue.list(user_id=user) == []
        assert queue.get(approval_id, thread_id=thread).status == "approved"

        # A record of an earlier version (keyed by the interrupt id alone) still counts,
        # for its own thread only.
        legacy_thread = f"{thread}-legacy"
        legacy_id = _interrupt(agent, legacy_thread, user, "AF1")
        old = queue.get(legacy_id, thread_id=legacy_thread)
        value = {
            "approval_id": legacy_id,
            "thread_id": legacy_thread,
            "user_id": user,
            "decision": "reject",
            "by": "old",
            "decided_at": old.created_at.isoformat(),
            "resumed_at": None,
            "status": "rejected",
        }
        store.batch([PutOp(("approvals", "decisions"), legacy_id, value)])
        assert queue.get(legacy_id, thread_id=legacy_thread).status == "rejected"
        with pytest.raises(ApprovalConflictError, match="old"):
            queue.decide(legacy_id, "approve", by="r", graph=agent, thread_id=legacy_thread)
        assert queue.recover(agent) == 1  # resumed with the legacy decision, once
        assert queue.get(legacy_id, thread_id=legacy_thread).decision.resumed_at  # type: ignore[union-attr]
        assert runs(runs_file) == [FLIGHT]


# -- 17, 18. order and options ----------------------------------------------------------


def test_decided_approvals_page_oldest_first(
    backend: str, saver_factory: Any, open_store: Any, tmp_path: Path
) -> None:
    user = f"u-{uuid.uuid4().hex[:8]}"
    clock = Clock()
    with saver_factory() as saver, open_store() as store:
        agent = booking_agent(saver, tmp_path / "runs")
        queue = Approvals(saver, store, clock=clock)
        ids = [_interrupt(agent, f"{user}-{i}", user, f"LH{i}") for i in range(4)]
        for i, approval_id in enumerate(ids):
            clock.now += timedelta(minutes=1)
            queue.decide(approval_id, "approve", by="r", graph=agent, thread_id=f"{user}-{i}")
        listed = queue.list(user_id=user, status="approved")
        assert [a.id for a in listed] == ids
        pages = [queue.list(user_id=user, status="approved", limit=1, offset=i) for i in range(4)]
        assert [p[0].id for p in pages] == ids
        assert queue.count(user_id=user, status="approved") == 4


@pytest.mark.parametrize(
    "option, value",
    [
        ("window", float("nan")),
        ("window", float("inf")),
        ("window", -1),
        ("window", 0),
        ("window", "24h"),
        ("window", True),
        ("window", timedelta(seconds=-5)),
        ("lease", float("nan")),
        ("lease", float("-inf")),
        ("lease", None),
    ],
)
def test_bad_windows_are_one_clear_error(
    saver_factory: Any, open_store: Any, option: str, value: Any
) -> None:
    expected = rf"^{option} must be a positive, finite"
    with (
        saver_factory() as saver,
        open_store() as store,
        pytest.raises(InvalidConfigError, match=expected),
    ):
        Approvals(saver, store, **{option: value})


# -- 13. task drafts under concurrency --------------------------------------------------

FIELDS = [f"f{i}" for i in range(8)]
SCHEMA = {
    "type": "object",
    "required": FIELDS,
    "properties": {f: {"type": "string"} for f in FIELDS},
}


def test_drafts_concurrent_updates_merge_and_one_submit_wins(backend: str, open_store: Any) -> None:
    user = f"u-{uuid.uuid4().hex[:8]}@example.com"
    with open_store() as store:
        drafts = TaskDrafts(store, SCHEMA)
        for _trial in range(3):
            draft = drafts.create(user, "form")
            start = threading.Barrier(len(FIELDS))

            def update(name: str, draft_id: str = draft.id, barrier: Any = start) -> None:
                barrier.wait()
                drafts.update(user, draft_id, {name: name.upper()})

            workers = [threading.Thread(target=update, args=(f,)) for f in FIELDS]
            for w in workers:
                w.start()
            for w in workers:
                w.join(30)
            got = drafts.get(user, draft.id)
            assert got is not None and got.fields == {f: f.upper() for f in FIELDS}
            assert got.missing == []

            outcomes: list[Any] = []
            go = threading.Barrier(6)

            def submit(
                draft_id: str = draft.id, barrier: Any = go, outcomes: Any = outcomes
            ) -> None:
                barrier.wait()
                try:
                    outcomes.append(drafts.submit(user, draft_id).status)
                except (DraftConflictError, DraftNotFoundError) as exc:
                    outcomes.append(exc)

            workers = [threading.Thread(target=submit) for _ in range(6)]
            for w in workers:
                w.start()
            for w in workers:
                w.join(30)
            assert outcomes.count("submitted") == 1, outcomes
            assert len(outcomes) == 6
            assert drafts.list(user) == []


def test_drafts_concurrent_tasks_merge_and_one_submit_wins(backend: str, open_store: Any) -> None:
    user = f"u-{uuid.uuid4().hex[:8]}.张三"
    cls = open_store.classes[1]
    url, options = open_store.target

    async def main() -> None:
        async with cls.from_conn_string(url, **options) as store:
            await store.setup()
            drafts = TaskDrafts(store, SCHEMA)
            for _trial in range(3):
                draft = await drafts.acreate(user, "form")
                await asyncio.gather(
                    *(drafts.aupdate(user, draft.id, {f: f.upper()}) for f in FIELDS)
                )
                got = await drafts.aget(user, draft.id)
                assert got is not None and got.fields == {f: f.upper() for f in FIELDS}
                results = await asyncio.gather(
                    *(drafts.asubmit(user, draft.id) for _ in range(6)), return_exceptions=True
                )
                won = [r for r in results if not isinstance(r, BaseException)]
                assert len(won) == 1 and won[0].status == "submitted"
                lost = [r for r in results if isinstance(r, BaseException)]
                assert all(isinstance(r, (DraftConflictError, DraftNotFoundError)) for r in lost)
                assert any(isinstance(r, DraftConflictError) for r in lost)
                assert await drafts.alist(user) == []

    asyncio.run(main())
