"""The rule-based extractor reads explicit statements only."""

from __future__ import annotations

import re

import pytest

from langgraph_memory_plus.nodes import RuleExtractor, Statement, extract_statements
from langgraph_memory_plus.nodes.extraction import Rule, read_word


def facts(text: str) -> dict[str, tuple[object, bool]]:
    return {s.field: (s.value, s.negated) for s in extract_statements(text)}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "Hi! My name is Ada and I prefer a window seat.",
            {"name": ("Ada", False), "seat": ("window", False)},
        ),
        ("call me ada lovelace please", {"name": ("Ada Lovelace", False)}),
        ("I'd rather have an aisle seat on long flights", {"seat": ("aisle", False)}),
        ("I always sit by the window.", {"seat": ("window", False)}),
        ("I hate middle seats.", {"seat": ("middle", True)}),
        ("I don't want a window seat anymore", {"seat": ("window", True)}),
        ("I live in New York, by the way.", {"location": ("New York", False)}),
        ("Please reply in french from now.", {"language": ("French", False)}),
        ("My favourite colour is deep green.", {"favorite_colour": ("deep green", False)}),
        ("I'm vegetarian.", {"diet": ("vegetarian", False)}),
    ],
)
def test_explicit_statements(text: str, expected: dict[str, tuple[object, bool]]) -> None:
    assert facts(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "What's my name?",
        "Is my name is Ada correct?",  # a question, however it is worded
        "If my name is Ada, what does that mean?",
        "Please call me back tomorrow.",
        "Call me when you land.",
        "My friend's name is Bob.",
        "My name is not important.",
        "Should I prefer a window seat?",
        "I live in the moment.",
        "You prefer window seats, right?",
        "You prefer window seats.",
        "My wife prefers aisle seats.",
        "He likes window seats. They love middle seats.",
    ],
)
def test_questions_hypotheticals_and_others_are_not_statements(text: str) -> None:
    assert extract_statements(text) == []


def test_hedges_lower_confidence_and_the_last_statement_wins() -> None:
    plain, hedged = (
        extract_statements("I prefer a window seat"),
        extract_statements("Maybe I prefer a window seat"),
    )
    assert hedged[0].confidence == pytest.approx(plain[0].confidence - 0.2)
    (seat,) = extract_statements("I prefer a window seat. No wait, I prefer an aisle seat.")
    assert seat.value == "aisle"
    assert seat.evidence == "I prefer an aisle seat"


def test_custom_rules() -> None:
    rule = Rule("meal", re.compile(r"\b(?P<value>kosher|halal) meals?\b", re.I), 0.7, read_word)
    extractor = RuleExtractor([rule])
    assert extractor("Book a Halal meal for me") == [
        Statement("meal", "halal", 0.7, False, "Book a Halal meal for me")
    ]
    assert extractor("My name is Ada") == []
