"""Preference learning on the design notes' sentences and on the labelled corpus (issue 36).

Floors sit a little below the values measured by ``python -m benchmarks.preferences_corpus
--half all``; the blind half is the honest estimate (see tests/corpora/preferences/README.md).
"""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.store.memory import InMemoryStore

from benchmarks.preferences_corpus import load, score, stored
from langgraph_memory_plus.nodes import PreferenceLearner, extract_statements

CONFIG = {"configurable": {"user_id": "u1", "thread_id": "t1"}}


def read(text: str) -> dict[str, Any]:
    return stored(extract_statements(text))


# -- the design notes' own sentences --------------------------------------------------------


def test_the_notes_inquiry_stores_nothing_end_to_end() -> None:
    """`我想看看商务舱有没有折扣` was stored as cabin=business at 0.8 and injected."""
    assert extract_statements("我想看看商务舱有没有折扣") == []
    store = InMemoryStore()
    result = PreferenceLearner().apply(
        [HumanMessage("我想看看商务舱有没有折扣", id="m1"), AIMessage("有的")],
        store=store,
        config=CONFIG,
    )
    assert result.outcomes == {}
    assert store.get(("users", "u1"), "profile") is None


def test_every_trip_window_business_gives_both_preferences() -> None:
    assert read("每次出行都要靠窗商务舱") == {"seat": "window", "cabin": "business"}
    statements = {s.field: s for s in extract_statements("每次出行都要靠窗商务舱")}
    assert statements["seat"].confidence == 0.9  # a standing order (每次)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("我要靠窗", {"seat": "window"}),
        ("给我窗座", {"seat": "window"}),
        ("我习惯坐窗座", {"seat": "window"}),
        ("经济舱就行", {"cabin": "economy"}),
        # the notes' keyword sets: 靠窗/窗座 -> window, 公务舱/商务舱 -> business, 经济舱 -> economy
        ("我喜欢靠窗", {"seat": "window"}),
        ("我喜欢窗座", {"seat": "window"}),
        ("我一般坐公务舱", {"cabin": "business"}),
        ("我一般坐商务舱", {"cabin": "business"}),
        ("我一般坐经济舱", {"cabin": "economy"}),
        # synonyms and the English equivalents
        ("我习惯坐靠过道的位置", {"seat": "aisle"}),
        ("给我过道", {"seat": "aisle"}),
        ("I want the aisle.", {"seat": "aisle"}),
        ("Window seat for me, please.", {"seat": "window"}),
        ("Economy is fine.", {"cabin": "economy"}),
        (
            "Every trip, I want a window seat in business class.",
            {"seat": "window", "cabin": "business"},
        ),
    ],
)
def test_the_notes_keyword_sentences_are_read(text: str, expected: dict[str, Any]) -> None:
    assert read(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "我想看看商务舱有没有折扣",
        "I want to check whether business class has any discounts.",
        "帮我查一下头等舱的价格",  # inquiry
        "商务舱和经济舱有什么区别",  # question without a question mark
        "假如升舱免费，我会选头等舱",  # hypothetical, and its consequence
        "If it's cheap, I'll fly business class.",
        "上次我坐的是经济舱",  # a past trip, not a habit
        "我老公喜欢靠过道",  # someone else
        "My husband prefers the aisle.",
        "经济舱太挤了",  # an opinion, no wish
    ],
)
def test_questions_inquiries_hypotheticals_and_others_store_nothing(text: str) -> None:
    assert read(text) == {}


@pytest.mark.parametrize(
    ("text", "field", "value"),
    [
        ("I don't want an aisle seat.", "seat", "aisle"),
        ("Not an aisle seat, please.", "seat", "aisle"),
        ("No window seat for me.", "seat", "window"),
        ("我不要过道的座位", "seat", "aisle"),
        ("以后别给我订经济舱", "cabin", "economy"),
    ],
)
def test_a_negation_is_a_negated_statement_never_the_positive(
    text: str, field: str, value: str
) -> None:
    (statement,) = extract_statements(text)
    assert (statement.field, statement.value, statement.negated) == (field, value, True)
    assert read(text) == {}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("我不喜欢靠窗，给我过道吧", {"seat": "aisle"}),
        ("给我过道，不要靠窗", {"seat": "aisle"}),  # "not window" does not cancel the aisle
        ("I don't like the aisle, I prefer the window.", {"seat": "window"}),
    ],
)
def test_not_x_but_y_keeps_y(text: str, expected: dict[str, Any]) -> None:
    assert read(text) == expected


def test_conflicting_statements_resolve_by_recency_and_confidence() -> None:
    """Across turns: a fresh preference yields to the next statement; a confirmed one to
    the second contradiction; a negation only lowers an equal value."""
    store, learn = InMemoryStore(), PreferenceLearner()

    def turn(text: str, message_id: str) -> dict[str, Any]:
        learn.apply([HumanMessage(text, id=message_id)], store=store, config=CONFIG)
        item = store.get(("users", "u1"), "profile")
        assert item is not None
        return {k: (v["value"], v["confidence"]) for k, v in item.value.items()}

    assert turn("我要靠窗", "m1") == {"seat": ("window", 0.8)}
    assert turn("我习惯坐过道", "m2") == {"seat": ("aisle", 0.8)}  # 0.7 < 0.8: replaced
    assert turn("以后都给我订过道的位置", "m3") == {"seat": ("aisle", 0.85)}  # confirmed
    assert turn("I always pick the aisle.", "m4") == {"seat": ("aisle", 0.9)}  # either language
    assert turn("我要靠窗", "m5") == {"seat": ("aisle", 0.8)}  # contradicted, held
    assert turn("给我窗座", "m6") == {"seat": ("window", 0.8)}  # 0.7 < 0.8: replaced
    assert turn("I don't want a window seat.", "m7") == {"seat": ("window", 0.7)}
    # within one message the latest word wins
    assert read("我要靠窗。不对，我要过道") == {"seat": "aisle"}


# -- the labelled corpus --------------------------------------------------------------------

FLOORS = {
    # half -> language -> (precision, recall); measured: see the README
    "blind": {"en": (0.78, 0.62), "zh": (0.80, 0.72)},
    # h36-attack's held-out half: before its normalization fix en 0.909/0.769, zh
    # 0.818/0.692; after en 0.917/0.846, zh 0.846/0.846
    "adversarial": {"en": (0.88, 0.80), "zh": (0.80, 0.80)},
    "reporting": {"en": (0.95, 0.95), "zh": (0.95, 0.95)},
    "tuning": {"en": (0.95, 0.95), "zh": (0.95, 0.95)},
}


@pytest.mark.parametrize("half", sorted(FLOORS))
def test_precision_and_recall_floors_on_the_corpus(half: str) -> None:
    examples = load(half)
    assert {e.lang for e in examples} == {"en", "zh"}
    scores = score(examples, extract_statements)
    for lang, (precision, recall) in FLOORS[half].items():
        s = scores[lang]
        assert s.messages >= (30 if half == "adversarial" else 40)
        assert s.precision >= precision, (lang, s.precision, s.wrong)
        assert s.recall >= recall, (lang, s.recall, s.wrong)
        assert s.negations_stored == 0, (lang, s.wrong)
