"""Keep ``messages`` in bounds: reducers, trimming, summarization, and a turn window.

Every context tool works three ways from one implementation:

* on a plain message list: ``trim(messages, max_tokens=...)``, ``summarize(...)``, or a
  policy object called directly (``Trimmer(...)(messages)``);
* as a LangGraph node or ``create_react_agent(pre_model_hook=...)``: ``policy.hook(mode)``;
* as LangChain 1.x agent middleware: ``policy.middleware(mode)`` (needs ``langchain``,
  the ``agents`` extra; this package imports without it).

``mode="transient"`` changes only what the model sees (the checkpoint keeps everything);
``mode="persistent"`` rewrites the state's ``messages`` with ``RemoveMessage`` /
``REMOVE_ALL_MESSAGES``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from langchain_core.runnables import RunnableLambda

from ._core import (
    TokenCounter,
    count_messages,
    count_turns,
    provider_problems,
    repair_tool_pairs,
)
from ._policy import Compaction, ContextPolicy, Mode, use_adapters
from .hooks import context_hook
from .reducers import (
    REMOVE_ALL_MESSAGES,
    Reducer,
    dedupe_messages,
    merge_messages,
    merge_profile,
    window_messages,
)
from .summarization import (
    SUMMARY_ID,
    RunningSummary,
    Summarizer,
    SummaryResult,
    SummaryState,
    asummarize,
    summarize,
)
from .tokens import (
    ExactTokenCounter,
    approximate_text_tokens,
    count_tokens_script_aware,
    encoding_for_model,
)
from .trimming import Trimmer, trim
from .turns import TurnError, TurnHistory, TurnRecord, TurnWindow, abbreviate

if TYPE_CHECKING:
    from langchain.agents.middleware import AgentMiddleware


class _Adapters:
    """The adapters behind ``policy.hook()`` and ``policy.middleware()`` (see
    :class:`._policy.Adapters`); middleware is imported on first use (``agents`` extra)."""

    def hook(
        self, policy: ContextPolicy, mode: Mode, messages_key: str, input_key: str | None
    ) -> RunnableLambda[Any, dict[str, Any]]:
        return context_hook(policy, mode=mode, messages_key=messages_key, input_key=input_key)

    def middleware(self, policy: ContextPolicy, mode: Mode) -> AgentMiddleware[Any, Any, Any]:
        from .middleware import context_middleware

        return context_middleware(policy, mode=mode)


use_adapters(_Adapters())

__all__ = [
    "REMOVE_ALL_MESSAGES",
    "SUMMARY_ID",
    "Compaction",
    "ContextPolicy",
    "ExactTokenCounter",
    "Mode",
    "Reducer",
    "RunningSummary",
    "Summarizer",
    "SummaryResult",
    "SummaryState",
    "TokenCounter",
    "Trimmer",
    "TurnError",
    "TurnHistory",
    "TurnRecord",
    "TurnWindow",
    "abbreviate",
    "approximate_text_tokens",
    "asummarize",
    "context_hook",
    "count_messages",
    "count_tokens_script_aware",
    "count_turns",
    "dedupe_messages",
    "encoding_for_model",
    "merge_messages",
    "merge_profile",
    "provider_problems",
    "repair_tool_pairs",
    "summarize",
    "trim",
    "window_messages",
]
