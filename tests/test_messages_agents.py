"""End to end: context tools inside real agents, checkpointed by our savers.

Two agent builders, each with the tool as a pre-model hook / middleware, in both modes:
``langgraph.prebuilt.create_react_agent(pre_model_hook=...)`` and
``langchain.agents.create_agent(middleware=[...])``. The fake model records every input, so
the tests check the provider rules and the token budget on each call, then read the
checkpoint back through a *new* saver (a restart) to see what was persisted.
"""

from __future__ import annotations

import warnings
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import BaseMessage, HumanMessage, ToolMessage
from langgraph.graph import MessagesState
from messages_support import AgentModel, SummaryModel, lookup, markers_in
from typing_extensions import NotRequired

from langgraph_memory_plus.messages import (
    SUMMARY_ID,
    Mode,
    RunningSummary,
    Summarizer,
    Trimmer,
    provider_problems,
)
from langgraph_memory_plus.messages.tokens import count_tokens_script_aware

pytestmark = pytest.mark.storage

BUDGET = 400
# The long scenarios run on one backend each (together they cover all three); the short
# ones run on one backend too unless what they check depends on the storage.
ON_POSTGRES = pytest.mark.parametrize("backend", ["postgres"], indirect=True)
ON_REDIS = pytest.mark.parametrize("backend", ["redis"], indirect=True)
ON_CLUSTER = pytest.mark.parametrize("backend", ["redis-cluster"], indirect=True)


def react_agent(model: AgentModel, hook: Any, checkpointer: Any, **options: Any) -> Any:
    from langgraph.prebuilt import create_react_agent

    with warnings.catch_warnings():  # it is deprecated in favour of create_agent, still used
        warnings.simplefilter("ignore")
        return create_react_agent(
            model, [lookup], pre_model_hook=hook, checkpointer=checkpointer, **options
        )


class SummaryAgentState(MessagesState):
    remaining_steps: NotRequired[int]
    running_summary: NotRequired[RunningSummary]


def question(k: int) -> dict[str, Any]:
    return {"messages": [HumanMessage(f"q{k}: tell me about topic {k}", id=f"q{k}")]}


def assert_inputs_valid(model: AgentModel, budget: int = BUDGET, system: int = 0) -> None:
    assert model.inputs, "the model was called"
    for n, model_input in enumerate(model.inputs):
        assert count_tokens_script_aware(model_input) <= budget, f"call {n} over budget"
        assert provider_problems(model_input) == [], f"call {n}: {provider_problems(model_input)}"


def converse(
    saver_factory: Callable[..., Any], build: Callable[[Any], Any], thread: str, turns: int
) -> dict[str, Any]:
    """Ask ``turns`` questions of the agent ``build(saver)`` makes, then read the thread's
    state back through a new saver and agent, as a restarted process would."""
    config = {"configurable": {"thread_id": thread}}
    with saver_factory() as saver:
        agent = build(saver)
        for k in range(turns):
            agent.invoke(question(k), config)
    with saver_factory() as saver:
        return dict(build(saver).get_state(config).values)


# ---------------------------------------------------------------------------------------------
# the 100-turn conversations


@ON_POSTGRES
def test_react_agent_100_turns_transient_trimming(saver_factory: Callable[..., Any]) -> None:
    model = AgentModel()
    hook = Trimmer(max_tokens=BUDGET).hook("transient")
    values = converse(saver_factory, lambda s: react_agent(model, hook, s), "react-100", 100)
    assert len(model.inputs) == 200
    assert_inputs_valid(model)
    assert [ask.id for ask in _questions_asked(model)] == [f"q{k // 2}" for k in range(200)]
    messages = values["messages"]
    assert len(messages) == 400, "the checkpoint keeps all 100 turns"
    assert [m.id for m in messages if isinstance(m, HumanMessage)] == [f"q{k}" for k in range(100)]
    assert sum(isinstance(m, ToolMessage) for m in messages) == 100


def _questions_asked(model: AgentModel) -> list[BaseMessage]:
    """The newest question in each model input."""
    return [next(m for m in reversed(i) if isinstance(m, HumanMessage)) for i in model.inputs]


def _agent(model: AgentModel, middleware: Any, **options: Any) -> Callable[[Any], Any]:
    return lambda saver: create_agent(
        model, [lookup], middleware=[middleware], checkpointer=saver, **options
    )


@ON_REDIS
def test_agent_middleware_100_turns_transient_trimming(saver_factory: Callable[..., Any]) -> None:
    model = AgentModel()
    middleware = Trimmer(max_tokens=BUDGET).middleware("transient")
    build = _agent(model, middleware, system_prompt="Be brief.")
    messages = converse(saver_factory, build, "agent-100", 100)["messages"]
    assert len(model.inputs) == 200
    assert_inputs_valid(model)
    assert all(i[0].content == "Be brief." for i in model.inputs), "the system prompt is kept"
    assert len(messages) == 400
    assert [m.id for m in messages if isinstance(m, HumanMessage)] == [f"q{k}" for k in range(100)]


# ---------------------------------------------------------------------------------------------
# persistent mode


def test_react_agent_persistent_trimming_rewrites_state(saver_factory: Callable[..., Any]) -> None:
    model = AgentModel()
    hook = Trimmer(max_tokens=BUDGET).hook("persistent")
    values = converse(saver_factory, lambda s: react_agent(model, hook, s), "react-trim", 12)
    assert_inputs_valid(model)
    messages = values["messages"]
    assert messages[-1].id == "q11-answer"
    assert "q0" not in [m.id for m in messages], "old turns were removed from state"
    # what is stored is the last trimmed input plus the reply: within budget but for that reply
    assert count_tokens_script_aware(messages[:-1]) <= BUDGET
    assert provider_problems(messages) == []


@ON_REDIS
def test_agent_middleware_persistent_trimming(saver_factory: Callable[..., Any]) -> None:
    model = AgentModel()
    build = _agent(model, Trimmer(max_turns=2).middleware("persistent"))
    messages = converse(saver_factory, build, "agent-trim", 10)["messages"]
    assert [m.id for m in messages if isinstance(m, HumanMessage)] == ["q8", "q9"]
    assert provider_problems(messages) == []
    assert all(sum(isinstance(m, HumanMessage) for m in i) <= 2 for i in model.inputs)


# ---------------------------------------------------------------------------------------------
# summarization inside agents


def _summary_agent(mode: Mode) -> tuple[AgentModel, SummaryModel, Callable[[Any], Any]]:
    model, summary_model = AgentModel(), SummaryModel()
    hook = Summarizer(summary_model, max_tokens=BUDGET, keep_last=4).hook(mode)
    return (
        model,
        summary_model,
        lambda s: react_agent(model, hook, s, state_schema=SummaryAgentState),
    )


@ON_CLUSTER
def test_react_agent_transient_summary_runs_100_turns(saver_factory: Callable[..., Any]) -> None:
    model, summary_model, build = _summary_agent("transient")
    values = converse(saver_factory, build, "react-summary", 100)
    assert_inputs_valid(model)
    assert sum(m.id == SUMMARY_ID for i in model.inputs[20:] for m in i) == len(model.inputs) - 20
    summarized = Counter(marker for p in summary_model.prompts for marker in markers_in(p))
    assert set(summarized.values()) == {1}, "no message was summarized twice"
    assert len(summarized) > 300
    assert len(values["messages"]) == 400
    running = values["running_summary"]
    assert running["summary"].startswith(f"summary#{len(summary_model.prompts) - 1} ")
    assert running["summarized_count"] > 300


def test_react_agent_persistent_summary_keeps_one_summary(
    saver_factory: Callable[..., Any],
) -> None:
    model, _, build = _summary_agent("persistent")
    values = converse(saver_factory, build, "react-persistent-summary", 15)
    assert_inputs_valid(model)
    ids = [m.id for m in values["messages"]]
    assert ids.count(SUMMARY_ID) == 1 and ids[0] == SUMMARY_ID
    assert values["messages"][0].content.endswith(values["running_summary"]["summary"])
    assert len(ids) < 20


@ON_REDIS
def test_summary_model_failure_never_fails_the_turn(saver_factory: Callable[..., Any]) -> None:
    model, summary_model = AgentModel(), SummaryModel(fail_on=set(range(100)))
    hook = Summarizer(summary_model, max_tokens=BUDGET).hook("persistent")
    build = lambda s: react_agent(model, hook, s, state_schema=SummaryAgentState)  # noqa: E731
    values = converse(saver_factory, build, "react-summary-failing", 10)
    assert len(summary_model.prompts) > 3, "it kept trying"
    assert_inputs_valid(model)
    assert len(values["messages"]) == 40, "nothing was removed without a summary"
    assert "running_summary" not in values


@ON_REDIS
@pytest.mark.parametrize("mode", ["transient", "persistent"])
def test_agent_middleware_summaries(saver_factory: Callable[..., Any], mode: Mode) -> None:
    model, summary_model = AgentModel(), SummaryModel()
    middleware = Summarizer(summary_model, max_tokens=BUDGET, keep_last=4).middleware(mode)
    values = converse(saver_factory, _agent(model, middleware), f"agent-summary-{mode}", 20)
    assert_inputs_valid(model)
    assert summary_model.prompts and values["running_summary"]["summary"].startswith("summary#")
    stored = [m.id for m in values["messages"]]
    if mode == "transient":
        assert len(stored) == 80 and SUMMARY_ID not in stored
    else:
        assert stored.count(SUMMARY_ID) == 1 and len(stored) < 20


# ---------------------------------------------------------------------------------------------
# async paths and streaming


@ON_REDIS
async def test_async_agents_use_the_async_savers(async_saver_factory: Callable[..., Any]) -> None:
    model, summary_model = AgentModel(), SummaryModel()
    summarizer = Summarizer(summary_model, max_tokens=BUDGET, keep_last=4)
    config = {"configurable": {"thread_id": "async-agents"}}
    async with async_saver_factory() as saver:
        react = react_agent(
            model, summarizer.hook("transient"), saver, state_schema=SummaryAgentState
        )
        agent = create_agent(
            model, [lookup], middleware=[summarizer.middleware("transient")], checkpointer=saver
        )
        for k in range(15):
            await react.ainvoke(question(k), config)
            await agent.ainvoke(question(k), {"configurable": {"thread_id": "async-agents-2"}})
        values = (await react.aget_state(config)).values
    assert_inputs_valid(model)
    assert len(values["messages"]) == 60 and values["running_summary"]["summarized_count"] > 0


def test_summary_tokens_are_not_streamed_to_the_app() -> None:
    from langgraph.checkpoint.memory import InMemorySaver

    model, summary_model = AgentModel(), SummaryModel()
    hook = Summarizer(summary_model, max_tokens=BUDGET, keep_last=2).hook("transient")
    agent = react_agent(model, hook, InMemorySaver(), state_schema=SummaryAgentState)
    config = {"configurable": {"thread_id": "stream"}}
    streamed: list[str] = []
    for k in range(10):
        for chunk, _meta in agent.stream(question(k), config, stream_mode="messages"):
            streamed.append(str(chunk.content))
    assert summary_model.prompts, "a summary was made"
    assert any("Answer to" in text for text in streamed), "the agent's own replies stream"
    assert not any(text.startswith("summary#") for text in streamed)
