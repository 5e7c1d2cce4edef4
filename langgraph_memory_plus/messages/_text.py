"""Cutting text to a length without breaking a character the reader sees as one.

Every length limit in this package (abbreviated turns, quotes kept with a preference,
excerpts in findings and errors) counts characters, and a cut must not split what a
reader sees as one character: a surrogate pair (text decoded with ``surrogatepass``), a
letter and its combining accents, an emoji and its skin tone or variation selector, a
ZWJ family, a flag's two regional indicators, a Hangul syllable spelled in jamo. Python
indexes code points, so ``text[:n]`` can do all of these. The rules here are the parts
of Unicode's grapheme-cluster rules (UAX #29) that matter for those cases, small enough
to need no dependency.
"""

from __future__ import annotations

import unicodedata

_ZWJ = "\u200d"


def _extends(ch: str) -> bool:
    """Does ``ch`` attach to the character before it (no boundary in front of it)?"""
    cp = ord(ch)
    return (
        0xDC00 <= cp <= 0xDFFF  # low surrogate (its high half is before it)
        or unicodedata.category(ch) in ("Mn", "Me", "Mc")  # combining marks
        or cp == 0x200D  # zero-width joiner
        or 0xFE00 <= cp <= 0xFE0F  # variation selectors
        or 0x1F3FB <= cp <= 0x1F3FF  # emoji skin tones
        or 0xE0020 <= cp <= 0xE007F  # emoji tag sequences (subdivision flags)
        or 0xE0100 <= cp <= 0xE01EF  # variation selectors supplement
        or 0x1160 <= cp <= 0x11FF  # Hangul medial vowels and final consonants
        or 0xD7B0 <= cp <= 0xD7FF
    )


def _regional(ch: str) -> bool:
    return 0x1F1E6 <= ord(ch) <= 0x1F1FF


def is_boundary(text: str, index: int) -> bool:
    """Is cutting ``text`` before ``index`` safe (no visible character split)?"""
    if index <= 0 or index >= len(text):
        return True
    before, after = text[index - 1], text[index]
    if _extends(after) or before == _ZWJ:
        return False
    if 0xD800 <= ord(before) <= 0xDBFF and 0xDC00 <= ord(after) <= 0xDFFF:
        return False
    if _regional(before) and _regional(after):
        # flags pair up from the start of the run: split only between whole pairs
        run = 0
        while index - 1 - run >= 0 and _regional(text[index - 1 - run]):
            run += 1
        return run % 2 == 0
    # a leading Hangul consonant joins a following syllable
    return not (0x1100 <= ord(before) <= 0x115F and 0xAC00 <= ord(after) <= 0xD7A3)


def head(text: str, max_chars: int) -> str:
    """The longest start of ``text`` of at most ``max_chars`` characters that ends on a
    boundary (shorter by the rest of a split character, empty if the first is longer)."""
    if len(text) <= max_chars:
        return text
    end = max(0, max_chars)
    while end > 0 and not is_boundary(text, end):
        end -= 1
    return text[:end]


def tail(text: str, max_chars: int) -> str:
    """The longest end of ``text`` of at most ``max_chars`` characters that starts on a
    boundary."""
    if len(text) <= max_chars:
        return text
    start = len(text) - max(0, max_chars)
    while start < len(text) and not is_boundary(text, start):
        start += 1
    return text[start:]


def around(text: str, start: int, end: int) -> str:
    """``text[start:end]`` widened to boundaries (for excerpts around a match)."""
    start, end = max(0, start), min(len(text), end)
    while start > 0 and not is_boundary(text, start):
        start -= 1
    while end < len(text) and not is_boundary(text, end):
        end += 1
    return text[start:end]
