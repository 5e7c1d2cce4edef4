"""Summarization: fold the older part of a long conversation into a running summary.

The summary lives in state (``RunningSummary``, under ``Summarizer.state_key``) together
with the id of the newest message it covers. Each call only looks at the messages after
that id, so every message is summarized once: when the unsummarized part grows past the
threshold, it is folded into the summary (the previous summary plus the new messages go to
the model), the last ``keep_last`` messages stay verbatim, and the model sees::

    [system prompt..., summary message, last messages verbatim...]

The summary message has a fixed id, so in persistent mode it replaces the previous one in
state instead of piling up. If the summary model fails (or answers with nothing), the turn
goes on with plain trimming and the failure is logged; the unsummarized messages are tried
again on the next call.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any, Literal

from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage, get_buffer_string
from langchain_core.runnables import Runnable
from typing_extensions import NotRequired, TypedDict

from ..drivers.plan import Plan
from ._core import Cuts, TokenCounterLike, message_text, split_leading_system
from ._policy import Compaction, ContextPolicy, ModelCall
from .trimming import Budget, Trimmer

logger = logging.getLogger(__name__)

SUMMARY_ID = "lgmp-summary"
"""The default id of the summary message (stable, so a new summary replaces the old)."""

DEFAULT_INITIAL_PROMPT = (
    "You are condensing a conversation so that an assistant can continue it without the "
    "full transcript. Write a compact note of what matters for the rest of the "
    "conversation: facts learned, decisions and their reasons, results of tool calls, "
    "names, numbers, the user's goals and preferences, and questions still open. Leave out "
    "greetings and filler. Reply with the note only.\n\n"
    "Conversation:\n{messages}"
)
DEFAULT_UPDATE_PROMPT = (
    "Below is a note summarizing a conversation so far, followed by the messages that came "
    "after it. Rewrite the note so that it also covers the new messages, keeping what still "
    "matters and staying compact. Reply with the updated note only.\n\n"
    "Note so far:\n{summary}\n\n"
    "New messages:\n{messages}"
)
DEFAULT_SUMMARY_PREFIX = "Summary of the conversation so far:\n"


class RunningSummary(TypedDict):
    """The summarizer's state: plain values, so any checkpoint serializer stores it."""

    summary: str
    """The summary text."""
    last_summarized_id: str | None
    """Id of the newest message the summary covers; later messages are not summarized yet."""
    summarized_count: int
    """How many messages the summary covers in total (for inspection)."""


class SummaryState(TypedDict):
    """Mix into a graph's state schema to give the summarizer its key (default name)."""

    running_summary: NotRequired[RunningSummary]


class Summarizer(ContextPolicy):
    """Summarize the older part of the conversation once it passes a token threshold.

    Args:
        model: the (cheaper) chat model, or any runnable taking messages and returning a
            message or a string, that writes the summary.
        max_tokens: token budget of the model input; enforced by trimming after
            summarizing, and the whole budget when the model fails.
        trigger_tokens: summarize when the input would pass this many tokens (default:
            ``max_tokens``). Lower it to summarize earlier than the hard budget.
        keep_last: how many of the newest messages stay verbatim; more when a tool call
            and its results straddle the boundary (never split) or when the current turn
            is longer (its question is never summarized away).
        token_counter: as for ``Trimmer``.
        initial_prompt: prompt for the first summary; ``{messages}`` is the transcript.
        update_prompt: prompt to extend a summary; ``{summary}`` and ``{messages}``.
        summary_prefix: text before the summary in the message the model sees.
        summary_id: the summary message's id.
        state_key: where the ``RunningSummary`` lives in the graph state.
        keep_system: keep the system messages at the head of the list.
        summary_role: ``"human"`` (default) sends the summary as a human message, so the
            input starts on a human turn whatever follows; ``"system"`` as a system
            message right after the system prompt, for models that expect context there
            (the verbatim part then starts on a human message).
        keep_first: messages after the system prompt never summarized nor trimmed away
            (the task statement), as ``Trimmer(keep_first=...)``.
    """

    def __init__(
        self,
        model: Runnable[Any, Any],
        *,
        max_tokens: int,
        trigger_tokens: int | None = None,
        keep_last: int = 6,
        token_counter: TokenCounterLike = None,
        initial_prompt: str = DEFAULT_INITIAL_PROMPT,
        update_prompt: str = DEFAULT_UPDATE_PROMPT,
        summary_prefix: str = DEFAULT_SUMMARY_PREFIX,
        summary_id: str = SUMMARY_ID,
        state_key: str = "running_summary",
        keep_system: bool = True,
        summary_role: Literal["human", "system"] = "human",
        keep_first: int = 0,
    ) -> None:
        if keep_last < 0:
            raise ValueError(f"keep_last must not be negative, got {keep_last}")
        if summary_role not in ("human", "system"):
            raise ValueError(f"summary_role must be 'human' or 'system', got {summary_role!r}")
        for name, template in (
            ("initial_prompt", initial_prompt),
            ("update_prompt", update_prompt),
        ):
            try:
                template.format(messages="", summary="")
            except (KeyError, IndexError, ValueError) as exc:
                raise ValueError(
                    f"{name} may only use the placeholders {{messages}} and {{summary}}: {exc}"
                ) from exc
        self.model = model
        self.trimmer = Trimmer(
            max_tokens=max_tokens,
            token_counter=token_counter,
            keep_system=keep_system,
            keep_first=keep_first,
        )
        self.counter = self.trimmer.budget.counter
        self.trigger_tokens = max_tokens if trigger_tokens is None else trigger_tokens
        self.keep_last = keep_last
        self.initial_prompt = initial_prompt
        self.update_prompt = update_prompt
        self.summary_prefix = summary_prefix
        self.summary_id = summary_id
        self.state_key = state_key
        self.keep_system = keep_system
        self.summary_role = summary_role
        self.keep_first = keep_first

    # -- the plan ------------------------------------------------------------------------------

    def plan(self, messages: Sequence[BaseMessage], memo: Any) -> Plan[ModelCall, Compaction]:
        running = _as_running_summary(memo)
        head, body = self._split(messages)
        first, body = body[: self.keep_first], body[self.keep_first :]
        fresh = _after(body, running["last_summarized_id"] if running else None)
        pinned = self._pinned(head, first, running["summary"] if running else None)

        budget = self.trimmer.budget.once()  # the trigger and the trim count alike
        if budget.counter([*pinned, *fresh]) <= self.trigger_tokens:
            return self._compose(budget, pinned, fresh, running, changed=False)
        cut = self._cut(fresh)
        if cut == 0:
            return self._compose(budget, pinned, fresh, running, changed=False)

        older, newer = fresh[:cut], fresh[cut:]
        reply = yield ModelCall(self.model, self._prompt(older, running))
        text = "" if isinstance(reply, BaseException) else message_text(reply).strip()
        if not text:
            logger.warning(
                "summarization failed (%s); trimming the conversation instead",
                reply if isinstance(reply, BaseException) else "the model returned no text",
                exc_info=reply if isinstance(reply, BaseException) else None,
            )
            return self._compose(budget, pinned, fresh, running, changed=False)
        updated = RunningSummary(
            summary=text,
            last_summarized_id=older[-1].id,
            summarized_count=(running["summarized_count"] if running else 0) + len(older),
        )
        summarized = self._pinned(head, first, text)
        return self._compose(budget, summarized, newer, updated, changed=True)

    def _pinned(
        self, head: list[BaseMessage], first: list[BaseMessage], summary: str | None
    ) -> list[BaseMessage]:
        """What always goes first: the system prompt, the ``keep_first`` messages and the
        summary; a summary sent as a system message joins the system prompt, so system
        messages only ever head the input."""
        if summary is None:
            return [*head, *first]
        message = self.summary_message(summary)
        if isinstance(message, SystemMessage):
            return [*head, message, *first]
        return [*head, *first, message]

    def _split(
        self, messages: Sequence[BaseMessage]
    ) -> tuple[list[BaseMessage], list[BaseMessage]]:
        """(the system prompt, the rest), both without an earlier summary message."""
        head, body = split_leading_system(messages) if self.keep_system else ([], list(messages))
        return (
            [m for m in head if m.id != self.summary_id],
            [m for m in body if m.id != self.summary_id],
        )

    def _compose(
        self,
        budget: Budget,
        pinned: list[BaseMessage],
        rest: list[BaseMessage],
        running: RunningSummary | None,
        *,
        changed: bool,
    ) -> Compaction:
        """The decision: trimmed input; new history and memo only if a summary was made."""
        model_input = self.trimmer.trim_within(budget, [*pinned, *rest], pin=self._pin(pinned))
        if not changed:
            return Compaction(model_input=model_input)
        return Compaction(
            model_input=model_input, history=[*pinned, *rest], memo=dict(running or {})
        )

    def _cut(self, fresh: list[BaseMessage]) -> int:
        """How many of ``fresh`` to summarize: all but ``keep_last``, at a safe cut, and
        never the current question (in an agent loop the summary may be made between two
        tool steps; the model must still see what it is working on, verbatim)."""
        wanted = len(fresh) - self.keep_last
        humans = [i for i, m in enumerate(fresh) if isinstance(m, HumanMessage)]
        if humans:
            wanted = min(wanted, humans[-1])
        if wanted <= 0:
            return 0
        return Cuts(fresh).previous_start(wanted, human=False) or 0

    def _prompt(
        self, messages: list[BaseMessage], running: RunningSummary | None
    ) -> list[BaseMessage]:
        transcript = get_buffer_string(messages)
        if running:
            text = self.update_prompt.format(messages=transcript, summary=running["summary"])
        else:
            text = self.initial_prompt.format(messages=transcript, summary="")
        return [HumanMessage(content=text)]

    # -- helpers for users and adapters -------------------------------------------------------

    def summary_message(self, summary: str) -> HumanMessage | SystemMessage:
        """The message that carries the summary into the model input.

        By default a human message, so the input still starts on a human turn whatever
        verbatim messages follow it (a system message there forces the cut onto a human
        one); ``summary_role="system"`` makes it a system message.
        """
        cls = SystemMessage if self.summary_role == "system" else HumanMessage
        return cls(content=f"{self.summary_prefix}{summary}", id=self.summary_id)

    def fallback(self, messages: Sequence[BaseMessage]) -> list[BaseMessage]:
        """Trim only, keeping the summary message if the list carries one (persistent mode)."""
        head, body = split_leading_system(messages) if self.keep_system else ([], list(messages))
        carried = [m for m in (*head, *body) if m.id == self.summary_id]
        head, body = self._split(messages)
        first, body = body[: self.keep_first], body[self.keep_first :]
        if carried and isinstance(carried[0], SystemMessage):
            pinned = [*head, carried[0], *first]
        else:
            pinned = [*head, *first, *carried[:1]]
        return self.trimmer.trim([*pinned, *body], pin=self._pin(pinned))

    def _pin(self, pinned: list[BaseMessage]) -> int:
        """How many of ``pinned`` the trimmer must pin after the system prompt it keeps by
        itself (a summary sent as a system message right after it is part of that)."""
        if not self.keep_system:
            return len(pinned)
        return len(pinned) - len(split_leading_system(pinned)[0])


def _as_running_summary(memo: Any) -> RunningSummary | None:
    if not memo or not memo.get("summary"):
        return None
    return RunningSummary(
        summary=str(memo["summary"]),
        last_summarized_id=memo.get("last_summarized_id"),
        summarized_count=int(memo.get("summarized_count", 0)),
    )


def _after(body: list[BaseMessage], last_id: str | None) -> list[BaseMessage]:
    """The messages after ``last_id``; all of them if it is not there (persistent mode
    removed the summarized messages from state)."""
    if last_id is not None:
        for k in range(len(body) - 1, -1, -1):
            if body[k].id == last_id:
                return body[k + 1 :]
    return body


class SummaryResult(TypedDict):
    """What ``summarize`` returns."""

    messages: list[BaseMessage]
    """The model input."""
    running_summary: RunningSummary | None
    """The running summary to store for the next call."""


def _result(compaction: Compaction, running: Any) -> SummaryResult:
    memo = compaction.memo if compaction.memo is not None else running
    return SummaryResult(messages=compaction.model_input, running_summary=_as_running_summary(memo))


def summarize(
    messages: Sequence[BaseMessage],
    running_summary: RunningSummary | None = None,
    **options: Any,
) -> SummaryResult:
    """Summarize once, for users' own nodes (options as ``Summarizer``, ``model`` included)."""
    return _result(Summarizer(**options).apply(messages, running_summary), running_summary)


async def asummarize(
    messages: Sequence[BaseMessage],
    running_summary: RunningSummary | None = None,
    **options: Any,
) -> SummaryResult:
    """``summarize`` for async code (awaits the summary model)."""
    return _result(await Summarizer(**options).aapply(messages, running_summary), running_summary)
