"""Trimming: keep the part of the conversation that fits, in a shape providers accept.

``langchain_core.messages.trim_messages`` does the budget search (by tokens with any
counter, or by messages with ``len``), so this module uses it for that and adds what it
leaves to the caller:

* every system message at the head is kept, not only the first one;
* the kept part never orphans a tool result nor keeps a tool call without all its results
  (``trim_messages`` cuts by size alone, and ``start_on="human"`` only helps while tool
  results directly follow their call);
* when even the current turn does not fit, the turn's human message is kept with as many
  of its newest tool steps as fit, instead of an input with no human message at all;
* the result is checked with the counter itself, so counters that are not additive per
  message (a model's tokenizer adds per-request overhead) still end up within budget.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

from langchain_core.messages import BaseMessage, HumanMessage, trim_messages

from ..drivers.plan import Plan
from ._core import (
    Cuts,
    TokenCounter,
    TokenCounterLike,
    as_token_counter,
    count_messages,
    count_turns,
    repair_indices,
    split_leading_system,
)
from ._policy import Compaction, ContextPolicy, ModelCall
from .tokens import counted_once

logger = logging.getLogger(__name__)

Strategy = Literal["last", "first"]


@dataclass(frozen=True)
class Budget:
    """The limits a model input must respect (``None``: no limit of that kind)."""

    counter: TokenCounter
    max_tokens: int | None = None
    max_messages: int | None = None
    max_turns: int | None = None

    def __post_init__(self) -> None:
        for name in ("max_tokens", "max_messages", "max_turns"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise ValueError(f"{name} must not be negative, got {value}")

    def once(self) -> Budget:
        """This budget for one search: an additive counter counts each message once
        (:func:`.tokens.counted_once`); drop it when the search is done."""
        counter = counted_once(self.counter)
        return self if counter is self.counter else replace(self, counter=counter)

    def limits(self, head: list[BaseMessage]) -> list[tuple[int, TokenCounter]]:
        """``(limit, counter)`` per active limit, for the part after ``head``."""
        out: list[tuple[int, TokenCounter]] = []
        if self.max_tokens is not None:
            out.append(
                (max(0, self.max_tokens - (self.counter(head) if head else 0)), self.counter)
            )
        if self.max_messages is not None:
            out.append((self.max_messages, count_messages))
        if self.max_turns is not None:
            out.append((self.max_turns, count_turns))
        return out

    def fits(self, messages: list[BaseMessage]) -> bool:
        """Is ``messages`` (the whole input) within the token budget?"""
        return self.max_tokens is None or self.counter(messages) <= self.max_tokens

    def admits(self, head: list[BaseMessage], part: list[BaseMessage]) -> bool:
        """Does ``head + part`` respect every limit (counts apply to ``part`` only)?"""
        if self.max_messages is not None and len(part) > self.max_messages:
            return False
        if self.max_turns is not None and count_turns(part) > self.max_turns:
            return False
        return self.fits([*head, *part])


def select(
    head: list[BaseMessage],
    body: list[BaseMessage],
    budget: Budget,
    *,
    strategy: Strategy = "last",
    start_on_human: bool = True,
    keep_pending: bool = True,
) -> list[BaseMessage]:
    """``head`` (always kept) followed by the part of ``body`` that fits ``budget``."""
    if not body:
        return list(head)
    cuts = Cuts(body)
    if strategy == "last":
        chosen = _select_last(head, body, budget, cuts, start_on_human)
    elif strategy == "first":
        chosen = _select_first(head, body, budget, cuts, start_on_human)
    else:
        raise ValueError(f"strategy must be 'last' or 'first', got {strategy!r}")
    chosen = repair_indices(body, chosen, pairing=cuts.pairing, keep_pending=keep_pending)
    result = [*head, *(body[i] for i in chosen)]
    if not budget.fits(result):
        logger.warning(
            "context over budget even after trimming (%d > %d tokens): the system prompt "
            "or the newest human message alone is larger than the budget",
            budget.counter(result),
            budget.max_tokens,
        )
    return result


def _select_last(
    head: list[BaseMessage], body: list[BaseMessage], budget: Budget, cuts: Cuts, human: bool
) -> list[int]:
    start = 0
    for limit, counter in budget.limits(head):
        kept = trim_messages(
            body[start:],
            max_tokens=limit,
            token_counter=counter,
            strategy="last",
            start_on="human" if human else None,
        )
        start = len(body) - len(kept)  # trim_messages keeps a suffix
    at = cuts.next_start(start, human=human)
    while at is not None:
        if budget.admits(head, body[at:]):
            return list(range(at, len(body)))
        at = cuts.next_start(at + 1, human=human)
    return _current_turn(head, body, budget, cuts, human)


def _current_turn(
    head: list[BaseMessage], body: list[BaseMessage], budget: Budget, cuts: Cuts, human: bool
) -> list[int]:
    """Not even the newest whole turn fits: keep its human message and the newest steps.

    Dropping the middle of a tool loop loses some intermediate results, but an input with
    no question at all (what a plain "start on human" cut would give) is useless.
    """
    humans = [i for i, m in enumerate(body) if isinstance(m, HumanMessage)]
    anchor = humans[-1] if humans else None
    if anchor is None or not human:
        last = cuts.previous_start(len(body) - 1, human=False) or 0
        return list(range(last, len(body)))
    at = cuts.next_start(anchor + 1, human=False)
    while at is not None:
        if budget.admits(head, [body[anchor], *body[at:]]):
            return [anchor, *range(at, len(body))]
        at = cuts.next_start(at + 1, human=False)
    return [anchor]


def _select_first(
    head: list[BaseMessage], body: list[BaseMessage], budget: Budget, cuts: Cuts, human: bool
) -> list[int]:
    end = len(body)
    for limit, counter in budget.limits(head):
        end = len(
            trim_messages(body[:end], max_tokens=limit, token_counter=counter, strategy="first")
        )
    start = cuts.next_start(0, human=human)
    if start is None or start >= end:
        return []
    while end > start and not budget.admits(head, body[start:end]):
        end -= 1
    return list(range(start, end))


class Trimmer(ContextPolicy):
    """Trim the conversation to a budget: the simplest context tool, no model involved.

    Args:
        max_tokens: token budget for the whole model input, system prompt included.
        max_messages: keep at most this many messages besides the system prompt.
        max_turns: keep at most this many turns (a turn starts at a human message).
        token_counter: a callable on a list of messages, a language model (exact
            for the families below, else its ``get_num_tokens_from_messages``),
            ``"approximate"``/``None`` for the
            conservative script-aware estimate (``messages.tokens``), or an encoding
            (``"o200k_base"``, ``"cl100k_base"``, ``"qwen"``, ``"qwen3.5"``) or model
            name (``"gpt-4o"``, ``"qwen-max"``) for exact counts (the ``tokens`` extra).
            A chat model picks its own by its model name.
        strategy: ``"last"`` keeps the newest messages, ``"first"`` the oldest.
        keep_system: keep the system messages at the head of the list.
        start_on_human: make the first kept message after the system prompt a human
            message, as several providers require.
        keep_pending: keep a trailing AI message whose tool calls have no results yet
            (the tool node is about to run); without it such a message is dropped.
        keep_first: always keep this many messages after the system prompt (the task
            statement or the first question of a long conversation), counted against the
            budget; a kept human message already satisfies ``start_on_human``.

    Callable on a message list (``trimmer(messages)``), usable as a graph node or
    ``pre_model_hook`` (``trimmer.hook(mode)``) and as agent middleware
    (``trimmer.middleware(mode)``).
    """

    def __init__(
        self,
        *,
        max_tokens: int | None = None,
        max_messages: int | None = None,
        max_turns: int | None = None,
        token_counter: TokenCounterLike = None,
        strategy: Strategy = "last",
        keep_system: bool = True,
        start_on_human: bool = True,
        keep_pending: bool = True,
        keep_first: int = 0,
    ) -> None:
        if max_tokens is None and max_messages is None and max_turns is None:
            raise ValueError("Trimmer needs max_tokens, max_messages or max_turns")
        if isinstance(keep_first, bool) or not isinstance(keep_first, int) or keep_first < 0:
            raise ValueError(f"keep_first must be an integer >= 0, got {keep_first!r}")
        if strategy not in ("last", "first"):
            raise ValueError(f"strategy must be 'last' or 'first', got {strategy!r}")
        self.budget = Budget(as_token_counter(token_counter), max_tokens, max_messages, max_turns)
        self.strategy: Strategy = strategy
        self.keep_system = keep_system
        self.start_on_human = start_on_human
        self.keep_pending = keep_pending
        self.keep_first = keep_first

    def __call__(self, messages: Sequence[BaseMessage]) -> list[BaseMessage]:
        """The trimmed list (the messages themselves, never copies)."""
        return self.trim(messages)

    def trim(self, messages: Sequence[BaseMessage], *, pin: int | None = None) -> list[BaseMessage]:
        """Trim, keeping the leading system messages and the ``pin`` messages after them
        (default: ``keep_first``).

        ``pin`` lets the summarizer keep its summary message next to the system prompt; a
        pinned human message already satisfies "start on human".
        """
        return self.trim_within(self.budget.once(), messages, pin=pin)

    def trim_within(
        self, budget: Budget, messages: Sequence[BaseMessage], *, pin: int | None = None
    ) -> list[BaseMessage]:
        """:meth:`trim` with ``budget`` (this trimmer's, made :meth:`Budget.once` by a
        caller that counts the same messages before: the summarizer)."""
        pin = self.keep_first if pin is None else pin
        head, body = split_leading_system(messages) if self.keep_system else ([], list(messages))
        head, body = head + body[:pin], body[pin:]
        return select(
            head,
            body,
            budget,
            strategy=self.strategy,
            start_on_human=self.start_on_human
            and not any(isinstance(m, HumanMessage) for m in head),
            keep_pending=self.keep_pending,
        )

    def fallback(self, messages: Sequence[BaseMessage]) -> list[BaseMessage]:
        return self.trim(messages)

    def plan(self, messages: Sequence[BaseMessage], memo: object) -> Plan[ModelCall, Compaction]:
        kept = self.trim(messages)
        yield from ()
        changed = len(kept) != len(messages)
        return Compaction(model_input=kept, history=kept if changed else None)


def trim(messages: Sequence[BaseMessage], **options: Any) -> list[BaseMessage]:
    """``Trimmer(**options)(messages)``: trim a message list once (options as ``Trimmer``)."""
    return Trimmer(**options)(messages)
