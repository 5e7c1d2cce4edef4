"""What one caller does to objects it got from a saver never shows anywhere else.

``InMemorySaver`` decodes every read from bytes, so each read hands out new objects and an
edit made after a checkpoint never reaches it, its forks, or another read. These tests hold
our savers (which remember lists to store them in O(T)) to the same, on every backend, and
check the result through a fresh saver too, which shows what was actually stored.
"""

from __future__ import annotations

import gc
import operator
import threading
import uuid
from typing import Annotated, Any

import pytest
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, StateGraph
from langgraph.graph.message import add_messages
from typing_extensions import TypedDict

pytestmark = pytest.mark.storage


class State(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]
    edit: bool


def _graph(**compile_options: Any) -> Any:
    """A chat whose model node, when asked to, edits the first message in place (the
    supported way: reassign a field and return the object) before answering."""

    def model(state: State) -> dict[str, Any]:
        n = len(state["messages"])
        out: list[AnyMessage] = []
        if state.get("edit"):
            first = state["messages"][0]
            first.content = "EDITED"
            out.append(first)
        out.append(AIMessage(f"answer {n}", id=f"ai-{n}"))
        return {"messages": out, "edit": False}

    builder = StateGraph(State)
    builder.add_node("model", model)
    builder.add_edge(START, "model")
    return builder.compile(**compile_options)


def _ask(turn: int, edit: bool = False) -> dict[str, Any]:
    return {"messages": [HumanMessage(f"question {turn}", id=f"h-{turn}")], "edit": edit}


def _texts(state: Any) -> list[str]:
    return [m.content for m in state.values["messages"]]


def _fork_after_edit(graph: Any, config: dict[str, Any]) -> dict[str, Any]:
    """Four turns, an in-place edit in the fifth, then a run from the checkpoint before
    the edit; returns the fork's config."""
    for turn in range(4):
        graph.invoke(_ask(turn), config, durability="sync")
    before = graph.get_state(config).config
    graph.invoke(_ask(4, edit=True), config, durability="sync")
    assert _texts(graph.get_state(config))[0] == "EDITED"
    graph.invoke(_ask(5), before, durability="sync")
    return config


def test_a_fork_from_before_an_edit_does_not_store_the_edit(saver_factory: Any) -> None:
    config = {"configurable": {"thread_id": f"iso-{uuid.uuid4()}"}}
    reference = _graph(checkpointer=InMemorySaver())
    _fork_after_edit(reference, config)
    expected = _texts(reference.get_state(config))
    assert expected[0] == "question 0"  # the fork starts from before the edit
    with saver_factory() as saver:
        graph = _graph(checkpointer=saver)
        _fork_after_edit(graph, config)
        assert _texts(graph.get_state(config)) == expected
        history = [_texts(s) for s in graph.get_state_history(config)]
    with saver_factory() as fresh:
        graph = _graph(checkpointer=fresh)
        assert _texts(graph.get_state(config)) == expected
        assert [_texts(s) for s in graph.get_state_history(config)] == history
    assert history == [_texts(s) for s in reference.get_state_history(config)]


def test_reads_hand_out_new_objects(saver_factory: Any) -> None:
    """Editing what ``get_state`` or ``invoke`` returned changes no later read."""
    config = {"configurable": {"thread_id": f"iso-{uuid.uuid4()}"}}
    with saver_factory() as saver:
        graph = _graph(checkpointer=saver)
        for turn in range(3):
            result = graph.invoke(_ask(turn), config)
        first = graph.get_state(config).values["messages"]
        second = graph.get_state(config).values["messages"]
        assert all(a is not b for a, b in zip(first, second, strict=True))
        assert not {id(m) for m in result["messages"]} & {id(m) for m in first}
        # Edits of every kind on what was read or returned: fields, nested values.
        first[0].content = "changed"
        first[1].response_metadata["leak"] = True
        result["messages"][2].content = "changed too"
        result["messages"][3].additional_kwargs["leak"] = True
        third = graph.get_state(config).values["messages"]
        assert [m.content for m in third] == [
            "question 0", "answer 1", "question 1", "answer 3", "question 2", "answer 5",
        ]  # fmt: skip
        assert "leak" not in third[1].response_metadata
        assert "leak" not in third[3].additional_kwargs
        tup = saver.get_tuple(config)
        assert tup is not None
        again = saver.get_tuple(config)
        assert again is not None
        a, b = tup.checkpoint["channel_values"], again.checkpoint["channel_values"]
        assert all(x is not y for x, y in zip(a["messages"], b["messages"], strict=True))


def test_editing_a_snapshots_tool_calls_changes_nothing_stored(saver_factory: Any) -> None:
    """Upstream's ``test_state_graph_packets`` pattern: a snapshot's ``tool_calls`` edited
    in place must not change a later ``get_state`` or what the next run sees."""

    def agent(state: State) -> dict[str, Any]:
        if isinstance(state["messages"][-1], ToolMessage):
            return {"messages": [AIMessage("done", id=f"ai-{len(state['messages'])}")]}
        call = {"name": "search", "args": {"q": "trains"}, "id": "call-1"}
        return {"messages": [AIMessage("", id="ai-call", tool_calls=[call])]}

    def tools(state: State) -> dict[str, Any]:
        last = state["messages"][-1]
        assert isinstance(last, AIMessage)
        return {"messages": [ToolMessage(str(last.tool_calls[0]["args"]), tool_call_id="call-1")]}

    builder = StateGraph(State)
    builder.add_node("agent", agent)
    builder.add_node("tools", tools)
    builder.add_edge(START, "agent")
    builder.add_edge("agent", "tools")
    config = {"configurable": {"thread_id": f"iso-{uuid.uuid4()}"}}
    with saver_factory() as saver:
        graph = builder.compile(checkpointer=saver, interrupt_before=["tools"])
        graph.invoke({"messages": [HumanMessage("find trains", id="h")]}, config)
        snapshot = graph.get_state(config)
        snapshot.values["messages"][-1].tool_calls[0]["args"]["q"] = "planes"
        assert graph.get_state(config).values["messages"][-1].tool_calls[0]["args"] == {
            "q": "trains"
        }
        out = graph.invoke(None, config)
        assert out["messages"][-1].content == "{'q': 'trains'}"


def test_a_nested_edit_of_a_returned_message_is_stored(saver_factory: Any) -> None:
    """A node that edits a message deeper than a field and returns it: stored, as on
    ``InMemorySaver`` (returned objects are serialized again)."""

    def tag(state: State) -> dict[str, Any]:
        first = state["messages"][0]
        first.additional_kwargs["tag"] = "vip"
        return {"messages": [first]}

    builder = StateGraph(State)
    builder.add_node("tag", tag)
    builder.add_edge(START, "tag")
    config = {"configurable": {"thread_id": f"iso-{uuid.uuid4()}"}}
    with saver_factory() as saver:
        chat = _graph(checkpointer=saver)
        for turn in range(3):
            chat.invoke(_ask(turn), config)
        builder.compile(checkpointer=saver).invoke({"messages": []}, config)
    with saver_factory() as fresh:
        state = _graph(checkpointer=fresh).get_state(config)
        assert state.values["messages"][0].additional_kwargs == {"tag": "vip"}


def test_a_field_reassigned_without_returning_the_message_is_stored(saver_factory: Any) -> None:
    """As on ``InMemorySaver``, whose put serializes the whole channel: a reassigned field
    of a message the node did not return still reaches the next checkpoint."""

    def redact(state: State) -> dict[str, Any]:
        state["messages"][0].content = "[redacted]"
        return {"messages": [AIMessage("ok", id="ai-ok")]}

    builder = StateGraph(State)
    builder.add_node("redact", redact)
    builder.add_edge(START, "redact")
    config = {"configurable": {"thread_id": f"iso-{uuid.uuid4()}"}}
    reference = {"configurable": {"thread_id": config["configurable"]["thread_id"]}}
    memory = InMemorySaver()
    for checkpointer, cfg in ((memory, reference),):
        chat = _graph(checkpointer=checkpointer)
        for turn in range(3):
            chat.invoke(_ask(turn), cfg)
        builder.compile(checkpointer=checkpointer).invoke({"messages": []}, cfg)
    expected = _texts(_graph(checkpointer=memory).get_state(reference))
    assert expected[0] == "[redacted]"
    with saver_factory() as saver:
        chat = _graph(checkpointer=saver)
        for turn in range(3):
            chat.invoke(_ask(turn), config)
        builder.compile(checkpointer=saver).invoke({"messages": []}, config)
    with saver_factory() as fresh:
        assert _texts(_graph(checkpointer=fresh).get_state(config)) == expected


def test_copies_edited_differently_stay_apart(saver_factory: Any) -> None:
    """``copy_thread``, then a different in-place edit on each copy."""

    def edit_to(text: str) -> Any:
        def edit(state: State) -> dict[str, Any]:
            first = state["messages"][0]
            first.content = text
            return {"messages": [first]}

        builder = StateGraph(State)
        builder.add_node("edit", edit)
        builder.add_edge(START, "edit")
        return builder

    a = {"configurable": {"thread_id": f"iso-a-{uuid.uuid4()}"}}
    b = {"configurable": {"thread_id": f"iso-b-{uuid.uuid4()}"}}
    with saver_factory() as saver:
        chat = _graph(checkpointer=saver)
        for turn in range(10):
            chat.invoke(_ask(turn), a)
        saver.copy_thread(a["configurable"]["thread_id"], b["configurable"]["thread_id"])
        edit_to("from A").compile(checkpointer=saver).invoke({"messages": []}, a)
        edit_to("from B").compile(checkpointer=saver).invoke({"messages": []}, b)
        chat.invoke(_ask(10), a)
        chat.invoke(_ask(10), b)
    with saver_factory() as fresh:
        chat = _graph(checkpointer=fresh)
        ta, tb = _texts(chat.get_state(a)), _texts(chat.get_state(b))
    assert ta[0] == "from A" and tb[0] == "from B"
    assert ta[1:] == tb[1:] and len(ta) == 22


def test_templates_built_together_share_nothing() -> None:
    """``build_all`` unpacks many templates in one call: each element, and everything
    inside it, is still an object of its own, equal to the original (an element listed
    twice included), models with their fields-set, extra and private state."""
    from pydantic import BaseModel, ConfigDict, PrivateAttr

    from langgraph_memory_plus.checkpoint.lists import Template, build_all

    class Loose(BaseModel):
        model_config = ConfigDict(extra="allow")
        n: int = 0
        _secret: dict[str, Any] = PrivateAttr(default_factory=dict)

    loose = Loose(n=1, more={"x": [1]})  # type: ignore[call-arg]
    loose._secret["k"] = "v"
    originals: list[Any] = [
        AIMessage("a", id="a1", response_metadata={"usage": {"n": 1}}),
        {"plain": [1, {"deep": "x"}]},
        loose,
        HumanMessage("h", id="h1"),
    ]
    templates = [Template.of(v) for v in originals]
    for count in (1, 15, 16, 17, 70_000 // 4):  # array headers of every size
        batch = (templates * (count // len(templates) + 1))[:count]
        built = build_all(batch)
        assert len(built) == count
        assert built == (originals * (count // len(originals) + 1))[:count]
        assert len({id(b) for b in built}) == count
    a, b = build_all([templates[2], templates[2]])
    assert a is not b and a.__pydantic_extra__ is not b.__pydantic_extra__
    assert a._secret == {"k": "v"} and a._secret is not b._secret
    assert a.model_fields_set == loose.model_fields_set
    first, second = build_all([templates[0], templates[0]])
    first.response_metadata["usage"]["n"] = 99
    assert (
        second.response_metadata["usage"]["n"] == 1 == originals[0].response_metadata["usage"]["n"]
    )
    assert templates[0].build() == originals[0]


def test_large_builds_pause_the_collector_only_while_they_run() -> None:
    """``build_all`` pauses the cyclic collector for a long list (issue 39): eight threads
    building at once, each sure of fresh objects, leave it enabled when the last one
    ends; a collector the application disabled stays disabled."""
    from langgraph_memory_plus.checkpoint.lists import PAUSE_GC_FROM, Template, build_all

    originals = [
        AIMessage(f"m{i}", id=f"a{i}", response_metadata={"usage": {"n": i}})
        for i in range(PAUSE_GC_FROM)
    ]
    templates = [Template.of(m) for m in originals]
    start, failures = threading.Barrier(8), []

    def build() -> None:
        start.wait()
        for _ in range(20):
            out = build_all(templates)
            out[3].response_metadata["usage"]["n"] = -1
            if out[:3] != originals[:3] or out[4:] != originals[4:]:
                failures.append(out)

    assert gc.isenabled()
    threads = [threading.Thread(target=build) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures and gc.isenabled()
    assert originals[3].response_metadata["usage"]["n"] == 3
    gc.disable()
    try:
        assert build_all(templates) == originals
        assert not gc.isenabled()
    finally:
        gc.enable()


def _long_templates(n: int) -> tuple[list[Any], list[Any]]:
    from langgraph_memory_plus.checkpoint.lists import Template

    originals = [
        AIMessage(f"m{i}", id=f"a{i}", response_metadata={"usage": {"n": i}}) for i in range(n)
    ]
    return originals, [Template.of(m) for m in originals]


class _Cycle:
    """Cyclic garbage: only a full or young collection frees it, never reference counts."""

    def __init__(self, ballast: int) -> None:
        self.me = self
        self.ballast = [{"k": i} for i in range(ballast)]


@pytest.mark.skipif(
    not __import__("langgraph_memory_plus.checkpoint.lists", fromlist=["x"]).PROMOTES,
    reason="the promotion is CPython 3.10-3.13's (other interpreters re-enable plainly)",
)
def test_a_large_build_promotes_its_objects_without_a_young_collection() -> None:
    """A pause ends by moving the young generations to the oldest unwalked (issue 39):
    the built objects are there, no young collection ran for them (the one a pause starts
    with walks what was there before the build: few objects), and the collector is on
    again."""
    from langgraph_memory_plus.checkpoint.lists import PAUSE_GC_FROM, build_all

    originals, templates = _long_templates(PAUSE_GC_FROM)
    young: list[int] = []

    def seen(phase: str, info: dict[str, Any]) -> None:
        if phase == "start" and info["generation"] < 2 and gc.get_count()[0] >= 50:
            young.append(info["generation"])

    gc.collect()
    gc.callbacks.append(seen)
    try:
        out = build_all(templates)
        count = gc.get_count()[0]
    finally:
        gc.callbacks.remove(seen)
    assert out == originals and gc.isenabled()
    assert not young and count < 50, (young, count)
    oldest = {id(o) for o in gc.get_objects(2)}
    assert all(id(m) in oldest and id(m.__dict__) in oldest for m in out)


@pytest.mark.skipif(
    not __import__("langgraph_memory_plus.checkpoint.lists", fromlist=["x"]).PROMOTES,
    reason="the promotion is CPython 3.10-3.13's (other interpreters re-enable plainly)",
)
def test_cyclic_garbage_promoted_by_builds_is_freed_within_a_quarter_of_the_heap() -> None:
    """Promoted cyclic garbage (made by other code between builds) waits for a full
    collection, which the builds run once the heap grew by a quarter: with no explicit
    collection by anyone, the first cycle is freed before the garbage made after it
    passes half the heap's size at the start (never without bound)."""
    import sys
    import weakref

    from langgraph_memory_plus.checkpoint.lists import PAUSE_GC_FROM, build_all

    _, templates = _long_templates(PAUSE_GC_FROM)
    gc.collect()
    start = sys.getallocatedblocks()
    thresholds = gc.get_threshold()
    # Python's own collections off (the builds' promotions take everything young):
    # only the builds' full collections can free the cycles.
    gc.set_threshold(0)
    try:
        first = _Cycle(100)
        alive = weakref.ref(first)
        del first
        made = 0
        while alive() is not None and made < start:
            build_all(templates)
            _Cycle(1000)
            made += 1000
        assert alive() is None, f"not freed after {made} blocks of garbage ({start} at start)"
        assert made < start // 2 + 20_000
    finally:
        gc.set_threshold(*thresholds)
        gc.collect()


def test_a_build_leaves_objects_the_application_froze_frozen() -> None:
    """An application that froze its objects (a pre-fork server) keeps them frozen: a
    build re-enables the collector plainly instead of promoting."""
    from langgraph_memory_plus.checkpoint.lists import PAUSE_GC_FROM, build_all

    originals, templates = _long_templates(PAUSE_GC_FROM)
    gc.collect()
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        assert frozen > 0
        assert build_all(templates) == originals
        assert gc.get_freeze_count() >= frozen and gc.isenabled()
    finally:
        gc.unfreeze()


def test_fresh_all_keeps_order_across_batches_and_undecoded_items() -> None:
    """A long list read at a chat's turn mixes items with a template (built together in
    batches of ``BUILD_BATCH``) and items not decoded yet or without one (decoded one by
    one, spliced in by slices, issue 39): every element comes back in its place, new,
    equal to what was stored, and the undecoded items get their template."""
    from langgraph_memory_plus.checkpoint.lists import BUILD_BATCH, Template, _Known

    n = 2 * BUILD_BATCH + 5
    originals: list[Any] = [
        AIMessage(f"m{i}", id=f"a{i}", response_metadata={"usage": {"n": i}}) for i in range(n)
    ]
    originals[7] = ("not", "plain")  # a tuple: never a template, decoded at every read
    stored = {i: (f"t{i}", repr(i).encode()) for i in range(n)}
    items = [_Known(stored[i]) for i in range(n)]
    undecoded = {0, 7, BUILD_BATCH, BUILD_BATCH + 1, n - 1}
    for i in set(range(n)) - undecoded:
        items[i].state = (Template.of(originals[i]), None)
    loads: list[bytes] = []

    def load(iid: bytes, typ: str, data: bytes) -> Any:
        loads.append(iid)
        i = int(data)
        assert (typ, data) == stored[i] and iid == b"%d" % i
        value = originals[i]
        return tuple(list(value)) if isinstance(value, tuple) else value.model_copy(deep=True)

    ids = [b"%d" % i for i in range(n)]
    for expected_loads in (undecoded, {7}):  # the second read: only the tuple again
        out = _Known.fresh_all(ids, items, load)
        assert out == originals
        assert not any(map(operator.is_, out, originals))
        assert sorted(loads) == sorted(b"%d" % i for i in expected_loads)
        loads.clear()


DEEP_EDIT_UNSEEN = (
    "documented limit (README, 'O(T) bytes per thread'): a put reuses the item of an "
    "element that is the same object with the same field objects, so an edit deep inside "
    "one a node neither returned nor reassigned a field of is not stored; seeing it would "
    "mean serializing every element at every step, the O(T^2) cost the list storage avoids"
)


class Docs(TypedDict):
    docs: Annotated[list[dict[str, Any]], operator.add]


@pytest.mark.parametrize(
    "what",
    [
        "message",
        # Not strict: the second turn's deep edit of a dict is lost in some runs only
        # (about one in three, on every backend), so the limit shows through a graph too.
        pytest.param("dict", marks=pytest.mark.xfail(strict=False, reason=DEEP_EDIT_UNSEEN)),
    ],
)
def test_a_node_s_deep_edit_of_an_element_not_returned_is_stored_as_in_memory(
    saver_factory: Any, what: str
) -> None:
    """Differential with ``InMemorySaver``: a node edits an old element in place, deep
    inside it (a message's ``additional_kwargs``; a nested dict of a plain list of dicts),
    and returns something else; InMemorySaver's next checkpoint holds the edit. Ours
    does for messages; for the plain dicts it misses it now and then (see the mark)."""
    if what == "message":

        def deep(state: State) -> dict[str, Any]:
            state["messages"][0].additional_kwargs["tag"] = "vip"
            return {"messages": [AIMessage("ok", id="ai-ok")]}

        builder: Any = StateGraph(State)
        builder.add_node("deep", deep)
        first: dict[str, Any] = {
            "messages": [HumanMessage(f"q{i}", id=f"q{i}") for i in range(4)],
            "edit": False,
        }
    else:

        def deep_doc(state: Docs) -> dict[str, Any]:
            state["docs"][0]["meta"]["tags"].append("vip")
            return {"docs": [{"n": 99, "meta": {"tags": []}}]}

        builder = StateGraph(Docs)
        builder.add_node("deep", deep_doc)
        first = {"docs": [{"n": i, "meta": {"tags": [f"t{i}"]}} for i in range(4)]}
    builder.add_edge(START, "deep")

    def run(checkpointer: Any, config: dict[str, Any]) -> Any:
        graph = builder.compile(checkpointer=checkpointer)
        graph.invoke(first, config)
        graph.invoke({"messages": []} if what == "message" else {"docs": []}, config)
        return graph.get_state(config).values

    expected = run(InMemorySaver(), {"configurable": {"thread_id": "ref"}})
    config = {"configurable": {"thread_id": f"deep-{uuid.uuid4()}"}}
    with saver_factory() as saver:
        got = run(saver, config)
    with saver_factory() as fresh:
        stored = builder.compile(checkpointer=fresh).get_state(config).values
    assert got == expected
    assert stored == expected


@pytest.mark.xfail(strict=True, reason=DEEP_EDIT_UNSEEN)
def test_a_deep_edit_of_what_get_tuple_returned_then_put_is_stored_as_in_memory(
    saver_factory: Any,
) -> None:
    """Differential with ``InMemorySaver`` through the saver API: read a checkpoint with
    ``get_tuple``, edit its list elements in place (a reassigned field, a message's
    ``additional_kwargs``, a nested dict), put the next checkpoint with those lists plus
    one element: InMemorySaver stores every edit, and the older checkpoint stays as it
    was. Ours stores the reassigned field, keeps the older checkpoint, and misses the
    deep edits (the documented limit)."""
    from langgraph.checkpoint.base import create_checkpoint, empty_checkpoint

    def scenario(saver: Any, thread_id: str) -> tuple[Any, ...]:
        config = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
        first = empty_checkpoint()
        first["channel_values"] = {
            "messages": [HumanMessage(f"q{i}", id=f"q{i}") for i in range(4)],
            "docs": [{"n": i, "meta": {"tags": [i]}} for i in range(20)],
        }
        first["channel_versions"] = {"messages": "1", "docs": "1"}
        meta: Any = {"source": "loop", "step": 0, "parents": {}}
        at_first = saver.put(config, first, meta, {"messages": "1", "docs": "1"})
        read = saver.get_tuple(config)
        values = read.checkpoint["channel_values"]
        values["messages"][1].content = "reassigned"
        values["messages"][0].additional_kwargs["k"] = "v"
        values["docs"][0]["meta"]["tags"].append("vip")
        second = create_checkpoint(read.checkpoint, None, 1)
        second["channel_values"] = {
            "messages": [*values["messages"], HumanMessage("q4", id="q4")],
            "docs": [*values["docs"], {"n": 99}],
        }
        second["channel_versions"] = {"messages": "2", "docs": "2"}
        meta = {"source": "loop", "step": 1, "parents": {}}
        saver.put(read.config, second, meta, {"messages": "2", "docs": "2"})
        latest = saver.get_tuple(config).checkpoint["channel_values"]
        older = saver.get_tuple(at_first).checkpoint["channel_values"]
        return (
            latest["messages"][1].content,
            older["messages"][1].content,
            older["messages"][0].additional_kwargs,
            older["docs"][0],
            latest["messages"][0].additional_kwargs,
            latest["docs"][0],
        )

    expected = scenario(InMemorySaver(), "ref")
    assert expected[:4] == ("reassigned", "q1", {}, {"n": 0, "meta": {"tags": [0]}})
    with saver_factory() as saver:
        got = scenario(saver, f"deep-{uuid.uuid4()}")
    assert got[:4] == expected[:4]  # holds today
    assert got[4:] == expected[4:]  # the deep edits: missed
