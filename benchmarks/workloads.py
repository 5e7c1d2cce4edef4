"""The workloads: a chat graph through the real LangGraph runtime, read paths, throughput, stores.

Each function runs one *unit* (one target, one round) on an opened :class:`Session` and
returns ``{(metric, unit): value}``. Every loop is bounded in count and by a deadline; a
unit that hits its deadline stops early and says so (``stopped_early``).

Everything is deterministic: message texts and ids derive from the turn number (random-looking
ids from RNGs seeded by it), the fake "model" derives its answer from the conversation, so every
saver stores the same values.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import math
import operator
import random
import statistics
import string
import sys
import time
import uuid
from typing import Annotated, Any

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langgraph.graph import END, START, StateGraph, add_messages
from typing_extensions import TypedDict

from .targets import Session

Metrics = dict[tuple[str, str], float]

USER_CHARS = 190  # per user message; with the model's answer about 380 characters a turn
MODEL_CHARS = 190

# ---------------------------------------------------------------------------------------------
# chat text
#
# The text decides how much PostgreSQL's TOAST compression (pglz) can shrink the savers' rows,
# so it must compress like real English, not better. "natural" (the default) is English made
# by a word-bigram chain over the prose of the Python docs that ship with the interpreter
# (``pydoc_data``, read at run time); "repetitive" is the earlier text, uniform draws from
# ~150 words, which pglz compresses better than real English. See benchmarks/README.md.

TEXTS = ("natural", "repetitive")
_text = "natural"

TOPIC_TURNS = 8  # a conversation keeps to one topic (a passage of the corpus) this many turns
TOPIC_WORDS = 600  # words in a topic's passage
TOPIC_SHARE = 0.8  # how often the next word follows the topic's passage rather than the corpus


def use_text(kind: str) -> None:
    """Select the chat text for this process: ``natural`` (default) or ``repetitive``."""
    global _text
    if kind not in TEXTS:
        raise ValueError(f"unknown text {kind!r}; expected one of {', '.join(TEXTS)}")
    if kind == "natural":
        _prose()  # fail early, with the reason, if the corpus is missing
    _text = kind


def current_text() -> str:
    return _text


def text_description(kind: str | None = None) -> str:
    """One line for the report header."""
    kind = kind or _text
    if kind == "repetitive":
        return "repetitive (uniform draws from ~150 common words)"
    words, follow, _ = _prose()
    return (
        f"natural (word-bigram chain over the prose of Python {sys.version_info[0]}."
        f"{sys.version_info[1]}'s pydoc_data: {len(words)} words, {len(follow)} distinct; "
        f"topic every {TOPIC_TURNS} turns)"
    )


def sentence(seed: str, length: int, topic: int = 0) -> str:
    """Deterministic chat text of exactly ``length`` characters, in the selected style.

    ``seed`` fixes the text; messages with the same ``topic`` (natural text only) share
    vocabulary and phrases, as consecutive messages of a conversation do.
    """
    if _text == "repetitive":
        return repetitive_text(seed, length)
    return natural_text(seed, length, topic)


def _fit(text: str, length: int, pad: str) -> str:
    """Cut or pad to ``length - 1`` characters, then a full stop."""
    return text[: length - 1].rstrip(" ,.;:!?").ljust(length - 1, pad) + "."


_VOCABULARY = """
    the a of to and in that is for it with as was on be at by this had not are but from or
    have an they which one you were her all she there would their we him been has when who
    will more no if out so said what up its about into than them can only other new some
    could time these two may then do first any my now such like our over man me even most
    made after also did many before must through back years where much your way well down
    should because each just those people how too little state good very make world still own
    see men work long get here between both life being under never day same another know while
    last might us great old year off come since against go came right used take three memory
    thread checkpoint graph node message reply question answer summary context token window
    storage database latency version channel history agent tool result search profile
"""
_WORDS = tuple(_VOCABULARY.split())


def repetitive_text(seed: str, length: int) -> str:
    """Uniform draws from ~150 words (the text of the earlier benchmark runs)."""
    rng = random.Random(seed)
    words: list[str] = []
    size = 0
    while size < length:
        word = rng.choice(_WORDS)
        words.append(word)
        size += len(word) + 1
    return _fit(" ".join(words), length, "s")


_Chain = dict[str, list[str]]


def _successors(words: list[str]) -> _Chain:
    follow: _Chain = {}
    for a, b in itertools.pairwise(words):
        follow.setdefault(a, []).append(b)
    return follow


@functools.lru_cache(maxsize=1)
def _prose() -> tuple[list[str], _Chain, list[str]]:
    """Words of the prose paragraphs of the stdlib's docs, their successors, sentence starts."""
    try:
        from pydoc_data.topics import topics
    except ImportError as exc:  # some distributions strip the stdlib's docs
        raise RuntimeError(
            "the natural chat text reads the stdlib module pydoc_data, which this Python lacks; "
            "use --text repetitive"
        ) from exc
    paragraphs = []
    for key in sorted(topics):
        for para in str(topics[key]).split("\n\n"):
            lines = para.split("\n")
            if any(line[:1].isspace() for line in lines):  # code, grammar, indented lists
                continue
            if any(line.strip() and set(line.strip()) <= set("*=-^~") for line in lines):
                continue  # headings
            text = " ".join(line.strip() for line in lines).replace('"', "")
            prose = sum(c.isalpha() or c == " " for c in text)
            if len(text) >= 80 and prose >= 0.9 * len(text) and "::" not in text:
                paragraphs.append(text)
    words = " ".join(paragraphs).split()
    if len(words) < 5 * TOPIC_WORDS:
        raise RuntimeError("pydoc_data holds too little prose for the natural chat text")
    starts = [b for a, b in itertools.pairwise(words) if a.endswith(".") and b[:1].isupper()]
    return words, _successors(words), starts


@functools.lru_cache(maxsize=256)
def _topic(topic: int) -> tuple[list[str], _Chain]:
    """A topic: a passage of the corpus and its own word successors."""
    words = _prose()[0]
    start = random.Random(f"topic-{topic}").randrange(len(words) - TOPIC_WORDS)
    passage = words[start : start + TOPIC_WORDS]
    return passage, _successors(passage)


def natural_text(seed: str, length: int, topic: int = 0) -> str:
    """English from a word-bigram chain, keeping mostly to the topic's passage."""
    _, follow, starts = _prose()
    passage, local = _topic(topic)
    rng = random.Random(seed)
    word = rng.choice(passage if rng.random() < TOPIC_SHARE else starts)
    words = [word[:1].upper() + word[1:]]
    size = len(word)
    while size < length:
        nearby = local.get(word)
        if nearby and rng.random() < TOPIC_SHARE:
            word = rng.choice(nearby)
        else:
            after = follow.get(word)
            word = rng.choice(after) if after and rng.random() > 0.02 else rng.choice(starts)
        words.append(word)
        size += len(word) + 1
    return _fit(" ".join(words), length, "s")


# ---------------------------------------------------------------------------------------------
# message envelopes
#
# What a message carries besides its text: ids and the model's metadata, which the savers store
# with every message (the official PostgreSQL saver again at every step). "realistic" (the
# default) stores messages as an app on LangGraph with a real chat model does:
#
# - a user message arrives without an id and add_messages gives it str(uuid.uuid4());
# - the model's answer is the AIMessage that ChatOpenAI (langchain-openai 1.x on langchain-core
#   1.x, Chat Completions, not streaming) returns: id "lc_run--<uuid7 of the LLM run>-0" (set by
#   BaseChatModel; langchain-core 0.3 wrote "run--<uuid4>-0"), additional_kwargs {"refusal":
#   None}, response_metadata = OpenAI's usage, model, system_fingerprint, completion id
#   ("chatcmpl-" + 29 letters and digits), service_tier, and the choice's finish_reason and
#   logprobs; usage_metadata with input/output token details.
#
# The random parts come from RNGs seeded by the turn (user) or the message position (model), so
# runs are reproducible and every saver stores the same bytes. "bare" is the earlier messages
# (ids "user-<turn>" and "model-<position>", a small response_metadata), byte for byte.

MESSAGES = ("realistic", "bare")
_messages = "realistic"

OPENAI_MODEL = "gpt-4o-mini-2024-07-18"  # the "model" field of OpenAI's response
SYSTEM_FINGERPRINT = "fp_" + f"{random.Random('system-fingerprint').getrandbits(40):010x}"
CLOCK_START_MS = 1_762_160_400_000  # 2025-11-03 09:00 UTC: uuid7 timestamps of the model runs
MS_PER_MESSAGE = 12_000  # a turn (user message + answer) every ~24 s
_ALNUM = string.ascii_letters + string.digits


def use_messages(kind: str) -> None:
    """Select the message envelopes for this process: ``realistic`` (default) or ``bare``."""
    global _messages
    if kind not in MESSAGES:
        raise ValueError(f"unknown messages {kind!r}; expected one of {', '.join(MESSAGES)}")
    _messages = kind


def current_messages() -> str:
    return _messages


def messages_description(kind: str | None = None) -> str:
    """One line for the report header."""
    kind = kind or _messages
    if kind == "bare":
        return 'bare (ids "user-<turn>" / "model-<position>", small response metadata)'
    return (
        "realistic (user ids uuid4 as add_messages assigns them; AIMessage as langchain-openai "
        f"1.x ChatOpenAI returns it for {OPENAI_MODEL}: lc_run--<uuid7> id, OpenAI token usage, "
        "chatcmpl id, system fingerprint; seeded, reproducible)"
    )


def user_message_id(turn: int) -> str:
    if _messages == "bare":
        return f"user-{turn}"
    return str(uuid.UUID(int=random.Random(f"user-id-{turn}").getrandbits(128), version=4))


def _uuid7(rng: random.Random, ms: int) -> uuid.UUID:
    """A uuid7 as langchain-core makes them (uuid_utils): ms timestamp, 42-bit counter, random."""
    counter = rng.getrandbits(41)  # a new millisecond starts the counter at random, MSB 0
    value = (ms & (2**48 - 1)) << 80 | 7 << 76 | (counter >> 30) << 64
    value |= 0b10 << 62 | (counter & (2**30 - 1)) << 32 | rng.getrandbits(32)
    return uuid.UUID(int=value)


def model_message_id(position: int) -> str:
    """The id of the model's answer at ``position`` in the thread (0-based; 2 * turn - 1)."""
    if _messages == "bare":
        return f"model-{position}"
    rng = random.Random(f"model-run-{position}")
    ms = CLOCK_START_MS + position * MS_PER_MESSAGE + rng.randrange(MS_PER_MESSAGE // 2)
    return f"lc_run--{_uuid7(rng, ms)}-0"


def _tokens(text: str) -> int:
    """Approximate token count of English text (~4/3 tokens a word)."""
    return max(1, round(len(text.split()) * 4 / 3))


def _prompt_tokens(history: list[AnyMessage]) -> int:
    """OpenAI's count for a chat prompt: 3 tokens a message + its text, 3 to prime the reply.

    O(1) at every T (the fake model's cost must not grow with the thread): the previous
    answer's usage already counts everything before it.
    """
    if len(history) >= 3 and isinstance(previous := history[-2], AIMessage):
        usage = previous.usage_metadata
        if usage is not None:
            return usage["total_tokens"] + 3 + 3 + _tokens(str(history[-1].content))
    return 3 + sum(3 + _tokens(str(m.content)) for m in history)


def _cached_tokens(previous_prompt: int) -> int:
    """OpenAI's prompt cache: the previous prompt is a prefix of this one; hits come for
    prompts of 1,024 tokens and more, in steps of 128."""
    if previous_prompt < 1024:
        return 0
    return 1024 + (previous_prompt - 1024) // 128 * 128


def openai_reply(content: str, history: list[AnyMessage]) -> AIMessage:
    """The AIMessage ChatOpenAI returns for ``content`` after the prompt ``history``."""
    position = len(history)
    rng = random.Random(f"model-completion-{position}")
    prompt = _prompt_tokens(history)
    previous = history[-2] if position > 2 else None
    previous_usage = previous.usage_metadata if isinstance(previous, AIMessage) else None
    cached = _cached_tokens(previous_usage["input_tokens"]) if previous_usage else 0
    completion = _tokens(content)
    usage = {
        "completion_tokens": completion,
        "prompt_tokens": prompt,
        "total_tokens": prompt + completion,
        "completion_tokens_details": {
            "accepted_prediction_tokens": 0,
            "audio_tokens": 0,
            "reasoning_tokens": 0,
            "rejected_prediction_tokens": 0,
        },
        "prompt_tokens_details": {"audio_tokens": 0, "cached_tokens": cached},
    }
    return AIMessage(
        content=content,
        additional_kwargs={"refusal": None},
        response_metadata={
            "token_usage": usage,
            "model_provider": "openai",
            "model_name": OPENAI_MODEL,
            "system_fingerprint": SYSTEM_FINGERPRINT,
            "id": "chatcmpl-" + "".join(rng.choice(_ALNUM) for _ in range(29)),
            "service_tier": "default",
            "finish_reason": "stop",
            "logprobs": None,
        },
        id=model_message_id(position),
        usage_metadata={
            "input_tokens": prompt,
            "output_tokens": completion,
            "total_tokens": prompt + completion,
            "input_token_details": {"audio": 0, "cache_read": cached},
            "output_token_details": {"audio": 0, "reasoning": 0},
        },
    )


def user_message(turn: int) -> HumanMessage:
    text = sentence(f"user-{turn}", USER_CHARS, topic=turn // TOPIC_TURNS)
    return HumanMessage(content=text, id=user_message_id(turn))


class _ReducerClock:
    """Seconds LangGraph spent in the ``messages`` reducer, summed.

    ``add_messages`` walks the whole list at every update (it indexes the ids of all
    messages), so a turn's latency grows with T whatever the saver. Timing it separates
    the runtime's own O(T) work from the saver's.
    """

    seconds = 0.0


def timed_add_messages(left: Any, right: Any) -> Any:
    """``add_messages``, timed; the stored state is exactly what ``add_messages`` gives."""
    started = time.perf_counter()
    try:
        return add_messages(left, right)
    finally:
        _ReducerClock.seconds += time.perf_counter() - started


class ChatState(TypedDict, total=False):
    messages: Annotated[list[AnyMessage], timed_add_messages]
    turns: Annotated[int, operator.add]
    last_reply_chars: int


def chat_graph() -> StateGraph:
    """START -> model (deterministic fake LLM) -> remember -> END."""

    def model(state: ChatState) -> dict[str, Any]:
        position = len(state["messages"])
        turn = (position + 1) // 2
        text = sentence(f"model-{position}", MODEL_CHARS, topic=turn // TOPIC_TURNS)
        if _messages == "realistic":
            return {"messages": [openai_reply(text, list(state["messages"]))]}
        answer = AIMessage(
            content=text,
            id=f"model-{position}",
            response_metadata={"model_name": "fake-chat-model", "finish_reason": "stop"},
            usage_metadata={
                "input_tokens": 48 * position,
                "output_tokens": 48,
                "total_tokens": 48 * position + 48,
            },
        )
        return {"messages": [answer]}

    def remember(state: ChatState) -> dict[str, Any]:
        return {"turns": 1, "last_reply_chars": len(str(state["messages"][-1].content))}

    builder = StateGraph(ChatState)
    builder.add_node("model", model)
    builder.add_node("remember", remember)
    builder.add_edge(START, "model")
    builder.add_edge("model", "remember")
    builder.add_edge("remember", END)
    return builder


# ---------------------------------------------------------------------------------------------
# helpers that hide sync vs async


def _config(thread_id: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread_id}}


def _invoke(session: Session, graph: Any, inputs: Any, config: dict[str, Any]) -> Any:
    if session.loop is None:
        return graph.invoke(inputs, config)
    return session.run(graph.ainvoke(inputs, config))


def _state_values(session: Session, graph: Any, config: dict[str, Any]) -> dict[str, Any]:
    if session.loop is None:
        return dict(graph.get_state(config).values)
    return dict(session.run(graph.aget_state(config)).values)


def _get_tuple(session: Session, config: dict[str, Any]) -> Any:
    if session.loop is None:
        return session.obj.get_tuple(config)
    return session.run(session.obj.aget_tuple(config))


def _list(
    session: Session,
    config: dict[str, Any],
    limit: int | None,
    filter: dict[str, Any] | None = None,
) -> list[Any]:
    if session.loop is None:
        return list(session.obj.list(config, limit=limit, filter=filter))

    async def collect() -> list[Any]:
        return [item async for item in session.obj.alist(config, limit=limit, filter=filter)]

    return list(session.run(collect()))


def _median_ms(seconds: list[float]) -> float:
    return statistics.median(seconds) * 1000.0


class StoppedEarly(Exception):
    """A unit hit its deadline before its counted work was done."""


def _check_conversation(values: dict[str, Any], turns: int, where: str) -> list[AnyMessage]:
    messages = list(values.get("messages", []))
    if len(messages) != 2 * turns or values.get("turns") != turns:
        raise AssertionError(
            f"{where}: expected {2 * turns} messages and turns={turns}, "
            f"read back {len(messages)} messages and turns={values.get('turns')}"
        )
    for position, message in enumerate(messages):
        turn = position // 2 + 1
        kind, expected = (
            ("human", user_message_id(turn))
            if position % 2 == 0
            else ("ai", model_message_id(position))
        )
        if message.type != kind or message.id != expected:
            raise AssertionError(
                f"{where}: message {position} read back as {message.type} {message.id!r}, "
                f"expected {kind} {expected!r}"
            )
    return messages


# ---------------------------------------------------------------------------------------------
# 1. chat turns


def chat_turns(
    session: Session, turns: list[int], deadline: float, short_samples: int = 50
) -> dict[str, Any]:
    """One thread grows to ``max(turns)``; footprint snapshots at every T (and T/2).

    Then, for every T, fresh threads of T turns until the T-turn threads (the long one's
    first T turns count as one) hold at least ``short_samples`` turns: at T=1 a thread has
    one turn, so its p50 needs many threads. Their first turns, with the long thread's,
    are the first turns of new threads. They run after the long thread so that its
    footprints are its own.
    """
    graph = chat_graph().compile(checkpointer=session.obj)
    # one untimed turn on another thread first: connections, prepared statements, scripts
    _invoke(session, graph, {"messages": [user_message(1)]}, _config(f"{session.marker}-warm"))
    config = _config(f"{session.marker}-chat")
    t_max = max(turns)
    snapshots = {*turns, *(t // 2 for t in turns if t >= 2)}
    latencies: list[float] = []
    reducer: list[float] = []
    footprints: dict[int, int] = {}
    for turn in range(1, t_max + 1):
        in_reducer = _ReducerClock.seconds
        started = time.perf_counter()
        _invoke(session, graph, {"messages": [user_message(turn)]}, config)
        latencies.append(time.perf_counter() - started)
        reducer.append(_ReducerClock.seconds - in_reducer)
        if turn in snapshots:
            footprints[turn] = session.footprint()
        if time.perf_counter() > deadline:
            break
    done = len(latencies)
    messages = _check_conversation(_state_values(session, graph, config), done, "chat")
    text_bytes = {
        t: sum(len(str(m.content).encode()) for m in messages[: 2 * t]) for t in turns if t <= done
    }
    short: dict[int, list[float]] = {t: latencies[:t] for t in turns if t <= done}
    first_turns = latencies[:1]
    for t in sorted(short):
        for k in range(1, math.ceil(short_samples / t)):
            if time.perf_counter() > deadline:
                break
            thread = _config(f"{session.marker}-short{t}-{k}")
            for turn in range(1, t + 1):
                started = time.perf_counter()
                _invoke(session, graph, {"messages": [user_message(turn)]}, thread)
                short[t].append(time.perf_counter() - started)
                if turn == 1:
                    first_turns.append(short[t][-1])
            if k == 1:  # one read-back per length: the threads are alike
                _check_conversation(_state_values(session, graph, thread), t, f"chat T={t}")
    return {
        "turns_done": done,
        "latencies": latencies,
        "reducer": reducer,
        "footprints": footprints,
        "text_bytes": text_bytes,
        "short": short,
        "first_turns": first_turns,
    }


def chat_metrics(result: dict[str, Any], turns: list[int]) -> Metrics:
    latencies: list[float] = result["latencies"]
    footprints: dict[int, int] = result["footprints"]
    out: Metrics = {}
    reached = [t for t in sorted(turns) if t <= len(latencies)]
    if result["first_turns"]:
        out[("first turn p50, new thread", "ms")] = _median_ms(result["first_turns"])
        out[("new threads", "count")] = float(len(result["first_turns"]))
    for t in reached:
        out[(f"turn p50 @T={t}", "ms")] = _median_ms(result["short"][t])
    for t in reached:
        out[(f"footprint @T={t}", "bytes")] = float(footprints[t])
    for t in reached:
        k = max(1, t // 10)
        first = statistics.median(latencies[:k])
        last = statistics.median(latencies[t - k : t])
        out[(f"turn p50, first 10% @T={t}", "ms")] = first * 1000.0
        out[(f"turn p50, last 10% @T={t}", "ms")] = last * 1000.0
        out[(f"turn p50 last/first @T={t}", "x")] = last / first
        # The same without the time LangGraph spent in add_messages during each turn.
        own = [lat - red for lat, red in zip(latencies, result["reducer"], strict=True)]
        out[(f"add_messages per turn, last 10% @T={t}", "ms")] = (
            statistics.median(result["reducer"][t - k : t]) * 1000.0
        )
        out[(f"turn p50 without add_messages last/first @T={t}", "x")] = statistics.median(
            own[t - k : t]
        ) / statistics.median(own[:k])
    if len(reached) >= 2:
        lo, hi = growth_span(reached)
        if footprints[lo] > 0:
            out[(f"growth exponent T={lo}..{hi}", "exp")] = math.log(
                footprints[hi] / footprints[lo]
            ) / math.log(hi / lo)
    if reached:
        hi = reached[-1]
        half = hi // 2
        if half >= 1 and half != hi and footprints.get(half, 0) > 0:
            out[(f"growth exponent top half T={half}..{hi}", "exp")] = math.log(
                footprints[hi] / footprints[half]
            ) / math.log(hi / half)
    return out


def growth_span(turns: list[int]) -> tuple[int, int]:
    """The T range of the growth exponent: from the smallest T of at least 50 when there is
    one below the largest (an empty schema's fixed pages dominate a footprint at T=1 or 10),
    else from the smallest T."""
    ts = sorted(turns)
    lo = next((t for t in ts[:-1] if t >= 50), ts[0])
    return lo, ts[-1]


# ---------------------------------------------------------------------------------------------
# 2. read paths


def read_paths(session: Session, checkpoints: int, reps: int, deadline: float) -> Metrics:
    """``get_tuple`` latest, ``get_tuple`` of a given ``checkpoint_id`` (time travel, forks:
    the middle checkpoint and the 10th), ``list(limit=10)`` and a filtered ``list`` whose one
    match is the thread's first checkpoint (so it looks at all of them) on a chat thread of
    >= N checkpoints."""
    graph = chat_graph().compile(checkpointer=session.obj)
    _invoke(session, graph, {"messages": [user_message(1)]}, _config(f"{session.marker}-warm"))
    config = _config(f"{session.marker}-reads")
    count, turn, per_turn, after_first = 0, 0, 0, 0
    while count < checkpoints:
        turn += 1
        _invoke(session, graph, {"messages": [user_message(turn)]}, config)
        if turn == 1:
            count = after_first = len(_list(session, config, None))
        elif turn == 2:
            count = len(_list(session, config, None))
            per_turn = count - after_first
            if per_turn <= 0:
                raise AssertionError("a turn added no checkpoint")
        else:
            count += per_turn
        if time.perf_counter() > deadline:
            raise StoppedEarly(f"building the thread stopped at {count} checkpoints")
    _check_conversation(_state_values(session, graph, config), turn, "reads")
    ids = [t.config["configurable"]["checkpoint_id"] for t in _list(session, config, None)]
    if len(ids) != count:
        raise AssertionError(f"list found {len(ids)} checkpoints, expected {count}")
    older = {  # newest first: the middle one, and the 10th from the start
        "get_tuple by id, middle": ids[len(ids) // 2],
        "get_tuple by id, 10th": ids[-min(10, len(ids))],
    }
    by_id: dict[str, list[float]] = {name: [] for name in older}
    get_times: list[float] = []
    list_times: list[float] = []
    filter_times: list[float] = []
    expected = min(10, count)
    for _ in range(reps):
        started = time.perf_counter()
        latest = _get_tuple(session, config)
        get_times.append(time.perf_counter() - started)
        started = time.perf_counter()
        page = _list(session, config, 10)
        list_times.append(time.perf_counter() - started)
        if latest is None or len(page) != expected:
            raise AssertionError(f"read back {latest!r:.80} and {len(page)} of {expected} items")
        started = time.perf_counter()
        first = _list(session, config, 1, {"step": -1})
        filter_times.append(time.perf_counter() - started)
        if len(first) != 1:
            raise AssertionError(f"list(filter={{'step': -1}}) found {len(first)} checkpoints")
        for name, checkpoint_id in older.items():
            at = {"configurable": {**config["configurable"], "checkpoint_id": checkpoint_id}}
            started = time.perf_counter()
            found = _get_tuple(session, at)
            by_id[name].append(time.perf_counter() - started)
            if found is None or found.config["configurable"]["checkpoint_id"] != checkpoint_id:
                raise AssertionError(f"{name}: read back {found!r:.80}")
        if time.perf_counter() > deadline:
            break
    return {
        ("get_tuple latest", "ms"): _median_ms(get_times),
        **{(name, "ms"): _median_ms(times) for name, times in by_id.items()},
        ("list(limit=10)", "ms"): _median_ms(list_times),
        ("list(filter=first, limit=1)", "ms"): _median_ms(filter_times),
        ("checkpoints in the thread", "count"): float(count),
    }


# ---------------------------------------------------------------------------------------------
# 3. throughput


def throughput(
    session: Session, threads: int, turns: int, concurrency: int, deadline: float
) -> tuple[Metrics, bool]:
    """``threads`` x ``turns`` chat turns with ``concurrency`` threads in flight at once."""
    graph = chat_graph().compile(checkpointer=session.obj)
    prefix = f"{session.marker}-tp"
    _invoke(session, graph, {"messages": [user_message(1)]}, _config(f"{session.marker}-warm"))
    latencies: list[float] = []
    finished_threads = 0
    started = time.perf_counter()
    if session.loop is None:
        if concurrency != 1:
            raise ValueError("sync targets run at concurrency 1")
        for i in range(threads):
            if time.perf_counter() > deadline:
                break
            config = _config(f"{prefix}{i}")
            for turn in range(1, turns + 1):
                t0 = time.perf_counter()
                graph.invoke({"messages": [user_message(turn)]}, config)
                latencies.append(time.perf_counter() - t0)
            finished_threads += 1
        elapsed = time.perf_counter() - started
    else:
        next_thread = iter(range(threads))

        async def worker() -> int:
            done = 0
            for i in next_thread:
                if time.perf_counter() > deadline:
                    break
                config = _config(f"{prefix}{i}")
                for turn in range(1, turns + 1):
                    t0 = time.perf_counter()
                    await graph.ainvoke({"messages": [user_message(turn)]}, config)
                    latencies.append(time.perf_counter() - t0)
                done += 1
            return done

        async def main() -> int:
            return sum(await asyncio.gather(*(worker() for _ in range(concurrency))))

        finished_threads = session.run(main())
        elapsed = time.perf_counter() - started
    if finished_threads:
        _check_conversation(_state_values(session, graph, _config(f"{prefix}0")), turns, "tp")
    metrics: Metrics = {
        (f"turns/s @c={concurrency}", "turns/s"): len(latencies) / elapsed,
        (f"turn p50 @c={concurrency}", "ms"): _median_ms(latencies) if latencies else math.nan,
    }
    return metrics, finished_threads < threads


# ---------------------------------------------------------------------------------------------
# 4. stores

KINDS = ("fact", "preference", "episode", "note")
TOPICS = 25  # a user's topic; a cross-namespace search filters on kind and topic


def store_namespaces(items: int) -> int:
    """How many users the items are spread over: 10 items each, at most 1,000."""
    return max(1, min(1000, items // 10))


def _namespace(i: int, namespaces: int) -> tuple[str, ...]:
    return ("users", f"u{i % namespaces}", "memories")


def _item(i: int, namespaces: int) -> dict[str, Any]:
    user = i % namespaces
    kind = KINDS[(i // namespaces) % len(KINDS)]  # every namespace gets every kind
    text = sentence(f"item-{i}", 190, topic=user)  # a topic per namespace
    return {"text": text, "kind": kind, "topic": f"t{user % TOPICS}", "n": i}


def store_ops(session: Session, items: int, reps: int, deadline: float) -> Metrics:
    """put N items, 10 per user namespace ``("users", "u<k>", "memories")``, then timed get,
    search in one namespace, search across all of them (``("users",)``, filtered on kind and
    topic: about 1% of the items match, in every 25th namespace) and list_namespaces."""
    store = session.obj
    namespaces = store_namespaces(items)
    put_times: list[float] = []
    matches: dict[str, int] = {}  # topic -> facts with it: what a full search finds
    started = time.perf_counter()
    for i in range(items):
        value = _item(i, namespaces)
        if value["kind"] == "fact":
            matches[value["topic"]] = matches.get(value["topic"], 0) + 1
        t0 = time.perf_counter()
        store.put(_namespace(i, namespaces), f"m{i}", value)
        put_times.append(time.perf_counter() - t0)
        if time.perf_counter() > deadline:
            raise StoppedEarly(f"put stopped after {i + 1} items")
    put_elapsed = time.perf_counter() - started
    rng = random.Random(7)
    get_times: list[float] = []
    search_times: list[float] = []
    across_times: list[float] = []
    list_times: list[float] = []
    for _ in range(reps):
        i = rng.randrange(items)
        t0 = time.perf_counter()
        item = store.get(_namespace(i, namespaces), f"m{i}")
        get_times.append(time.perf_counter() - t0)
        if item is None or item.value.get("n") != i:
            raise AssertionError(f"get m{i} read back {item!r:.80}")

        user = rng.randrange(namespaces)
        t0 = time.perf_counter()
        hits = store.search(("users", f"u{user}"), filter={"kind": "fact"}, limit=10)
        search_times.append(time.perf_counter() - t0)
        if not hits or any(h.value.get("kind") != "fact" for h in hits) or len(hits) > 10:
            raise AssertionError(f"search read back {len(hits)} items")

        topic = f"t{rng.randrange(namespaces) % TOPICS}"
        wanted = {"kind": "fact", "topic": topic}
        t0 = time.perf_counter()
        hits = store.search(("users",), filter=wanted, limit=10)
        across_times.append(time.perf_counter() - t0)
        if len(hits) != min(10, matches.get(topic, 0)) or any(
            {k: h.value.get(k) for k in wanted} != wanted or h.namespace[0] != "users" for h in hits
        ):
            raise AssertionError(f"search across namespaces for {topic} read back {hits!r:.120}")

        t0 = time.perf_counter()
        found = store.list_namespaces(prefix=("users",), limit=100)
        list_times.append(time.perf_counter() - t0)
        if len(found) != min(100, namespaces):
            raise AssertionError(f"list_namespaces read back {len(found)} namespaces")
        if time.perf_counter() > deadline:
            break
    return {
        ("put", "ms"): _median_ms(put_times),
        ("put, sequential", "ops/s"): items / put_elapsed,
        ("get", "ms"): _median_ms(get_times),
        ("search(ns, filter, limit=10)", "ms"): _median_ms(search_times),
        ("search(('users',), filter, limit=10)", "ms"): _median_ms(across_times),
        ("list_namespaces(limit=100)", "ms"): _median_ms(list_times),
    }
