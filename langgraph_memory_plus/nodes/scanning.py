"""Scanning user text before it becomes memory: prompt injection, role-play orders, SQL.

Whatever is stored in a user's memory is later pasted into the model's input, in every
thread, with the authority of a system message. A sentence like "ignore previous
instructions" typed once would otherwise become a standing order (memory poisoning). So
every piece of text a node is about to store is scanned first, and refused (logged,
counted, never written) when it reads like an instruction to the assistant rather than a
fact about the user; the profile injector scans again when it reads, for data that reached
the store some other way.

The rules are deliberately plain regular expressions over a normalized text (Unicode
compatibility forms folded, invisible characters dropped, case folded, spaces collapsed):
predictable, fast, and easy to extend with :class:`Rule`. They err on the side of refusing,
since a refused memory costs little and a stored instruction costs a lot.
"""

from __future__ import annotations

import logging
import re
import unicodedata
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from .. import _text
from ..errors import MemoryPlusError

logger = logging.getLogger(__name__)

PROMPT_INJECTION = "prompt_injection"
ROLE_PLAY = "role_play"
SQL = "sql"


@dataclass(frozen=True)
class Rule:
    """One pattern, matched against normalized text (lower case, single spaces)."""

    category: str
    name: str
    pattern: re.Pattern[str]

    @classmethod
    def of(cls, category: str, name: str, pattern: str) -> Rule:
        return cls(category, name, re.compile(pattern, re.MULTILINE))


@dataclass(frozen=True)
class Finding:
    """A match: which rule, and a short excerpt of the normalized text around it."""

    category: str
    rule: str
    excerpt: str

    def __str__(self) -> str:
        return f"{self.category}/{self.rule}"


class UnsafeTextError(MemoryPlusError, ValueError):
    """Text was refused for storage; ``findings`` says which rules matched."""

    def __init__(self, findings: list[Finding]) -> None:
        names = ", ".join(sorted({str(f) for f in findings}))
        super().__init__(f"refused: the text reads like instructions to the assistant ({names})")
        self.findings = findings


_W = r"(?:\s+[\w'-]+)"  # one more word
# "answer as soon as possible" is not a role: words that follow "act as" / "talk like" in
# ordinary requests
_NOT_ROLES = (
    r"(?:soon|well|usual|quickly|fast|much|long|briefly|before|always|normal|needed|follows"
    r"|if\s+(?!you))\b"
)
_TARGETS = (
    r"(?:instructions?|prompts?|rules|directions|directives|guidelines|guidance|messages?"
    r"|context|commands|orders|constraints|programming|restrictions|guardrails)"
)


def rules(category: str, patterns: dict[str, str]) -> tuple[Rule, ...]:
    """Rules of one category from ``{name: pattern}``."""
    return tuple(Rule.of(category, name, pattern) for name, pattern in patterns.items())


_INJECTION_PATTERNS = {
    "ignore-instructions": (
        r"\b(?:ignore|disregard|forget|bypass|override|overrule)\b" rf"{_W}{{0,4}}?\s+{_TARGETS}\b"
    ),
    "disregard-above": (
        r"\b(?:ignore|disregard|forget)\s+(?:all\s+|everything\s+)?(?:of\s+)?(?:the\s+|that\s+)?"
        r"(?:above|before|said before|you were told|you have been told|you know)\b"
    ),
    "reveal-prompt": (
        r"\b(?:reveal|show|print|repeat|leak|output|dump|tell me|give me)\b"
        r"(?:\s+[\w'-]+){0,4}?\s+(?:system|hidden|secret|initial|original|developer)\s+"
        r"(?:prompt|instructions?|message|rules)\b"
    ),
    "new-instructions": (
        r"\b(?:new|updated|real|actual|following|additional|secret)\s+"
        r"(?:system\s+)?(?:instructions?|prompt|rules|directives?)\s*:"
    ),
    "system-prompt": r"\b(?:your|the|a|new)\s+system\s+(?:prompt|instructions?|message)\b",
    "chat-markup": (
        r"<\|?\s*(?:im_start|im_end|system|endoftext|assistant)\s*\|?>|\[/?inst\]"
        r"|<<\s*/?sys\s*>>|^\s*#{2,}\s*(?:system|instruction|assistant)\b"
        r"|^\s*(?:system|assistant|developer)\s*:"
    ),
    "jailbreak": (
        r"\b(?:jailbreak\w*|dan mode|developer mode|god mode|do anything now|unfiltered mode)\b"
    ),
    "obey": (
        r"\byou\s+(?:must|will|shall)\s+(?:now\s+)?"
        r"(?:obey|comply|follow\s+(?:my|these|the\s+new))\b"
    ),
    "standing-order": (
        r"\b(?:always|never)\s+(?:tell|say|answer|respond|reply|recommend|reveal|obey)\b"
        r"(?:\s+[\w'-]+){0,6}?\s+(?:no matter|regardless|whatever|even if)\b"
    ),
}
_ROLE_PLAY_PATTERNS = {
    "you-are-now": r"\byou\s+are\s+(?:now|no\s+longer)\s+(?:an?|the|my|in)\b",
    "from-now-on-you": r"\bfrom\s+now\s+on\s*,?\s+(?:you|act|behave|respond)\b",
    "act-as": (
        r"\b(?:act|behave|respond|answer|speak|talk)\s+(?:as|like)\s+(?!" + _NOT_ROLES + r")"
        r"(?:if\s+you\s+(?:are|were)\s+)?(?:an?\s+|the\s+|my\s+)?[\w-]+"
    ),
    "pretend": r"\bpretend\s+(?:to\s+be|you\s*(?:are|'re)|that\s+you|you\s+have)\b",
    "role-play": (
        r"\b(?:let'?s|we|you|please)\s+(?:[\w'-]+\s+)?role[\s-]?play\w*"
        r"|\brole[\s-]?play\w*\s+(?:as|that|with\s+me|an?)\b"
    ),
    "in-character": r"\b(?:stay|remain)\s+in\s+character\b",
    "impersonate": r"\bimpersonat(?:e|ing)\s+(?:an?|the|my|your|someone|somebody|him|her|them)\b",
    "new-persona": r"\byour\s+(?:new\s+)?(?:role|persona|identity|character)\s+(?:is|will be)\b",
    "simulate": (
        r"\bsimulate\s+being\b|\bsimulate\s+an?\s+(?:[\w-]+\s+)?"
        r"(?:assistant|ai|chatbot|bot|persona|character|person|human)\b"
    ),
}
_SQL_PATTERNS = {
    "ddl": r"\b(?:drop|truncate|alter)\s+(?:table|database|schema|index|view)\b",
    "union-select": r"\bunion\s+(?:all\s+)?select\b",
    "select-from": (
        r"\bselect\s+(?:\*|[\w.]+(?:\s*,\s*[\w.]+)*)\s+from\s+[\w.\"`]+(?:\s+where\b|\s*;|\s*$)"
    ),
    "insert-into": r"\binsert\s+into\s+[\w.\"`]+",
    "delete-from": r"\bdelete\s+from\s+[\w.\"`]+",
    "update-set": r"\bupdate\s+[\w.\"`]+\s+set\s+[\w.\"`]+\s*=",
    "tautology": r"['\"]\s*(?:or|and)\s+['\"]?\w+['\"]?\s*=\s*['\"]?\w+",
    "comment-out": r"['\"]\s*\)?\s*;?\s*--",
    "stacked": r";\s*(?:shutdown|exec(?:ute)?)\b",
    "procedures": (
        r"\b(?:exec(?:ute)?\s+(?:xp|sp)_\w+|pg_sleep\s*\(|waitfor\s+delay\b|benchmark\s*\()"
    ),
}

DEFAULT_RULES: tuple[Rule, ...] = (
    *rules(PROMPT_INJECTION, _INJECTION_PATTERNS),
    *rules(ROLE_PLAY, _ROLE_PLAY_PATTERNS),
    *rules(SQL, _SQL_PATTERNS),
)
"""The rules :class:`Scanner` uses unless given others."""

_INVISIBLE = {"Cf", "Cc", "Co", "Cs", "Cn"}
_SPACES = re.compile(r"[^\S\n]+")


def normalize(text: str) -> str:
    """The form rules match against: NFKC, invisible characters dropped, case-folded,
    runs of spaces collapsed (newlines kept, so line-start rules still work)."""
    text = unicodedata.normalize("NFKC", text)
    text = "".join(ch for ch in text if ch in "\n\t" or unicodedata.category(ch) not in _INVISIBLE)
    text = text.replace("\u2019", "'").replace("\u2018", "'")
    return _SPACES.sub(" ", text.casefold())


def _strings(value: Any) -> Iterator[str]:
    """Every string in a JSON-like value, dict keys included."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield str(key)
            yield from _strings(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _strings(item)


class Scanner:
    """Finds instruction-like text that must not be stored as memory.

    Args:
        rules: the rules to use (default :data:`DEFAULT_RULES`).
        extra: rules to add to them, e.g. ``Rule.of("custom", "pii", r"\\bssn\\b")``.
    """

    def __init__(self, rules: Iterable[Rule] | None = None, *, extra: Iterable[Rule] = ()) -> None:
        self.rules: tuple[Rule, ...] = (*(DEFAULT_RULES if rules is None else rules), *extra)

    def scan(self, text: str) -> list[Finding]:
        """Every rule that matches ``text`` (empty: safe to store)."""
        normal = normalize(text)
        findings: list[Finding] = []
        for rule in self.rules:
            match = rule.pattern.search(normal)
            if match is not None:
                excerpt = _text.around(normal, match.start() - 20, match.end() + 20)
                findings.append(Finding(rule.category, rule.name, excerpt))
        return findings

    def scan_value(self, value: Any) -> list[Finding]:
        """:meth:`scan` over every string in a JSON-like value (keys too)."""
        return [finding for text in _strings(value) for finding in self.scan(text)]

    def check(self, value: Any) -> None:
        """Raise :class:`UnsafeTextError` if ``value`` (text or JSON-like) is refused."""
        findings = self.scan_value(value)
        if findings:
            raise UnsafeTextError(findings)


def log_refusal(where: str, findings: list[Finding]) -> None:
    """One warning per refusal, naming the rules; the excerpt goes through ``%r`` so the
    attacker's text cannot forge log lines."""
    logger.warning(
        "%s: refused to store user text (%s); excerpt %r",
        where,
        ", ".join(sorted({str(f) for f in findings})),
        _text.head(findings[0].excerpt, 80),
    )


DEFAULT_SCANNER = Scanner()
"""A scanner with the default rules (stateless, safe to share)."""
