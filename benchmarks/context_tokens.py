"""Tokens sent to the model per turn, with no context tool, with trimming, with summarization.

A deterministic tool-using conversation (per turn: a question, a tool call, its result, an
answer; two model calls per turn) is played for ``--turns`` turns. Before each model call the
context tool decides the input exactly as the graph hooks and middleware do (transient
mode: the history itself keeps growing), and the input's tokens are counted with
``langchain_core``'s ``count_tokens_approximately``. Per turn we add up both calls.

Run::

    python benchmarks/context_tokens.py               # 200 turns, budget 2000 tokens
    python benchmarks/context_tokens.py --turns 500 --budget 4000

The summarize row also reports what the summary model itself was sent, since that is the
price of the smaller inputs.
"""

from __future__ import annotations

import argparse
import math
import statistics
from collections.abc import Callable
from typing import Any

from langchain_core.language_models.fake_chat_models import FakeListChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.messages.utils import count_tokens_approximately

from langgraph_memory_plus.messages import ContextPolicy, Summarizer, Trimmer

WORDS = [
    "alpha",
    "beta",
    "gamma",
    "delta",
    "epsilon",
    "zeta",
    "eta",
    "theta",
    "iota",
    "kappa",
    "lambda",
    "mu",
]


def _text(seed: int, words: int) -> str:
    return " ".join(WORDS[(seed * 7 + i * 3) % len(WORDS)] for i in range(words))


def turn(k: int) -> list[BaseMessage]:
    """One turn: ~20-token question, a tool call, ~100-token result, ~80-token answer."""
    call = {"name": "search", "args": {"query": f"topic {k}"}, "id": f"call-{k}"}
    return [
        HumanMessage(f"Question {k}: " + _text(k, 12), id=f"h{k}"),
        AIMessage("", id=f"c{k}", tool_calls=[call]),
        ToolMessage(_text(k + 1, 70), tool_call_id=f"call-{k}", id=f"t{k}"),
        AIMessage(f"Answer {k}: " + _text(k + 2, 55), id=f"a{k}"),
    ]


class _CountingSummaries(FakeListChatModel):
    """A summary model whose summaries are ~150 tokens; counts the tokens it is sent."""

    sent: int = 0

    def _call(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> str:
        self.sent += count_tokens_approximately(messages)
        return _text(self.sent, 110)


def play(turns: int, policy: ContextPolicy | None) -> list[int]:
    """Tokens sent to the model in each turn (both calls of the turn added up)."""
    history: list[BaseMessage] = [SystemMessage("You are a research assistant. " + _text(0, 30))]
    memo: Any = None
    per_turn: list[int] = []
    for k in range(turns):
        messages = turn(k)
        sent = 0
        # call 1 sees the question; call 2 also its own tool call and the tool's result
        for seen in (1, 3):
            visible = history + messages[:seen]
            if policy is None:
                model_input = visible
            else:
                compaction = policy.apply(visible, memo)
                memo = compaction.memo if compaction.memo is not None else memo
                model_input = compaction.model_input
            sent += count_tokens_approximately(model_input)
        history.extend(messages)
        per_turn.append(sent)
    return per_turn


def p95(values: list[int]) -> int:
    ordered = sorted(values)
    return ordered[max(0, math.ceil(0.95 * len(ordered)) - 1)]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--budget", type=int, default=2000, help="max tokens per model call")
    parser.add_argument("--keep-last", type=int, default=6)
    args = parser.parse_args(argv)

    summaries = _CountingSummaries(responses=["unused"])
    modes: dict[str, Callable[[], ContextPolicy | None]] = {
        "none": lambda: None,
        # the tools budget with the counter the table counts with (the default is the
        # script-aware estimate, which counts this English text about the same)
        "trim": lambda: Trimmer(max_tokens=args.budget, token_counter=count_tokens_approximately),
        "summarize": lambda: Summarizer(
            summaries,
            max_tokens=args.budget,
            keep_last=args.keep_last,
            token_counter=count_tokens_approximately,
        ),
    }
    print(
        f"{args.turns} turns, 2 model calls per turn, budget {args.budget} tokens per call "
        "(count_tokens_approximately); tokens sent per turn:\n"
    )
    header = (
        f"| {'mode':<9} | {'mean':>7} | {'p95':>7} | {'max':>7} | {'last turn':>9} | {'total':>9} |"
    )
    print(header)
    print("|" + "|".join("-" * (len(cell)) for cell in header.split("|")[1:-1]) + "|")
    for name, make in modes.items():
        per_turn = play(args.turns, make())
        print(
            f"| {name:<9} | {statistics.fmean(per_turn):>7.0f} | {p95(per_turn):>7} | "
            f"{max(per_turn):>7} | {per_turn[-1]:>9} | {sum(per_turn):>9} |"
        )
    print(f"\nsummary model input, all turns: {summaries.sent} tokens")


if __name__ == "__main__":
    main()
