"""Seeded random operation sequences on real graphs, ours against ``InMemorySaver``.

Each sequence plays the same random operations on one graph compiled twice, with our saver and
with LangGraph's ``InMemorySaver``, and after every operation compares what the graph shows
(state, next nodes, interrupts, the whole history) through the saver that wrote it *and* through
a fresh saver on the same storage, which shows what was actually stored. The operations are the
ones that broke list memory before: in-place edits (returned or not) followed by forks from
older checkpoints, edits of objects ``get_state`` returned (of the latest checkpoint and of
older ones read by id, which are built from the items a saver remembers), ``copy_thread``
followed by different edits on both copies, ``Send`` fan-out, interrupts in parallel
branches, a two-level subgraph, deletion of a thread while a run of it (a subgraph and
``Send`` workers next) is under way (nothing of it may come back; later runs on the thread
id match a new thread's), list channels of dicts, tuples, bytes and pydantic models that
also shrink, both durability modes, and restarts with ``keep_last`` cycling through None, 1
and 3.

The seed differs per run (``LGMP_FUZZ_SEED`` fixes it) and a failure names it.
"""

from __future__ import annotations

import copy
import operator
import os
import random
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated, Any

import pytest
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.types import Command, Send, interrupt
from pydantic import BaseModel
from typing_extensions import TypedDict

from langgraph_memory_plus import FencedWriteError

pytestmark = pytest.mark.storage

SEQUENCES = int(os.environ.get("LGMP_FUZZ_SEQUENCES", "3"))
STEPS = int(os.environ.get("LGMP_FUZZ_STEPS", "14"))
BASE_SEED = int(os.environ.get("LGMP_FUZZ_SEED", str(random.SystemRandom().randrange(1 << 30))))


class Note(BaseModel):
    text: str
    tags: list[str] = []


class State(TypedDict, total=False):
    messages: Annotated[list[AnyMessage], add_messages]
    items: Annotated[list[Any], operator.add]
    bag: list[Any]  # replaced whole: grows and shrinks
    plan: dict[str, Any]  # what this step's nodes should do


class Sub(TypedDict, total=False):
    messages: Annotated[list[AnyMessage], add_messages]


def _inner() -> Any:
    def deep(state: Sub) -> dict[str, Any]:
        n = len(state["messages"])
        return {"messages": [AIMessage(f"deep {n}", id=f"deep-{n}")]}

    b = StateGraph(Sub)
    b.add_node("deep", deep)
    b.add_edge(START, "deep")
    return b.compile()


def _middle() -> Any:
    def mid(state: Sub) -> dict[str, Any]:
        n = len(state["messages"])
        return {"messages": [AIMessage(f"mid {n}", id=f"mid-{n}")]}

    b = StateGraph(Sub)
    b.add_node("mid", mid)
    b.add_node("inner", _inner())
    b.add_edge(START, "mid")
    b.add_edge("mid", "inner")
    return b.compile()


# Runs held inside ``model`` (by thread id) while the test deletes their thread.
PAUSED: dict[str, tuple[threading.Event, threading.Event]] = {}


def build_graph() -> StateGraph:
    def model(state: State, config: RunnableConfig) -> dict[str, Any]:
        held = PAUSED.get(config["configurable"]["thread_id"])
        if held is not None:
            inside, go_on = held
            inside.set()
            assert go_on.wait(20)
        plan = state.get("plan") or {}
        messages = state["messages"]
        out: list[Any] = []
        n = len(messages)
        edit = plan.get("edit")
        if edit is not None and messages:
            target = messages[edit % n]
            kind = plan.get("edit_kind", "field")
            if kind == "field":
                target.content = f"edited@{n}"
                out.append(target)
            elif kind == "nested":
                target.additional_kwargs["note"] = f"nested@{n}"
                out.append(target)
            else:  # reassigned, not returned
                target.content = f"silent@{n}"
        out.append(AIMessage(f"answer {n}", id=f"ai-{plan.get('tag', n)}"))
        update: dict[str, Any] = {"messages": out}
        bag = list(state.get("bag") or [])
        if plan.get("shrink") and bag:
            bag = bag[: len(bag) // 2]
        else:
            bag.append(Note(text=f"note {n}", tags=["a", str(n)]))
        update["bag"] = bag
        return update

    def route(state: State) -> Any:
        plan = state.get("plan") or {}
        sends: list[Any] = [Send("worker", {"k": k}) for k in range(plan.get("fan", 0))]
        if plan.get("review"):
            sends += ["review_a", "review_b"]
        if plan.get("sub"):
            sends.append("sub")
        return sends or END

    def worker(arg: dict[str, Any]) -> dict[str, Any]:
        k = arg["k"]
        values: list[Any] = [{"k": k, "nested": {"x": [k]}}, ("t", k), f"b{k}".encode()]
        return {"items": [values[k % 3]]}

    def review(name: str) -> Any:
        def node(state: State) -> dict[str, Any]:
            answer = interrupt({"review": name, "n": len(state["messages"])})
            return {"items": [{"reviewed": name, "answer": answer}]}

        return node

    b = StateGraph(State)
    b.add_node("model", model)
    b.add_node("worker", worker)
    b.add_node("review_a", review("a"))
    b.add_node("review_b", review("b"))
    b.add_node("sub", _middle())
    b.add_edge(START, "model")
    b.add_conditional_edges("model", route, ["worker", "review_a", "review_b", "sub", END])
    return b


def _plain(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return (type(value).__name__, _plain(value.model_dump()))
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, [_plain(v) for v in value])
    return value


def observe(graph: Any, config: dict[str, Any]) -> Any:
    """What a user sees of a thread: state, next, interrupts, and the whole history."""
    state = graph.get_state(config, subgraphs=True)
    states = list(graph.get_state_history(config))
    history = [
        (_plain(s.values), list(s.next), s.metadata.get("step"), s.metadata.get("source"))
        for s in states
    ]
    return {
        "values": _plain(state.values),
        "next": list(state.next),
        "interrupts": sorted(str(i.value) for i in state.interrupts),
        "history": history,
        # every checkpoint read by id (time travel), newest first, after the history
        "by_id": [_plain(graph.get_state(s.config).values) for s in states],
    }


def latest(graph: Any, config: dict[str, Any]) -> Any:
    state = graph.get_state(config)
    return {"values": _plain(state.values), "next": list(state.next)}


def _copy_in_memory(saver: InMemorySaver, source: str, target: str) -> None:
    """``copy_thread`` for the reference, which has none: the same records, renamed."""
    for ns, checkpoints in list(saver.storage[source].items()):
        saver.storage[target][ns] = dict(checkpoints)
    for (tid, ns, cid), writes in list(saver.writes.items()):
        if tid == source:
            saver.writes[(target, ns, cid)] = dict(writes)
    for (tid, ns, ch, v), blob in list(saver.blobs.items()):
        if tid == source:
            saver.blobs[(target, ns, ch, v)] = blob


class Sequence:
    """One random sequence, played on both savers step by step."""

    def __init__(self, seed: int, factory: Any, fence: bool = False) -> None:
        self.rng = random.Random(seed)
        self.seed = seed
        self.factory = factory
        self.fence = fence
        self.reference = InMemorySaver()
        self.threads = [f"fz-{uuid.uuid4()}"]
        self.keep_last: int | None = None
        self.turn = 0
        self.log: list[str] = []
        self.written: set[str] = set()  # threads run since the last restart

    def cfg(self, thread: str) -> dict[str, Any]:
        return {"configurable": {"thread_id": thread}}

    def run_cfg(self, config: Any) -> Any:
        """A run's config: with the fence on, a run id of its own (as the server gives),
        which takes the thread's fence at the run's start (the reference ignores it)."""
        return {**config, "run_id": uuid.uuid4()} if self.fence else config

    def plan(self, durability: str) -> dict[str, Any]:
        """What the next run's nodes do. In-place edits only with ``durability="sync"``:
        with ``"exit"`` LangGraph serializes a step's checkpoint after later steps ran, so
        ``InMemorySaver`` itself stores later edits in it, which we don't copy."""
        r = self.rng
        self.turn += 1
        plan: dict[str, Any] = {"tag": self.turn}
        if durability == "sync" and r.random() < 0.35:
            plan["edit"] = r.randrange(1000)
            plan["edit_kind"] = r.choice(["field", "nested", "silent"])
        if r.random() < 0.3:
            plan["fan"] = r.randint(1, 4)
        if r.random() < 0.2:
            plan["review"] = True
        if r.random() < 0.2:
            plan["sub"] = True
        if r.random() < 0.2:
            plan["shrink"] = True
        return plan

    def step(self, ours: Any, ref: Any) -> None:
        r = self.rng
        thread = r.choice(self.threads)
        config = self.cfg(thread)
        pending = ref.get_state(config).interrupts
        op = r.random()
        durability = r.choice(["sync", "exit"])
        self.log.append(f"{thread[-6:]} op={op:.2f} {durability} pending={len(pending)}")
        if pending:
            # Resume every pending interrupt (parallel branches) at once, each by its id.
            self._both(ours, ref, config, None, durability, resume=f"ok{self.turn}")
        elif op < 0.5 or (len(self.threads) == 1 and op < 0.7):
            text = f"question {self.turn} " + "x" * r.randrange(60)
            message = HumanMessage(text, id=f"h-{self.turn}")
            inputs = {"messages": [message], "plan": self.plan(durability)}
            self._both(ours, ref, config, inputs, durability)
        elif op < 0.7:
            # Fork from an older checkpoint, after whatever edits came since.
            history = list(ref.get_state_history(config))
            ours_history = list(ours.get_state_history(config))
            if len(ours_history) > 1:
                i = r.randrange(1, len(ours_history))
                step = ours_history[i].metadata.get("step")
                match = [s for s in history if s.metadata.get("step") == step]
                if match and _plain(match[0].values) == _plain(ours_history[i].values):
                    inputs = {"messages": [HumanMessage(f"fork {self.turn}", id=f"f-{self.turn}")],
                              "plan": self.plan(durability)}  # fmt: skip
                    self.written.add(thread)
                    ours.invoke(copy.deepcopy(inputs), self.run_cfg(ours_history[i].config),
                                durability=durability)  # fmt: skip
                    ref.invoke(inputs, self.run_cfg(match[0].config), durability=durability)
        elif op < 0.8:
            # Edit what get_state returned, of the latest and of an older checkpoint read
            # by id, every way there is: nothing may change.
            back = r.randrange(8)
            for graph in (ours, ref):
                states = list(graph.get_state_history(config))[: back + 1]
                reads = [graph.get_state(config)]
                if states:
                    reads.append(graph.get_state(states[-1].config))
                for values in (state.values for state in reads):
                    for m in values.get("messages", []):
                        m.content = "tampered"
                        m.additional_kwargs["tampered"] = True
                    for note in values.get("bag", []):
                        note.tags.append("tampered")
                    values.get("items", []).append("tampered")
        elif op < 0.85:
            new = f"fz-{uuid.uuid4()}"
            ours.checkpointer.copy_thread(thread, new)
            _copy_in_memory(self.reference, thread, new)
            self.threads.append(new)
        elif op >= 0.88 and list(ref.get_state_history(config)):
            self._delete_midway(ours, ref, thread)
        else:
            n = self.turn
            update = {"messages": [AIMessage(f"patched {n}", id=f"ai-{n - 1}")]}
            self.written.add(thread)
            ours.update_state(config, copy.deepcopy(update), as_node="model")
            ref.update_state(config, update, as_node="model")

    def _delete_midway(self, ours: Any, ref: Any, thread: str) -> None:
        """Delete the thread while a run of it (a subgraph and ``Send`` workers next) is
        inside its first node. Nothing of that run may come back, in any namespace or
        in the thread index; the reference, which has no tombstone, deletes the thread
        after the run. Later runs on the thread id are compared as on a new thread."""
        r = self.rng
        durability = r.choice(["sync", "async", "exit"])
        self.log.append(f"delete midway {durability}")
        plan = {**self.plan("sync"), "sub": True, "fan": r.randint(1, 3), "review": False}
        text = f"doomed {self.turn}"
        inputs = {"messages": [HumanMessage(text, id=f"d-{self.turn}")], "plan": plan}
        inside, go_on = threading.Event(), threading.Event()
        PAUSED[thread] = (inside, go_on)
        errors: list[BaseException] = []

        def run() -> None:
            try:
                ours.invoke(inputs, self.run_cfg(self.cfg(thread)), durability=durability)
            except BaseException as exc:  # reported below
                errors.append(exc)

        runner = threading.Thread(target=run)
        runner.start()
        try:
            assert inside.wait(20), "the run never reached its first node"
            ours.checkpointer.delete_thread(thread)
        finally:
            go_on.set()
            runner.join(30)
            del PAUSED[thread]
        # With the fence on, deletion removed the run's fence: its next write is refused
        # (FencedWriteError, no owner now) and the run stops, instead of being dropped.
        assert all(
            self.fence and isinstance(e, FencedWriteError) and e.current_owner is None
            for e in errors
        ), errors
        ref.checkpointer.delete_thread(thread)
        self.written.discard(thread)
        saver = ours.checkpointer
        assert list(saver.list(self.cfg(thread))) == []
        assert saver.threads.get(thread) is None
        assert thread not in [t["thread_id"] for t in saver.threads.search(limit=1000)]

    def _both(
        self,
        ours: Any,
        ref: Any,
        config: dict[str, Any],
        inputs: Any,
        durability: str,
        resume: str | None = None,
    ) -> None:
        self.written.add(config["configurable"]["thread_id"])
        for graph in (ours, ref):
            given = copy.deepcopy(inputs)  # nodes edit messages in place
            if resume is not None:
                interrupts = graph.get_state(config).interrupts
                answers = {i.id: f"{resume}-{i.value['review']}" for i in interrupts}
                given = Command(resume=answers)
            graph.invoke(given, self.run_cfg(config), durability=durability)

    def check(self, ours: Any, ref: Any, fresh: Any) -> None:
        for thread in self.threads:
            config = self.cfg(thread)
            if self.keep_last is None:
                expected = observe(ref, config)
                assert observe(ours, config) == expected
                assert observe(fresh, config) == expected
            else:
                expected = latest(ref, config)
                assert latest(ours, config) == expected
                assert latest(fresh, config) == expected
                # Retention holds from a thread's next write; a skipped fork (no older
                # checkpoint matched) writes nothing, so it is not counted as one.
                if thread in self.written:
                    root = [t for t in ours.checkpointer.list(config)
                            if t.config["configurable"]["checkpoint_ns"] == ""]  # fmt: skip
                    assert 1 <= len(root) <= self.keep_last

    def run(self) -> None:
        builder = build_graph()
        ref = builder.compile(checkpointer=self.reference)
        for segment in range(3):
            with self.factory(keep_last=self.keep_last, fence=self.fence) as saver:
                ours = builder.compile(checkpointer=saver)
                for _ in range(STEPS // 3):
                    self.step(ours, ref)
                    with self.factory() as other:
                        self.check(ours, ref, builder.compile(checkpointer=other))
            # A restart, perhaps with another retention: once trimmed, history is ours.
            if segment < 2 and self.rng.random() < 0.5:
                self.keep_last = self.rng.choice([1, 3])
                self.log.append(f"restart keep_last={self.keep_last}")
            self.written.clear()


@contextmanager
def _named(sequence: Sequence) -> Iterator[None]:
    try:
        yield
    except BaseException as exc:
        raise AssertionError(
            f"differential sequence failed; rerun with LGMP_FUZZ_SEED={sequence.seed}; "
            f"operations: {sequence.log}"
        ) from exc


@pytest.mark.parametrize(
    "n, fence",
    # one more sequence with the fence on (fence=True, every run with a run id): the
    # fence changes nothing a single writer sees
    [*((n, False) for n in range(SEQUENCES)), (SEQUENCES, True)],
    ids=[*(str(n) for n in range(SEQUENCES)), "fence"],
)
def test_random_sequences_match_in_memory_saver(saver_factory: Any, n: int, fence: bool) -> None:
    seed = BASE_SEED + n
    print(f"LGMP_FUZZ_SEED={seed}")
    sequence = Sequence(seed, saver_factory, fence)
    with _named(sequence):
        sequence.run()


# -- pending writes: the order InMemorySaver gives (issue 34) --------------------------------
# InMemorySaver returns a checkpoint's pending writes sorted by ``writes_sort_key`` with the
# task path of the call that stored each write; ours kept one path per task, so a task's
# writes stored by calls with different paths came back in another order.

_MSG, _ERR = [("messages", 1)], [("__error__", "x")]
_PUT_WRITES_CASES: dict[str, list[tuple[list[tuple[str, Any]], str, str]]] = {
    "error after writes, other path": [(_MSG, "t1", ""), (_ERR, "t1", "p")],
    "error after writes, same path": [(_MSG, "t1", "p"), (_ERR, "t1", "p")],
    "error then writes, other path": [(_ERR, "t1", "q"), (_MSG, "t1", "")],
    "special replaced by another path": [
        ([("__error__", "x"), ("messages", 1)], "t1", "a"),
        ([("__error__", "y")], "t1", "z"),
        ([("messages", 2), ("other", 3)], "t1", ""),  # a regular write stored stays
    ],
    "two tasks": [([("messages", 1)], "t2", "p"), ([("__error__", "x")], "t1", "p")],
}


def _pending(saver: Any, config: Any) -> list[tuple[str, str, Any]]:
    found = saver.get_tuple(config)
    return [tuple(w) for w in found.pending_writes]


@pytest.mark.parametrize("case", list(_PUT_WRITES_CASES))
def test_pending_writes_order_matches_in_memory_saver(saver_factory: Any, case: str) -> None:
    from langgraph.checkpoint.base import empty_checkpoint

    def play(saver: Any) -> list[tuple[str, str, Any]]:
        config = {"configurable": {"thread_id": f"pw-{uuid.uuid4()}", "checkpoint_ns": ""}}
        stored = saver.put(config, empty_checkpoint(), {}, {})
        for writes, task_id, path in _PUT_WRITES_CASES[case]:
            saver.put_writes(stored, writes, task_id, path)
        return _pending(saver, stored)

    expected = play(InMemorySaver())
    with saver_factory() as saver:
        assert play(saver) == expected


def _failing_graph(failing: str) -> Any:
    """``ok`` writes and ends first; ``failing`` (named to sort before or after it) raises."""

    def ok(state: State) -> dict[str, Any]:
        return {"messages": [AIMessage("ok", id="ok")], "items": ["ok"]}

    def fail(state: State) -> dict[str, Any]:
        import time

        time.sleep(0.05)  # after ok's writes are stored: LangGraph drops late ones
        raise ValueError("boom")

    b = StateGraph(State)
    b.add_node("ok", ok)
    b.add_node(failing, fail)
    b.add_edge(START, "ok")
    b.add_edge(START, failing)
    return b


@pytest.mark.parametrize("failing", ["a_fails", "z_fails"])
def test_failed_step_pending_writes_match_and_copies_verify(
    saver_factory: Any, failing: str
) -> None:
    from langgraph_memory_plus.transfer.migration import copy_threads

    builder = _failing_graph(failing)

    def run(saver: Any, thread_id: str) -> list[Any]:
        graph = builder.compile(checkpointer=saver)
        config: Any = {"configurable": {"thread_id": thread_id}}
        with pytest.raises(ValueError, match="boom"):
            graph.invoke({"messages": [HumanMessage("hi", id="h")]}, config)
        history = [_pending(saver, s.config) for s in graph.get_state_history(config)]
        # task ids hash the thread id: compared by order of first appearance
        seen: dict[str, int] = {}
        return [[(seen.setdefault(t, len(seen)), c, v) for t, c, v in w] for w in history]

    reference = InMemorySaver()
    theirs, ours_id = f"fail-{uuid.uuid4()}", f"fail-{uuid.uuid4()}"
    expected = run(reference, theirs)
    channels = [channel for _, channel, _ in expected[0]]
    assert "__error__" in channels and "messages" in channels
    with saver_factory() as saver:
        assert run(saver, ours_id) == expected
        into_ours = copy_threads(reference, saver, [theirs], verify=True)
        assert into_ours.differences == []
        assert into_ours.threads == [theirs]
        from_ours = copy_threads(saver, InMemorySaver(), [ours_id], verify=True)
        assert from_ours.differences == []
        assert from_ours.threads == [ours_id]
