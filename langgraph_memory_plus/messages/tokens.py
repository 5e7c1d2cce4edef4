"""Token counts for budgets: a script-aware estimate by default, exact counts as an extra.

A budget is only as good as its counter. ``langchain_core``'s ``count_tokens_approximately``
assumes four characters per token, which holds for English and undercounts Chinese,
Japanese and Korean text three- to fourfold (one ideograph is about one token), so a
``Trimmer(max_tokens=4000)`` would let 12-16k tokens of Chinese through.

:func:`approximate_text_tokens` counts each script at its own rate, calibrated against the
o200k and cl100k tokenizers on customer-service text (``benchmarks/language.py``): it aims
at the geometric mean of the two, so it stays within 25% of both on English, Chinese,
Japanese and mixed text. It classifies characters by their UTF-8 lead bytes in a few C
calls a text (one ``bytes.translate``, a byte sum, and for text with U+3000-3FFF
characters a look for CJK punctuation). On English and code it costs about what the
four-characters rule costs (0.4-1.0x); on Chinese and Japanese about twice as much in a
100-turn list and 4-7x on one 2 KB message, as it reads the text where ``len`` does not.
Budget searches make up for it: both counters here add up per message, so
:func:`counted_once` lets ``Trimmer`` and ``Summarizer`` count each message once per call
where ``trim_messages`` counts the list about ten times (a ``Trimmer`` call: 0.5-0.75x
of what it costs with the four-characters rule; ``benchmarks/language.py``,
``benchmarks/results/2026-12-02-token-budgets-once.md``).

For exact budgets, :class:`ExactTokenCounter` counts with the real tables (the ``tokens``
extra, ``bpe-openai``, which ships them: no download at run time); it is imported only
when one is made.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable, Sequence
from typing import Any, cast
from zlib import adler32

from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)

EXTRA_TOKENS_PER_MESSAGE = 4
"""Per-message framing, as in OpenAI's chat format: three for the markers and separators,
one for the role (every role name is one token in both encodings)."""
TOKENS_PER_IMAGE = 85
"""What an image block costs (OpenAI's low-detail price), instead of counting its base64."""

# ---------------------------------------------------------------------------------------------
# the estimate
#
# Rates are kept in units of 1/20 token, so a count is an exact integer (no float rounding
# between the two paths below) and a message rounds up once: ceil(units / 20).

UNITS_PER_TOKEN = 20
# tokens per character x 20, fitted to the geometric mean of o200k and cl100k on
# benchmarks/data/language_samples.py (English runs ~4.7 characters a token)
_ASCII = 4  # ASCII letters, spaces and controls
_PUNCT = 14  # ASCII punctuation (code and markup split on it)
_DIGIT = 9  # digits, and letters of two-byte scripts (accented Latin, Cyrillic...)
_WIDE = 18  # other BMP symbols, CJK punctuation (U+3000-303F), full-width forms
_HAN = 18
_KANJI = 21  # ideographs in Japanese text (with kana) cost more in cl100k
_KANA = 14
_HANGUL = 13
_ASTRAL = 34  # emoji (o200k ~1.3, cl100k ~2.2 a code point)

# Characters are classed by their UTF-8 lead byte, without a pass per class:
# 7 b - 3 n (b bytes, n characters) charges every character by its UTF-8 length, 4 units
# for one byte (_ASCII), 11 for two, 18 for three (_HAN), 25 for four, and one
# bytes.translate keeps one byte per character whose class costs something else (its
# lead byte, mapped to the difference plus _OFFSET, as bytes are unsigned), dropping
# continuation bytes and ideographs. The kept weights are summed in C (zlib.adler32,
# below), less _OFFSET per kept byte. Ideographs then number n - (kept bytes).
_OFFSET = 5
_W_LETTER = _OFFSET  # ASCII letters, spaces, controls (the ASCII path drops them instead)
_W_PUNCT = _PUNCT - _ASCII + _OFFSET
_W_DIGIT = _DIGIT - _ASCII + _OFFSET
_W_TWO = _DIGIT - (7 * 2 - 3) + _OFFSET  # U+0080-07FF: Latin-1, Greek, Cyrillic, Arabic...
_W_WIDE = _WIDE - _HAN + _OFFSET  # U+0800-2FFF, U+E000-FFFF: Indic, symbols, full-width
_W_KANA = _KANA - _HAN + _OFFSET  # U+3000-3FFF: kana; its CJK punctuation is added back
_W_HANGUL = _HANGUL - _HAN + _OFFSET  # U+A000-DFFF: Hangul syllables (and Yi)
_W_ASTRAL = _ASTRAL - (7 * 4 - 3) + _OFFSET  # emoji, CJK ext. B+
_CJK_PUNCT = _WIDE - _KANA  # what a U+3000-303F character costs more than kana

_WEIGHT = bytearray(256)
_DROP, _ASCII_DROP = bytearray(), bytearray()
for _b in range(256):
    if 0x21 <= _b <= 0x7E and not chr(_b).isalnum():
        _WEIGHT[_b] = _W_PUNCT
    elif 0x30 <= _b <= 0x39:
        _WEIGHT[_b] = _W_DIGIT
    elif _b < 0x80:
        _WEIGHT[_b] = _W_LETTER
        _ASCII_DROP.append(_b)
    elif _b < 0xC0 or 0xE4 <= _b <= 0xE9:  # continuation bytes; U+4000-9FFF ideographs
        _DROP.append(_b)
    elif _b < 0xE0:
        _WEIGHT[_b] = _W_TWO
    elif _b == 0xE3:
        _WEIGHT[_b] = _W_KANA
    elif 0xEA <= _b <= 0xED:
        _WEIGHT[_b] = _W_HANGUL
    elif _b < 0xF0:
        _WEIGHT[_b] = _W_WIDE
    else:
        _WEIGHT[_b] = _W_ASTRAL
_WEIGHT_TABLE, _DROPPED, _ASCII_DROPPED = bytes(_WEIGHT), bytes(_DROP), bytes(_ASCII_DROP)
del _WEIGHT, _DROP, _ASCII_DROP, _b
# kana are counted among the kept bytes (and a kept weight is a byte)
assert _W_KANA not in (_W_LETTER, _W_PUNCT, _W_DIGIT, _W_TWO, _W_WIDE, _W_HANGUL, _W_ASTRAL)
assert min(_W_PUNCT, _W_DIGIT, _W_TWO, _W_WIDE, _W_KANA, _W_HANGUL, _W_ASTRAL) >= 0

# zlib.adler32's low half is 1 + the sum of the bytes mod 65521 (RFC 1950): a byte sum in
# C. Exact while the sum stays below 65521, so longer inputs are summed in chunks.
_SUM_CHUNK = 65519 // max(_W_PUNCT, _W_DIGIT, _W_TWO, _W_WIDE, _W_KANA, _W_HANGUL, _W_ASTRAL)


def _byte_sum(data: bytes) -> int:
    """The sum of the bytes of ``data`` (callers inline the one-chunk case)."""
    return sum(
        (adler32(data[i : i + _SUM_CHUNK]) & 0xFFFF) - 1 for i in range(0, len(data), _SUM_CHUNK)
    )


def _general_units(text: str) -> int:
    """:func:`text_units` of any text."""
    raw = text.encode("utf-8", "surrogatepass")
    kept = raw.translate(_WEIGHT_TABLE, _DROPPED)
    size = len(kept)
    weights = (adler32(kept) & 0xFFFF) - 1 if size <= _SUM_CHUNK else _byte_sum(kept)
    units = 7 * len(raw) - 3 * len(text) + weights - _OFFSET * size
    if 0xE3 not in raw:  # a memchr
        return units
    j = kept.count(_W_KANA)  # U+3000-3FFF: CJK punctuation (U+3000-303F) and kana
    # In Chinese text these are as a rule all 。 and 、 (and few): two str.count passes
    # then settle what the pair search, about three passes, would
    if j * 8 <= len(text) and text.count("。") + text.count("、") == j:
        cjk_punct = j
    else:
        cjk_punct = raw.count(b"\xe3\x80")
    units += _CJK_PUNCT * cjk_punct
    if j > cjk_punct:  # kana: Japanese, whose ideographs cost _KANJI, not _HAN
        units += (_KANJI - _HAN) * (len(text) - size)
    return units


def text_units(text: str) -> int:
    """:func:`approximate_text_tokens` in 1/20 tokens (:data:`UNITS_PER_TOKEN`), exact."""
    if not text.isascii():
        return _general_units(text)
    # what most messages are: _general_units without the classes ASCII cannot have
    # (7 b - 3 n is 4 n here), inlined as it runs once a message
    kept = text.encode().translate(_WEIGHT_TABLE, _ASCII_DROPPED)
    size = len(kept)
    weights = (adler32(kept) & 0xFFFF) - 1 if size <= _SUM_CHUNK else _byte_sum(kept)
    return _ASCII * len(text) + weights - _OFFSET * size


def approximate_text_tokens(text: str) -> float:
    """About how many tokens ``text`` is for today's OpenAI-style tokenizers.

    A float, so a message's parts can be added before rounding once.
    """
    return text_units(text) / UNITS_PER_TOKEN


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
    messages: Sequence[BaseMessage],
    text_tokens: Callable[[str], float],
    units_per_token: int = 1,
) -> int:
    """Tokens of a message list with ``text_tokens`` for its texts: each message's
    content, tool calls and name, plus :data:`EXTRA_TOKENS_PER_MESSAGE` framing and
    :data:`TOKENS_PER_IMAGE` per image. Rounded up per message, so counts add up.

    ``text_tokens`` may count in fractions of a token (``units_per_token`` of them make
    one): integer counts are then rounded once per message without going through floats.
    """
    total: float = 0
    for message in messages:
        content = message.content
        kind = type(message)
        if (
            type(content) is str
            and (
                kind in _NO_EXTRAS
                or (kind is AIMessage and not cast(AIMessage, message).tool_calls)
            )
            and not message.name
        ):  # the common case, without building lists
            total += -(-text_tokens(content) // units_per_token) + EXTRA_TOKENS_PER_MESSAGE
            continue
        texts, images = _parts(message)
        tokens = sum(text_tokens(text) for text in texts if text)
        total += (
            -(-tokens // units_per_token) + EXTRA_TOKENS_PER_MESSAGE + images * TOKENS_PER_IMAGE
        )
    return int(total)


_NO_EXTRAS = frozenset({HumanMessage, SystemMessage})
"""Message types with nothing to count but content and name (subclasses take the long way)."""


def count_tokens_script_aware(messages: Sequence[BaseMessage]) -> int:
    """The default token counter: :func:`approximate_text_tokens` over each message."""
    return count_message_tokens(messages, text_units, UNITS_PER_TOKEN)


def counted_once(
    counter: Callable[[list[BaseMessage]], int],
) -> Callable[[list[BaseMessage]], int]:
    """``counter`` for one budget search, counting each message once, if it is additive.

    A budget search counts overlapping parts of one list many times (``trim_messages``
    bisects, each candidate cut is checked, the summarizer counts before it trims): about
    ten passes over a 100-message conversation. The counters of this module count a list
    as the sum of its messages' counts (each rounded on its own), so the search can count
    each message once and add. Any other counter (a model's, a user's) may add per-list
    overheads and is returned as it is.

    The counts live as long as the returned callable, which a search drops when it
    returns: no text outlives the call (a process-wide cache would keep erased text).
    """
    if counter is count_tokens_script_aware:
        return _CountedOnce(text_units, UNITS_PER_TOKEN)
    if isinstance(counter, ExactTokenCounter):
        return _CountedOnce(counter.text_tokens, 1)
    return counter


class _CountedOnce:
    """An additive counter's counts, each message counted on first sight (see
    :func:`counted_once`)."""

    __slots__ = ("_held", "_known", "_text_tokens", "_units")

    def __init__(self, text_tokens: Callable[[str], float], units_per_token: int) -> None:
        self._text_tokens, self._units = text_tokens, units_per_token
        self._known: dict[int, int] = {}  # by id: ...
        # ... of a message held here, so no other message can take its id meanwhile
        self._held: list[BaseMessage] = []

    def __call__(self, messages: Sequence[BaseMessage]) -> int:
        known = self._known
        try:  # once each message is known (every call after the first): a sum in C
            return sum(map(known.__getitem__, map(id, messages)))
        except KeyError:
            pass
        for message in messages:
            if id(message) not in known:
                self._held.append(message)
                known[id(message)] = count_message_tokens(
                    (message,), self._text_tokens, self._units
                )
        return sum(map(known.__getitem__, map(id, messages)))


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
