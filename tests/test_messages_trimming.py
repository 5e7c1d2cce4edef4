"""Trimming: budgets by tokens, messages and turns, and the provider rules on every result."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
    trim_messages,
)
from langchain_core.messages.utils import count_tokens_approximately
from messages_support import conversation, turn_messages

from langgraph_memory_plus.messages import (
    Trimmer,
    provider_problems,
    repair_tool_pairs,
    trim,
)
from langgraph_memory_plus.messages._policy import history_update
from langgraph_memory_plus.messages.tokens import count_tokens_script_aware


def ids(messages: list[BaseMessage]) -> list[str | None]:
    return [m.id for m in messages]


@st.composite
def conversations(draw: st.DrawFn) -> list[BaseMessage]:
    """Realistic histories: turns of a question, 0-3 tool steps (some parallel), an answer;
    sometimes a trailing tool call still waiting for its results."""
    out: list[BaseMessage] = []
    if draw(st.booleans()):
        out.append(SystemMessage("system " * draw(st.integers(1, 20)), id="sys"))
    for k in range(draw(st.integers(0, 12))):
        out.append(HumanMessage(f"q{k} " + "word " * draw(st.integers(0, 40)), id=f"q{k}"))
        for step in range(draw(st.integers(0, 3))):
            calls = [
                {"name": "t", "args": {"n": i}, "id": f"c{k}-{step}-{i}"}
                for i in range(draw(st.integers(1, 3)))
            ]
            out.append(AIMessage("", id=f"a{k}-{step}", tool_calls=calls))
            for call in calls:
                size = draw(st.integers(0, 60))
                out.append(ToolMessage("r " * size, tool_call_id=call["id"], id=f"{call['id']}-r"))
        out.append(AIMessage(f"answer {k} " + "text " * draw(st.integers(0, 30)), id=f"f{k}"))
    if out and draw(st.integers(0, 4)) == 0:
        call = {"name": "t", "args": {}, "id": "pending"}
        out.append(AIMessage("", id="waiting", tool_calls=[call]))
    return out


def _ends_in_pending_call(messages: list[BaseMessage]) -> bool:
    return bool(messages) and messages[-1].id == "waiting"


@settings(max_examples=200, deadline=None)
@given(history=conversations(), budget=st.integers(20, 600))
def test_token_trim_respects_budget_and_provider_rules(
    history: list[BaseMessage], budget: int
) -> None:
    trimmed = Trimmer(max_tokens=budget)(history)
    system = [m for m in history if isinstance(m, SystemMessage)]
    humans = [m for m in history if isinstance(m, HumanMessage)]
    assert trimmed[: len(system)] == system, "the system prompt is always kept"
    assert all(m in history for m in trimmed) and ids(trimmed) == [
        m.id for m in history if m.id in set(ids(trimmed))
    ], "trimming only drops, never reorders or invents"
    problems = provider_problems(trimmed[:-1] if _ends_in_pending_call(history) else trimmed)
    if humans:
        assert problems == []
        assert humans[-1] in trimmed, "the newest question is never trimmed away"
        newest_turn_alone = [*system, humans[-1]]
        if count_tokens_script_aware(newest_turn_alone) <= budget:
            assert count_tokens_script_aware(trimmed) <= budget


@settings(max_examples=120, deadline=None)
@given(history=conversations(), limit=st.integers(1, 12), by=st.sampled_from(["msgs", "turns"]))
def test_count_trim_respects_limits(history: list[BaseMessage], limit: int, by: str) -> None:
    options: dict[str, Any] = {"max_messages": limit} if by == "msgs" else {"max_turns": limit}
    trimmed = trim(history, **options)
    body = [m for m in trimmed if not isinstance(m, SystemMessage)]
    if by == "turns":
        assert sum(isinstance(m, HumanMessage) for m in body) <= limit
    elif any(isinstance(m, HumanMessage) for m in history):
        assert len(body) <= limit or len(body) == 1
    if any(isinstance(m, HumanMessage) for m in history) and not _ends_in_pending_call(history):
        assert provider_problems(trimmed) == []


@settings(max_examples=120, deadline=None)
@given(history=conversations(), budget=st.integers(20, 600))
def test_first_strategy_keeps_a_valid_prefix(history: list[BaseMessage], budget: int) -> None:
    trimmed = Trimmer(max_tokens=budget, strategy="first")(history)
    system = [m for m in history if isinstance(m, SystemMessage)]
    body = trimmed[len(system) :]
    assert trimmed[: len(system)] == system
    assert ids(body) == [m.id for m in history if m.id in set(ids(body))]
    assert provider_problems(body[:-1] if body and body[-1].id == "waiting" else body) == []
    if count_tokens_script_aware(system) <= budget:
        assert count_tokens_script_aware(trimmed) <= budget


def test_matches_trim_messages_when_tool_pairing_is_not_at_stake() -> None:
    """Without tool calls the result is exactly langchain_core's trim_messages, except when
    not even the last turn fits: there trim_messages keeps no question at all."""
    history = conversation(8, tools=False)
    squeezed = trim_messages(
        history, max_tokens=30, token_counter="approximate", start_on="human", include_system=True
    )
    assert ids(squeezed) == ["sys"]
    same = {"token_counter": count_tokens_approximately}
    assert ids(Trimmer(max_tokens=30, **same)(history)) == ["sys", "q7"]
    for budget in (80, 150, 400):
        ours = Trimmer(max_tokens=budget, **same)(history)
        theirs = trim_messages(
            history,
            max_tokens=budget,
            token_counter=count_tokens_approximately,
            strategy="last",
            start_on="human",
            include_system=True,
        )
        assert ours == theirs


def test_trim_messages_alone_would_orphan_a_tool_result() -> None:
    """The case this module exists for: a cut between a call and its results."""
    history = [
        HumanMessage("q0 question", id="q0"),
        AIMessage("", id="a0", tool_calls=[{"name": "t", "args": {}, "id": "c0"}]),
        HumanMessage("interjection while the tool runs", id="q1"),
        ToolMessage("r " * 30, tool_call_id="c0", id="r0"),
        AIMessage("answer", id="f0"),
    ]
    theirs = trim_messages(
        history,
        max_tokens=60,
        token_counter=count_tokens_approximately,
        start_on="human",
    )
    assert provider_problems(theirs) != []
    ours = Trimmer(max_tokens=60)(history)
    assert provider_problems(ours) == []
    assert history[2] in ours


def test_current_turn_kept_when_the_whole_turn_does_not_fit() -> None:
    """A long tool loop: the question stays, with the newest steps that fit."""
    turn: list[BaseMessage] = [HumanMessage("q0 what is up", id="q0")]
    for step in range(6):
        turn.append(
            AIMessage("", id=f"a{step}", tool_calls=[{"name": "t", "args": {}, "id": f"c{step}"}])
        )
        turn.append(ToolMessage("data " * 40, tool_call_id=f"c{step}", id=f"r{step}"))
    history = [SystemMessage("sys", id="sys"), *turn]
    trimmed = Trimmer(max_tokens=180)(history)
    assert ids(trimmed)[:2] == ["sys", "q0"]
    assert ids(trimmed)[-2:] == ["a5", "r5"]
    assert "a0" not in ids(trimmed)
    assert provider_problems(trimmed) == []
    assert count_tokens_script_aware(trimmed) <= 180


def test_all_leading_system_messages_kept_and_budget_counts_them() -> None:
    history = [
        SystemMessage("a " * 40, id="s1"),
        SystemMessage("b " * 40, id="s2"),
        *conversation(4, system=False),
    ]
    trimmed = Trimmer(max_tokens=150)(history)
    assert ids(trimmed)[:2] == ["s1", "s2"]
    assert count_tokens_script_aware(trimmed) <= 150
    assert provider_problems(trimmed) == []
    without = Trimmer(max_tokens=150, keep_system=False)(history)
    assert "s1" not in ids(without)


def test_model_style_counter_with_per_request_overhead() -> None:
    """A counter that is not additive per message (fixed overhead) still ends in budget."""

    def counter(messages: list[BaseMessage]) -> int:
        return 50 + count_tokens_approximately(messages)

    history = conversation(10)
    trimmed = Trimmer(max_tokens=300, token_counter=counter)(history)
    assert counter(trimmed) <= 300
    assert provider_problems(trimmed) == []


def test_trailing_pending_call_kept_or_dropped() -> None:
    waiting = AIMessage("", id="w", tool_calls=[{"name": "t", "args": {}, "id": "cw"}])
    history = [*conversation(2), HumanMessage("q2", id="q2"), waiting]
    assert Trimmer(max_turns=1)(history)[-1] is waiting
    assert Trimmer(max_turns=1, keep_pending=False)(history)[-1].id == "q2"
    # an unanswered call that is not at the end is never pending: dropped
    broken = [*history, HumanMessage("q3", id="q3")]
    assert "w" not in ids(Trimmer(max_turns=2)(broken))


def test_repair_tool_pairs() -> None:
    history = [
        ToolMessage("orphan", tool_call_id="nope", id="o"),
        HumanMessage("q", id="q"),
        AIMessage(
            "",
            id="a",
            tool_calls=[
                {"name": "t", "args": {}, "id": "c1"},
                {"name": "t", "args": {}, "id": "c2"},
            ],
        ),
        ToolMessage("r1", tool_call_id="c1", id="r1"),
        HumanMessage("q again", id="q2"),
        AIMessage("fine", id="f"),
    ]
    assert ids(repair_tool_pairs(history)) == ["q", "q2", "f"]


def test_first_strategy_and_validation() -> None:
    history = conversation(5)
    first = Trimmer(max_tokens=120, strategy="first")(history)
    assert ids(first)[:2] == ["sys", "q0"]
    assert provider_problems(first) == []
    assert count_tokens_script_aware(first) <= 120
    with pytest.raises(ValueError):
        Trimmer()
    with pytest.raises(ValueError):
        Trimmer(max_tokens=10, strategy="middle")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        Trimmer(max_tokens=10, token_counter=3)  # type: ignore[arg-type]


def test_history_update_is_surgical_when_it_can_be() -> None:
    old = conversation(3)
    new = [old[0], *old[5:]]
    update = history_update(old, new)
    assert update is not None and all(m.type == "remove" for m in update)
    assert {m.id for m in update} == {m.id for m in old[1:5]}
    assert history_update(old, list(old)) is None
    reordered = [old[0], HumanMessage("summary", id="summary"), *old[5:]]
    full = history_update(old, reordered)
    assert full is not None and full[0].id == "__remove_all__" and full[1:] == reordered


def test_trim_returns_the_same_objects() -> None:
    history = [*conversation(3), *turn_messages(3)]
    assert all(any(m is h for h in history) for m in Trimmer(max_tokens=100)(history))


def test_package_imports_without_langchain() -> None:
    """The agents extra is optional: only the middleware module needs ``langchain``."""
    import subprocess
    import sys

    script = (
        "import sys; sys.modules['langchain'] = None\n"
        "import langgraph_memory_plus.messages as m\n"
        "m.Trimmer(max_tokens=10).hook()\n"
        "try:\n"
        "    import langgraph_memory_plus.messages.middleware\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert "pip install 'langgraph-memory-plus[agents]'" in out.stdout


# -- counting each message once per search ---------------------------------------------------


@settings(max_examples=150, deadline=None)
@given(conversations(), st.integers(0, 400), st.sampled_from(["last", "first"]))
def test_counting_each_message_once_trims_as_counting_every_time(
    messages: list[BaseMessage], budget: int, strategy: Any
) -> None:
    """The default counter is additive, so a search counts each message once; a wrapper
    the package cannot know is additive takes the counting-every-time path. Both keep
    the very same messages."""
    once = Trimmer(max_tokens=budget, strategy=strategy)
    every_time = Trimmer(
        max_tokens=budget, strategy=strategy, token_counter=lambda m: count_tokens_script_aware(m)
    )
    assert once(messages) == every_time(messages)
    assert [id(m) for m in once(messages)] == [id(m) for m in every_time(messages)]


def test_a_search_counts_each_message_once_and_forgets_the_counts_after() -> None:
    """Measured on an exact counter (additive too): one count of each text per trim,
    not one per candidate cut; and a second trim counts afresh, so a message edited in
    between is counted as it is now."""
    pytest.importorskip("bpe_openai")
    from langgraph_memory_plus.messages import ExactTokenCounter

    seen: list[str] = []

    class Recording(ExactTokenCounter):
        def text_tokens(self, text: str) -> int:
            seen.append(text)
            return super().text_tokens(text)

    history: list[BaseMessage] = []
    for k in range(40):
        history.append(HumanMessage(f"question {k} " + "word " * 30, id=f"q{k}"))
        history.append(AIMessage(f"answer {k} " + "text " * 30, id=f"a{k}"))
    trimmer = Trimmer(max_tokens=800, token_counter=Recording())
    kept = trimmer(history)
    assert 2 < len(kept) < len(history)
    assert sorted(seen) == sorted(m.text for m in history)  # each text once

    seen.clear()
    history[-2].content = "question 39 " + "word " * 2000  # now over the budget alone
    again = trimmer(history)
    assert any("word " * 2000 in text for text in seen)
    assert again != kept
