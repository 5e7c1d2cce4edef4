"""Preference learning after the model call: the user's explicit statements, kept with care.

After each model call the user's newest message is read for explicit statements (see
:mod:`.extraction`), scanned (see :mod:`.scanning`), and merged into the user's profile
item in the store, one field per preference::

    {"seat": {"value": "window", "confidence": 0.85, "updated_at": "2025-...Z",
              "source": {"kind": "user_statement", "thread_id": "t1",
                         "message_id": "m7", "quote": "I prefer a window seat"}}}

Confidence moves slowly up and faster down: a confirmation adds :data:`CONFIRM_STEP`, a
contradiction takes :data:`CONTRADICT_STEP` off the stored value, and the new value takes
over once the old one has fallen below the confidence of the statement that contradicts
it (so a fresh preference yields to the next statement, a well-confirmed one to the
second). The profile injector shows only fields above its threshold.

Two turns of the same user can run at once (two tabs, two threads). The merge is a
read-modify-write with the store's conditional put and retries
(:func:`._store.read_modify_write`), so neither update is lost.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Literal, TypedDict, TypeGuard

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.runnables import RunnableLambda
from langgraph.store.base import BaseStore
from typing_extensions import Unpack

from ..drivers.plan import Plan
from ..messages import _text
from ..store.namespaces import PROFILE
from ._adapting import Prefetches, adapters
from ._store import (
    Stats,
    Step,
    StoreFailure,
    StoreRunner,
    Unchanged,
    Written,
    finished,
    read_modify_write,
    supports_versions,
)
from .extraction import Extractor, Statement, extract_statements, field_name
from .scanning import DEFAULT_SCANNER, Finding, Scanner, log_refusal
from .scope import MissingScopeError, Namespace, NamespaceTemplate, Scope, ScopeArgs, Scoped

if TYPE_CHECKING:
    from langchain.agents.middleware import AgentMiddleware

logger = logging.getLogger(__name__)

CONFIRM_STEP = 0.05
CONTRADICT_STEP = 0.10
PROFILE_KEY = "profile"
PROFILE_NAMESPACE = PROFILE  # declared in store.namespaces, which erasure reads
"""Where the learner keeps the profile by default (``erase_user`` erases it); the
``ProfileInjector`` reads it."""
OWN_MESSAGE_PREFIX = "lgmp-"
"""Ids of messages this package writes (summaries, injected profiles): never evidence."""

Outcome = Literal["created", "confirmed", "contradicted", "replaced", "ignored", "repeated"]


class Preference(TypedDict):
    """One stored preference (a field of the profile item)."""

    value: Any
    confidence: float
    source: dict[str, Any]
    updated_at: str


def is_preference(value: Any) -> TypeGuard[Mapping[str, Any]]:
    """Does a profile field hold a :class:`Preference` (rather than a plain value an app
    stored itself, which counts as fully confident)?"""
    return (
        isinstance(value, Mapping)
        and "value" in value
        and isinstance(value.get("confidence"), (int, float))
        and not isinstance(value.get("confidence"), bool)
    )


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, str) and isinstance(b, str):
        return " ".join(a.casefold().split()) == " ".join(b.casefold().split())
    return bool(a == b)


def _clamp(confidence: float) -> float:
    return round(min(1.0, max(0.0, confidence)), 4)


def update_preference(
    current: Any, statement: Statement, source: dict[str, Any], now: str
) -> tuple[Preference | None, Outcome]:
    """The stored field after ``statement``: the new :class:`Preference` (``None``: leave
    the field as it is) and what happened.

    ``current`` is the field's stored value: a preference, a plain value (confidence 1),
    or ``None`` when absent. A statement from the message that already set the field
    (same ``source``) changes nothing, so replaying a turn never confirms twice.
    """

    def stored(value: Any, confidence: float) -> Preference:
        return Preference(value=value, confidence=_clamp(confidence), source=source, updated_at=now)

    if current is None:
        return (
            (None, "ignored")
            if statement.negated
            else (stored(statement.value, statement.confidence), "created")
        )
    if is_preference(current):
        value, confidence = current["value"], float(current["confidence"])
        if source.get("message_id") and current.get("source") == source:
            return None, "repeated"
    else:
        value, confidence = current, 1.0
    if _same(value, statement.value):
        if statement.negated:
            return stored(value, confidence - CONTRADICT_STEP), "contradicted"
        return stored(value, confidence + CONFIRM_STEP), "confirmed"
    if statement.negated:
        return None, "ignored"  # "I don't want X" says nothing about a stored Y
    if _clamp(confidence - CONTRADICT_STEP) < statement.confidence:
        return stored(statement.value, statement.confidence), "replaced"
    return stored(value, confidence - CONTRADICT_STEP), "contradicted"


def user_turn(messages: Sequence[BaseMessage]) -> list[HumanMessage]:
    """The user's messages that the newest model call answered.

    The trailing run of human messages, either at the very end (a node placed before the
    model) or right before one final AI message (after the model). After a tool result,
    the run is empty: the later model calls of a tool loop answer the same user turn,
    which was already learned from on its first call. Messages this package wrote itself
    (ids starting ``lgmp-``) are never the user's words.
    """
    end = len(messages)
    if end and isinstance(messages[-1], AIMessage):
        end -= 1
    start = end
    while start > 0 and isinstance(messages[start - 1], HumanMessage):
        start -= 1
    return [
        message
        for message in messages[start:end]
        if isinstance(message, HumanMessage)
        and not (message.id or "").startswith(OWN_MESSAGE_PREFIX)
    ]


@dataclass
class LearnResult:
    """What one call learned: outcomes per field, refusals, and any store failure."""

    outcomes: dict[str, Outcome] = field(default_factory=dict)
    refused: list[Finding] = field(default_factory=list)
    profile: dict[str, Any] | None = None
    attempts: int = 0
    error: str | None = None

    @property
    def changed(self) -> bool:
        return any(o not in ("ignored", "repeated") for o in self.outcomes.values())


def _now() -> datetime:
    return datetime.now(timezone.utc)


class PreferenceLearner(Scoped):
    """Learn the user's explicit preferences after each model call.

    Args:
        namespace: where the user's profile lives; placeholders are filled from the runtime
            context or ``config["configurable"]``.
        key: the profile item's key in that namespace.
        extractor: text -> statements; default :data:`.extraction.extract_statements`.
        scanner: refuses instruction-like text; default the default rules.
        store: a store to use instead of the graph's.
        timeout: seconds per store call before giving up (the turn goes on).
        max_attempts: how many lost write races to retry.
        stats: counters to share; by default the learner's own (``learner.stats``).
        clock: the time source for ``updated_at`` (tests pin it).

    Plugs in as a plain function (``apply``), a graph node or
    ``create_react_agent(post_model_hook=...)`` (``hook()``), and agent middleware
    (``middleware()``).
    """

    def __init__(
        self,
        namespace: Sequence[str] = PROFILE_NAMESPACE,
        *,
        key: str = PROFILE_KEY,
        extractor: Extractor | None = None,
        scanner: Scanner | None = None,
        store: BaseStore | None = None,
        timeout: float | None = 5.0,
        max_attempts: int = 5,
        stats: Stats | None = None,
        clock: Callable[[], datetime] = _now,
    ) -> None:
        if max_attempts < 1:
            raise ValueError(f"max_attempts must be at least 1, got {max_attempts}")
        self.namespace = NamespaceTemplate(namespace)
        self.key = key
        self.extractor: Extractor = extractor if extractor is not None else extract_statements
        self.scanner = scanner if scanner is not None else DEFAULT_SCANNER
        self.store = store
        self.timeout = timeout
        self.max_attempts = max_attempts
        self.stats = stats if stats is not None else Stats()
        self.clock = clock

    # -- reading the turn ---------------------------------------------------------------

    def statements(
        self, messages: Sequence[BaseMessage], thread_id: str | None, result: LearnResult
    ) -> list[tuple[Statement, dict[str, Any]]]:
        """The turn's statements with their sources; refused text is dropped (and noted).

        A message that trips the scanner contributes nothing at all, not even its harmless
        parts: it was written to manipulate, so none of it is trusted.
        """
        found: list[tuple[Statement, dict[str, Any]]] = []
        for message in user_turn(messages):
            text = message.text
            findings = self.scanner.scan(text)
            statements = [] if findings else self._extract(text)
            for statement in statements:
                findings += self.scanner.scan_value([statement.field, statement.value])
            if findings:
                self.stats.incr("refused")
                log_refusal("preference learning", findings)
                result.refused.extend(findings)
                continue
            for statement in statements:
                source = {
                    "kind": "user_statement",
                    "thread_id": thread_id,
                    "message_id": message.id,
                    "quote": _text.head(statement.evidence, 200),
                }
                found.append((statement, source))
        return found

    def _extract(self, text: str) -> list[Statement]:
        """The extractor's statements, fields normalized; a failing extractor (say, an
        LLM-based one whose API is down) costs this turn's learning, never the turn."""
        try:
            statements = list(self.extractor(text))
        except Exception:
            self.stats.incr("extractor_errors")
            logger.exception("preference learning: the extractor failed; nothing learned")
            return []
        # normalized names: never empty, never ``_private`` (which the injector hides)
        named = [replace(s, field=field_name(s.field)) for s in statements]
        return [statement for statement in named if statement.field]

    # -- the plan -----------------------------------------------------------------------

    def plan(
        self,
        statements: list[tuple[Statement, dict[str, Any]]],
        namespace: Namespace,
        *,
        conditional: bool,
        result: LearnResult,
    ) -> Plan[Step, LearnResult]:
        """Merge ``statements`` into the profile item, retrying lost races."""
        now = self.clock().isoformat().replace("+00:00", "Z")

        def merge(current: Mapping[str, Any] | None) -> dict[str, Any] | Unchanged:
            profile = dict(current or {})
            result.outcomes = {}
            for statement, source in statements:
                updated, outcome = update_preference(
                    profile.get(statement.field), statement, source, now
                )
                result.outcomes[statement.field] = outcome
                if updated is not None:
                    profile[statement.field] = dict(updated)
            return profile if result.changed else Unchanged(profile)

        outcome = yield from read_modify_write(
            namespace,
            self.key,
            merge,
            conditional=conditional,
            attempts=self.max_attempts,
            stats=self.stats,
        )
        if isinstance(outcome, StoreFailure):
            self.stats.incr("lost" if outcome.conflict else "store_errors")
            logger.warning(
                "preference learning: could not update %s: %s", namespace, outcome.describe()
            )
            result.error = outcome.describe()
            return result
        result.profile = outcome.value
        if isinstance(outcome, Written):
            result.attempts = outcome.attempts
            self.stats.incr("written")
        return result

    def _prepare(
        self, messages: Sequence[BaseMessage], scope: Scope
    ) -> tuple[Plan[Step, LearnResult], StoreRunner]:
        """The plan for this call and the runner to run it with."""
        runner = StoreRunner(scope.store, timeout=self.timeout, stats=self.stats)
        result = LearnResult()
        statements = self.statements(messages, scope.thread_id, result)
        if not statements:
            return finished(result), runner
        if scope.store is None:
            self.stats.incr("no_store")
            logger.warning("preference learning: no store (pass one, or compile(store=...))")
            result.error = "no store"
            return finished(result), runner
        try:
            namespace = self.namespace.resolve(scope)
        except MissingScopeError as exc:
            self.stats.incr("no_user")
            logger.warning("preference learning skipped: %s", exc)
            result.error = str(exc)
            return finished(result), runner
        conditional = supports_versions(scope.store)
        return self.plan(statements, namespace, conditional=conditional, result=result), runner

    def apply(self, messages: Sequence[BaseMessage], **scope: Unpack[ScopeArgs]) -> LearnResult:
        """Learn from the newest user turn of ``messages``; never raises for store trouble.

        The store, config and context default to the running graph's (see
        :class:`.scope.ScopeArgs`).
        """
        plan, runner = self._prepare(messages, self.scope(**scope))
        return runner.run(plan)

    async def aapply(
        self, messages: Sequence[BaseMessage], **scope: Unpack[ScopeArgs]
    ) -> LearnResult:
        """Async :meth:`apply`."""
        plan, runner = self._prepare(messages, self.scope(**scope))
        return await runner.arun(plan)

    # -- plug-in places -----------------------------------------------------------------

    def hook(
        self, *, prefetch: Prefetches | None = None, messages_key: str = "messages"
    ) -> RunnableLambda[Any, dict[str, Any]]:
        """This learner as a graph node after the model, or
        ``create_react_agent(post_model_hook=...)``.

        ``prefetch``: an injector whose next read to start once learning is done, so the
        next turn finds the profile (with what was just learned) already read.
        """
        return adapters().post_model_hook(self, prefetch, messages_key, "learn_preferences")

    def middleware(self, *, prefetch: Prefetches | None = None) -> AgentMiddleware[Any, Any, Any]:
        """This learner as LangChain agent middleware (``after_model``; ``agents`` extra)."""
        return adapters().post_model_middleware(self, prefetch)
