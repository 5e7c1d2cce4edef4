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

from ._store import Stats
from .extraction import Extractor, LanguageRules, RuleExtractor, Statement, extract_statements
from .hooks import PostModelHook, ProfileHook
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
