"""Reading explicit statements about the user out of what the user wrote.

Only what the user says about themselves in so many words counts ("my name is Ada",
"I prefer a window seat"); questions, hypotheticals and anything the model said are never
evidence. The default :class:`RuleExtractor` is a small set of regular expressions:
predictable, free, and easy to audit, which matters more here than recall, since every
statement it returns ends up in front of the model in later conversations. Anything that
maps a text to :class:`Statement` s can replace it (an LLM-based extractor, say), as long
as it keeps to the same rule: explicit statements only.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from .. import _text

DEFAULT_CONFIDENCE = 0.8
HEDGE_PENALTY = 0.2


@dataclass(frozen=True)
class Statement:
    """One explicit claim of the user about themselves.

    ``negated``: the user said it is *not* so ("I don't want a window seat"): it can
    only lower the confidence of an equal stored value, never set one. ``evidence``: the
    words it was read from, kept with the stored preference as its source.
    """

    field: str
    value: Any
    confidence: float = DEFAULT_CONFIDENCE
    negated: bool = False
    evidence: str = ""


Extractor = Callable[[str], Iterable[Statement]]
"""Turns one user message's text into statements."""

ValueReader = Callable[[re.Match[str]], str | None]


def field_name(text: str) -> str:
    """A stable field name: lower case, runs of other characters as ``_``, at most 64."""
    return re.sub(r"[^a-z0-9]+", "_", text.casefold()).strip("_")[:64]


_STOP = {
    "and", "but", "or", "so", "please", "thanks", "thank", "btw", "i", "im", "i'm", "my",
    "from", "here", "by", "the", "to", "if", "when", "now", "because", "since", "though",
}  # fmt: skip
_NOT_NAMES = {
    "not", "a", "an", "the", "back", "later", "tomorrow", "today", "tonight", "soon", "again",
    "anytime", "asap", "sometime", "whenever", "sure", "happy", "here", "at", "on", "in",
    "if", "when", "now", "please", "maybe", "whatever", "anything", "something", "nothing",
}  # fmt: skip


def _words(text: str, limit: int) -> list[str]:
    """The leading words of ``text`` up to the first filler word, at most ``limit``."""
    out: list[str] = []
    for word in text.split():
        if word.casefold() in _STOP or len(out) == limit:
            break
        out.append(word)
    return out


def read_name(match: re.Match[str]) -> str | None:
    words = _words(match["value"], 3)
    if not words or words[0].casefold() in _NOT_NAMES:
        return None
    name = " ".join(words)
    return name.title() if name.islower() else name


def read_phrase(match: re.Match[str]) -> str | None:
    words = _words(match["value"], 4)
    return " ".join(words) if words else None


def read_word(match: re.Match[str]) -> str | None:
    return match["value"].casefold()


def read_title(match: re.Match[str]) -> str | None:
    return match["value"].strip().title()


@dataclass(frozen=True)
class Rule:
    """A pattern with a ``value`` group (and optionally a ``topic`` group).

    ``field`` may contain ``{topic}``, filled from the ``topic`` group ("my favourite
    colour is" gives ``favorite_colour``). ``read`` turns the match into the stored value,
    or ``None`` to reject it.
    """

    field: str
    pattern: re.Pattern[str]
    confidence: float = DEFAULT_CONFIDENCE
    read: ValueReader = read_phrase


_I = r"(?i:\bi)"  # "I" in any case
_LANGUAGES = (
    "english|french|german|spanish|italian|portuguese|dutch|swedish|norwegian|danish|finnish"
    "|polish|czech|greek|turkish|russian|ukrainian|arabic|hebrew|hindi|japanese|chinese"
    "|mandarin|cantonese|korean|vietnamese|thai|indonesian"
)
_SEAT_VERBS = (
    r"prefer|like|love|want|need|take|choose|pick|book|get|reserve|give me|go for|rather have"
    r"|hate|dislike|avoid|can'?t stand"
)

DEFAULT_RULES: tuple[Rule, ...] = (
    Rule(
        "name",
        re.compile(
            r"\b(?:my name is|my name's|call me|i go by|i am called|i'm called)\s+"
            r"(?P<value>[^\W\d_][\w'\-]*(?:\s+[^\W\d_][\w'\-]*){0,4})",
            re.IGNORECASE,
        ),
        0.9,
        read_name,
    ),
    Rule(
        "seat",
        re.compile(
            rf"\b(?:{_SEAT_VERBS})\b(?:\s+[\w'-]+){{0,4}}?\s+(?P<value>window|aisle|middle)"
            r"(?:\s+|-)seats?\b",
            re.IGNORECASE,
        ),
        0.8,
        read_word,
    ),
    Rule(
        "seat",
        re.compile(
            r"\b(?:always\s+|usually\s+)?sit\s+(?:by|at|next to|near|on|in)\s+the\s+"
            r"(?P<value>window|aisle)\b",
            re.IGNORECASE,
        ),
        0.75,
        read_word,
    ),
    Rule(
        "location",
        re.compile(
            rf"{_I}(?i:(?:'m|\s+am)\s+(?:based|living)|\s+live|\s+reside)(?i:\s+in)\s+"
            r"(?P<value>[A-Z][\w'\-]*(?:\s+[A-Z][\w'\-]*){0,2})"
        ),
        0.8,
        read_phrase,
    ),
    Rule(
        "language",
        re.compile(
            r"\b(?:answer|reply|respond|write|talk|speak)(?:\s+to\s+me)?\s+(?:only\s+)?in\s+"
            rf"(?P<value>{_LANGUAGES})\b",
            re.IGNORECASE,
        ),
        0.8,
        read_title,
    ),
    Rule(
        "favorite_{topic}",
        re.compile(
            r"\bmy\s+fav(?:ou?rite)?\s+(?P<topic>[a-z]+(?:\s+[a-z]+)?)\s+is\s+"
            r"(?P<value>[^\W_][\w'\-]*(?:\s+[\w'\-]+){0,5})",
            re.IGNORECASE,
        ),
        0.8,
        read_phrase,
    ),
    Rule(
        "diet",
        re.compile(
            r"\bi(?:'m|\s+am)\s+(?:an?\s+)?(?P<value>vegetarian|vegan|pescatarian|"
            r"gluten[- ]free|lactose[- ]intolerant|kosher|halal)\b",
            re.IGNORECASE,
        ),
        0.85,
        read_word,
    ),
)
"""The rules :class:`RuleExtractor` uses unless given others."""

# A sentence and its end mark; the end mark tells statements from questions.
_SENTENCE = re.compile(r"[^.!?;\n]+[.!?;\n]*")
# Within a sentence, a new clause starts at a comma or at a conjunction before a new
# subject ("... and I prefer ...", "... but my name is ...").
_CLAUSE_BREAK = re.compile(
    r",\s*|\s+(?:and|but|though|although|while|whereas)\s+(?=(?:i|i'm|i'd|my|please|call)\b)",
    re.IGNORECASE,
)
_NEGATION = re.compile(
    r"\b(?:don'?t|do not|doesn'?t|does not|never|no longer|not|hate|dislike|avoid|can'?t stand"
    r"|won'?t|rather not)\b",
    re.IGNORECASE,
)
_HEDGE = re.compile(
    r"\b(?:maybe|perhaps|probably|i think|i guess|i suppose|might|sometimes|not sure|kind of)\b",
    re.IGNORECASE,
)
_HYPOTHETICAL = re.compile(r"^\s*(?:if|when|whether|suppose|imagine|what if)\b", re.IGNORECASE)
# Clauses about someone else ("you prefer ...", "my wife likes ..."); "my name" and
# "my favourite" are the user's own.
_SOMEONE_ELSE = re.compile(
    r"^\s*(?:you|he|she|they|we|it|my\s+(?!name\b|fav)[\w-]+(?:'s)?)\b", re.IGNORECASE
)


def clauses(text: str) -> list[str]:
    """The declarative clauses of ``text`` about the user: questions, hypotheticals and
    clauses about someone else are left out."""
    out: list[str] = []
    for sentence in _SENTENCE.findall(text):
        if "?" in sentence:
            continue
        for clause in _CLAUSE_BREAK.split(sentence.strip(" .!;\n")):
            if clause.strip() and not (_HYPOTHETICAL.match(clause) or _SOMEONE_ELSE.match(clause)):
                out.append(clause.strip())
    return out


class RuleExtractor:
    """The default extractor: :data:`DEFAULT_RULES` (name, seat, location, reply language,
    favourites, diet), applied clause by clause.

    A clause with a negation before the match ("I don't want a window seat") gives a
    negated statement; a hedge ("maybe", "I think") lowers the confidence by
    ``hedge_penalty``. When a field is stated more than once, the last statement wins (it
    is the user's latest word).
    """

    def __init__(
        self, rules: Sequence[Rule] | None = None, *, hedge_penalty: float = HEDGE_PENALTY
    ) -> None:
        self.rules: tuple[Rule, ...] = tuple(DEFAULT_RULES if rules is None else rules)
        self.hedge_penalty = hedge_penalty

    def __call__(self, text: str) -> list[Statement]:
        found: dict[str, Statement] = {}
        for clause in clauses(text):
            for rule in self.rules:
                statement = self._read(rule, clause)
                if statement is not None:
                    found.pop(statement.field, None)
                    found[statement.field] = statement
        return list(found.values())

    def _read(self, rule: Rule, clause: str) -> Statement | None:
        match = rule.pattern.search(clause)
        if match is None:
            return None
        value = rule.read(match)
        if not value:
            return None
        topic = match.groupdict().get("topic") or ""
        field = field_name(rule.field.format(topic=topic))
        if not field:
            return None
        confidence = rule.confidence
        if _HEDGE.search(clause):
            confidence -= self.hedge_penalty
        negated = _NEGATION.search(clause[: match.start("value")]) is not None
        evidence = _text.head(clause, 200)
        statement = Statement(field, value, round(confidence, 4), negated, evidence)
        return statement if statement.confidence > 0 else replace(statement, confidence=0.0)


extract_statements = RuleExtractor()
"""The default extractor instance."""
