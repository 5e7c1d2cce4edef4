"""Token counts for budgets: a script-aware estimate by default, exact counts as an extra.

A budget is only as good as its counter. ``langchain_core``'s ``count_tokens_approximately``
assumes four characters per token, which holds for English and undercounts Chinese,
Japanese and Korean text three- to fourfold (one ideograph is about one token), so a
``Trimmer(max_tokens=4000)`` would let 12-16k tokens of Chinese through.

:func:`approximate_text_tokens` counts each script at its own rate, calibrated against the
o200k and cl100k tokenizers on customer-service text (``benchmarks/language.py``): it aims
at the geometric mean of the two, so it stays within 25% of both on English, Chinese,
Japanese and mixed text. It classifies characters by their UTF-8 lead bytes with one
``bytes.translate`` and a few ``bytes.count`` calls, all in C, so it costs about what the
four-characters rule costs.

For exact budgets, :class:`ExactTokenCounter` counts with the real tables (the ``tokens``
extra, ``bpe-openai``, which ships them: no download at run time); it is imported only
when one is made.
"""

from __future__ import annotations

import json
import math
import warnings
from collections.abc import Callable, Sequence
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, ToolMessage

EXTRA_TOKENS_PER_MESSAGE = 4
"""Per-message framing, as in OpenAI's chat format: three for the markers and separators,
one for the role (every role name is one token in both encodings)."""
TOKENS_PER_IMAGE = 85
"""What an image block costs (OpenAI's low-detail price), instead of counting its base64."""

# ---------------------------------------------------------------------------------------------
# the estimate

# byte -> class letter; UTF-8 continuation bytes (0x80-0xBF) are deleted, so every
# character leaves exactly one letter behind (its lead byte's class). Classes that cost
# the same share a letter: each letter is one more pass over the text.
_CLASS = bytearray(b"l" * 256)  # ASCII letters, spaces and controls
for _b in b"!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~":
    _CLASS[_b] = ord("p")
for _lo, _hi, _letter in (
    (0x30, 0x39, "d"),  # digits (numbers split into groups of up to three)
    (0xC0, 0xDF, "d"),  # U+0080-07FF: Latin-1, Latin extended, Greek, Cyrillic, Arabic...
    (0xE0, 0xE2, "w"),  # U+0800-2FFF: Indic scripts, punctuation, symbols, dingbats
    (0xE3, 0xE3, "j"),  # U+3000-3FFF: kana, CJK punctuation (split below), ext. A
    (0xE4, 0xE9, "h"),  # U+4000-9FFF: CJK unified ideographs
    (0xEA, 0xED, "k"),  # U+A000-DFFF: Hangul syllables (and Yi)
    (0xEE, 0xEF, "w"),  # U+E000-FFFF: full-width forms, compatibility ideographs, VS16
    (0xF0, 0xFF, "4"),  # astral: emoji, CJK ext. B+
):
    for _b in range(_lo, _hi + 1):
        _CLASS[_b] = ord(_letter)
_TABLE = bytes(_CLASS)
_CONTINUATION = bytes(range(0x80, 0xC0))
del _b, _lo, _hi, _letter

# tokens per character, fitted to the geometric mean of o200k and cl100k on
# benchmarks/data/language_samples.py (English runs ~4.7 characters a token)
_ASCII = 0.2
_PUNCT = 0.7  # ASCII punctuation (code and markup split on it)
_DIGIT = 0.45  # digits, and letters of two-byte scripts (accented Latin, Cyrillic...)
_WIDE = 0.9  # other BMP symbols, CJK punctuation, full-width forms
_HAN = 0.9
_KANJI = 1.05  # ideographs in Japanese text (with kana) cost more in cl100k
_KANA = 0.7
_HANGUL = 0.65
_ASTRAL = 1.7  # emoji (o200k ~1.3, cl100k ~2.2 a code point)


def approximate_text_tokens(text: str) -> float:
    """About how many tokens ``text`` is for today's OpenAI-style tokenizers.

    A float, so a message's parts can be added before rounding once.
    """
    if text.isascii():
        classes = text.encode("ascii").translate(_TABLE)
        return (
            _ASCII * len(classes)
            + (_PUNCT - _ASCII) * classes.count(b"p")
            + (_DIGIT - _ASCII) * classes.count(b"d")
        )
    raw = text.encode("utf-8", "surrogatepass")
    classes = raw.translate(_TABLE, _CONTINUATION)
    punct, digit, wide, han, j, hangul, astral = map(classes.count, _LETTERS)
    cjk_punct = raw.count(b"\xe3\x80")  # U+3000-303F, the rest of "j" is kana (mostly)
    kana = j - cjk_punct
    rest = len(classes) - punct - digit - wide - han - j - hangul - astral
    return (
        _ASCII * rest
        + _PUNCT * punct
        + _DIGIT * digit
        + _WIDE * (wide + cjk_punct)
        + (_KANJI if kana else _HAN) * han
        + _KANA * kana
        + _HANGUL * hangul
        + _ASTRAL * astral
    )


_LETTERS = (b"p", b"d", b"w", b"h", b"j", b"k", b"4")


# ---------------------------------------------------------------------------------------------
# messages


def _parts(message: BaseMessage) -> tuple[list[str], int]:
    """The texts of a message that reach the model, and its images (priced flat)."""
    texts: list[str] = []
    images = 0
    content = message.content
    if isinstance(content, str):
        texts.append(content)
    else:
        for block in content:
            if isinstance(block, str):
                texts.append(block)
            elif isinstance(block, dict) and block.get("type") in ("image", "image_url"):
                images += 1
            elif isinstance(block, dict) and block.get("type") == "text":
                texts.append(str(block.get("text", "")))
            else:
                texts.append(json.dumps(block, ensure_ascii=False, default=str))
    if isinstance(message, AIMessage) and message.tool_calls and isinstance(content, str):
        calls = [{"name": c["name"], "args": c["args"]} for c in message.tool_calls]
        texts.append(json.dumps(calls, ensure_ascii=False, default=str))
    if isinstance(message, ToolMessage):
        texts.append(message.tool_call_id)
    if message.name:
        texts.append(message.name)
    return texts, images


def count_message_tokens(
    messages: Sequence[BaseMessage], text_tokens: Callable[[str], float]
) -> int:
    """Tokens of a message list with ``text_tokens`` for its texts: each message's
    content, tool calls and name, plus :data:`EXTRA_TOKENS_PER_MESSAGE` framing and
    :data:`TOKENS_PER_IMAGE` per image. Rounded up per message, so counts add up."""
    total = 0
    for message in messages:
        content = message.content
        if (
            isinstance(content, str)
            and not message.name
            and not isinstance(message, ToolMessage)
            and not (isinstance(message, AIMessage) and message.tool_calls)
        ):  # the common case, without building lists
            total += math.ceil(text_tokens(content)) + EXTRA_TOKENS_PER_MESSAGE
            continue
        texts, images = _parts(message)
        tokens = sum(text_tokens(text) for text in texts if text)
        total += math.ceil(tokens) + EXTRA_TOKENS_PER_MESSAGE + images * TOKENS_PER_IMAGE
    return total


def count_tokens_script_aware(messages: Sequence[BaseMessage]) -> int:
    """The default token counter: :func:`approximate_text_tokens` over each message."""
    return count_message_tokens(messages, approximate_text_tokens)


# ---------------------------------------------------------------------------------------------
# exact counts

ENCODINGS = ("o200k_base", "cl100k_base")
"""The encodings :class:`ExactTokenCounter` is meant for (GPT-4o and later; GPT-4/3.5)."""


class ExactTokenCounter:
    """Exact token counts with OpenAI's tables, offline (``pip install
    'langgraph-memory-plus[tokens]'``, which brings ``bpe-openai``).

    Callable on a message list, so it goes wherever a ``token_counter`` does
    (``Trimmer(max_tokens=4000, token_counter=ExactTokenCounter("o200k_base"))``; the
    strings ``"o200k_base"`` and ``"cl100k_base"`` make one too). Messages are framed
    as :func:`count_message_tokens` says; texts are counted exactly.
    """

    def __init__(self, encoding: str = "o200k_base") -> None:
        # its table loader (run on import) uses a deprecated importlib API
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            try:
                import bpe_openai
            except ImportError as exc:  # pragma: no cover - the test extra installs it
                raise ImportError(
                    "exact token counts need the 'tokens' extra: "
                    "pip install 'langgraph-memory-plus[tokens]'"
                ) from exc
            self._encoding: Any = bpe_openai.get_encoding(encoding)
        self.encoding = encoding

    def text_tokens(self, text: str) -> int:
        """The exact token count of ``text`` (special-token text counted as plain text)."""
        return len(self._encoding.encode_ordinary(text))

    def __call__(self, messages: Sequence[BaseMessage]) -> int:
        return count_message_tokens(messages, self.text_tokens)

    def __repr__(self) -> str:
        return f"ExactTokenCounter({self.encoding!r})"
