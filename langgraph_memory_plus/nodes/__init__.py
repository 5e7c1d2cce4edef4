"""Move knowledge between the store and the conversation, safely.

* :class:`ProfileInjector` (before the model): the user's profile, read from the store,
  as one system message with a stable id; modes ``frozen``, ``transient``, ``replace``.
* :class:`PreferenceLearner` (after the model): the user's explicit statements, merged
  into the profile with confidence, source and time; conditional writes with retries.
* :func:`create_memory_tools`: tools for the agent to add, update, delete and search
  memories.
* :class:`Scanner`: what all of them use to refuse instruction-like text before storing;
  :class:`ModelCheck`: an optional model-backed second opinion on memory writes.

Like the context tools (:mod:`langgraph_memory_plus.messages`), each works as a plain
function (``apply``/``aapply``), a LangGraph node or ``create_react_agent`` pre/post-model
hook (``hook()``), and LangChain agent middleware (``middleware()``, needs the ``agents``
extra). The user comes from the runtime context or ``config["configurable"]``
(``user_id`` for the default namespaces); the store is the graph's unless one is given.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._adapting import Node, Prefetches, use_adapters
from ._store import Stats
from .extraction import Extractor, LanguageRules, RuleExtractor, Statement, extract_statements
from .hooks import PostModelHook, ProfileHook, as_node
from .llm_extraction import LLMExtractor, ProposedPreference, ProposedPreferences
from .preferences import (
    CONFIRM_STEP,
    CONTRADICT_STEP,
    PROFILE_KEY,
    LearnResult,
    Preference,
    PreferenceLearner,
    update_preference,
)
from .prefetch import Prefetcher
from .profile import (
    DEFAULT_MIN_CONFIDENCE,
    PROFILE_ID,
    PROFILE_LANGUAGES,
    InjectionMode,
    ProfileInjector,
    ProfileLanguage,
    Section,
    Source,
    format_profile,
)
from .quoting import neutralize
from .scanning import DEFAULT_SCANNER, Finding, ModelCheck, Rule, Scanner, UnsafeTextError
from .scope import MissingScopeError, NamespaceTemplate, Scope, current_scope
from .tools import create_memory_tools, normalize_key

if TYPE_CHECKING:
    from langchain.agents.middleware import AgentMiddleware


class _Adapters:
    """The adapters behind ``injector.hook()``, ``learner.middleware()`` and the like (see
    :class:`._adapting.Adapters`); middleware is imported on first use (``agents`` extra)."""

    def profile_hook(
        self, injector: Any, mode: Any, messages_key: str, input_key: str | None
    ) -> Node:
        return as_node(ProfileHook(injector, mode, messages_key, input_key), f"profile_{mode}")

    def post_model_hook(
        self, learner: Any, prefetch: Prefetches | None, messages_key: str, name: str
    ) -> Node:
        return as_node(PostModelHook(learner, prefetch=prefetch, messages_key=messages_key), name)

    def profile_middleware(self, injector: Any, mode: Any) -> AgentMiddleware[Any, Any, Any]:
        from .middleware import profile_middleware

        return profile_middleware(injector, mode=mode)

    def post_model_middleware(
        self, learner: Any, prefetch: Prefetches | None
    ) -> AgentMiddleware[Any, Any, Any]:
        from .middleware import PostModelMiddleware

        return PostModelMiddleware(learner, prefetch=prefetch)


use_adapters(_Adapters())

__all__ = [
    "CONFIRM_STEP",
    "CONTRADICT_STEP",
    "DEFAULT_MIN_CONFIDENCE",
    "DEFAULT_SCANNER",
    "PROFILE_ID",
    "PROFILE_KEY",
    "PROFILE_LANGUAGES",
    "Extractor",
    "Finding",
    "InjectionMode",
    "LLMExtractor",
    "LanguageRules",
    "LearnResult",
    "MissingScopeError",
    "ModelCheck",
    "NamespaceTemplate",
    "PostModelHook",
    "Preference",
    "PreferenceLearner",
    "Prefetcher",
    "ProfileHook",
    "ProfileInjector",
    "ProfileLanguage",
    "ProposedPreference",
    "ProposedPreferences",
    "Rule",
    "RuleExtractor",
    "Scanner",
    "Scope",
    "Section",
    "Source",
    "Statement",
    "Stats",
    "UnsafeTextError",
    "create_memory_tools",
    "current_scope",
    "extract_statements",
    "format_profile",
    "neutralize",
    "normalize_key",
    "update_preference",
]
