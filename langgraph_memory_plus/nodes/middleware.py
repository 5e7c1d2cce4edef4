"""The nodes as LangChain 1.x agent middleware (``langchain.agents.create_agent``).

Optional: needs ``langchain`` (``pip install "langgraph-memory-plus[agents]"``), like
:mod:`langgraph_memory_plus.messages.middleware`, whose layout (and handler types) this
follows: one class per mode, because ``create_agent`` decides which hooks a middleware has
from its class.

* ``TransientProfileMiddleware``: ``wrap_model_call`` adds the profile to the request's
  messages; state is never touched.
* ``PersistentProfileMiddleware`` (frozen and replace): ``before_model`` updates the
  state's ``messages``, so the model (and the checkpoint) see the injected message.
* ``PostModelMiddleware``: ``after_model`` learns from the user's turn and/or starts the
  injector's prefetch.

The store and context come from the agent's ``Runtime``
(``create_agent(..., store=...)``, ``agent.invoke(..., context={"user_id": ...})``), the
``configurable`` values from the running config.
"""

from __future__ import annotations

from typing import Any, cast

try:
    from langchain.agents.middleware import AgentMiddleware, ModelRequest, ModelResponse
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "langgraph_memory_plus.nodes.middleware needs LangChain 1.x agents: "
        "pip install 'langgraph-memory-plus[agents]'"
    ) from exc
from langchain_core.messages import AnyMessage, BaseMessage
from langgraph.runtime import Runtime

from ..messages.middleware import AsyncHandler, Handler
from ._adapting import Prefetches
from .hooks import injection_update, state_messages
from .preferences import PreferenceLearner
from .profile import MODES, InjectionMode, ProfileInjector


class ProfileMiddleware(AgentMiddleware[Any, Any, Any]):
    """Shared by both injection classes: the injector, the mode, a readable name."""

    mode: InjectionMode

    def __init__(self, injector: ProfileInjector) -> None:
        super().__init__()
        self.injector = injector
        self.tools = []

    @property
    def name(self) -> str:
        return f"ProfileInjector[{self.mode}]"


class TransientProfileMiddleware(ProfileMiddleware):
    """Adds the profile to each model request; the checkpoint never holds it."""

    mode: InjectionMode = "transient"

    @staticmethod
    def _with(request: ModelRequest[Any], messages: list[BaseMessage]) -> ModelRequest[Any]:
        return request.override(messages=cast(list[AnyMessage], messages))

    def wrap_model_call(self, request: ModelRequest[Any], handler: Handler) -> ModelResponse[Any]:
        compaction = self.injector.apply(
            list(request.messages), mode="transient", runtime=request.runtime
        )
        return handler(self._with(request, compaction.model_input))

    async def awrap_model_call(
        self, request: ModelRequest[Any], handler: AsyncHandler
    ) -> ModelResponse[Any]:
        compaction = await self.injector.aapply(
            list(request.messages), mode="transient", runtime=request.runtime
        )
        return await handler(self._with(request, compaction.model_input))


class PersistentProfileMiddleware(ProfileMiddleware):
    """Puts the profile into the state's ``messages`` before the model (frozen, replace)."""

    def __init__(self, injector: ProfileInjector, mode: InjectionMode) -> None:
        super().__init__(injector)
        self.mode = mode

    def before_model(self, state: Any, runtime: Runtime[Any]) -> dict[str, Any] | None:
        messages = state_messages(state)
        compaction = self.injector.apply(messages, mode=self.mode, runtime=runtime)
        return injection_update(messages, compaction, input_key=None) or None

    async def abefore_model(self, state: Any, runtime: Runtime[Any]) -> dict[str, Any] | None:
        messages = state_messages(state)
        compaction = await self.injector.aapply(messages, mode=self.mode, runtime=runtime)
        return injection_update(messages, compaction, input_key=None) or None


class PostModelMiddleware(AgentMiddleware[Any, Any, Any]):
    """After each model call: learn the user's explicit preferences (with a learner), then
    start the injector's next read (with ``prefetch``), so the read sees what was learned."""

    def __init__(
        self, learner: PreferenceLearner | None, *, prefetch: Prefetches | None = None
    ) -> None:
        super().__init__()
        self.learner = learner
        self.prefetch = prefetch
        self.tools = []

    @property
    def name(self) -> str:
        return "PreferenceLearner" if self.learner is not None else "ProfilePrefetch"

    def _then_prefetch(self, runtime: Runtime[Any]) -> None:
        if self.prefetch is not None:
            self.prefetch.prefetch(runtime=runtime)

    def after_model(self, state: Any, runtime: Runtime[Any]) -> dict[str, Any] | None:
        if self.learner is not None:
            self.learner.apply(state_messages(state), runtime=runtime)
        self._then_prefetch(runtime)
        return None

    async def aafter_model(self, state: Any, runtime: Runtime[Any]) -> dict[str, Any] | None:
        if self.learner is not None:
            await self.learner.aapply(state_messages(state), runtime=runtime)
        self._then_prefetch(runtime)
        return None


def profile_middleware(
    injector: ProfileInjector, *, mode: InjectionMode = "frozen"
) -> ProfileMiddleware:
    """``injector`` as middleware for ``create_agent(..., middleware=[...])``."""
    if mode == "transient":
        return TransientProfileMiddleware(injector)
    if mode in MODES:
        return PersistentProfileMiddleware(injector, mode)
    raise ValueError(f"mode must be one of {MODES}, got {mode!r}")


__all__ = [
    "PersistentProfileMiddleware",
    "PostModelMiddleware",
    "ProfileMiddleware",
    "TransientProfileMiddleware",
    "profile_middleware",
]
