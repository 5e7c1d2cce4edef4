"""Reducers: windows, de-duplication, profile merging; batching invariance for DeltaChannel."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Annotated, Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    RemoveMessage,
    SystemMessage,
    ToolMessage,
)
from langgraph.channels.delta import DeltaChannel
from langgraph.graph import END, START, StateGraph, add_messages
from messages_support import conversation, turn_messages
from typing_extensions import TypedDict

from langgraph_memory_plus.messages import (
    REMOVE_ALL_MESSAGES,
    dedupe_messages,
    merge_messages,
    merge_profile,
    provider_problems,
    window_messages,
)
from langgraph_memory_plus.messages._core import Cuts, Pairing

# ---------------------------------------------------------------------------------------------
# writes as hypothesis generates them

IDS = [f"m{i}" for i in range(8)]


@st.composite
def message_write(draw: st.DrawFn) -> list[Any]:
    """One node's update: messages (some without ids, some as tuples), tool groups, removals."""
    out: list[Any] = []
    for _ in range(draw(st.integers(0, 4))):
        kind = draw(st.sampled_from(["human", "ai", "tuple", "tools", "remove", "remove_all"]))
        mid = draw(st.sampled_from([*IDS, None]))
        text = draw(st.sampled_from(["hi", "ok", "more", "x" * 30]))
        if kind == "human":
            out.append(HumanMessage(text, id=mid))
        elif kind == "ai":
            out.append(AIMessage(text, id=mid))
        elif kind == "tuple":
            out.append(("user", text))
        elif kind == "tools":
            call = f"c{draw(st.integers(0, 99))}"
            out.append(AIMessage("", id=mid, tool_calls=[{"name": "t", "args": {}, "id": call}]))
            out.append(ToolMessage(text, tool_call_id=call, id=f"{call}-r"))
        elif kind == "remove":
            out.append(RemoveMessage(id=draw(st.sampled_from(IDS))))
        elif kind == "remove_all" and draw(st.integers(0, 5)) == 0:
            out.append(RemoveMessage(id=REMOVE_ALL_MESSAGES))
    return out


profile_keys = st.sampled_from(["name", "prefs", "tz", "lang"])
profile_values: st.SearchStrategy[Any] = st.recursive(
    st.one_of(st.none(), st.integers(0, 3), st.text(max_size=3), st.lists(st.integers(0, 3))),
    lambda inner: st.dictionaries(profile_keys, inner, max_size=3),
    max_leaves=6,
)
profile_write = st.one_of(
    st.dictionaries(profile_keys, profile_values, max_size=3),
    st.just(RemoveMessage(id=REMOVE_ALL_MESSAGES)),
    profile_keys.map(lambda key: RemoveMessage(id=key)),
    st.none(),
)

MESSAGE_REDUCERS = {
    "window-6": window_messages(6),
    "window-2-turns": window_messages(max_turns=2),
    "window-both": window_messages(5, max_turns=1),
    "dedupe-first": dedupe_messages("first"),
    "dedupe-last": dedupe_messages("last"),
}
system_head = st.lists(st.just(SystemMessage("rules", id="sys")), max_size=1)


@pytest.mark.parametrize("name", MESSAGE_REDUCERS)
@settings(max_examples=80, deadline=None)
@given(
    head=system_head,
    xs=st.lists(message_write(), max_size=5),
    ys=st.lists(message_write(), max_size=5),
)
def test_message_reducers_are_batching_invariant(
    name: str, head: list[BaseMessage], xs: list[Any], ys: list[Any]
) -> None:
    """The DeltaChannel contract: r(r(s, xs), ys) == r(s, xs + ys), and the batch form is the
    same fold LangGraph does with the binary form (so switching channels changes nothing)."""
    fold = MESSAGE_REDUCERS[name].fold
    binary = MESSAGE_REDUCERS[name]
    assert fold(fold(head, xs), ys) == fold(head, xs + ys)
    assert fold(head, xs + ys) == functools.reduce(binary, xs + ys, binary(head, []))


@settings(max_examples=80, deadline=None)
@given(xs=st.lists(profile_write, max_size=6), ys=st.lists(profile_write, max_size=6))
def test_merge_profile_is_batching_invariant(xs: list[Any], ys: list[Any]) -> None:
    fold = merge_profile.fold
    assert fold(fold({"seed": 1}, xs), ys) == fold({"seed": 1}, xs + ys)


@settings(max_examples=120, deadline=None)
@given(head=system_head, writes=st.lists(message_write(), max_size=8))
def test_window_keeps_system_bounds_length_and_never_splits_tool_groups(
    head: list[BaseMessage], writes: list[Any]
) -> None:
    """Each step keeps the system prompt and a suffix of what merging alone would hold, cut
    where no kept tool result loses its call; longer than the limit only for one tool group."""
    window = window_messages(4)
    state: list[BaseMessage] = list(head)
    for write in writes:
        merged = merge_messages(state, write)
        windowed = window(state, write)
        system = [m for m in merged if isinstance(m, SystemMessage)]
        assert windowed[: len(system)] == system
        body, kept = merged[len(system) :], windowed[len(system) :]
        cut = len(body) - len(kept)
        assert kept == body[cut:]
        pairing = Pairing.of(body)
        assert all(owner >= cut for j, owner in pairing.owner.items() if j >= cut)
        if len(kept) > 4:  # only when no later cut is safe: the newest tool group is longer
            assert isinstance(kept[0], AIMessage) and kept[0].tool_calls
            assert not any(Cuts(body).safe[i] for i in range(cut + 1, len(body)))
        state = windowed


@settings(max_examples=120, deadline=None)
@given(
    left=st.lists(st.sampled_from(IDS).map(lambda i: HumanMessage("l", id=i)), max_size=6),
    writes=st.lists(message_write(), max_size=5),
)
def test_dedupe_keeps_one_message_per_id(left: list[BaseMessage], writes: list[Any]) -> None:
    for keep in ("first", "last"):
        state = dedupe_messages(keep).fold(left, writes)
        ids = [m.id for m in state]
        assert len(ids) == len(set(ids))


def test_merge_matches_add_messages_on_well_formed_updates() -> None:
    """Users switch from add_messages: with ids present and known removals, same result."""
    left = [HumanMessage("a", id="1"), AIMessage("b", id="2"), HumanMessage("c", id="3")]
    right = [AIMessage("b2", id="2"), RemoveMessage(id="1"), HumanMessage("d", id="4")]
    assert merge_messages(left, right) == add_messages(left, right)
    again = [RemoveMessage(id="3"), HumanMessage("c2", id="3")]  # remove then re-add: in place
    assert merge_messages(left, again) == add_messages(left, again)
    reset = [
        HumanMessage("x", id="9"),
        RemoveMessage(id=REMOVE_ALL_MESSAGES),
        AIMessage("y", id="8"),
    ]
    assert merge_messages(left, reset) == add_messages(left, reset)


def test_merge_ignores_unknown_removals_and_derives_stable_ids() -> None:
    left = [HumanMessage("a", id="1")]
    assert merge_messages(left, [RemoveMessage(id="gone")]) == left
    with pytest.raises(ValueError):
        add_messages(left, [RemoveMessage(id="gone")])
    first = merge_messages(left, [("user", "same"), ("user", "same")])
    second = merge_messages(left, [("user", "same"), ("user", "same")])
    assert [m.id for m in first] == [m.id for m in second]
    assert len({m.id for m in first}) == 3, "equal messages in a row still get distinct ids"


def test_merge_never_mutates_its_inputs() -> None:
    left = [HumanMessage("a")]
    right = [AIMessage("b")]
    merge_messages(left, right)
    assert left[0].id is None and right[0].id is None


def test_dedupe_first_ignores_redelivery_last_replaces_in_place() -> None:
    state = [HumanMessage("a", id="1"), AIMessage("b", id="2")]
    redelivered = [AIMessage("b (again)", id="2"), HumanMessage("c", id="3")]
    assert [m.content for m in dedupe_messages("first")(state, redelivered)] == ["a", "b", "c"]
    assert [m.content for m in dedupe_messages("last")(state, redelivered)] == [
        "a",
        "b (again)",
        "c",
    ]
    doubled = [HumanMessage("a", id="1"), HumanMessage("a'", id="1"), AIMessage("b", id="2")]
    assert [m.content for m in dedupe_messages("first")(doubled, [])] == ["a", "b"]


def test_window_by_turns_and_by_messages() -> None:
    history = conversation(5)
    by_turns = window_messages(max_turns=2).fold([], [history])
    assert [m.id for m in by_turns] == ["sys", *(m.id for k in (3, 4) for m in turn_messages(k))]
    assert provider_problems(by_turns) == []
    assert [m.id for m in window_messages(3)([], history)] == [
        "sys",
        "q4-call",
        "q4-r",
        "q4-answer",
    ]
    # the last 2 messages would start on q4's tool result: the cut moves past it
    assert [m.id for m in window_messages(2)([], history)] == ["sys", "q4-answer"]


def test_window_keeps_an_oversized_newest_tool_group_whole() -> None:
    calls = [{"name": "t", "args": {}, "id": f"c{i}"} for i in range(4)]
    group = [
        HumanMessage("q", id="q"),
        AIMessage("", id="a", tool_calls=calls),
        *(ToolMessage("r", tool_call_id=f"c{i}", id=f"r{i}") for i in range(4)),
    ]
    kept = window_messages(3)([], group)
    assert [m.id for m in kept] == ["a", "r0", "r1", "r2", "r3"]


def test_window_honours_remove_all() -> None:
    window = window_messages(10)
    state = window([], conversation(2))
    assert window(state, [RemoveMessage(id=REMOVE_ALL_MESSAGES), HumanMessage("x", id="x")]) == [
        HumanMessage("x", id="x")
    ]


def test_reducer_validation() -> None:
    with pytest.raises(ValueError):
        window_messages()
    with pytest.raises(ValueError):
        window_messages(0)
    with pytest.raises(ValueError):
        dedupe_messages("middle")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        merge_profile({}, 3)


def test_merge_profile_deep_merges_and_deletes() -> None:
    profile = {"name": "Ada", "prefs": {"tz": "UTC", "lang": "en", "units": {"t": "C"}}}
    update = {"prefs": {"lang": None, "units": {"d": "km"}}, "name": None, "city": {"x": None}}
    assert merge_profile(profile, update) == {
        "prefs": {"tz": "UTC", "units": {"t": "C", "d": "km"}},
        "city": {},
    }
    assert profile["prefs"]["lang"] == "en", "the old value is untouched"
    assert merge_profile(profile, RemoveMessage(id="name")) == {"prefs": profile["prefs"]}
    assert merge_profile(profile, [RemoveMessage(id=REMOVE_ALL_MESSAGES), {"a": 1}]) == {"a": 1}


# ---------------------------------------------------------------------------------------------
# in LangGraph channels and graphs


def test_delta_channel_replay_rebuilds_the_live_value() -> None:
    """What DeltaChannel does on read (one reducer call over all saved writes) equals what
    the live run did step by step, including messages that arrived as tuples."""
    reducer = window_messages(max_turns=2)
    writes: list[Any] = [[("user", f"question {k}")] for k in range(2)]
    writes += [turn_messages(k) for k in range(2, 6)]
    live = DeltaChannel(reducer.fold, list)
    live = live.from_checkpoint(None)
    for write in writes:
        live.update([write])
    replayed = DeltaChannel(reducer.fold, list).from_checkpoint(None)
    replayed.replay_writes([("task", "messages", w) for w in writes])
    assert replayed.get() == live.get()
    assert sum(isinstance(m, HumanMessage) for m in live.get()) == 2


class WindowState(TypedDict, total=False):
    messages: Annotated[list[BaseMessage], DeltaChannel(window_messages(max_turns=3).fold)]
    profile: Annotated[dict[str, Any], merge_profile]


def _window_graph() -> StateGraph:
    def respond(state: WindowState) -> dict[str, Any]:
        k = sum(isinstance(m, HumanMessage) for m in state["messages"])
        last = state["messages"][-1]
        return {
            "messages": turn_messages(int(str(last.id)[1:]))[1:],
            "profile": {"turns_seen": k, "last": str(last.id), "draft": None},
        }

    builder = StateGraph(WindowState)
    builder.add_node("respond", respond)
    builder.add_edge(START, "respond")
    builder.add_edge("respond", END)
    return builder


@pytest.mark.storage
def test_window_and_profile_reducers_on_our_savers(saver_factory: Callable[..., Any]) -> None:
    """A DeltaChannel window and a profile survive a restart on every backend."""
    config = {"configurable": {"thread_id": "reducers-window"}}
    with saver_factory() as saver:
        graph = _window_graph().compile(checkpointer=saver)
        for k in range(8):
            live = graph.invoke(
                {"messages": [HumanMessage(f"q{k}", id=f"q{k}")], "profile": {"draft": k}},
                config,
            )
    with saver_factory() as saver:  # a new process
        state = _window_graph().compile(checkpointer=saver).get_state(config).values
    assert state["messages"] == live["messages"]
    assert [m.id for m in state["messages"] if isinstance(m, HumanMessage)] == ["q5", "q6", "q7"]
    assert provider_problems(state["messages"]) == []
    assert state["profile"] == {"turns_seen": 3, "last": "q7"}


def _fold_compare(fold: Callable[[Any, list[Any]], Any], writes: list[Any]) -> None:
    assert fold(fold([], writes[:1]), writes[1:]) == fold([], writes)


def test_fold_is_stable_object_for_channel_equality() -> None:
    reducer = window_messages(4)
    assert reducer.fold is reducer.fold
    assert DeltaChannel(reducer.fold) == DeltaChannel(reducer.fold)
    _fold_compare(reducer.fold, [[HumanMessage("a", id="a")], [AIMessage("b", id="b")]])
