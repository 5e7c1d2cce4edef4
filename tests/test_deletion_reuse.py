"""Deletion stays final when the thread id is used again: by a copy, by a new run that
then expires, by a run under retention; and bad metadata filters never reach a driver.

A deliberate copy onto a deleted id (``copy_thread``, ``copy_threads``) is a new thread:
it is visible, its own runs go on, but the runs that predate the deletion stay refused.
A deleted id reused by a new run that then expires keeps the first deletion's tombstone,
bare and with its own expiry, until that expires: a late write of the deleted run is
refused, a third run works, nothing of the second stays. Under retention, the refusal of
a late write of the deleted run never drops what the new run stored.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest
from langgraph.checkpoint.memory import InMemorySaver

from langgraph_memory_plus.errors import InvalidConfigError
from langgraph_memory_plus.transfer.migration import copy_threads
from tests.test_deletion_final import (
    TTL,
    _checkpoint,
    assert_fresh_run_works,
    assert_gone,
    build,
    cfg,
    inputs,
    small,
    tombstone_faults,
)

pytestmark = pytest.mark.storage

META = {"source": "loop", "step": 5, "parents": {}}


def _values(saver: Any, thread_id: str) -> Any:
    found = saver.get_tuple(cfg(thread_id))
    return None if found is None else found.checkpoint["channel_values"]


def _namespaces(saver: Any, thread_id: str) -> set[str]:
    return {t.config["configurable"]["checkpoint_ns"] for t in saver.list(cfg(thread_id))}


def _late_writes(saver: Any, old: Any) -> None:
    """What a run that began before the deletion still writes: a step's writes, its
    subgraph's first checkpoint (no parent), then its next root checkpoint."""
    late = _checkpoint("late-of-deleted-run")
    at = {"configurable": {**old.config["configurable"], "checkpoint_id": late["id"]}}
    saver.put_writes(at, [("a", "late-write")], "task-late")
    sub_cfg = {
        "configurable": {
            "thread_id": old.config["configurable"]["thread_id"],
            "checkpoint_ns": f"sub:{uuid.uuid4()}",
            "checkpoint_map": {"": late["id"]},
        }
    }
    sub_meta = {"source": "input", "step": -1, "parents": {"": late["id"]}}
    saver.put(sub_cfg, _checkpoint("late-sub"), sub_meta, {"a": "1"})
    saver.put(old.config, late, META, {"a": "9"})


def _assert_no_late_state(saver: Any, thread_id: str) -> None:
    for t in saver.list(cfg(thread_id)):
        assert t.checkpoint["channel_values"].get("a") not in ("late-of-deleted-run", "late-sub")
        assert all(w[2] != "late-write" for w in t.pending_writes or [])


@pytest.mark.parametrize("how", ["copy_thread", "copy_threads"])
def test_a_copy_onto_a_deleted_id_is_a_new_thread(
    saver_factory: Any, storage: Any, how: str
) -> None:
    """Thread ``dst`` ran, was deleted, then ``src`` is copied onto it: the copy is
    visible and whole, the deleted run's late writes stay refused, and a new run on the
    copy keeps everything (subgraphs included), as on ``InMemorySaver``."""
    with saver_factory(**small(storage, ttl=TTL)) as saver:
        src, dst = (f"{p}-{uuid.uuid4().hex[:8]}" for p in ("src", "dst"))
        graph = build(None, is_async=False).compile(checkpointer=saver)
        graph.invoke(inputs("source"), cfg(src))
        graph.invoke(inputs("deleted"), cfg(dst))
        old = saver.get_tuple(cfg(dst))
        saver.delete_thread(dst)
        if how == "copy_thread":
            saver.copy_thread(src, dst)
        else:  # from another saver, under the same thread id
            memory = InMemorySaver()
            build(None, is_async=False).compile(checkpointer=memory).invoke(
                inputs("source"), cfg(dst)
            )
            report = copy_threads(memory, saver, [dst], verify=True)
            assert report.threads == [dst] and report.ok, report
        assert _values(saver, dst) == _values(saver, src)
        assert saver.threads.get(dst) is not None
        _late_writes(saver, old)
        assert _values(saver, dst) == _values(saver, src)
        _assert_no_late_state(saver, dst)
        graph.invoke(inputs("more"), cfg(dst))
        reference = build(None, is_async=False).compile(checkpointer=InMemorySaver())
        reference.invoke(inputs("source"), cfg("r"))
        reference.invoke(inputs("more"), cfg("r"))
        assert graph.get_state(cfg(dst)).values == reference.get_state(cfg("r")).values
        assert any("|inner:" in ns for ns in _namespaces(saver, dst))
        assert saver.threads.get(dst) is not None


BAD_TEXT = ["\ud800", "a\udfffb"]


@pytest.mark.parametrize("text", BAD_TEXT)
def test_lone_surrogates_in_metadata_filters_are_refused(
    saver_factory: Any, storage: Any, text: str
) -> None:
    """A lone surrogate (not valid Unicode) in a filter's key or value is one
    ``InvalidConfigError`` naming it, never a driver's error; the saver stays usable."""
    with saver_factory(**small(storage)) as saver:
        thread_id = f"sur-{uuid.uuid4().hex[:8]}"
        graph = build(None, is_async=False).compile(checkpointer=saver)
        graph.invoke(inputs("x"), cfg(thread_id))
        calls = [
            lambda: list(saver.list(None, filter={"user_id": text})),
            lambda: list(saver.list(cfg(thread_id), filter={text: "x"})),
            lambda: list(saver.list(None, filter={"k": {"nested": [text]}})),
            lambda: saver.threads.search(metadata={"user_id": text}),
            lambda: saver.threads.search(metadata={text: 1}),
        ]
        for call in calls:
            with pytest.raises(InvalidConfigError, match="lone surrogate"):
                call()
        assert saver.get_tuple(cfg(thread_id)) is not None
        assert [t for t in saver.list(None, filter={"user_id": f"user-{thread_id}"})]


def test_a_reused_id_that_expires_keeps_the_first_deletions_tombstone(
    saver_factory: Any, storage: Any
) -> None:
    """Run, delete, run again on the same id with a short TTL, let it expire and sweep:
    nothing of either run is left but the first deletion's bare tombstone (its own
    expiry, no id in clear); a late write of the deleted run is still refused; a third
    run on the id works as on a new thread."""
    thread_id = f"reuse-{uuid.uuid4().hex[:8]}"
    with saver_factory(**small(storage)) as saver:
        graph = build(None, is_async=False).compile(checkpointer=saver)
        graph.invoke(inputs("first"), cfg(thread_id))
        old = saver.get_tuple(cfg(thread_id))
        saver.delete_thread(thread_id)
    with saver_factory(**small(storage, ttl={"default_ttl": 0.02})) as saver:  # 1.2 s
        graph = build(None, is_async=False).compile(checkpointer=saver)
        graph.invoke(inputs("second"), cfg(thread_id))
        assert saver.threads.get(thread_id) is not None
        deadline = time.monotonic() + 10
        while saver.get_tuple(cfg(thread_id)) is not None and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(0.2)  # Redis expires keys itself, a little after their deadline
        saver.sweep_expired()
        assert_gone(saver, thread_id)
        assert tombstone_faults(storage, saver, thread_id) == []
        _late_writes(saver, old)
        assert_gone(saver, thread_id)
        assert tombstone_faults(storage, saver, thread_id) == []
    with saver_factory(**small(storage)) as saver:
        graph = build(None, is_async=False).compile(checkpointer=saver)
        graph.invoke(inputs("third"), cfg(thread_id))
        reference = build(None, is_async=False).compile(checkpointer=InMemorySaver())
        reference.invoke(inputs("third"), cfg("r"))
        assert graph.get_state(cfg(thread_id)).values == reference.get_state(cfg("r")).values
        assert any("|inner:" in ns for ns in _namespaces(saver, thread_id))
        _late_writes(saver, old)
        assert graph.get_state(cfg(thread_id)).values == reference.get_state(cfg("r")).values


@pytest.mark.parametrize("retention", ["keep_last", "prune"])
def test_a_late_refusal_does_not_bury_a_new_runs_subgraphs_under_retention(
    saver_factory: Any, storage: Any, retention: str
) -> None:
    """Run, delete, run again on the id with retention (``keep_last=1``, or ``prune``
    keeping the latest): the new run's root checkpoints its subgraphs hang from are gone.
    A late write of the deleted run is then refused, and must not take the new run's
    subgraph checkpoints with it; the new run's next turn works."""
    options = {"keep_last": 1} if retention == "keep_last" else {}
    with saver_factory(**small(storage, **options)) as saver:
        thread_id = f"bury-{uuid.uuid4().hex[:8]}"
        graph = build(None, is_async=False).compile(checkpointer=saver)
        graph.invoke(inputs("first"), cfg(thread_id))
        old = saver.get_tuple(cfg(thread_id))
        saver.delete_thread(thread_id)
        graph.invoke(inputs("second"), cfg(thread_id))
        if retention == "prune":
            saver.prune([thread_id], strategy="keep_latest")
        before = _namespaces(saver, thread_id)
        state = graph.get_state(cfg(thread_id)).values
        assert any("|inner:" in ns for ns in before)
        _late_writes(saver, old)
        assert _namespaces(saver, thread_id) == before
        assert graph.get_state(cfg(thread_id)).values == state
        _assert_no_late_state(saver, thread_id)
        graph.invoke(inputs("third"), cfg(thread_id))
        reference = build(None, is_async=False).compile(checkpointer=InMemorySaver())
        reference.invoke(inputs("second"), cfg("r"))
        reference.invoke(inputs("third"), cfg("r"))
        assert graph.get_state(cfg(thread_id)).values == reference.get_state(cfg("r")).values


ODD_IDS = ["a.b/c", "用户/会话.1", "nul\x00inside", "x" * 300, " lead and trail "]


@pytest.mark.parametrize("odd", ODD_IDS, ids=["dot-slash", "chinese", "nul", "long", "spaces"])
def test_deletion_is_final_for_any_thread_id(saver_factory: Any, storage: Any, odd: str) -> None:
    """Any string a product uses as a thread id: delete it, its late writes are refused,
    the tombstone is bare, a copy onto it and a fresh run on it work."""
    with saver_factory(**small(storage, ttl=TTL)) as saver:
        thread_id = f"{odd}-{uuid.uuid4().hex[:6]}"
        graph = build(None, is_async=False).compile(checkpointer=saver)
        graph.invoke(inputs("first"), cfg(thread_id))
        old = saver.get_tuple(cfg(thread_id))
        saver.delete_thread(thread_id)
        _late_writes(saver, old)
        assert_gone(saver, thread_id)
        assert tombstone_faults(storage, saver, thread_id) == []
        source = f"src-{uuid.uuid4().hex[:6]}"
        graph.invoke(inputs("source"), cfg(source))
        saver.copy_thread(source, thread_id)
        assert _values(saver, thread_id) == _values(saver, source)
        assert saver.threads.get(thread_id) is not None
        graph.invoke(inputs("more"), cfg(thread_id))
        assert any("|inner:" in ns for ns in _namespaces(saver, thread_id))
        saver.delete_thread(thread_id)
        assert_gone(saver, thread_id)
        assert_fresh_run_works(saver, graph, thread_id)


def test_runs_whose_thread_expires_as_they_write_never_deadlock(
    saver_factory: Any, storage: Any
) -> None:
    """A TTL so short that a run's parallel writes (``Send`` workers, a subgraph) refresh
    or revive an expiring thread all the time: on PostgreSQL two writes refreshing the
    expiry and updating the thread index in opposite orders deadlocked (18 runs in 40).
    Every run succeeds."""
    with saver_factory(**small(storage, ttl={"default_ttl": 0.002})) as saver:  # 0.12 s
        graph = build(None, is_async=False).compile(checkpointer=saver)
        for k in range(12):
            thread_id = f"expiring-{k}-{uuid.uuid4().hex[:6]}"
            graph.invoke(inputs("a"), cfg(thread_id))
            graph.invoke(inputs("b"), cfg(thread_id))
