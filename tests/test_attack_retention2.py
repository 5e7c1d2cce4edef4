"""Retention and late pending writes, a second attacker's finds, on every backend.

LangGraph stores a task's pending writes on background threads, so a write may land after
its checkpoint was trimmed (``keep_last``, ``prune``), deleted with its run
(``delete_for_runs``) or expired with its thread (``ttl``). ``test_attack_retention_writes``
covers the trims; these tests cover the rest, and real graphs (``DeltaChannel`` values,
interrupts, forks) under ``keep_last`` and ``prune``.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from typing import Any

import pytest
from conftest import SaverFactory, Storage
from graphs import DeltaState, fan_graph, human, reply, team_graph
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt
from test_attack_retention_writes import _small, orphans, stored
from test_postgres_saver import cfg, make_checkpoint

pytestmark = pytest.mark.storage

TTL_MINUTES = 0.005  # 0.3 s


@pytest.mark.parametrize("late", ["put_writes", "put"])
def test_a_late_write_does_not_bring_back_an_expired_thread(
    saver_factory: SaverFactory, storage: Storage, late: str
) -> None:
    """An expired thread is never returned. A write after its expiry starts it over, and
    used to drop only what sorted before the written checkpoint: a late write (to a
    checkpoint ``keep_last`` had trimmed) or a late put (an older checkpoint id) left the
    newer, expired checkpoints stored and visible again, with their writes (PostgreSQL,
    SQLite; Redis expires the keys whole). Failed before on both."""
    tid = f"ttl-{uuid.uuid4().hex}"
    with saver_factory(keep_last=1, ttl={"default_ttl": TTL_MINUTES}, **_small(storage)) as saver:
        early = make_checkpoint({"a": 0}, {"a": 0})  # its id sorts before the others'
        first = saver.put(cfg(tid), make_checkpoint({"a": 1}), {"step": 0}, {"a": 1})
        second = saver.put(first, make_checkpoint({"a": 2}, {"a": 2}), {"step": 1}, {"a": 2})
        saver.put_writes(second, [("a", 3)], "done")
        time.sleep(TTL_MINUTES * 60 + 0.3)
        assert saver.get_tuple(cfg(tid)) is None
        if late == "put_writes":
            saver.put_writes(first, [("a", 6)], "late")  # first: trimmed by second's put
            assert saver.get_tuple(cfg(tid)) is None
            assert saver.get_tuple(second) is None
            assert list(saver.list(cfg(tid))) == []
            assert saver.threads.get(tid) is None
            return
        revived = saver.put(cfg(tid), early, {"step": 5}, {"a": 0})
        found = saver.get_tuple(cfg(tid))
        assert found is not None and found.config == revived and found.pending_writes == []
        assert saver.get_tuple(second) is None
        assert [t.config for t in saver.list(cfg(tid))] == [revived]
        assert stored(storage, saver, tid)[1] == set()


def _run_of(saver: Any, tid: str, run_id: str, parent: Any, value: int) -> Any:
    checkpoint = make_checkpoint({"a": value}, {"a": value})
    return saver.put(parent, checkpoint, {"step": value, "run_id": run_id}, {"a": value})


@pytest.mark.xfail(
    strict=True,
    reason="delete_for_runs cannot tell a late write to a checkpoint it deleted (newer than "
    "every checkpoint left) from a write that comes before its checkpoint's put: both name "
    "an id above everything stored, so neither delete_for_runs nor prune takes it; it stays "
    "until a later checkpoint's trim passes it, or the thread is deleted (see the test below)",
)
def test_a_late_write_to_a_run_deleted_by_delete_for_runs_is_collected(
    saver_factory: SaverFactory, storage: Storage
) -> None:
    tid = f"runs-{uuid.uuid4().hex}"
    with saver_factory(**_small(storage)) as saver:
        first = _run_of(saver, tid, "r1", cfg(tid), 1)
        second = _run_of(saver, tid, "r2", first, 2)
        saver.put_writes(second, [("a", 5)], "on-time")
        saver.delete_for_runs(["r2"])
        assert orphans(storage, saver, tid) == set()  # what came on time goes with it
        saver.put_writes(second, [("a", 6)], "late")
        saver.prune([tid])
        assert orphans(storage, saver, tid) == set()


@pytest.mark.xfail(
    strict=True,
    reason="delete_for_runs (the LangGraph server's rollback) leaves no tombstone: a put the "
    "deleted run still had on its way (LangGraph stores checkpoints in the background) is "
    "stored as the thread's latest checkpoint, its parent gone; a deleted thread refuses "
    "such a put (live_after), a deleted run does not",
)
def test_a_late_put_of_a_run_deleted_by_delete_for_runs_is_refused(
    saver_factory: SaverFactory, storage: Storage
) -> None:
    tid = f"runs-{uuid.uuid4().hex}"
    with saver_factory(**_small(storage)) as saver:
        first = _run_of(saver, tid, "r1", cfg(tid), 1)
        second = _run_of(saver, tid, "r2", first, 2)
        saver.delete_for_runs(["r2"])
        _run_of(saver, tid, "r2", second, 3)
        found = saver.get_tuple(cfg(tid))
        assert found is not None and found.config == first


def test_a_late_write_to_a_deleted_run_goes_with_the_next_trim_past_it(
    saver_factory: SaverFactory, storage: Storage
) -> None:
    """The bound of the xfail above: once the thread moves on, the trim whose floor passes
    the late write takes it (``keep_last``, and ``prune``), and nothing reads it before."""
    tid = f"runs-{uuid.uuid4().hex}"
    with saver_factory(keep_last=2, **_small(storage)) as saver:
        first = _run_of(saver, tid, "r1", cfg(tid), 1)
        second = _run_of(saver, tid, "r2", first, 2)
        saver.delete_for_runs(["r2"])
        saver.put_writes(second, [("a", 6)], "late")
        found = saver.get_tuple(cfg(tid))
        assert found is not None and found.config == first and found.pending_writes == []
        third = _run_of(saver, tid, "r3", first, 3)
        fourth = _run_of(saver, tid, "r3", third, 4)
        assert orphans(storage, saver, tid) == set()
        kept = {("", c["configurable"]["checkpoint_id"]) for c in (third, fourth)}
        assert stored(storage, saver, tid)[0] == kept


@pytest.mark.parametrize(
    "tid_head",
    ["plain", "a.b/c", "线程", "tab\tand space", "nul\x00{tag}"],
    ids=["plain", "dots", "cjk", "space", "nul-braces"],
)
def test_late_writes_of_a_trimmed_checkpoint_change_neither_status_nor_other_namespaces(
    saver_factory: SaverFactory, storage: Storage, tid_head: str
) -> None:
    """A late interrupt write to a checkpoint ``keep_last`` trimmed does not make the
    thread interrupted, and the trim's key range stays inside its namespace: writes of
    namespaces whose names extend it (``|``, ``:``) or sort around it are untouched, and
    what the trim of their own namespace keeps is read back."""
    tid = f"{tid_head}-{uuid.uuid4().hex}"
    spaces = ["", "sub", "sub|x", "sub:1", "sub:1|inner:2", "a"]
    with saver_factory(keep_last=1, **_small(storage)) as saver:
        heads = {
            ns: saver.put(cfg(tid, ns), make_checkpoint({"a": 1}), {}, {"a": 1}) for ns in spaces
        }
        for ns in spaces:
            saver.put_writes(heads[ns], [("a", ns)], "early")
        latest = saver.put(heads["sub"], make_checkpoint({"a": 2}, {"a": 2}), {}, {"a": 2})
        saver.put_writes(heads["sub"], [("__interrupt__", "late")], "late")
        saver.put_writes(heads[""], [("a", "root")], "task")
        root = saver.put(heads[""], make_checkpoint({"a": 2}, {"a": 2}), {"step": 1}, {"a": 2})
        saver.put_writes(heads[""], [("__interrupt__", "stop")], "late")
        record = saver.threads.get(tid)
        assert record is not None and record["status"] == "idle"
        saver.prune([tid])
        assert orphans(storage, saver, tid) == set()
        record = saver.threads.get(tid)
        assert record is not None and record["status"] == "idle"
        for ns in spaces:
            want = {"": root, "sub": latest}.get(ns, heads[ns])
            found = saver.get_tuple(want)
            assert found is not None, ns
            writes = [] if ns in ("", "sub") else [("early", "a", ns)]
            assert found.pending_writes == writes, ns


# -- real graphs -------------------------------------------------------------------------


def _gated() -> Any:
    """A ``DeltaChannel`` graph whose every turn waits for a human (an interrupt)."""

    def model(state: DeltaState) -> dict[str, Any]:
        items = f"item-{len(state.get('items', []))}"
        return {"messages": [reply(state["messages"], prefix="d")], "items": [items]}

    def gate(state: DeltaState) -> dict[str, Any]:
        return {"items": [f"answer-{interrupt('ok?')}"], "turns": 1}

    builder = StateGraph(DeltaState)
    builder.add_node("model", model)
    builder.add_node("gate", gate)
    builder.add_edge(START, "model")
    builder.add_edge("model", "gate")
    builder.add_edge("gate", END)
    return builder


def _scenario(app: Any, tid: str, back: int, prune: Any) -> list[Any]:
    """Turns (each interrupted, then resumed), ``prune(status)`` after each half, then a
    fork from the listed checkpoint ``back`` steps back (``update_state``), run on and
    resumed, then a turn, and a run again from ``back`` steps back (time travel)."""
    config = {"configurable": {"thread_id": tid}}
    seen: list[Any] = []
    for turn in range(3):
        app.invoke({"messages": [human(f"hi {turn}", f"h{turn}")]}, config)
        prune("interrupted")
        seen.append(app.get_state(config).values)
        app.invoke(Command(resume=turn), config)
        prune("idle")
        seen.append(app.get_state(config).values)
    old = list(app.get_state_history(config))[back]
    forked = app.update_state(old.config, {"items": ["forked"]})
    seen.append(app.get_state(forked).values)
    app.invoke(None, forked)
    app.invoke(Command(resume="f"), config)
    seen.append(app.get_state(config).values)
    app.invoke({"messages": [human("again", "ha")]}, config)
    seen.append(app.get_state(config).values)
    app.invoke(Command(resume="z"), config)
    seen.append(app.get_state(config).values)
    for step in list(app.get_state_history(config))[: back + 1]:
        seen.append(step.values)
    old = list(app.get_state_history(config))[back]
    app.invoke(None, old.config)  # time travel: run again from there
    prune("interrupted" if app.get_state(config).next else "idle")
    seen.append(app.get_state(config).values)
    app.invoke(Command(resume="t"), config)
    seen.append(app.get_state(config).values)
    return seen


@pytest.mark.parametrize("keep", [1, 2])
@pytest.mark.parametrize("prune", [False, True], ids=["keep_last", "and-prune"])
def test_delta_graph_with_interrupts_and_forks_under_retention_matches_memory(
    saver_factory: SaverFactory, storage: Storage, keep: int, prune: bool
) -> None:
    """Every state read along the way equals LangGraph's in-memory saver's (which keeps
    everything), the thread's status follows its interrupts through every trim and prune,
    and no write of a deleted checkpoint is left at the end."""
    back = 0 if prune else keep - 1
    memory = _gated().compile(checkpointer=InMemorySaver())
    expected = _scenario(memory, "t", back, lambda status: None)
    tid = f"delta-{uuid.uuid4().hex}"
    with saver_factory(keep_last=keep, **_small(storage)) as saver:

        def pruned(status: str) -> None:
            if prune:
                saver.prune([tid])
            record = saver.threads.get(tid)
            assert record is not None and record["status"] == status

        got = _scenario(_gated().compile(checkpointer=saver), tid, back, pruned)
        assert got == expected
        if prune:
            saver.prune([tid])
        assert orphans(storage, saver, tid) == set()


def _plain(result: dict[str, Any]) -> dict[str, Any]:
    """A run's result without its interrupts' ids (they derive from checkpoint ids)."""
    return {k: [i.value for i in v] if k == "__interrupt__" else v for k, v in result.items()}


def _team_and_fan(checkpointer: Any, tid: str, after: Any) -> list[Any]:
    """A nested subgraph interrupted (namespace ``sub:<id>|inner:<id>``), then resumed,
    and a superstep whose one task failed after its sibling's writes were stored, then
    retried; ``after(name)`` runs between each failure or interrupt and its sequel. What
    each run returned, its state and how often each node ran."""
    calls: Counter[str] = Counter()
    team = team_graph(calls, nested=True).compile(checkpointer=checkpointer)
    config: Any = {"configurable": {"thread_id": f"{tid}-team"}}
    out: list[Any] = [_plain(team.invoke({"messages": [human("go", "g1")]}, config))]
    after(config["configurable"]["thread_id"])
    out += [team.invoke(Command(resume="yes"), config), team.get_state(config).values]
    failing = {"flaky": True}
    fan = fan_graph(calls, failing).compile(checkpointer=checkpointer)
    config = {"configurable": {"thread_id": f"{tid}-fan"}, "max_concurrency": 1}
    with pytest.raises(ValueError):
        fan.invoke({"request": "r"}, config)
    after(config["configurable"]["thread_id"])
    failing["flaky"] = False
    out += [fan.invoke(None, config), fan.get_state(config).values, dict(calls)]
    return out


@pytest.mark.parametrize("keep", [1, 2])
def test_subgraph_interrupts_and_failed_supersteps_resume_through_keep_last_and_prune(
    saver_factory: SaverFactory, storage: Storage, keep: int
) -> None:
    """The interrupted subgraph's checkpoint and writes (in its own namespaces), and the
    writes a failed superstep's finished sibling stored, survive ``keep_last`` and a
    ``prune`` in between: the resumed runs return what LangGraph's in-memory saver's do,
    and no finished node runs again."""
    expected = _team_and_fan(InMemorySaver(), "t", lambda tid: None)
    tid = f"team-{uuid.uuid4().hex}"
    with saver_factory(keep_last=keep, **_small(storage)) as saver:
        got = _team_and_fan(saver, tid, lambda thread_id: saver.prune([thread_id]))
        assert got == expected
        for suffix in ("-team", "-fan"):
            # a subgraph's writes may land after its namespace's last put (see below)
            saver.prune([tid + suffix])
            assert orphans(storage, saver, tid + suffix) == set()


@pytest.mark.xfail(
    strict=True,
    reason="keep_last trims only the namespace of the put: a finished subgraph's namespace "
    "(sub:<task id>, one per parent task) gets no later put, so a write that lands after "
    "its last put trimmed the checkpoint it names (a resumed subgraph's last task; seen in "
    "real runs of team_graph) stays until prune or the thread's deletion, whatever the "
    "root namespace's puts trim",
)
def test_a_late_write_in_a_finished_subgraph_namespace_is_collected_by_keep_last(
    saver_factory: SaverFactory, storage: Storage
) -> None:
    tid = f"subns-{uuid.uuid4().hex}"
    with saver_factory(keep_last=1, **_small(storage)) as saver:
        root = saver.put(cfg(tid), make_checkpoint({"a": 1}), {"step": 0}, {"a": 1})
        first = saver.put(cfg(tid, "sub:1"), make_checkpoint({"b": 1}), {"step": 0}, {"b": 1})
        saver.put(first, make_checkpoint({"b": 2}, {"b": 2}), {"step": 1}, {"b": 2})
        saver.put_writes(first, [("b", 3)], "late")  # its task's write, after the last put
        for step in range(1, 4):
            root = saver.put(root, make_checkpoint({"a": step}, {"a": step}), {}, {"a": step})
        assert orphans(storage, saver, tid) == set()
