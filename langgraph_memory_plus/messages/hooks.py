"""Context tools as LangGraph nodes and ``create_react_agent`` pre-model hooks.

``langgraph.prebuilt.create_react_agent(pre_model_hook=...)`` runs the hook as a node
before every model call and reads two keys of its update: ``messages`` (applied to state
through the reducer) and ``llm_input_messages`` (used as the model input instead of
``messages``, without touching state). The node built here returns:

* transient mode: ``llm_input_messages`` only, so the checkpoint keeps the full history;
* persistent mode: a ``messages`` update (``RemoveMessage``s, or ``REMOVE_ALL_MESSAGES``
  and the new list) *and* ``llm_input_messages``. The latter matters: the agent stores
  ``llm_input_messages`` as an ordinary state key and prefers it over ``messages``, so a
  hook that ever set it (say, after a summary model failure) must keep setting it, or a
  later call would see a stale input.

Plus the policy's own key (the running summary) when it changed. In a hand-built graph the
same node works anywhere before the model node; the model node reads
``state["llm_input_messages"]`` (or whatever ``input_key`` names).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langchain_core.messages import BaseMessage
from langchain_core.runnables import RunnableLambda

from ._core import coerce_messages
from ._policy import Compaction, ContextPolicy, Mode, history_update


def read_state(state: Any, key: str) -> Any:
    """A key of a graph state, whether the schema is a TypedDict or a Pydantic model."""
    if isinstance(state, dict):
        return state.get(key)
    return getattr(state, key, None)


class ContextHook:
    """The node behind ``context_hook``: reads the state, applies the policy, writes back."""

    def __init__(
        self,
        policy: ContextPolicy,
        *,
        mode: Mode,
        messages_key: str = "messages",
        input_key: str | None = "llm_input_messages",
    ) -> None:
        if mode not in ("transient", "persistent"):
            raise ValueError(f"mode must be 'transient' or 'persistent', got {mode!r}")
        if mode == "transient" and input_key is None:
            raise ValueError("transient mode needs an input_key to put the model input in")
        self.policy = policy
        self.mode = mode
        self.messages_key = messages_key
        self.input_key = input_key

    def inputs(self, state: Any) -> tuple[list[BaseMessage], Any]:
        messages = coerce_messages(read_state(state, self.messages_key) or [])
        memo = read_state(state, self.policy.state_key) if self.policy.state_key else None
        return messages, memo

    def update(self, messages: Sequence[BaseMessage], compaction: Compaction) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.input_key is not None:
            out[self.input_key] = compaction.model_input
        if self.mode == "persistent" and compaction.history is not None:
            change = history_update(messages, compaction.history)
            if change is not None:
                out[self.messages_key] = change
        if compaction.memo is not None and self.policy.state_key:
            out[self.policy.state_key] = compaction.memo
        return out

    def invoke(self, state: Any) -> dict[str, Any]:
        messages, memo = self.inputs(state)
        return self.update(messages, self.policy.apply(messages, memo))

    async def ainvoke(self, state: Any) -> dict[str, Any]:
        messages, memo = self.inputs(state)
        return self.update(messages, await self.policy.aapply(messages, memo))


def context_hook(
    policy: ContextPolicy,
    *,
    mode: Mode = "transient",
    messages_key: str = "messages",
    input_key: str | None = "llm_input_messages",
) -> RunnableLambda[Any, dict[str, Any]]:
    """``policy`` as a node: ``builder.add_node("context", hook)`` or ``pre_model_hook=hook``.

    A runnable with both a sync and an async body, so ``ainvoke`` on the graph awaits the
    summary model instead of blocking a worker thread on it.
    """
    hook = ContextHook(policy, mode=mode, messages_key=messages_key, input_key=input_key)
    name = f"{type(policy).__name__.lower()}_{mode}"
    return RunnableLambda(hook.invoke, afunc=hook.ainvoke, name=name)
