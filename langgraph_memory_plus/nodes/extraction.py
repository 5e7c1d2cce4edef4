"""Reading explicit statements about the user out of what the user wrote.

Only what the user says about themselves in so many words counts ("my name is Ada",
"I prefer a window seat"); questions, hypotheticals and anything the model said are never
evidence. The default :class:`RuleExtractor` is a small set of regular expressions:
predictable, free, and easy to audit, which matters more here than recall, since every
statement it returns ends up in front of the model in later conversations. Anything that
maps a text to :class:`Statement` s can replace it, as long as it keeps to the same rule:
explicit statements only (:class:`.llm_extraction.LLMExtractor` asks a chat model and
keeps what these rules allow).

Rules are data, per language (:class:`LanguageRules`: the rules plus how that language
marks sentences, questions, negations, hedges and standing orders). English and Chinese
come built in; values are stored in one canonical form ("靠窗" and "window seat" both
give ``seat: window``), so a statement in either language confirms the other.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from ..messages import _text
from ._hant import simplified

DEFAULT_CONFIDENCE = 0.8
HEDGE_PENALTY = 0.2
STANDING_BONUS = 0.1
"""Added for a standing order ("from now on", "以后都"): said as a rule, not a one-off."""


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


def read_cabin(match: re.Match[str]) -> str | None:
    return " ".join(match["value"].casefold().split())


def read_seat(match: re.Match[str]) -> str | None:
    value = match["value"].casefold()
    return None if value == "middle" and not match["seat"] else value


def read_member_number(match: re.Match[str]) -> str | None:
    """A membership number without its spaces and dashes, letters upper case."""
    return re.sub(r"[\s-]+", "", match["value"]).upper()


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
# a wish or a habit stated by the user, or an order to the assistant, before the value
_EN_WISH = (
    r"prefer|like|love|want|need|take|choose|pick|book|get|reserve|give me|go for|put me"
    r"|seat me|rather have|'d rather|sit|sitting|used to|always|usually|normally|generally"
    r"|preference is|hate|dislike|avoid|can'?t stand"
)
# "window"/"aisle" alone ("I want the aisle"); "middle" only as "middle seat" (see read_seat)
_EN_SEAT = r"(?P<value>window|aisle|middle)(?P<seat>(?:\s+|-)(?:seats?|side)\b)?\b"
# "business" and "first" name a cabin only with "class" ("book business travel")
_EN_CABIN = r"(?P<value>premium economy|economy|business|first)(?:(?:\s+|-)class\b|(?<=economy)\b)"
# a value that opens the clause and is accepted after it ("Aisle seats only, please",
# "Economy is fine for me"); "no"/"not" before it makes the statement negated
_EN_BARE = r"^\s*(?:please\s*,?\s*)?(?:(?:no|not)\s+)?(?:an?\s+|the\s+)?"
_EN_TAKEN = (
    r"(?:\s+only)?\s*,?\s*(?:for me|please|only|is fine|is ok(?:ay)?|is good|is perfect|works"
    r"|will do)\b"
)


ENGLISH_RULES: tuple[Rule, ...] = (
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
        re.compile(rf"\b(?:{_EN_WISH})\b(?:\s+[\w'-]+){{0,5}}?\s+{_EN_SEAT}", re.IGNORECASE),
        0.8,
        read_seat,
    ),
    Rule("seat", re.compile(rf"{_EN_BARE}{_EN_SEAT}{_EN_TAKEN}", re.IGNORECASE), 0.8, read_seat),
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
    Rule(
        "cabin",
        re.compile(
            rf"\b(?:{_EN_WISH}|fly|flying|flies|travel|travelling|traveling|upgrade(?: me)? to)\b"
            rf"(?:\s+[\w'-]+){{0,6}}?\s+{_EN_CABIN}",
            re.IGNORECASE,
        ),
        0.8,
        read_cabin,
    ),
    Rule("cabin", re.compile(rf"{_EN_BARE}{_EN_CABIN}{_EN_TAKEN}", re.IGNORECASE), 0.8, read_cabin),
    Rule(
        "frequent_flyer",
        re.compile(
            r"\bmy\s+(?:[a-z]+\s+)?(?:frequent[- ]fl(?:y|i)er|loyalty|mileage|miles)"
            r"(?:\s+(?:program(?:me)?|club|account|membership))?\s+(?:number|no\.?|#|id)"
            r"\s*(?:is|:)?\s*(?P<value>[A-Z]{0,3}[\s-]?\d[\d\s-]{4,18}\d)\b",
            re.IGNORECASE,
        ),
        0.9,
        read_member_number,
    ),
    Rule(
        "meal",
        re.compile(
            r"\b(?P<value>vegetarian|vegan|kosher|halal|gluten[- ]free|diabetic|low[- ]salt"
            r"|child|children's|hindu|asian vegetarian)\s+meals?\b",
            re.IGNORECASE,
        ),
        0.8,
        read_word,
    ),
)
"""English rules: name, seat, cabin, location, reply language, favourites, diet, meal,
frequent-flyer number."""

_HAN_NAME = r"[\u4e00-\u9fff·]{2,4}"
# a wish, a habit or an order to the assistant, before the value ("我习惯坐窗座", "给我窗座")
_WANT = (
    r"(?:喜欢|偏好|偏爱|习惯|爱|要|想要|想|需要|订|预订|预定|选|坐|安排|换成?|换到|改成?|改到|留"
    r"|给我|帮我|讨厌|不喜欢|一向|一般|通常|总是|一直|向来|都|只|最好)"
)
# seat words that say "seat" on their own, and those that need a seat noun after them
# (窗口 is also a service counter, 中间 any middle)
_CN_SEATS = {"靠窗": "window", "窗座": "window", "窗位": "window", "靠窗户": "window",
             "窗户旁边": "window", "窗户边": "window", "窗边": "window", "靠过道": "aisle",
             "过道": "aisle", "走道": "aisle", "靠走廊": "aisle"}  # fmt: skip
_CN_WEAK_SEATS = {"窗口": "window", "走廊": "aisle", "中间": "middle"}
_CN_SEAT_NOUN = r"(?:的)?(?:座位|位置|位子|座|位|那边|一侧)"
_CN_CABINS = {"超级经济舱": "premium economy", "高端经济舱": "premium economy",
              "明珠经济舱": "premium economy", "经济舱": "economy", "商务舱": "business",
              "公务舱": "business", "头等舱": "first"}  # fmt: skip
# a value that opens the clause and is accepted after it ("经济舱就行", "还是靠窗吧")
_CN_BARE = r"^\s*(?:还是|就|请|要)?"
_CN_TAKEN = r"(?:的)?(?:座位|位置|位子|座|位)?(?:就行|就好|就可以|就成|即可|就够了|也行|吧)"
_CN_MEALS = {"素食": "vegetarian", "素": "vegetarian", "素餐": "vegetarian", "清真": "halal",
             "无麸质": "gluten-free", "儿童": "child", "糖尿病": "diabetic", "低盐": "low-salt",
             "犹太": "kosher"}  # fmt: skip
_CN_LANGUAGES = {"中文": "Chinese", "汉语": "Chinese", "普通话": "Mandarin", "国语": "Mandarin",
                 "粤语": "Cantonese", "广东话": "Cantonese", "英文": "English", "英语": "English",
                 "日语": "Japanese", "日文": "Japanese", "韩语": "Korean", "韩文": "Korean",
                 "法语": "French", "德语": "German", "西班牙语": "Spanish"}  # fmt: skip


def _alternatives(words: Mapping[str, str]) -> str:
    """A regex alternation of ``words``, longest first (so 超级经济舱 beats 经济舱)."""
    return "|".join(sorted(map(re.escape, words), key=len, reverse=True))


def lookup(table: Mapping[str, str]) -> ValueReader:
    """A reader that maps the matched word to its canonical value (``None``: unknown), so
    "靠窗" and "window" are the same preference whatever language it was stated in."""

    def read(match: re.Match[str]) -> str | None:
        return table.get(match["value"])

    return read


# A name ends where the next word starts: these characters do not end Chinese names often
# enough to matter, and begin the words that typically follow one ("我叫王芳想订票").
_AFTER_NAME = re.compile(
    r"(?<=..)(?:以后|每次|想|要|在|是|的|今|明|来|需|请|给|和|也|就|了|先生|女士)"
)
_NOT_CN_NAMES = ("了", "过", "着", "你", "他", "她", "人", "车", "什么", "不")


def read_chinese_name(match: re.Match[str]) -> str | None:
    value = _AFTER_NAME.split(match["value"], maxsplit=1)[0]
    if len(value) < 2 or value.startswith(_NOT_CN_NAMES):
        return None
    return value


CHINESE_RULES: tuple[Rule, ...] = (
    Rule(
        "name",
        re.compile(rf"(?:我叫|我的名字是|我的名字叫|我名字叫|叫我|本人叫)(?P<value>{_HAN_NAME})"),
        0.9,
        read_chinese_name,
    ),
    Rule(
        "name",
        re.compile(
            r"(?:我叫|我的名字是|我的名字叫|叫我|我的英文名是|我的英文名叫)\s*"
            r"(?P<value>[A-Za-z][A-Za-z'\-]*(?:\s+[A-Za-z][A-Za-z'\-]*){0,2})"
        ),
        0.9,
        read_name,
    ),
    Rule(
        "seat",
        re.compile(rf"{_WANT}[^，,。]{{0,8}}?(?P<value>{_alternatives(_CN_SEATS)})"),
        0.8,
        lookup(_CN_SEATS),
    ),
    Rule(
        "seat",
        re.compile(
            rf"{_WANT}[^，,。]{{0,8}}?(?P<value>{_alternatives(_CN_WEAK_SEATS)}){_CN_SEAT_NOUN}"
        ),
        0.8,
        lookup(_CN_WEAK_SEATS),
    ),
    Rule(
        "seat",
        re.compile(rf"{_CN_BARE}(?P<value>{_alternatives(_CN_SEATS)}){_CN_TAKEN}"),
        0.8,
        lookup(_CN_SEATS),
    ),
    Rule(
        "cabin",
        re.compile(
            rf"(?:{_WANT}|飞|升级?到?|买)[^，,。]{{0,8}}?(?P<value>{_alternatives(_CN_CABINS)})"
        ),
        0.8,
        lookup(_CN_CABINS),
    ),
    Rule(
        "cabin",
        re.compile(rf"{_CN_BARE}(?P<value>{_alternatives(_CN_CABINS)}){_CN_TAKEN}"),
        0.8,
        lookup(_CN_CABINS),
    ),
    Rule(
        "meal",
        re.compile(
            rf"(?:{_WANT}|吃|点)[^，,。]{{0,6}}?(?P<value>{_alternatives(_CN_MEALS)})(?:的)?(?:餐|饭|餐食|食品)"
        ),
        0.8,
        lookup(_CN_MEALS),
    ),
    Rule(
        "diet",
        re.compile(r"我(?:是|只)?(?:吃|一直吃)?(?P<value>素食者|吃素|素食主义者|清真)"),
        0.85,
        lookup(
            {
                "素食者": "vegetarian",
                "吃素": "vegetarian",
                "素食主义者": "vegetarian",
                "清真": "halal",
            }
        ),
    ),
    Rule(
        "frequent_flyer",
        re.compile(
            r"(?:常旅客|会员|里程|积分|凤凰知音|东方万里行|明珠)(?:卡)?(?:号|号码|卡号|账号)"
            r"\s*(?:是|为|:)?\s*(?P<value>[A-Za-z]{0,3}[\s-]?\d[\d\s-]{4,18}\d)"
        ),
        0.9,
        read_member_number,
    ),
    Rule(
        "language",
        re.compile(
            rf"(?:用|说|讲)(?P<value>{_alternatives(_CN_LANGUAGES)})"
            r"(?:回复|回答|答复|跟我说|和我说|跟我交流|和我交流|交流|沟通|聊|说话)?"
        ),
        0.8,
        lookup(_CN_LANGUAGES),
    ),
)
"""Chinese rules: the same fields as English, values stored in the same canonical form."""


@dataclass(frozen=True)
class LanguageRules:
    """How one language states facts about the speaker: the rules, and the grammar the
    extractor needs around them. Extend a language with :meth:`extend`, or make a new one
    and pass ``RuleExtractor(languages=[...])``.

    ``sentence`` finds sentences with their end marks; a sentence that matches
    ``question`` is never evidence. Sentences split into clauses at ``clause_break``;
    clauses that match ``someone_else`` (at their start) or ``inquiry`` (anywhere: asking,
    checking, comparing, reporting the past) are skipped, and a clause with
    ``hypothetical`` anywhere is skipped with the rest of its sentence ("If it's cheap,
    I'll fly business", "假如升舱免费，我会选头等舱"). In a clause, ``negation`` before
    the value makes the statement negated, ``hedge`` lowers the confidence, and
    ``standing`` ("from now on") raises it. ``wish`` marks a clause as the user's own
    wish, habit or order (first person, an order to the assistant, an accepted value):
    the rules encode it in their patterns; a guard (:class:`.llm_extraction.LLMExtractor`)
    asks it of clauses a model read.
    """

    name: str
    rules: tuple[Rule, ...]
    sentence: re.Pattern[str]
    question: re.Pattern[str]
    clause_break: re.Pattern[str]
    negation: re.Pattern[str]
    hedge: re.Pattern[str]
    standing: re.Pattern[str]
    hypothetical: re.Pattern[str]
    someone_else: re.Pattern[str]
    inquiry: re.Pattern[str] = re.compile(r"(?!)")
    wish: re.Pattern[str] = re.compile("")

    def extend(self, *rules: Rule) -> LanguageRules:
        """This language with ``rules`` added after its own."""
        return replace(self, rules=(*self.rules, *rules))

    def clauses(self, text: str) -> list[str]:
        """The declarative clauses of ``text`` about the speaker (see the class docs)."""
        return [clause for clause, _ in self.parts(text)]

    def parts(self, text: str) -> list[tuple[str, str]]:
        """``(clause, its sentence)`` for each declarative clause: a standing order
        usually opens the sentence, a clause of its own ("From now on, book me ...")."""
        out: list[tuple[str, str]] = []
        for sentence in self.sentence.findall(text):
            if self.question.search(sentence):
                continue
            for clause in self.clause_break.split(sentence.strip(" .!;\n。！；")):
                clause = clause.strip()
                if self.hypothetical.search(clause):
                    break  # a condition, and what would follow from it
                if clause and not (self.someone_else.match(clause) or self.inquiry.search(clause)):
                    out.append((clause, sentence))
        return out


ENGLISH = LanguageRules(
    name="en",
    rules=ENGLISH_RULES,
    sentence=re.compile(r"[^.!?;\n]+[.!?;\n]*"),
    question=re.compile(r"\?"),
    # a new clause starts at a comma or at a conjunction before a new subject
    # ("... and I prefer ...", "... but my name is ...")
    # ("Aisle, please" stays one clause)
    clause_break=re.compile(
        r",(?!\s*(?:please|thanks|thank you|for me|only)\b)\s*"
        r"|\s+(?:and|but|though|although|while|whereas)\s+(?=(?:i|i'm|i'd|my|please|call)\b)",
        re.IGNORECASE,
    ),
    negation=re.compile(
        r"\b(?:don'?t|do not|doesn'?t|does not|never|no longer|not|no|hate|dislike|avoid"
        r"|can'?t stand|won'?t|rather not)\b",
        re.IGNORECASE,
    ),
    hedge=re.compile(
        r"\b(?:maybe|perhaps|probably|i think|i guess|i suppose|might|sometimes|not sure"
        r"|kind of)\b",
        re.IGNORECASE,
    ),
    standing=re.compile(
        r"\b(?:from now on|always|every time|each time|every (?:trip|flight)|in future"
        r"|in the future|going forward)\b",
        re.IGNORECASE,
    ),
    hypothetical=re.compile(
        r"^\s*(?:when|whether|imagine)\b|\b(?:if|unless|in case|suppose|supposing|what if)\b",
        re.IGNORECASE,
    ),
    # clauses about someone else ("you prefer ...", "my wife likes ..."); "my name",
    # "my favourite" and "my frequent flyer number" are the user's own
    someone_else=re.compile(
        r"^\s*(?:you|he|she|they|we|it|my\s+(?!name\b|fav|frequent|loyalty|mileage|miles|preference)"
        r"[\w-]+(?:'s)?)\b",
        re.IGNORECASE,
    ),
    # asking, checking or comparing ("I want to check whether business class ..."), or
    # what happened once ("Last time I sat by the window")
    inquiry=re.compile(
        r"\b(?:check|see if|to see|know|look up|looking up|show me|tell me|compare|comparing"
        r"|wonder|wondering|find out|prices?|costs?|fares?|discounts?|seat map|options"
        r"|availab\w*|last time|last (?:trip|flight|week|month|year)|yesterday)\b",
        re.IGNORECASE,
    ),
    wish=re.compile(
        rf"\b(?:i|i'm|i'd|i'll|me|my preference|please)\b|\b(?:{_EN_WISH})\b"
        r"|^\s*(?:book|give|get|put|seat|reserve|make)\b"
        r"|\b(?:for me|only|is fine|is ok(?:ay)?|is good|is perfect|works|will do)\b",
        re.IGNORECASE,
    ),
)

CHINESE = LanguageRules(
    name="zh",
    rules=CHINESE_RULES,
    sentence=re.compile(r"[^。！？；!?;\n]+[。！？；!?;\n]*"),
    # "？", or a sentence-final question particle ("可以订靠窗的吗")
    question=re.compile(r"[？?]|[吗呢么][。！!\s]*$"),
    clause_break=re.compile(r"[，,、]\s*|(?:但是|不过|而且|另外|还有|然后)"),
    negation=re.compile(
        r"不要|别|不想|不喜欢|不用|不需要|讨厌|不坐|不订|不选|不再|不是|没有|从不|不(?!管|论|然|错|过|仅)"
    ),
    hedge=re.compile(r"可能|也许|大概|或许|好像|应该吧|说不定|差不多|有时候|有时"),
    standing=re.compile(r"以后都|以后|每次都|每次|总是|一直|一律|永远|从现在起|今后"),
    hypothetical=re.compile(r"如果|要是|假如|假设|万一|若是|^\s*若|的话"),
    someone_else=re.compile(
        r"^\s*(?:他|她|他们|她们|我们|你(?!帮|给|替|就|们帮)|我(?:的)?(?:老婆|老公|妻子|丈夫|太太"
        r"|先生|爱人|妈妈|爸爸|母亲|父亲|孩子|儿子|女儿|朋友|同事|老板|家人))"
    ),
    # asking, checking, comparing ("我想看看商务舱有没有折扣"), or what happened once
    inquiry=re.compile(
        r"看看|看一下|看下|看一看|查|问|了解|咨询|比较一下|比较下|在比较|对比|知道|介绍|价格|价钱|多少|票价|折扣"
        r"|特价|优惠|规则|规定|政策|区别|座位图|行李|退|怎么|什么|哪|是否|是不是|有没有|能不能"
        r"|可不可以|要不要|加钱|费用|上次|上回|之前|以前|那次|昨天|曾经"
    ),
    wish=re.compile(rf"我|请|麻烦|{_WANT}|就行|就好|就可以|就成|即可|就够了|也行|吧"),
)

DEFAULT_LANGUAGES: tuple[LanguageRules, ...] = (ENGLISH, CHINESE)
"""The languages :class:`RuleExtractor` reads unless given others."""

DEFAULT_RULES: tuple[Rule, ...] = ENGLISH_RULES
"""The English rules (kept under their old name)."""


def clauses(text: str) -> list[str]:
    """The declarative English clauses of ``text`` about the user."""
    return ENGLISH.clauses(text)


def _supersedes(statement: Statement, at: int, held: tuple[int, Statement] | None) -> bool:
    """Does ``statement`` (at ``at`` in the text) replace ``held`` for its field? The
    latest word wins, except that "not X" says nothing against a wanted Y ("给我过道，
    不要靠窗" wants the aisle)."""
    if held is None:
        return True
    held_at, previous = held
    if held_at > at:
        return False
    return not (statement.negated and not previous.negated and not _same_value(statement, previous))


def _same_value(a: Statement, b: Statement) -> bool:
    return bool(a.value == b.value)


def normal_form(text: str) -> str:
    """The one form the rules read: full-width letters as ASCII (NFKC), traditional
    characters as simplified ("我都坐商務艙" is "我都坐商务舱"), runs of spaces as one and
    of line breaks as one (a long run made the rules' patterns take quadratic time)."""
    text = simplified(unicodedata.normalize("NFKC", text))
    return _LINE_BREAKS.sub("\n", _SPACE_RUNS.sub(" ", text))


_SPACE_RUNS = re.compile(r"[^\S\n]+")
_LINE_BREAKS = re.compile(r"\s*\n\s*")


class RuleExtractor:
    """The default extractor: each of ``languages`` (English and Chinese by default)
    applied clause by clause.

    A clause with a negation before the match ("I don't want a window seat", "不要靠窗的
    座位") gives a negated statement; a hedge ("maybe", "也许") lowers the confidence by
    ``hedge_penalty``; a standing order ("from now on", "以后都") raises it by
    ``standing_bonus``. When a field is stated more than once, the last statement wins
    (it is the user's latest word), except that "not X" leaves a wanted Y standing.
    ``rules`` alone means: English grammar, only these rules (as before languages existed).
    """

    def __init__(
        self,
        rules: Sequence[Rule] | None = None,
        *,
        languages: Sequence[LanguageRules] | None = None,
        hedge_penalty: float = HEDGE_PENALTY,
        standing_bonus: float = STANDING_BONUS,
    ) -> None:
        if languages is None:
            languages = (
                DEFAULT_LANGUAGES if rules is None else (replace(ENGLISH, rules=tuple(rules)),)
            )
        elif rules is not None:
            raise ValueError("pass rules or languages, not both")
        self.languages: tuple[LanguageRules, ...] = tuple(languages)
        self.hedge_penalty = hedge_penalty
        self.standing_bonus = standing_bonus

    @property
    def rules(self) -> tuple[Rule, ...]:
        """Every language's rules."""
        return tuple(rule for language in self.languages for rule in language.rules)

    def __call__(self, text: str) -> list[Statement]:
        text = normal_form(text)
        found: dict[str, tuple[int, Statement]] = {}
        for language in self.languages:
            for clause, sentence in language.parts(text):
                for rule in language.rules:
                    statement = self._read(language, rule, clause, sentence)
                    if statement is not None:
                        at = text.find(clause)
                        if _supersedes(statement, at, found.get(statement.field)):
                            found[statement.field] = (at, statement)
        return [statement for _, statement in sorted(found.values(), key=lambda pair: pair[0])]

    def _read(
        self, language: LanguageRules, rule: Rule, clause: str, sentence: str
    ) -> Statement | None:
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
        if language.hedge.search(clause):
            confidence -= self.hedge_penalty
        elif language.standing.search(sentence):
            confidence += self.standing_bonus
        negated = language.negation.search(clause[: match.start("value")]) is not None
        evidence = _text.head(clause, 200)
        statement = Statement(field, value, round(min(confidence, 1.0), 4), negated, evidence)
        return statement if statement.confidence > 0 else replace(statement, confidence=0.0)


extract_statements = RuleExtractor()
"""The default extractor instance."""
