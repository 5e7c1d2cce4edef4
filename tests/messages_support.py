"""Deterministic models, tools and conversations for the ``test_messages_*`` tests.

``AgentModel`` plays a tool-using assistant without any randomness: asked a question it
calls the ``lookup`` tool once, given the tool's result it answers, and it records every
input it was given, so a test can check what the model saw on each call. ``SummaryModel``
writes a summary that names each message it was given (so a test can tell which messages
were summarized, and how often) and can be told to fail.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from typing import Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.tools import tool
from pydantic import Field

from langgraph_memory_plus.messages import SUMMARY_ID


@tool
def lookup(query: str) -> str:
    """Look something up (deterministic: the answer only depends on the query)."""
    return f"facts about {query}: " + " ".join(f"fact{i}" for i in range(24))


class ScriptedModel(BaseChatModel):
    """Base of the fakes: a chat model whose reply is computed by ``reply``."""

    @property
    def _llm_type(self) -> str:
        return type(self).__name__

    def reply(self, messages: list[BaseMessage]) -> AIMessage:
        raise NotImplementedError

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        return ChatResult(generations=[ChatGeneration(message=self.reply(messages))])


class AgentModel(ScriptedModel):
    """A tool-calling chat model that answers from its input alone."""

    inputs: list[list[BaseMessage]] = Field(default_factory=list)

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> AgentModel:  # type: ignore[override]
        return self

    def reply(self, messages: list[BaseMessage]) -> AIMessage:
        self.inputs.append(list(messages))
        question = next(
            m for m in reversed(messages) if isinstance(m, HumanMessage) and m.id != SUMMARY_ID
        )
        last = messages[-1]
        if isinstance(last, ToolMessage):
            reply = AIMessage(
                content=f"Answer to {question.id}: " + " ".join(["detail"] * 20),
                id=f"{question.id}-answer",
            )
        else:
            reply = AIMessage(
                content="",
                id=f"{question.id}-call",
                tool_calls=[
                    {
                        "name": "lookup",
                        "args": {"query": str(question.id)},
                        "id": f"{question.id}-c",
                    }
                ],
            )
        return reply


class SummaryModel(ScriptedModel):
    """Summarizes by listing the ids it was shown; fails on the calls listed in ``fail_on``."""

    prompts: list[str] = Field(default_factory=list)
    fail_on: set[int] = Field(default_factory=set)
    empty_on: set[int] = Field(default_factory=set)

    def reply(self, messages: list[BaseMessage]) -> AIMessage:
        call = len(self.prompts)
        prompt = str(messages[-1].content)
        self.prompts.append(prompt)
        if call in self.fail_on:
            raise RuntimeError(f"summary model unavailable (call {call})")
        text = "" if call in self.empty_on else f"summary#{call} covering {len(ids_in(prompt))}"
        return AIMessage(content=text)


_ID = re.compile(r"\bq\d+\b")
_MARKER = re.compile(r"tell me about topic \d+|'query': 'q\d+'|facts about q\d+|Answer to q\d+")


def ids_in(text: str) -> list[str]:
    """Question ids (``q12``) mentioned in a text; the conversations below use them."""
    return _ID.findall(text)


def markers_in(text: str) -> list[str]:
    """One marker per message of the conversations here (question, tool call, tool result,
    answer each say something unique), so counting markers in summary prompts counts how
    often each message was summarized."""
    return _MARKER.findall(text)


def conversation(turns: int, *, tools: bool = True, system: bool = True) -> list[BaseMessage]:
    """A finished conversation: per turn a question, a tool call and result, an answer."""
    out: list[BaseMessage] = [SystemMessage("You are terse.", id="sys")] if system else []
    for k in range(turns):
        out.extend(turn_messages(k, tools=tools))
    return out


def turn_messages(k: int, *, tools: bool = True) -> list[BaseMessage]:
    """One turn, worded as ``AgentModel`` and ``lookup`` would word it."""
    out: list[BaseMessage] = [HumanMessage(f"q{k}: tell me about topic {k}", id=f"q{k}")]
    if tools:
        out.append(
            AIMessage(
                "",
                id=f"q{k}-call",
                tool_calls=[{"name": "lookup", "args": {"query": f"q{k}"}, "id": f"q{k}-c"}],
            )
        )
        out.append(
            ToolMessage(lookup.invoke({"query": f"q{k}"}), tool_call_id=f"q{k}-c", id=f"q{k}-r")
        )
    out.append(AIMessage(f"Answer to q{k}: " + " ".join(["detail"] * 20), id=f"q{k}-answer"))
    return out


class StreamingModel(ScriptedModel):
    """Streams a deterministic answer word by word; records prompts; can fail mid-stream."""

    prompts: list[list[BaseMessage]] = Field(default_factory=list)
    fail_after_words: int | None = None

    def reply(self, messages: list[BaseMessage]) -> AIMessage:
        self.prompts.append(list(messages))
        question = str(messages[-1].content)
        text = f"Here is what I know about {question}. " + " ".join(["More"] * 30) + " Done."
        return AIMessage(content=text)

    def _stream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> Iterator[ChatGenerationChunk]:
        words = str(self.reply(messages).content).split(" ")
        for n, word in enumerate(words):
            if self.fail_after_words is not None and n == self.fail_after_words:
                raise ConnectionError("stream cut")
            text = word if n == 0 else f" {word}"
            yield ChatGenerationChunk(message=AIMessageChunk(content=text))  # callbacks: base
