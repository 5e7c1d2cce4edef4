"""One implementation per context tool, served to plain code, graph nodes and agent middleware.

A context tool (trimmer, summarizer) is a *policy*: given the conversation and the tool's
own state (the running summary), it decides what the model sees and, in persistent mode,
what the conversation in state becomes. The decision is written once, as a plan (see
``langgraph_memory_plus.drivers.plan``): a generator that yields the model calls it needs and gets
their replies back. Sync and async callers differ only in how they run those calls, so
``apply`` and ``aapply`` are the whole difference between the two worlds, and every adapter
(``hooks.context_hook``, ``middleware``) calls one or the other.
"""

from __future__ import annotations

import itertools
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol

from langchain_core.messages import BaseMessage, RemoveMessage
from langchain_core.runnables import Runnable, RunnableConfig, RunnableLambda
from langgraph.constants import TAG_NOSTREAM
from langgraph.errors import GraphBubbleUp
from langgraph.graph.message import REMOVE_ALL_MESSAGES

from ..drivers.plan import Plan, adrive, drive

if TYPE_CHECKING:
    from langchain.agents.middleware import AgentMiddleware

Mode = Literal["transient", "persistent"]
"""``transient``: only the model input changes, the checkpoint keeps the full history.
``persistent``: the state's ``messages`` is rewritten to what the policy keeps."""


@dataclass(frozen=True)
class ModelCall:
    """A request, yielded by a plan, to run ``model`` on ``prompt``."""

    model: Runnable[Any, Any]
    prompt: list[BaseMessage]


@dataclass(frozen=True)
class Compaction:
    """A policy's decision for one model call.

    ``model_input``: the messages the model should see. ``history``: what the state's
    conversation should become in persistent mode (``None``: leave it as it is).
    ``memo``: the new value of the policy's own state key (``None``: unchanged).
    """

    model_input: list[BaseMessage]
    history: list[BaseMessage] | None = None
    memo: dict[str, Any] | None = None


_CALL_CONFIG: RunnableConfig = {
    # The summary is bookkeeping: keep its tokens out of the app's `stream_mode="messages"`.
    "tags": [TAG_NOSTREAM],
    "metadata": {"lgmp_source": "context"},
    "run_name": "lgmp_context_model",
}


def _call(call: ModelCall) -> Any:
    """Run a plan's model call; a failure comes back as the exception, for the plan to
    degrade on. Graph control flow (interrupts, ``Command``) is not a failure and passes."""
    try:
        return call.model.invoke(call.prompt, _CALL_CONFIG)
    except GraphBubbleUp:
        raise
    except Exception as exc:
        return exc


async def _acall(call: ModelCall) -> Any:
    try:
        return await call.model.ainvoke(call.prompt, _CALL_CONFIG)
    except GraphBubbleUp:
        raise
    except Exception as exc:
        return exc


class ContextPolicy(ABC):
    """Base of the context tools; subclasses write ``plan`` and ``fallback`` only."""

    state_key: str | None = None
    """The state key holding this policy's own state, if it has any."""

    @abstractmethod
    def plan(self, messages: Sequence[BaseMessage], memo: Any) -> Plan[ModelCall, Compaction]:
        """Decide the model input (and history, memo) for ``messages``."""

    @abstractmethod
    def fallback(self, messages: Sequence[BaseMessage]) -> list[BaseMessage]:
        """The model input within budget, decided without calling any model."""

    def apply(self, messages: Sequence[BaseMessage], memo: Any = None) -> Compaction:
        """Run the policy, calling models synchronously."""
        return drive(self.plan(messages, memo), _call)

    async def aapply(self, messages: Sequence[BaseMessage], memo: Any = None) -> Compaction:
        """Run the policy, awaiting model calls."""
        return await adrive(self.plan(messages, memo), _acall)

    def hook(
        self,
        mode: Mode = "transient",
        *,
        messages_key: str = "messages",
        input_key: str | None = "llm_input_messages",
    ) -> RunnableLambda[Any, dict[str, Any]]:
        """This policy as a graph node, or as ``create_react_agent(pre_model_hook=...)``."""
        return _adapters[0].hook(self, mode, messages_key, input_key)

    def middleware(self, mode: Mode = "transient") -> AgentMiddleware[Any, Any, Any]:
        """This policy as LangChain agent middleware (needs the ``agents`` extra)."""
        return _adapters[0].middleware(self, mode)


class Adapters(Protocol):
    """A policy as a graph node (``hooks.py``) and as agent middleware (``middleware.py``).

    The adapters import the policies, never the reverse: the package's ``__init__``, which
    Python runs before any module of the package, hands them over (:func:`use_adapters`).
    """

    def hook(
        self, policy: ContextPolicy, mode: Mode, messages_key: str, input_key: str | None
    ) -> RunnableLambda[Any, dict[str, Any]]: ...

    def middleware(self, policy: ContextPolicy, mode: Mode) -> AgentMiddleware[Any, Any, Any]: ...


_adapters: list[Adapters] = []


def use_adapters(adapters: Adapters) -> None:
    _adapters[:] = [adapters]


def history_update(
    old: Sequence[BaseMessage], new: Sequence[BaseMessage]
) -> list[BaseMessage] | None:
    """The ``messages`` update that turns ``old`` into ``new`` under ``add_messages``.

    ``None`` when nothing changes. When ``new`` only removes messages and replaces some in
    place, the update is those ``RemoveMessage``s and replacements: small, which matters for
    ``DeltaChannel`` state that stores writes. Anything else (a new message that must sit
    before old ones, like a first summary) needs ``REMOVE_ALL_MESSAGES`` and the full list.
    """
    old_ids = [m.id for m in old]
    new_ids = [m.id for m in new]
    if old_ids == new_ids and all(a is b or a == b for a, b in zip(old, new, strict=True)):
        return None
    position = {mid: k for k, mid in enumerate(old_ids)}
    in_order = all(mid in position for mid in new_ids) and all(
        position[a] < position[b] for a, b in itertools.pairwise(new_ids)
    )
    if None in old_ids or not in_order:
        return [RemoveMessage(id=REMOVE_ALL_MESSAGES), *new]
    kept = set(new_ids)
    removals: list[BaseMessage] = [
        RemoveMessage(id=mid) for mid in old_ids if mid is not None and mid not in kept
    ]
    changed = [m for m in new if not (m is old[position[m.id]] or m == old[position[m.id]])]
    return removals + changed
