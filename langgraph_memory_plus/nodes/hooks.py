"""The nodes as LangGraph nodes and ``create_react_agent`` pre/post-model hooks.

Same contract as the context tools' hooks (:mod:`langgraph_memory_plus.messages.hooks`):
a runnable with a sync and an async body, reading the state whether its schema is a
TypedDict or a Pydantic model.

* :class:`ProfileHook` (before the model; ``injector.hook(mode)``) returns
  ``llm_input_messages`` (the model input; ``create_react_agent`` reads it instead of
  ``messages``) and, in the frozen and replace modes, the ``messages`` update that puts
  the profile into the thread (``RemoveMessage`` / ``REMOVE_ALL_MESSAGES`` through
  ``history_update``). Like the context hooks it always sets ``llm_input_messages``
  when it has an ``input_key``: the agent keeps that key in state, so a hook that set it
  once must keep it current.
* :class:`PostModelHook` (after the model; ``learner.hook()``,
  ``injector.prefetch_hook()``) writes nothing to the state; it works on the store.

Each reads the run's config (for ``user_id`` in ``configurable``) from the argument
LangGraph passes to runnables that accept one, and the runtime (store, context) from the
running graph.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from langchain_core.messages import BaseMessage
from langchain_core.runnables import RunnableConfig, RunnableLambda

from ..messages._core import coerce_messages
from ..messages._policy import Compaction, history_update
from ..messages.hooks import read_state
from ._adapting import Prefetches
from .profile import MODES, InjectionMode, ProfileInjector

if TYPE_CHECKING:
    from .preferences import PreferenceLearner


def state_messages(state: Any, key: str = "messages") -> list[BaseMessage]:
    """The state's conversation as message objects."""
    return coerce_messages(read_state(state, key) or [])


def injection_update(
    messages: Sequence[BaseMessage],
    compaction: Compaction,
    *,
    messages_key: str = "messages",
    input_key: str | None = "llm_input_messages",
) -> dict[str, Any]:
    """The state update for an injection: the model input and the history change, if any."""
    out: dict[str, Any] = {}
    if input_key is not None:
        out[input_key] = compaction.model_input
    if compaction.history is not None:
        change = history_update(messages, compaction.history)
        if change is not None:
            out[messages_key] = change
    return out


@dataclass
class ProfileHook:
    """The node behind ``injector.hook(mode)``.

    In a hand-built graph, put it before the model node; with ``input_key=None`` the
    persistent modes only update ``messages`` and the model node reads those.
    """

    injector: ProfileInjector
    mode: InjectionMode
    messages_key: str = "messages"
    input_key: str | None = "llm_input_messages"

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {self.mode!r}")
        if self.mode == "transient" and self.input_key is None:
            raise ValueError("transient mode needs an input_key to put the model input in")

    def _update(self, messages: list[BaseMessage], compaction: Compaction) -> dict[str, Any]:
        return injection_update(
            messages, compaction, messages_key=self.messages_key, input_key=self.input_key
        )

    def invoke(self, state: Any, config: RunnableConfig) -> dict[str, Any]:
        messages = state_messages(state, self.messages_key)
        compaction = self.injector.apply(messages, mode=self.mode, config=config)
        return self._update(messages, compaction)

    async def ainvoke(self, state: Any, config: RunnableConfig) -> dict[str, Any]:
        messages = state_messages(state, self.messages_key)
        compaction = await self.injector.aapply(messages, mode=self.mode, config=config)
        return self._update(messages, compaction)


class PostModelHook:
    """The node behind ``learner.hook()`` and ``injector.prefetch_hook()``: learn from the
    user's turn (if given a learner), then start the next turn's read (if given an
    injector), in that order so the read sees what was just learned."""

    def __init__(
        self,
        learner: PreferenceLearner | None,
        *,
        prefetch: Prefetches | None = None,
        messages_key: str = "messages",
    ) -> None:
        self.learner = learner
        self.prefetch = prefetch
        self.messages_key = messages_key

    def _then_prefetch(self, config: RunnableConfig) -> dict[str, Any]:
        if self.prefetch is not None:
            self.prefetch.prefetch(config=config)
        return {}

    def invoke(self, state: Any, config: RunnableConfig) -> dict[str, Any]:
        if self.learner is not None:
            self.learner.apply(state_messages(state, self.messages_key), config=config)
        return self._then_prefetch(config)

    async def ainvoke(self, state: Any, config: RunnableConfig) -> dict[str, Any]:
        if self.learner is not None:
            await self.learner.aapply(state_messages(state, self.messages_key), config=config)
        return self._then_prefetch(config)


def as_node(hook: ProfileHook | PostModelHook, name: str) -> RunnableLambda[Any, dict[str, Any]]:
    """A hook as a runnable with both a sync and an async body, so ``ainvoke`` on the
    graph awaits the store instead of blocking a worker thread on it."""
    return RunnableLambda(hook.invoke, afunc=hook.ainvoke, name=name)
