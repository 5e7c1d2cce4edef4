"""Keyword search of memories without embeddings, for Chinese, Japanese and Korean too.

A memory store without an index has no notion of relevance, so the memory tools rank
the newest memories here. The rules, and why:

* **Terms.** Text is NFKC-folded, case-folded (full-width letters and digits are
  ASCII) and traditional characters are simplified (:mod:`._hant`). Letters and digits
  in other scripts form words; a word counts if it has two characters or more or holds
  a digit, and is not an English function word (``the``, ``my``). Two or more
  capitalized words in a row are a name (``Li Si``): its adjacent word pairs are its
  terms (in a memory, the two words side by side, in either order), never its words
  alone, so ``Li Wei``'s record is no answer to ``Li Si``. Han, kana and hangul are
  written without spaces, so a run of them gives its overlapping character pairs
  (bigrams: ``身份证号`` -> ``身份 份证 证号``); a single character alone gives itself.
  Runs are first cut at common function characters (``的 了 是 吗`` ...), which would
  otherwise glue a name to the next word (``李四的``).
  Bigrams need no dictionary, find any name a user wrote (a segmenter such as jieba
  splits unknown names unpredictably), and cost nothing to install.
* **Matching.** A term matches a memory whose folded text contains it: a bigram or a
  number anywhere (``1101`` finds an ID number), a word as a whole word (``art`` does not
  match ``party``), or as a word's start for four letters or more (``passport`` in
  ``passports``).
* **Scoring.** A term found in few of the memories weighs more than one found in most
  (inverse document frequency over the memories searched, as BM25 does), and words that
  name a kind of record (``身份证``, ``passport``) weigh a quarter; a memory's score is the
  weight of the query terms it holds over the weight of all of them. A bigram that only
  straddles two words a memory holds (``四护`` of ``李四护照``) is not counted. A memory is a
  hit only at :data:`MIN_SCORE` or above, so the record of ``张三`` never answers a query
  for ``李四``'s ID number just because both say ``身份证号``: the name is the rare term
  that carries the weight. Nothing matches a query of function words only; there is no
  fallback that returns every memory.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property
from itertools import pairwise
from typing import Generic, TypeVar

from ._hant import simplified

T = TypeVar("T")


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


MIN_SCORE = 0.5
"""The weighted share of the query's terms a memory must hold to be a hit."""

MAX_QUERY_TERMS = 48
"""Terms of a query that are looked for (its first ones); a search is a few words."""

GENERIC_WEIGHT = 0.1
"""The weight, relative to others, of terms that name a kind of record rather than its
subject (``身份证``, ``passport``): every passenger record says ``身份证号``, so with
few memories stored it must not outweigh the name that was asked for."""

_GENERIC = _words(
    "乘客 旅客 用户 客户 身份 份证 证号 证件 件号 号码 护照 照号 电话 手机 机号 邮箱 地址 "
    "座位 位置 偏好 喜欢 生日 出生 姓名 名字 信息 资料 记录 会员 卡号 航班 预订 订单 "
    "passenger passengers traveler traveller customer id number no passport phone "
    "mobile email address seat preference preferences likes birthday name info record "
    "member card booking flight order "
    "パス スポ ポー ート 電話 番号 住所 名前 여권 번호 전화 주소 이름"
)

_CJK = (
    "\u1100-\u11ff\u3040-\u30ff\u3131-\u318e\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff"
    "\uac00-\ud7af\uf900-\ufaff\U00020000-\U0003134f"
)
_RUN = re.compile(rf"[{_CJK}]+|[^\W_{_CJK}]+")
_IS_CJK = re.compile(rf"[{_CJK}]")
# Function characters and words that join content words in Chinese and Japanese; a run is
# cut there (they never start or end a name in a query worth matching on).
_CJK_STOPS = re.compile(
    r"的|了|是|吗|呢|吧|啊|呀|和|与|及|或|在|把|被|给|我们|你们|他们|她们|我|你|他|她|它|"
    r"有没有|有|没有|一下|什么|哪些|哪个|哪里|哪儿|哪|谁|几|是否|为什么|如何|怎么|多少|这个|那个|"
    r"这|那|请|帮|查|找|看|"
    r"の|は|が|を|に|で|と|も|へ|から|まで|です|ます"
)
_STOP_WORDS = _words(
    "a an and are as at be by did do does for from had has have he her his how i in is it "
    "its me my of on or our she that the their them they this to was we were what when "
    "where which who whom why with you your user users about any"
)


@dataclass(frozen=True)
class Term:
    """One query term: its text and how it must appear in a memory."""

    text: str
    whole_word: bool  # a word of letters: match whole words, by their stems
    generic: bool = False
    name: bool = False  # two words of a name ("li si"): adjacent in a memory, either order


# Two or more capitalized words in a row ("Li Si", "ZHANG/WEI", "Maria Garcia"): a name,
# matched by its adjacent pairs, never word by word
_NAME_RUN = re.compile(r"\b[A-Z][A-Za-z'-]*(?:(?:\s+|\s*[/,]\s*)[A-Z][A-Za-z'-]*)+\b")
_LETTERS = re.compile(r"[a-z0-9]+")


def fold(text: str) -> str:
    """Text as terms are matched on: compatibility forms folded, case folded, traditional
    characters simplified (a query for 張三 finds 张三's record, and the other way)."""
    return simplified(unicodedata.normalize("NFKC", text).casefold())


def query_chains(query: str) -> list[list[Term]]:
    """A query's terms, as chains: the bigrams of one CJK run in order, one word, or the
    adjacent word pairs of a name written in Latin letters.

    A name is two or more capitalized words in a row: "Li Si" is one term ("li si"), so
    a memory about Li Wei or Zhang Si, which holds one of its words, is no match (word by
    word, each held half the query's weight)."""
    chains: list[list[Term]] = []
    plain = unicodedata.normalize("NFKC", query)
    for run in _NAME_RUN.findall(plain):
        words = [w for w in _LETTERS.findall(fold(run)) if w not in _STOP_WORDS]
        if len(words) >= 2:
            pairs = [f"{a} {b}" for a, b in pairwise(words)]
            chains.append(
                [Term(p, whole_word=False, generic=_both_generic(p), name=True) for p in pairs]
            )
            plain = plain.replace(run, " ", 1)
    for run in _RUN.findall(fold(plain)):
        if _IS_CJK.match(run):
            for part in _CJK_STOPS.split(run):
                grams = (
                    [part] if len(part) == 1 else [part[i : i + 2] for i in range(len(part) - 1)]
                )
                if part:
                    chains.append([Term(g, whole_word=False, generic=g in _GENERIC) for g in grams])
        elif (len(run) >= 2 or run.isdigit()) and run not in _STOP_WORDS:
            if any(ch.isdigit() for ch in run):
                chains.append([Term(run, whole_word=False)])
            else:
                root = stem(run)
                chains.append([Term(root, whole_word=True, generic=root in _GENERIC_STEMS)])
    return chains


def _both_generic(pair: str) -> bool:
    return all(stem(w) in _GENERIC_STEMS for w in pair.split())


class _Document:
    """A memory's folded text, its words for whole-word matches, and its word pairs (in
    both orders) for names."""

    def __init__(self, text: str) -> None:
        self.text = fold(text)
        self.words = [w for w in _RUN.findall(self.text) if not _IS_CJK.match(w)]
        self.stems = {stem(w) for w in set(self.words)}

    @cached_property
    def pairs(self) -> frozenset[str]:
        """Adjacent words, in both orders (only names need them)."""
        pairs = list(pairwise(self.words))
        return frozenset([f"{a} {b}" for a, b in pairs] + [f"{b} {a}" for a, b in pairs])

    def holds(self, term: Term) -> bool:
        if term.name:
            return term.text in self.pairs
        return term.text in self.stems if term.whole_word else term.text in self.text


_SUFFIXES = ("ences", "ence", "ance", "ings", "ing", "ies", "ied", "ed", "er", "ic", "y")


def stem(word: str) -> str:
    """A crude English stem, the same for a word's common forms (``prefers``,
    ``preference`` -> ``pref``; ``allergy``, ``allergic`` -> ``allerg``): enough to
    match a query's word with a memory's, never shown to anyone."""
    if word.endswith(("ses", "xes", "ches", "shes")):
        word = word[:-2]
    elif word.endswith("s") and not word.endswith("ss") and len(word) > 3:
        word = word[:-1]
    while True:
        cut = next((x for x in _SUFFIXES if word.endswith(x) and len(word) - len(x) >= 3), "")
        if not cut:
            return word
        word = word[: -len(cut)]


_GENERIC_STEMS = frozenset(stem(word) for word in _GENERIC)


@dataclass(frozen=True)
class Hit(Generic[T]):
    item: T
    score: float


def rank(items: Sequence[T], text_of: Callable[[T], str], query: str, limit: int) -> list[Hit[T]]:
    """The items that match ``query`` (score at least :data:`MIN_SCORE`), best first; on
    ties ``items``' order (the store's: newest first)."""
    chains = _capped(query_chains(query))
    if not chains or limit <= 0:
        return []
    docs = [_Document(text_of(item)) for item in items]
    terms = _meaningful(chains, docs)
    found = [[doc.holds(term) for term in terms] for doc in docs]
    weights = [
        _idf(len(docs), sum(row[i] for row in found))
        * (GENERIC_WEIGHT if t.text in _GENERIC else 1)
        for i, t in enumerate(terms)
    ]
    total = sum(weights)
    hits = []
    for item, row in zip(items, found, strict=True):
        score = sum(w for w, hit in zip(weights, row, strict=True) if hit) / total
        if score >= MIN_SCORE:
            hits.append(Hit(item, score))
    hits.sort(key=lambda hit: -hit.score)  # stable: ties keep the store's order
    return hits[:limit]


def _capped(chains: list[list[Term]]) -> list[list[Term]]:
    """The chains of the query's first :data:`MAX_QUERY_TERMS` terms: each term is
    looked for in every memory of the pool, so a pasted page as the query would
    otherwise hold the caller (the event loop, for the async tools) for seconds."""
    kept: list[list[Term]] = []
    room = MAX_QUERY_TERMS
    for chain in chains:
        if room <= 0:
            break
        kept.append(chain[:room])
        room -= len(kept[-1])
    return kept


def _meaningful(chains: list[list[Term]], docs: Sequence[_Document]) -> list[Term]:
    """The distinct terms of the chains, without the bigrams that only straddle two
    words: one no memory holds between two that some memory holds or that name a kind
    of record (``四护`` in ``李四护照``), and a name's pairs that only join it to a
    capitalized word beside it (``show li`` in "Show Li Si"). Kept, such a pair would
    count as a missing term against the very record that holds the words."""
    seen: dict[tuple[str, bool, bool], Term] = {}
    for chain in chains:
        held = [any(doc.holds(t) for doc in docs) for t in chain]
        known = [h or t.generic for h, t in zip(held, chain, strict=True)]
        for i, term in enumerate(chain):
            inner = 0 < i < len(chain) - 1
            if inner and not held[i] and known[i - 1] and known[i + 1]:
                continue
            # a name's pair no memory holds beside one that some memory holds: a word
            # capitalized next to the name ("Show Li Si", "Li Si Passport")
            beside = [held[j] for j in (i - 1, i + 1) if 0 <= j < len(chain)]
            if term.name and not held[i] and any(beside):
                continue
            seen.setdefault((term.text, term.whole_word, term.name), term)
    return list(seen.values())


def _weight(term: Term) -> float:
    return GENERIC_WEIGHT if term.generic else 1.0


def _idf(n: int, df: int) -> float:
    """BM25's inverse document frequency, always positive."""
    return math.log((n - df + 0.5) / (df + 0.5) + 1.0)
