"""Attacks on the promotion of a long read's objects (e53c468, issue 39) and on the
one-pass recall of a remembered list.

A read building a long list pauses the cyclic collector and ends by moving the young
generations to the oldest unwalked (``gc.freeze(); gc.unfreeze()``), with a full
collection once ``sys.getallocatedblocks()`` grew by a quarter. The promises: cyclic
garbage is freed about as CPython's own rule would, the collector is left as it was,
and every read hands out objects of its own, equal to what ``InMemorySaver`` gives.
Real servers throughout; the collector is driven by hand, never by timing.
"""

from __future__ import annotations

import ast
import gc
import operator
import os
import subprocess
import sys
import textwrap
import threading
import uuid
import weakref
from collections.abc import Callable
from typing import Annotated, Any

import pytest
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.types import Send
from typing_extensions import TypedDict

from langgraph_memory_plus.checkpoint import lists

pytestmark = pytest.mark.storage

promotes = pytest.mark.skipif(
    not lists.PROMOTES, reason="the promotion is CPython 3.10-3.13's with the GIL"
)


@pytest.fixture(params=["postgres", "redis", "sqlite"])
def backend(request: pytest.FixtureRequest) -> str:
    """The machine's servers and SQLite (no Redis Cluster: these attack the saver's memory,
    not the driver)."""
    return str(request.param)


def _small(storage: Any) -> dict[str, Any]:
    return {"pool_max_size": 2} if storage.kind == "postgres" else {}


class State(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]
    items: Annotated[list[Any], operator.add]


def _graph(checkpointer: Any) -> Any:
    def model(state: State) -> dict[str, Any]:
        n = len(state["messages"])
        return {"messages": [AIMessage(f"answer {n}", id=f"ai-{n}")], "items": [{"turn": n}]}

    builder = StateGraph(State)
    builder.add_node("model", model)
    builder.add_edge(START, "model")
    return builder.compile(checkpointer=checkpointer)


def _config() -> dict[str, Any]:
    return {"configurable": {"thread_id": f"promote-{uuid.uuid4()}"}}


def _long_chat(graph: Any, config: dict[str, Any], n: int = lists.PAUSE_GC_FROM + 44) -> None:
    """A thread of ``n + 1`` messages, read once: the first read decodes the items one by
    one, every later one builds them together with the collector paused."""
    graph.invoke(
        {"messages": [HumanMessage(f"q{i}", id=f"h{i}") for i in range(n)], "items": []}, config
    )
    graph.get_state(config)


class _Cycle:
    """Cyclic garbage holding a buffer the C allocator maps by itself (past pymalloc's 512
    bytes): what a dropped traceback, a request object or a parser leaves behind."""

    def __init__(self, size: int = 256 * 1024) -> None:
        self.me = self
        self.buffer = bytearray(size)


# -- cyclic garbage ----------------------------------------------------------------------


@promotes
def test_cycles_holding_large_buffers_do_not_pile_up_across_long_reads(
    saver_factory: Any, storage: Any
) -> None:
    """Between long reads the application drops a cycle holding 256 KiB. CPython's young
    collection frees each one during the next read's building (fdd12e3: none left after
    1,000 reads). The promotion moved each to the oldest generation unwalked, and the
    full collection waits for ``sys.getallocatedblocks()`` to grow by a quarter, which
    large buffers hardly move: 199 of 200 were alive (1,000 reads: 999, 341 MB RSS
    against 85 MB), without bound."""
    config = _config()
    with saver_factory(**_small(storage)) as saver:
        graph = _graph(saver)
        _long_chat(graph, config)
        gc.collect()
        alive: list[weakref.ref[_Cycle]] = []
        for _ in range(60):
            cycle = _Cycle()
            alive.append(weakref.ref(cycle))
            del cycle
            assert len(graph.get_state(config).values["messages"]) == lists.PAUSE_GC_FROM + 45
        held = sum(r() is not None for r in alive)
        saver.delete_thread(config["configurable"]["thread_id"])
    assert held <= 2, f"{held} of 60 cycles (15 MiB) still held after 60 reads"


@promotes
def test_cycles_that_survived_a_young_collection_are_freed_as_by_the_middle_one(
    saver_factory: Any, storage: Any
) -> None:
    """A cycle that outlived one young collection (it sits in the middle generation) and
    is dropped before a long read: CPython frees it by the middle generation's next
    collection, at most ten young ones later. The promotion took it to the oldest."""
    config = _config()
    with saver_factory(**_small(storage)) as saver:
        graph = _graph(saver)
        _long_chat(graph, config)
        gc.collect()
        alive: list[weakref.ref[_Cycle]] = []
        for _ in range(40):
            cycle = _Cycle()
            alive.append(weakref.ref(cycle))
            gc.collect(0)  # as an automatic young collection would, while it is in use
            del cycle
            graph.get_state(config)
        held = sum(r() is not None for r in alive)
        saver.delete_thread(config["configurable"]["thread_id"])
    assert held <= 11, f"{held} of 40 cycles still held after 40 reads"


# -- the collector as the application left it --------------------------------------------


def _on_c_event(event: str, function: Any, then: Any, done: list[bool]) -> Any:
    """A profile function running ``then()`` once, at ``event`` of a call of ``function``
    in this thread (noted in ``done``): what another thread of the application does at
    that very moment."""

    def profile(frame: Any, what: str, arg: Any) -> None:
        if what == event and arg is function and not done:
            done.append(True)
            then()

    return profile


def _long_read_with(
    saver_factory: Any,
    storage: Any,
    after: Callable[..., Any],
    act: Callable[[], Any],
    outcome: Callable[[], Any],
    restore: Callable[[], Any],
) -> Any:
    """A long read during which, right after the package's own call of ``after`` (a C
    function), the application calls ``act`` (standing in for another thread): the
    hook must fire; ``outcome()`` as the read left it."""
    config = _config()
    with saver_factory(**_small(storage)) as saver:
        graph = _graph(saver)
        _long_chat(graph, config)
        try:
            done: list[bool] = []
            sys.setprofile(_on_c_event("c_return", after, act, done))
            try:
                graph.get_state(config)
            finally:
                sys.setprofile(None)
            assert done  # the hook fired
            return outcome()
        finally:
            restore()
            saver.delete_thread(config["configurable"]["thread_id"])


@pytest.mark.xfail(
    strict=True,
    reason="a collector the application disables while a long read is under way is "
    "re-enabled when the read ends: gc.disable() on a disabled collector leaves no trace "
    "(predates e53c468; no fix in lists.py)",
)
def test_a_collector_disabled_during_a_long_read_stays_disabled(
    saver_factory: Any, storage: Any
) -> None:
    # The read's build has just paused the collector; the application turns it off.
    still_off = _long_read_with(
        saver_factory, storage, gc.disable, gc.disable, lambda: not gc.isenabled(), gc.enable
    )
    assert still_off


@promotes
@pytest.mark.xfail(
    strict=True,
    reason="an application's gc.freeze() landing between the promotion's check of "
    "gc.get_freeze_count() and its gc.freeze() is undone by its gc.unfreeze() (no atomic "
    "promotion in the gc module; no fix in lists.py)",
)
def test_objects_the_application_freezes_during_a_promotion_stay_frozen(
    saver_factory: Any, storage: Any
) -> None:
    # The read is about to promote; the application freezes its objects.
    frozen = _long_read_with(
        saver_factory, storage, gc.get_freeze_count, gc.freeze, gc.get_freeze_count, gc.unfreeze
    )
    assert frozen > 0


def test_a_collector_disabled_before_a_long_read_stays_disabled_and_unfrozen_frozen(
    saver_factory: Any, storage: Any
) -> None:
    """Disabled or frozen before the read (the documented cases): left as they were."""
    config = _config()
    with saver_factory(**_small(storage)) as saver:
        graph = _graph(saver)
        _long_chat(graph, config)
        gc.disable()
        try:
            graph.get_state(config)
            assert not gc.isenabled()
        finally:
            gc.enable()
        marker: list[Any] = [object()]
        gc.collect()
        gc.freeze()
        try:
            graph.get_state(config)
            # Frozen objects are in no generation (freed ones leave the count: no test).
            assert not any(o is marker for o in gc.get_objects()) and gc.isenabled()
        finally:
            gc.unfreeze()
        assert any(o is marker for o in gc.get_objects(2))
        saver.delete_thread(config["configurable"]["thread_id"])


# -- reads that match InMemorySaver's, at the pause's edge, under load -------------------


def _mixed(n: int) -> list[Any]:
    """Elements of every kind a list channel may hold: dicts, tuples, nested lists, text
    with CJK and NUL, numbers, None, bytes."""
    kinds = [
        lambda i: {"k": i, "t": f"中文\x00{i}", "deep": {"l": [i, {"x": None}]}},
        lambda i: ("tuple", i, "元组"),
        lambda i: [i, "嵌套", [i * 1.5]],
        lambda i: f"s\x00中{i}",
        lambda i: i,
        lambda i: None,
        lambda i: b"b\x00" + bytes([i % 256]),
    ]
    return [kinds[i % len(kinds)](i) for i in range(n)]


def _snapshot(state: Any) -> tuple[Any, ...]:
    values = state.values
    return (
        [(type(m).__name__, m.id, m.content) for m in values["messages"]],
        [(type(v).__name__, v) for v in values["items"]],
    )


def _run_turns(graph: Any, config: dict[str, Any], turns: range) -> None:
    for turn in turns:
        text = f"next {turn} 中文\x00"
        graph.invoke({"messages": [HumanMessage(text, id=f"n{turn}")], "items": [turn]}, config)


@pytest.mark.parametrize(
    ("n", "mib"),
    [(lists.PAUSE_GC_FROM - 1, 1.0), (lists.PAUSE_GC_FROM, 64.0), (lists.PAUSE_GC_FROM, 0.05)],
    ids=["255-evicting", "256-default", "256-nothing-kept"],
)
def test_long_mixed_lists_read_by_eight_threads_during_puts_match_in_memory_saver(
    saver_factory: Any, storage: Any, n: int, mib: float
) -> None:
    """Lists of 255 to 258 mixed elements; a list memory that keeps everything, about one
    channel's lists (the two channels evict each other between a read's recall and its
    remember), or nothing; eight threads reading an old checkpoint by id and the latest
    while turns are put, each editing what it got: every read equals ``InMemorySaver``'s,
    history, a fork from the old checkpoint and a copy too."""
    config = _config()
    start = {"messages": [HumanMessage(f"q{i} 中", id=f"h{i}") for i in range(n)]}
    start["items"] = _mixed(n)
    reference = _graph(InMemorySaver())
    reference.invoke(start, config)
    old_expected = _snapshot(reference.get_state(config))
    _run_turns(reference, config, range(3))
    expected_history = [_snapshot(s) for s in reference.get_state_history(config)]

    thread_id = config["configurable"]["thread_id"]
    copy_id = f"{thread_id}-copy"
    with saver_factory(list_memory_mib=mib, **_small(storage)) as saver:
        graph = _graph(saver)
        graph.invoke(start, config)
        old = graph.get_state(config).config
        errors: list[Any] = []
        barrier = threading.Barrier(9)

        def read() -> None:
            barrier.wait()
            for _ in range(3):
                got = graph.get_state(old)
                if _snapshot(got) != old_expected:
                    errors.append(_snapshot(got))
                got.values["messages"][0].content = "EDITED"
                got.values["items"][0]["k"] = "EDITED"
                now = _snapshot(graph.get_state(config))
                if now not in expected_history:
                    errors.append(now)

        threads = [threading.Thread(target=read) for _ in range(8)]
        for t in threads:
            t.start()
        barrier.wait()
        _run_turns(graph, config, range(3))
        for t in threads:
            t.join()
        assert not errors
        assert gc.isenabled()
        assert [_snapshot(s) for s in graph.get_state_history(config)] == expected_history
        saver.copy_thread(thread_id, copy_id)
        copied = {"configurable": {"thread_id": copy_id}}
        assert _snapshot(graph.get_state(copied)) == expected_history[0]
        # A fork from the old checkpoint, on ours and the reference.
        _run_turns(graph, old, range(10, 11))
        forked = _snapshot(graph.get_state(config))
        saver.delete_thread(thread_id)
        saver.delete_thread(copy_id)
        assert not graph.get_state(config).values
    ref_old = next(
        s.config for s in reference.get_state_history(config) if _snapshot(s) == old_expected
    )
    _run_turns(reference, ref_old, range(10, 11))
    assert forked == _snapshot(reference.get_state(config))


# -- finalizers that read during a collection ---------------------------------------------

_FINALIZER_READS = """
import gc, sys, threading
sys.path.insert(0, {tests!r})
from test_attack_promote import _graph, _long_chat
from langgraph_memory_plus import PostgresSaver, RedisSaver
from langgraph_memory_plus.checkpoint import lists
from langgraph_memory_plus.checkpoint.sqlite import SqliteSaver

cls = {{"postgres": PostgresSaver, "redis": RedisSaver, "sqlite": SqliteSaver}}[{kind!r}]
got, made = [], []
with cls.from_conn_string({url!r}, **{options!r}) as saver:
    saver.setup()
    graph = _graph(saver)
    config = {{"configurable": {{"thread_id": {thread_id!r}}}}}
    _long_chat(graph, config)

    class Reads:
        # Cyclic garbage whose finalizer reads the long thread: it runs in whichever
        # collection finds it (a pause's young one, the promotion's full one, a catch-up).
        def __init__(self):
            self.me = self
            made.append(1)

        def __del__(self):
            got.append(len(graph.get_state(config).values["messages"]))

    def reader():
        ballast = []
        for i in range(12):
            Reads()
            ballast.append([[] for _ in range(20_000)])  # the heap grows: full collections
            got.append(len(graph.get_state(config).values["messages"]))

    threads = [threading.Thread(target=reader) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    gc.collect()
    print(repr((len(made), len(got), sorted(set(got)), gc.isenabled(), lists._pausing)))
    saver.delete_thread({thread_id!r})
"""


def test_finalizers_reading_a_long_thread_in_the_pauses_collections_do_not_deadlock(
    storage: Any,
) -> None:
    """Eight threads read a long thread while cyclic garbage whose ``__del__`` reads it
    too is freed by the collections the pauses run (at a pause's start, the promotion's
    full one, a catch-up), outside the pause's lock: every read completes, the same, and
    the collector is on again. In a child process: a deadlock would hang the run."""
    target = os.path.join(storage.url, "memory.db") if storage.kind == "sqlite" else storage.url
    options = {**storage.options, **_small(storage)}
    script = _FINALIZER_READS.format(
        tests=os.path.dirname(__file__),
        kind=storage.kind,
        url=target,
        options=options,
        thread_id=f"promote-{uuid.uuid4()}",
    )
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    # Every finalizer ran and read, as every thread did; the collector is on, no pause.
    assert ast.literal_eval(done.stdout) == (96, 192, [lists.PAUSE_GC_FROM + 45], True, 0)


# -- the list memory forgetting at the worst moment --------------------------------------


def test_lists_forgotten_between_recall_and_remember_are_read_and_put_whole(
    saver_factory: Any, storage: Any
) -> None:
    """The list memory drops everything just after a read's ``recall`` found the items
    (they stay usable: the read holds them), and just after a put chose its base (so
    ``remember_stored`` adds only the put's new items to an empty channel): the next
    reads fetch what is missing, and every state equals ``InMemorySaver``'s, through a
    fresh saver too."""
    config = _config()
    reference = _graph(InMemorySaver())
    _long_chat(reference, config)
    after = [_snapshot(reference.get_state(config))]
    for turn in range(3):
        _run_turns(reference, config, range(turn, turn + 1))
        after.append(_snapshot(reference.get_state(config)))
    expected = [_snapshot(s) for s in reference.get_state_history(config)]
    with saver_factory(**_small(storage)) as saver:
        memory = saver._lists
        recall, base = memory.recall, memory.base

        def recall_then_forget(*args: Any) -> Any:
            found = recall(*args)
            memory.clear()
            return found

        def base_then_forget(*args: Any) -> Any:
            view = base(*args)
            memory.clear()
            return view

        graph = _graph(saver)
        _long_chat(graph, config)
        memory.recall = recall_then_forget  # type: ignore[method-assign]
        memory.base = base_then_forget  # type: ignore[method-assign]
        try:
            for turn in range(3):
                assert _snapshot(graph.get_state(config)) == after[turn]
                _run_turns(graph, config, range(turn, turn + 1))
                assert _snapshot(graph.get_state(config)) == after[turn + 1]
        finally:
            del memory.recall, memory.base
        assert [_snapshot(s) for s in graph.get_state_history(config)] == expected
    with saver_factory(**_small(storage)) as fresh:
        graph = _graph(fresh)
        assert [_snapshot(s) for s in graph.get_state_history(config)] == expected
        fresh.delete_thread(config["configurable"]["thread_id"])


async def test_eight_asyncio_tasks_reading_long_threads_get_objects_of_their_own(
    async_saver_factory: Any, storage: Any
) -> None:
    """Eight tasks of one event loop read two long threads at once: each read equals
    the others of its thread, no object is shared between any two reads, and the
    collector is on afterwards."""
    import asyncio

    configs = [_config(), _config()]
    async with async_saver_factory(**_small(storage)) as saver:
        graph = _graph(saver)
        for n, config in enumerate(configs, start=300):
            await graph.ainvoke(
                {"messages": [HumanMessage(f"q{i}", id=f"h{i}") for i in range(n)]}
                | {"items": _mixed(n)},
                config,
            )
        states = await asyncio.gather(*(graph.aget_state(configs[i % 2]) for i in range(8)))
        snapshots = {_snapshot_key(s) for s in states}
        assert len(snapshots) == 2
        seen: set[int] = set()
        for state in states:
            ids = {id(m) for m in state.values["messages"]} | {
                id(v) for v in state.values["items"] if isinstance(v, (dict, list))
            }
            assert not ids & seen
            seen |= ids
        assert gc.isenabled()
        for config in configs:
            await saver.adelete_thread(config["configurable"]["thread_id"])


def _snapshot_key(state: Any) -> str:
    return repr(_snapshot(state))


def test_a_long_read_runs_no_young_collection_when_the_application_turned_them_off(
    saver_factory: Any, storage: Any
) -> None:
    """``gc.set_threshold(0)`` turns automatic collections off: the young collection a
    pause starts with (which stands for the automatic ones the promotion skips) is
    skipped too."""
    config = _config()
    young: list[int] = []

    def seen(phase: str, info: dict[str, Any]) -> None:
        if phase == "start" and info["generation"] < 2:
            young.append(info["generation"])

    with saver_factory(**_small(storage)) as saver:
        graph = _graph(saver)
        _long_chat(graph, config)
        thresholds = gc.get_threshold()
        gc.set_threshold(0)
        gc.callbacks.append(seen)
        try:
            assert len(graph.get_state(config).values["messages"]) == lists.PAUSE_GC_FROM + 45
        finally:
            gc.callbacks.remove(seen)
            gc.set_threshold(*thresholds)
        saver.delete_thread(config["configurable"]["thread_id"])
    assert not young


# -- retention, prune and copies of long threads ------------------------------------------


def test_long_threads_under_retention_prune_and_copy_read_as_in_memory(
    saver_factory: Any, storage: Any
) -> None:
    """``keep_last=2`` deleting the items of checkpoints it drops while long reads
    remember them, an old checkpoint read by id then forked, ``prune`` and a copy that
    is read and continued: every long read equals ``InMemorySaver``'s on the same turns."""
    config = _config()
    thread_id = config["configurable"]["thread_id"]
    reference = _graph(InMemorySaver())
    _long_chat(reference, config)
    after = [_snapshot(reference.get_state(config))]
    for turn in range(4):
        _run_turns(reference, config, range(turn, turn + 1))
        after.append(_snapshot(reference.get_state(config)))
    with saver_factory(keep_last=2, **_small(storage)) as saver:
        graph = _graph(saver)
        _long_chat(graph, config)
        _run_turns(graph, config, range(1))
        assert _snapshot(graph.get_state(config)) == after[1]
        kept = [s.config for s in graph.get_state_history(config)]
        assert len(kept) == 2
        oldest = kept[-1]
        oldest_values = _snapshot(graph.get_state(oldest))
        _run_turns(graph, config, range(1, 2))
        # The oldest checkpoint read above is gone with its list's newest items.
        assert _snapshot(graph.get_state(config)) == after[2]
        gone = graph.get_state(oldest).values
        assert not gone or _snapshot(graph.get_state(oldest)) == oldest_values
        saver.prune([thread_id], strategy="keep_latest")
        assert _snapshot(graph.get_state(config)) == after[2]
        copy = {"configurable": {"thread_id": f"{thread_id}-copy"}}
        saver.copy_thread(thread_id, f"{thread_id}-copy")
        assert _snapshot(graph.get_state(copy)) == after[2]
        for turn in range(2, 4):
            _run_turns(graph, copy, range(turn, turn + 1))
            assert _snapshot(graph.get_state(copy)) == after[turn + 1]
        assert _snapshot(graph.get_state(config)) == after[2]
    with saver_factory(**_small(storage)) as fresh:
        graph = _graph(fresh)
        assert _snapshot(graph.get_state(copy)) == after[4]
        assert _snapshot(graph.get_state(config)) == after[2]
        fresh.delete_thread(thread_id)
        fresh.delete_thread(f"{thread_id}-copy")


# -- subgraphs and Send with long lists ----------------------------------------------------


class _Fan(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]
    results: Annotated[list[Any], operator.add]


def _fan_graph(checkpointer: Any) -> Any:
    """A subgraph answering on the long ``messages`` (its own namespace), then a fan-out
    by ``Send`` whose payloads are long lists of dicts."""

    def answer(state: _Fan) -> dict[str, Any]:
        n = len(state["messages"])
        return {"messages": [AIMessage(f"sub {n}", id=f"sub-{n}")]}

    child = StateGraph(_Fan)
    child.add_node("answer", answer)
    child.add_edge(START, "answer")

    def fan(state: _Fan) -> list[Send]:
        n = len(state["messages"])
        return [
            Send("work", {"results": [{"w": w, "i": i, "t": "中\x00"} for i in range(n)]})
            for w in range(3)
        ]

    def work(state: _Fan) -> dict[str, Any]:
        return {"results": [{"len": len(state["results"]), "w": state["results"][0]["w"]}]}

    parent = StateGraph(_Fan)
    parent.add_node("child", child.compile())
    parent.add_node("work", work)
    parent.add_edge(START, "child")
    parent.add_conditional_edges("child", fan, ["work"])
    return parent.compile(checkpointer=checkpointer)


def _all_checkpoints(saver: Any, thread_id: str) -> list[Any]:
    """Every checkpoint of the thread, namespaces by node name, oldest first per
    namespace (task ids in namespaces and checkpoint ids differ between savers)."""
    out = []
    for tup in saver.list({"configurable": {"thread_id": thread_id}}):
        ns = "|".join(
            p.split(":")[0] for p in tup.config["configurable"]["checkpoint_ns"].split("|")
        )
        values = tup.checkpoint["channel_values"]
        out.append(
            (
                ns,
                tup.metadata["step"],
                [(m.id, m.content) for m in values.get("messages", [])],
                sorted(map(repr, values.get("results", []))),
            )
        )
    return sorted(out, key=repr)


def test_subgraphs_and_sends_with_long_lists_store_what_in_memory_saver_stores(
    saver_factory: Any, storage: Any
) -> None:
    config = _config()
    thread_id = config["configurable"]["thread_id"]
    start = {"messages": [HumanMessage(f"q{i}", id=f"h{i}") for i in range(300)]}
    reference_saver = InMemorySaver()
    _fan_graph(reference_saver).invoke(start, config, subgraphs=True)
    expected = _all_checkpoints(reference_saver, thread_id)
    assert any(ns == "child" for ns, *_ in expected)
    with saver_factory(**_small(storage)) as saver:
        graph = _fan_graph(saver)
        graph.invoke(start, config, subgraphs=True)
        assert _all_checkpoints(saver, thread_id) == expected
        final = graph.get_state(config).values
        assert len(final["messages"]) == 301 and len(final["results"]) == 3
        saver.delete_thread(thread_id)


@promotes
def test_a_long_read_runs_one_full_collection_per_growth_after_gc_callbacks_are_cleared(
    saver_factory: Any, storage: Any
) -> None:
    """An application (or a test harness) clearing ``gc.callbacks`` removed the hook a
    first version took the heap's size with after each full collection: with the heap
    grown by a quarter, every long read then ran a full collection (5 of 5), walking the
    whole heap each time. Full collections are now noticed from CPython's own count."""
    config = _config()
    full: list[int] = []

    def seen(phase: str, info: dict[str, Any]) -> None:
        if phase == "start" and info["generation"] == 2:
            full.append(1)

    with saver_factory(**_small(storage)) as saver:
        graph = _graph(saver)
        _long_chat(graph, config)
        graph.get_state(config)
        gc.collect()  # the heap's size now is the last full collection's
        saved = list(gc.callbacks)
        gc.callbacks.clear()
        try:
            ballast = [[] for _ in range(sys.getallocatedblocks() // 2)]
            gc.callbacks.append(seen)
            for _ in range(5):
                graph.get_state(config)
        finally:
            gc.callbacks[:] = saved
            del ballast
        saver.delete_thread(config["configurable"]["thread_id"])
    assert len(full) <= 2, f"{len(full)} full collections in 5 reads"
