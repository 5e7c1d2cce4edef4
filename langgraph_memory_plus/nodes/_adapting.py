"""How the profile tools reach their adapters without importing them.

``hooks.py`` and ``middleware.py`` import :class:`.profile.ProfileInjector` and
:class:`.preferences.PreferenceLearner`, never the reverse: the package's ``__init__``,
which Python runs before any module of the package, hands the adapters over
(:func:`use_adapters`), and ``injector.hook()``, ``learner.middleware()`` and the like
call them through :func:`adapters`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from langchain_core.runnables import RunnableLambda
from typing_extensions import Unpack

from .scope import ScopeArgs

if TYPE_CHECKING:
    from langchain.agents.middleware import AgentMiddleware

Node = RunnableLambda[Any, dict[str, Any]]


class Prefetches(Protocol):
    """What a learner's hook starts once it has learned: an injector's next read."""

    def prefetch(self, **scope: Unpack[ScopeArgs]) -> bool: ...


class Adapters(Protocol):
    """Graph nodes (``hooks.py``) and agent middleware (``middleware.py``) for the injector
    (before the model) and the learner or prefetch (after it)."""

    def profile_hook(
        self, injector: Any, mode: Any, messages_key: str, input_key: str | None
    ) -> Node: ...

    def post_model_hook(
        self, learner: Any, prefetch: Prefetches | None, messages_key: str, name: str
    ) -> Node: ...

    def profile_middleware(self, injector: Any, mode: Any) -> AgentMiddleware[Any, Any, Any]: ...

    def post_model_middleware(
        self, learner: Any, prefetch: Prefetches | None
    ) -> AgentMiddleware[Any, Any, Any]: ...


_adapters: list[Adapters] = []


def use_adapters(given: Adapters) -> None:
    _adapters[:] = [given]


def adapters() -> Adapters:
    return _adapters[0]
