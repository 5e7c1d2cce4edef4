"""Summarization: threshold, running summary, once-only summarizing, stable id, degradation."""

from __future__ import annotations

import logging
import re
from collections import Counter
from typing import Any

import pytest
from langchain_core.messages import BaseMessage, HumanMessage, get_buffer_string
from langgraph.graph import add_messages
from messages_support import SummaryModel, conversation, ids_in, markers_in, turn_messages

from langgraph_memory_plus.messages import (
    SUMMARY_ID,
    Summarizer,
    asummarize,
    provider_problems,
    summarize,
)
from langgraph_memory_plus.messages._policy import history_update
from langgraph_memory_plus.messages.tokens import count_tokens_script_aware

BUDGET = 300


def _play(summarizer: Summarizer, turns: int, *, persistent: bool) -> tuple[list[Any], Any]:
    """Grow a conversation turn by turn, compacting before each "model call" as a graph
    would; returns the model inputs seen and the final (history, memo)."""
    history: list[BaseMessage] = conversation(0)
    memo: Any = None
    inputs: list[list[BaseMessage]] = []
    for k in range(turns):
        history = add_messages(history, turn_messages(k))  # type: ignore[assignment]
        compaction = summarizer.apply(history, memo)
        inputs.append(compaction.model_input)
        if compaction.memo is not None:
            memo = compaction.memo
        if persistent and compaction.history is not None:
            update = history_update(history, compaction.history)
            history = add_messages(history, update or [])  # type: ignore[assignment]
    return inputs, (history, memo)


@pytest.mark.parametrize("persistent", [False, True], ids=["transient", "persistent"])
def test_every_message_is_summarized_once_and_input_stays_in_budget(persistent: bool) -> None:
    model = SummaryModel()
    summarizer = Summarizer(model, max_tokens=BUDGET, keep_last=4)
    inputs, (history, memo) = _play(summarizer, 40, persistent=persistent)

    assert len(model.prompts) >= 5, "the threshold was passed several times"
    summarized = Counter(marker for prompt in model.prompts for marker in markers_in(prompt))
    assert set(summarized.values()) == {1}, "no message was summarized twice"
    newest = max(int(re.findall(r"\d+", marker)[0]) for marker in summarized)
    expected = {m for k in range(newest) for m in markers_in(get_buffer_string(turn_messages(k)))}
    assert expected <= set(summarized), "every older message, oldest first, no gaps"
    assert memo["summarized_count"] > 0 and memo["summary"].startswith("summary#")
    for model_input in inputs:
        assert count_tokens_script_aware(model_input) <= BUDGET
        assert provider_problems(model_input) == []
    assert [m.id for m in inputs[-1]][:2] == ["sys", SUMMARY_ID]
    assert inputs[-1][-1].id == "q39-answer"
    if persistent:
        assert [m.id for m in history].count(SUMMARY_ID) == 1
        assert history[1].id == SUMMARY_ID and history[1].content.endswith(memo["summary"])
        assert len(history) < 20, "summarized messages left the state"
    else:
        assert len(history) == 1 + 40 * 4, "transient mode leaves the history alone"


def test_update_prompt_carries_the_previous_summary() -> None:
    model = SummaryModel()
    summarizer = Summarizer(
        model,
        max_tokens=BUDGET,
        keep_last=2,
        initial_prompt="FIRST {messages}",
        update_prompt="AGAIN <{summary}> {messages}",
    )
    _play(summarizer, 20, persistent=False)
    assert model.prompts[0].startswith("FIRST ")
    assert model.prompts[1].startswith("AGAIN <summary#0 covering")
    with pytest.raises(ValueError):
        Summarizer(model, max_tokens=10, update_prompt="{history}")


def test_below_threshold_nothing_happens() -> None:
    model = SummaryModel()
    history = conversation(2)
    result = summarize(history, None, model=model, max_tokens=10_000)
    assert result["messages"] == history and result["running_summary"] is None
    assert model.prompts == []


@pytest.mark.parametrize("failure", ["error", "empty"])
def test_model_failure_degrades_to_trimming_and_is_retried(
    failure: str, caplog: pytest.LogCaptureFixture
) -> None:
    model = SummaryModel(**({"fail_on": {0}} if failure == "error" else {"empty_on": {0}}))
    history = conversation(12)
    with caplog.at_level(logging.WARNING, logger="langgraph_memory_plus.messages.summarization"):
        first = summarize(history, None, model=model, max_tokens=BUDGET)
    assert first["running_summary"] is None
    assert count_tokens_script_aware(first["messages"]) <= BUDGET
    assert provider_problems(first["messages"]) == []
    assert SUMMARY_ID not in [m.id for m in first["messages"]]
    assert "summarization failed" in caplog.text
    second = summarize(history, None, model=model, max_tokens=BUDGET)
    assert second["running_summary"] is not None
    assert set(ids_in(model.prompts[1])) == set(ids_in(model.prompts[0])), "retried as a whole"


def test_trigger_below_budget_and_system_kept() -> None:
    model = SummaryModel()
    history = conversation(6)
    tokens = count_tokens_script_aware(history)
    result = summarize(history, None, model=model, max_tokens=10_000, trigger_tokens=tokens - 1)
    assert result["running_summary"] is not None
    assert [m.id for m in result["messages"]][:2] == ["sys", SUMMARY_ID]
    assert isinstance(result["messages"][1], HumanMessage)


def test_verbatim_part_keeps_the_current_question_and_whole_tool_groups() -> None:
    model = SummaryModel()
    history = conversation(6)
    # keep_last=2 would start inside q5's turn: the current question stays verbatim
    result = summarize(
        history, None, model=model, max_tokens=10_000, trigger_tokens=10, keep_last=2
    )
    assert [m.id for m in result["messages"]][2:] == ["q5", "q5-call", "q5-r", "q5-answer"]
    assert result["running_summary"] is not None
    assert result["running_summary"]["last_summarized_id"] == "q4-answer"
    # with a newer question, keep_last=3 would start on q5's tool result: moved to the call
    asked = [*history, HumanMessage("q6: and then?", id="q6")]
    result = summarize(asked, None, model=model, max_tokens=10_000, trigger_tokens=10, keep_last=3)
    assert [m.id for m in result["messages"]][2:] == ["q5-call", "q5-r", "q5-answer", "q6"]


async def test_asummarize_awaits_the_model() -> None:
    model = SummaryModel()
    result = await asummarize(conversation(12), None, model=model, max_tokens=BUDGET)
    assert result["running_summary"] is not None and len(model.prompts) == 1
    assert count_tokens_script_aware(result["messages"]) <= BUDGET
