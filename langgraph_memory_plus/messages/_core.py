"""What every context tool needs to know about a message list, computed in one place.

Providers reject a conversation where a ``ToolMessage`` answers a call that is not there, or
an ``AIMessage`` asks for tools whose answers never come. Every tool in this package cuts
lists (windows, trimming, summarization), so all of them share one analysis of which cuts
are safe and one repair step, instead of each re-deriving the pairing rules.
"""

from __future__ import annotations

import bisect
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from langchain_core.language_models import BaseLanguageModel
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    BaseMessageChunk,
    HumanMessage,
    SystemMessage,
    ToolMessage,
    convert_to_messages,
    message_chunk_to_message,
)

from .tokens import (
    ENCODINGS,
    ExactTokenCounter,
    count_tokens_script_aware,
    counter_for_model,
    model_name,
)

TokenCounter = Callable[[list[BaseMessage]], int]
"""Counts the tokens of a whole list (so per-list overheads can be included)."""

TokenCounterLike = TokenCounter | BaseLanguageModel[Any] | str | None
"""What users may pass: a list counter, a chat model, ``"approximate"`` or ``None`` (both:
the script-aware estimate, :func:`.tokens.count_tokens_script_aware`), or an encoding or
model name for exact counts (:class:`.tokens.ExactTokenCounter`, the ``tokens`` extra)."""

_ID_NAMESPACE = uuid.UUID("0b6b3f0e-6f4e-4a8e-9d1c-5c3f1f2a7d10")


def as_token_counter(counter: TokenCounterLike) -> TokenCounter:
    """Normalize the accepted counter forms to one callable on a list of messages."""
    if counter is None or counter == "approximate":
        return count_tokens_script_aware
    if isinstance(counter, str):
        exact = ExactTokenCounter(counter) if counter in ENCODINGS else counter_for_model(counter)
        if exact is not None:
            return exact
    if isinstance(counter, BaseLanguageModel):
        return _model_counter(counter)
    if callable(counter):
        return counter
    raise TypeError(
        "token_counter must be a callable on a list of messages, a language model, "
        f"'approximate', None, an encoding of {ENCODINGS} or a known model name "
        f"(gpt-4o, gpt-4, qwen-max...); got {counter!r}"
    )


def _model_counter(model: BaseLanguageModel[Any]) -> TokenCounter:
    """A chat model's counter, picked by its model name: exact for the families of
    :func:`.tokens.encoding_for_model` (the estimate, which bounds them, without the
    ``tokens`` extra), the estimate for DeepSeek, else the model's own
    ``get_num_tokens_from_messages`` (which may need a download)."""
    name = model_name(model)
    if name is not None:
        try:
            counter = counter_for_model(name)
        except ImportError:
            return count_tokens_script_aware
        if counter is not None:
            return counter
    return model.get_num_tokens_from_messages


def count_turns(messages: list[BaseMessage]) -> int:
    """A "token counter" that counts turns: a turn starts at each human message."""
    return sum(isinstance(m, HumanMessage) for m in messages)


def count_messages(messages: list[BaseMessage]) -> int:
    """A "token counter" that counts messages (``trim_messages`` documents ``len`` for this)."""
    return len(messages)


# ---------------------------------------------------------------------------------------------
# coercion and ids


def coerce_messages(value: Any) -> list[BaseMessage]:
    """Turn an update (one message-like or a list of them) into message objects.

    The same inputs ``add_messages`` accepts: messages, chunks, dicts, ``(role, content)``
    tuples and strings. Message objects pass through untouched (no copy), which keeps the
    common case (a node returning ``AIMessage``s) free.
    """
    items = value if isinstance(value, list) else [value]
    if all(isinstance(m, BaseMessage) and not isinstance(m, BaseMessageChunk) for m in items):
        return cast(list[BaseMessage], items)
    return [message_chunk_to_message(cast(BaseMessageChunk, m)) for m in convert_to_messages(items)]


def derived_id(previous_id: str | None, message: BaseMessage, ordinal: int) -> str:
    """A deterministic id for a message that arrived without one.

    ``add_messages`` draws a random UUID, so replaying the same writes (as ``DeltaChannel``
    does on every read) would give the message a new id each time and nothing could target
    it with ``RemoveMessage``. Deriving the id from what precedes it and what it says keeps
    replays identical while two equal messages in a row still get distinct ids.
    """
    seed = f"{previous_id or ''}\x00{ordinal}\x00{message.type}\x00{message.content!r}"
    return str(uuid.uuid5(_ID_NAMESPACE, seed))


def split_leading_system(
    messages: Sequence[BaseMessage],
) -> tuple[list[BaseMessage], list[BaseMessage]]:
    """Split off the run of system messages at the head of the list (the system prompt)."""
    n = 0
    while n < len(messages) and isinstance(messages[n], SystemMessage):
        n += 1
    return list(messages[:n]), list(messages[n:])


def message_text(message: Any) -> str:
    """The text of a model reply, whatever shape the runnable returned it in."""
    if isinstance(message, BaseMessage):
        return message.text
    return str(message)


# ---------------------------------------------------------------------------------------------
# tool-call pairing


@dataclass
class Pairing:
    """Who answers whom in a message list.

    ``owner[j]`` is the index of the AI message whose call the ``ToolMessage`` at ``j``
    answers; orphans (no such call before them, or a second answer to the same call) are
    absent. ``answers[a]`` lists the tool messages answering the AI message at ``a``, and
    ``incomplete`` holds the AI messages with at least one call that no message answers.
    """

    owner: dict[int, int] = field(default_factory=dict)
    answers: dict[int, list[int]] = field(default_factory=dict)
    incomplete: set[int] = field(default_factory=set)
    orphans: set[int] = field(default_factory=set)

    @classmethod
    def of(cls, messages: Sequence[BaseMessage]) -> Pairing:
        pairing = cls()
        open_calls: dict[str, int] = {}
        unanswered: dict[int, set[str]] = {}
        for i, message in enumerate(messages):
            if isinstance(message, AIMessage) and message.tool_calls:
                ids = {call["id"] or f"<missing:{k}>" for k, call in enumerate(message.tool_calls)}
                unanswered[i] = set(ids)
                pairing.answers[i] = []
                for call_id in ids:
                    open_calls[call_id] = i
            elif isinstance(message, ToolMessage):
                a = open_calls.pop(message.tool_call_id, None)
                if a is None:
                    pairing.orphans.add(i)
                else:
                    pairing.owner[i] = a
                    pairing.answers[a].append(i)
                    unanswered[a].discard(message.tool_call_id)
        pairing.incomplete = {a for a, left in unanswered.items() if left}
        return pairing

    def is_pending(self, a: int, length: int) -> bool:
        """Is the AI message at ``a`` waiting for its tools (nothing else came after it)?"""
        return all(self.owner.get(j) == a for j in range(a + 1, length))


class Cuts:
    """Where a list can be cut so that the kept suffix orphans no tool result.

    Cutting before index ``i`` (keeping ``messages[i:]``) is *safe* when no tool message at
    or after ``i`` answers a call made before ``i``. Computed once in O(n), queried with a
    binary search, because trimming asks "the next safe start after here" repeatedly.
    """

    def __init__(self, messages: Sequence[BaseMessage], pairing: Pairing | None = None) -> None:
        self.messages = messages
        self.pairing = pairing or Pairing.of(messages)
        n = len(messages)
        lowest_owner = n  # smallest owner index among tool messages at or after i
        safe = [False] * (n + 1)
        safe[n] = True
        for i in range(n - 1, -1, -1):
            owner = self.pairing.owner.get(i)
            if owner is not None:
                lowest_owner = min(lowest_owner, owner)
            safe[i] = lowest_owner >= i
        self.safe = safe
        self._safe_starts = [i for i in range(n) if safe[i]]
        self._human_starts = [i for i in self._safe_starts if isinstance(messages[i], HumanMessage)]

    def next_start(self, at: int, *, human: bool) -> int | None:
        """The first safe start at or after ``at`` (on a human message if asked), or None."""
        starts = self._human_starts if human else self._safe_starts
        k = bisect.bisect_left(starts, at)
        return starts[k] if k < len(starts) else None

    def previous_start(self, at: int, *, human: bool) -> int | None:
        """The last safe start at or before ``at`` (on a human message if asked), or None."""
        starts = self._human_starts if human else self._safe_starts
        k = bisect.bisect_right(starts, at)
        return starts[k - 1] if k else None


def repair_indices(
    messages: Sequence[BaseMessage],
    keep: Sequence[int],
    *,
    pairing: Pairing | None = None,
    keep_pending: bool = True,
) -> list[int]:
    """Drop from ``keep`` what would break tool pairing in ``[messages[i] for i in keep]``.

    Removed: tool messages whose call is not kept (or never existed), and AI messages with
    tool calls whose answers are not all kept, together with the answers that are. An AI
    message at the very end of ``messages`` that is still waiting for its tools stays when
    ``keep_pending`` (it is how an agent hands over to its tool node). Pending is judged on
    the original list, so a cut that merely hides the answers does not count as pending.
    """
    pairing = pairing or Pairing.of(messages)
    kept = set(keep)
    drop: set[int] = set()
    for i in keep:
        owner = pairing.owner.get(i)
        if i in pairing.orphans or (owner is not None and owner not in kept):
            drop.add(i)
        elif i in pairing.answers:
            complete = i not in pairing.incomplete and all(j in kept for j in pairing.answers[i])
            pending = keep_pending and pairing.is_pending(i, len(messages))
            if not complete and not pending:
                drop.add(i)
                drop.update(pairing.answers[i])
    return [i for i in keep if i not in drop]


def repair_tool_pairs(
    messages: Sequence[BaseMessage], *, keep_pending: bool = True
) -> list[BaseMessage]:
    """The messages minus every orphan tool result and every unanswered tool call.

    For users' own nodes: run it on whatever list is about to go to a model.
    """
    keep = repair_indices(messages, range(len(messages)), keep_pending=keep_pending)
    return [messages[i] for i in keep]


def provider_problems(messages: Sequence[BaseMessage]) -> list[str]:
    """What a strict provider would reject in this model input (empty when it is valid).

    Checked: every tool message answers a call made before it, every tool call is answered,
    and the first message after the system prompt is a human message. Used by the tests and
    handy in users' own assertions.
    """
    problems: list[str] = []
    pairing = Pairing.of(messages)
    for j in sorted(pairing.orphans):
        problems.append(f"tool message at {j} answers no call before it")
    for a in sorted(pairing.incomplete):
        problems.append(f"tool calls of the AI message at {a} are not all answered")
    _, body = split_leading_system(messages)
    if body and not isinstance(body[0], HumanMessage):
        problems.append(f"first non-system message is {body[0].type}, not human")
    if any(isinstance(m, SystemMessage) for m in body):
        problems.append("a system message follows a non-system message")
    return problems
