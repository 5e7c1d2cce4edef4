"""Context tools as LangChain 1.x agent middleware (``langchain.agents.create_agent``).

Optional: this module needs ``langchain`` (the ``agents`` extra); nothing else in the
package imports it, so ``langgraph_memory_plus`` works without it.

* transient mode (``TransientContextMiddleware``): ``wrap_model_call`` hands the model the
  compacted input and leaves state alone; a new running summary is written back through the
  ``Command`` of an ``ExtendedModelResponse``, so it survives in the checkpoint.
* persistent mode (``PersistentContextMiddleware``): ``before_model`` rewrites the state's
  ``messages`` (and the summary); ``wrap_model_call`` then only enforces the token budget
  on the request, which also covers the system prompt and a turn where the summary model
  failed and nothing was rewritten.

``create_agent`` decides which hooks a middleware has from its class, so each mode is its
own class rather than one class with a switch.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, cast

try:
    from langchain.agents.middleware import (
        AgentMiddleware,
        AgentState,
        ExtendedModelResponse,
        ModelRequest,
        ModelResponse,
    )
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "langgraph_memory_plus.messages.middleware needs LangChain 1.x agents: "
        "pip install 'langgraph-memory-plus[agents]'"
    ) from exc

from langchain_core.messages import AIMessage, AnyMessage, BaseMessage
from langgraph.runtime import Runtime
from langgraph.types import Command
from typing_extensions import NotRequired, TypedDict

from ._policy import Compaction, ContextPolicy, Mode, history_update
from .hooks import read_state
from .summarization import RunningSummary

Handler = Callable[[ModelRequest[Any]], ModelResponse[Any]]
AsyncHandler = Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]]
Result = ModelResponse[Any] | AIMessage | ExtendedModelResponse[Any]


def _state_schema(policy: ContextPolicy) -> type[Any]:
    """The agent state plus the policy's own key, so the agent checkpoints the summary."""
    if not policy.state_key:
        return AgentState
    fields = {policy.state_key: NotRequired[RunningSummary]}
    make_typed_dict: Any = TypedDict  # the key is only known at run time
    return cast(type[Any], make_typed_dict(f"{type(policy).__name__}State", fields))


class ContextMiddleware(AgentMiddleware[Any, Any, Any]):
    """Shared by both modes: how to read the request and how to answer with a summary."""

    mode: Mode

    def __init__(self, policy: ContextPolicy) -> None:
        super().__init__()
        self.policy = policy
        self.state_schema = _state_schema(policy)
        self.tools = []

    @property
    def name(self) -> str:
        return f"{type(self.policy).__name__}[{self.mode}]"

    def _request_messages(self, request: ModelRequest[Any]) -> list[BaseMessage]:
        """The model input as one list: the agent's system prompt counts against the budget."""
        system = [request.system_message] if request.system_message is not None else []
        return [*system, *request.messages]

    def _override(self, request: ModelRequest[Any], messages: list[BaseMessage]) -> Any:
        """``request`` with ``messages`` as its input, minus the system prompt we prepended
        (the agent sends ``request.system_message`` on its own)."""
        if messages and messages[0] is request.system_message:
            messages = messages[1:]
        return request.override(messages=cast(list[AnyMessage], messages))

    def _memo(self, state: Any) -> Any:
        return read_state(state, self.policy.state_key) if self.policy.state_key else None


class TransientContextMiddleware(ContextMiddleware):
    """Compacts the model input on every call; the checkpoint keeps the whole history."""

    mode: Mode = "transient"

    def _respond(self, compaction: Compaction, response: ModelResponse[Any]) -> Result:
        """The handler's response, carrying the new running summary into state if any.

        (The handler ``create_agent`` passes always returns a plain ``ModelResponse``; the
        commands of inner layers are collected by the agent itself.)
        """
        if compaction.memo is None or not self.policy.state_key:
            return response
        return ExtendedModelResponse(
            model_response=response,
            command=Command(update={self.policy.state_key: compaction.memo}),
        )

    def wrap_model_call(self, request: ModelRequest[Any], handler: Handler) -> Result:
        compaction = self.policy.apply(self._request_messages(request), self._memo(request.state))
        response = handler(self._override(request, compaction.model_input))
        return self._respond(compaction, response)

    async def awrap_model_call(self, request: ModelRequest[Any], handler: AsyncHandler) -> Result:
        messages = self._request_messages(request)
        compaction = await self.policy.aapply(messages, self._memo(request.state))
        response = await handler(self._override(request, compaction.model_input))
        return self._respond(compaction, response)


class PersistentContextMiddleware(ContextMiddleware):
    """Rewrites the conversation in state before each model call."""

    mode: Mode = "persistent"

    def _update(self, messages: Sequence[BaseMessage], compaction: Compaction) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if compaction.history is not None:
            change = history_update(messages, compaction.history)
            if change is not None:
                out["messages"] = change
        if compaction.memo is not None and self.policy.state_key:
            out[self.policy.state_key] = compaction.memo
        return out

    def before_model(self, state: Any, runtime: Runtime[Any]) -> dict[str, Any] | None:
        messages = list(read_state(state, "messages") or [])
        return self._update(messages, self.policy.apply(messages, self._memo(state))) or None

    async def abefore_model(self, state: Any, runtime: Runtime[Any]) -> dict[str, Any] | None:
        messages = list(read_state(state, "messages") or [])
        compaction = await self.policy.aapply(messages, self._memo(state))
        return self._update(messages, compaction) or None

    def _bounded(self, request: ModelRequest[Any]) -> Any:
        return self._override(request, self.policy.fallback(self._request_messages(request)))

    def wrap_model_call(self, request: ModelRequest[Any], handler: Handler) -> Result:
        return handler(self._bounded(request))

    async def awrap_model_call(self, request: ModelRequest[Any], handler: AsyncHandler) -> Result:
        return await handler(self._bounded(request))


def context_middleware(policy: ContextPolicy, *, mode: Mode = "transient") -> ContextMiddleware:
    """``policy`` as middleware for ``create_agent(..., middleware=[...])``."""
    if mode == "transient":
        return TransientContextMiddleware(policy)
    if mode == "persistent":
        return PersistentContextMiddleware(policy)
    raise ValueError(f"mode must be 'transient' or 'persistent', got {mode!r}")


__all__ = [
    "ContextMiddleware",
    "PersistentContextMiddleware",
    "TransientContextMiddleware",
    "context_middleware",
]
