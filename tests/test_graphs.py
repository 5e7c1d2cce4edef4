"""End-to-end: real compiled ``StateGraph``s on our savers behave exactly as on ``InMemorySaver``.

Every scenario below is one ``async def`` that talks to the graph only through an ``Env``. The
same function is played four times per test case:

* on our saver (from the ``saver_factory`` / ``async_saver_factory`` fixtures) and on LangGraph's
  ``InMemorySaver`` (the reference), and
* through the sync API (``invoke``/``get_state``/...) or the async one (``ainvoke``/...), chosen
  by the ``mode`` parameter.

A sync ``Env`` never awaits anything that suspends, so a sync run steps the coroutine to the end
without an event loop: the sync savers are exercised from plain sync code. An async run goes
through ``asyncio.run``.

While it runs, a scenario asserts what must hold on any correct saver (so the reference run also
checks the test itself) and records observations with ``env.see``. After both runs, the two lists
of observations must be equal. Observations are normalised so that what legitimately differs
between two runs (checkpoint ids, task ids, interrupt ids, thread ids, timestamps) is replaced by
labels in order of first appearance: equal traces therefore also mean the same parent links, the
same ordering of history and the same ids reported in the same places.

``InMemorySaver`` never forgets anything, so it does not know ``keep_last``: scenarios run with a
retention option record only what retention must not change (values, ``next``, interrupts,
outputs) and check the retention itself (``list()`` per namespace) on our saver only.
"""

from __future__ import annotations

import asyncio
import hashlib
import importlib.util
import re
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager, contextmanager
from typing import Any

import pytest
from backends import ALL_SERVERS
from graphs import (
    chat_graph,
    delta_graph,
    fan_graph,
    human,
    review_graph,
    team_graph,
)
from langchain_core.messages import AIMessage, BaseMessage
from langgraph.checkpoint.base import CheckpointTuple
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.serde.base import CipherProtocol
from langgraph.checkpoint.serde.encrypted import EncryptedSerializer
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.types import Command, Interrupt, PregelTask, StateSnapshot

pytestmark = [pytest.mark.storage, ALL_SERVERS]

Scenario = Callable[..., Coroutine[Any, Any, None]]

# =============================================================================================
# normalisation: what may differ between two equal runs is replaced by stable labels

_ID_RE = re.compile(
    r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"  # checkpoint/task/thread ids
    r"|\b[0-9a-f]{32}\b"  # interrupt ids (xxh3-128 hex digests)
)
_CONFIG_KEYS = ("thread_id", "checkpoint_ns", "checkpoint_id", "checkpoint_map")


def mask_ids(text: str) -> str:
    return _ID_RE.sub("*", text)


class Labels:
    """Replaces every id in a string by ``<idN>``, N counting distinct ids by first appearance.

    ``anonymous`` (set for savers with retention) replaces every id by ``<id>`` instead: which
    checkpoints exist, and so which ids are reported where, is then ours to decide.
    """

    def __init__(self) -> None:
        self._seen: dict[str, str] = {}
        self.anonymous = False

    def _label(self, match: re.Match[str]) -> str:
        if self.anonymous:
            return "<id>"
        found = match.group()
        if found not in self._seen:
            self._seen[found] = f"<id{len(self._seen)}>"
        return self._seen[found]

    def __call__(self, text: str) -> str:
        return _ID_RE.sub(self._label, text)


def _config(config: Any, labels: Labels) -> Any:
    if not config:
        return None
    configurable = config.get("configurable", {})
    return {k: normalize(configurable[k], labels) for k in _CONFIG_KEYS if k in configurable}


def normalize(obj: Any, labels: Labels) -> Any:
    """A plain, comparable form of whatever a graph or saver returned."""
    if isinstance(obj, StateSnapshot):
        return {
            "values": normalize(obj.values, labels),
            "next": list(obj.next),
            "config": _config(obj.config, labels),
            "metadata": normalize(obj.metadata, labels),
            # with retention, a checkpoint whose parent was trimmed may report no parent
            "parent_config": None if labels.anonymous else _config(obj.parent_config, labels),
            "tasks": [normalize(task, labels) for task in obj.tasks],
            "interrupts": [normalize(i, labels) for i in obj.interrupts],
        }
    if isinstance(obj, PregelTask):
        state = obj.state
        return {
            "task": labels(obj.id),
            "name": obj.name,
            "path": normalize(obj.path, labels),
            "error": normalize(obj.error, labels),
            "interrupts": [normalize(i, labels) for i in obj.interrupts],
            "state": normalize(state, labels)
            if isinstance(state, StateSnapshot)
            else _config(state, labels),
            "result": normalize(obj.result, labels),
        }
    if isinstance(obj, CheckpointTuple):
        return {
            "config": _config(obj.config, labels),
            "parent_config": _config(obj.parent_config, labels),
            "metadata": normalize(obj.metadata, labels),
            "pending_writes": normalize(obj.pending_writes, labels),
        }
    if isinstance(obj, Interrupt):
        return {"interrupt": normalize(obj.value, labels), "id": labels(obj.id)}
    if isinstance(obj, BaseMessage):
        return {"message": normalize(obj.model_dump(), labels)}
    if isinstance(obj, BaseException):
        return {"error": type(obj).__name__, "message": labels(str(obj))}
    if isinstance(obj, dict):
        # Sorted (ids masked) so that storage which reorders keys (e.g. jsonb) compares equal.
        keys = sorted(obj, key=lambda k: (mask_ids(str(k)), str(k)))
        return {normalize(k, labels): normalize(obj[k], labels) for k in keys}
    if isinstance(obj, (list, tuple)):
        return [normalize(item, labels) for item in obj]
    if isinstance(obj, str):
        return labels(obj)
    if obj is None or isinstance(obj, (bool, int, float)):
        return obj
    return labels(repr(obj))


# =============================================================================================
# Env: one scenario run on one saver kind, through the sync or the async API


class Env:
    def __init__(self, open_saver: Callable[..., Any], *, reference: bool) -> None:
        self._open_saver = open_saver
        self.reference = reference  # True when the saver is the InMemorySaver reference
        self.trace: list[tuple[str, Any]] = []
        self._labels = Labels()

    def retention(self, keep: int | None) -> int | None:
        """Declare the scenario's ``keep_last``; with retention, ids are no longer compared."""
        self._labels.anonymous = keep is not None
        return keep

    def see(self, label: str, value: Any) -> Any:
        """Record an observation that must be equal on our saver and on InMemorySaver."""
        self.trace.append((label, normalize(value, self._labels)))
        return value

    def open(self, **options: Any) -> AbstractAsyncContextManager[Any]:
        raise NotImplementedError

    async def invoke(self, graph: Any, value: Any, config: Any, **kwargs: Any) -> Any:
        raise NotImplementedError

    async def stream(self, graph: Any, value: Any, config: Any, **kwargs: Any) -> list[Any]:
        raise NotImplementedError

    async def get_state(self, graph: Any, config: Any, *, subgraphs: bool = False) -> Any:
        raise NotImplementedError

    async def history(self, graph: Any, config: Any, **kwargs: Any) -> list[StateSnapshot]:
        raise NotImplementedError

    async def update_state(
        self, graph: Any, config: Any, values: Any, as_node: str | None = None
    ) -> Any:
        raise NotImplementedError

    async def checkpoints(self, saver: Any, config: Any, **kwargs: Any) -> list[CheckpointTuple]:
        raise NotImplementedError


class SyncEnv(Env):
    @asynccontextmanager
    async def open(self, **options: Any) -> AsyncIterator[Any]:
        with self._open_saver(**options) as saver:
            yield saver

    async def invoke(self, graph: Any, value: Any, config: Any, **kwargs: Any) -> Any:
        return graph.invoke(value, config, **kwargs)

    async def stream(self, graph: Any, value: Any, config: Any, **kwargs: Any) -> list[Any]:
        return list(graph.stream(value, config, **kwargs))

    async def get_state(self, graph: Any, config: Any, *, subgraphs: bool = False) -> Any:
        return graph.get_state(config, subgraphs=subgraphs)

    async def history(self, graph: Any, config: Any, **kwargs: Any) -> list[StateSnapshot]:
        return list(graph.get_state_history(config, **kwargs))

    async def update_state(
        self, graph: Any, config: Any, values: Any, as_node: str | None = None
    ) -> Any:
        return graph.update_state(config, values, as_node=as_node)

    async def checkpoints(self, saver: Any, config: Any, **kwargs: Any) -> list[CheckpointTuple]:
        return list(saver.list(config, **kwargs))


class AsyncEnv(Env):
    @asynccontextmanager
    async def open(self, **options: Any) -> AsyncIterator[Any]:
        async with self._open_saver(**options) as saver:
            yield saver

    async def invoke(self, graph: Any, value: Any, config: Any, **kwargs: Any) -> Any:
        return await graph.ainvoke(value, config, **kwargs)

    async def stream(self, graph: Any, value: Any, config: Any, **kwargs: Any) -> list[Any]:
        return [chunk async for chunk in graph.astream(value, config, **kwargs)]

    async def get_state(self, graph: Any, config: Any, *, subgraphs: bool = False) -> Any:
        return await graph.aget_state(config, subgraphs=subgraphs)

    async def history(self, graph: Any, config: Any, **kwargs: Any) -> list[StateSnapshot]:
        return [s async for s in graph.aget_state_history(config, **kwargs)]

    async def update_state(
        self, graph: Any, config: Any, values: Any, as_node: str | None = None
    ) -> Any:
        return await graph.aupdate_state(config, values, as_node=as_node)

    async def checkpoints(self, saver: Any, config: Any, **kwargs: Any) -> list[CheckpointTuple]:
        return [t async for t in saver.alist(config, **kwargs)]


def memory_factory(mode: str) -> Callable[..., Any]:
    """The reference: one shared InMemorySaver, so a "restart" keeps the data.

    Retention and TTL options are ours only and are ignored; ``serde`` is honoured.
    """
    shared: list[InMemorySaver] = []

    def get(options: dict[str, Any]) -> InMemorySaver:
        if not shared:
            shared.append(InMemorySaver(serde=options.get("serde")))
        return shared[0]

    if mode == "sync":

        @contextmanager
        def open_sync(**options: Any) -> Iterator[InMemorySaver]:
            yield get(options)

        return open_sync

    @asynccontextmanager
    async def open_async(**options: Any) -> AsyncIterator[InMemorySaver]:
        yield get(options)

    return open_async


def run_without_loop(coro: Coroutine[Any, Any, None]) -> None:
    """Run a coroutine that never suspends (a scenario on a SyncEnv) with no event loop."""
    try:
        coro.send(None)
    except StopIteration:
        return
    coro.close()
    raise RuntimeError("a sync scenario awaited something that suspends")


def play(scenario: Scenario, mode: str, open_saver: Any, *, reference: bool, **params: Any) -> Env:
    env: Env = (SyncEnv if mode == "sync" else AsyncEnv)(open_saver, reference=reference)
    if mode == "sync":
        run_without_loop(scenario(env, **params))
    else:
        asyncio.run(scenario(env, **params))
    return env


def assert_same_trace(ours: list[tuple[str, Any]], reference: list[tuple[str, Any]]) -> None:
    assert [label for label, _ in ours] == [label for label, _ in reference]
    for (label, got), (_, want) in zip(ours, reference, strict=True):
        assert got == want, f"observation {label!r} differs from InMemorySaver's"


@pytest.fixture(params=["sync", "async"])
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def compare(mode: str, saver_factory: Any, async_saver_factory: Any) -> Callable[..., Env]:
    """``compare(scenario, **params)``: play it on InMemorySaver, then on ours; same trace."""

    def run(scenario: Scenario, **params: Any) -> Env:
        reference = play(scenario, mode, memory_factory(mode), reference=True, **params)
        ours_factory = saver_factory if mode == "sync" else async_saver_factory
        ours = play(scenario, mode, ours_factory, reference=False, **params)
        assert reference.trace, "scenario recorded nothing"
        assert_same_trace(ours.trace, reference.trace)
        return ours

    return run


# =============================================================================================
# helpers for scenarios


def new_thread(**configurable: Any) -> dict[str, Any]:
    return {"configurable": {"thread_id": f"thread-{uuid.uuid4()}", **configurable}}


def ckpt_id(config: Any) -> str:
    return str(config["configurable"]["checkpoint_id"])


def ask(turn: int, text: str | None = None) -> dict[str, Any]:
    return {"messages": [human(text or f"hello {turn}", f"human-{turn}")]}


async def check_retention(
    env: Env, saver: Any, graph: Any, config: Any, keep: int, *, replay_slack: int = 0
) -> None:
    """Our saver only: ``keep`` checkpoints per namespace, and the newest are the ones kept.

    The callers ran more steps than ``keep``, so the root namespace must hold exactly ``keep``,
    plus at most ``replay_slack`` older ones that a ``DeltaChannel`` replay still needs.
    """
    if env.reference:
        return
    thread = {"configurable": {"thread_id": config["configurable"]["thread_id"]}}
    tuples = await env.checkpoints(saver, thread)
    per_ns = Counter(t.config["configurable"]["checkpoint_ns"] for t in tuples)
    assert keep <= per_ns[""] <= keep + replay_slack, (
        f"keep_last={keep} kept {per_ns['']} checkpoints in the root namespace"
        + (f" (at most {replay_slack} more allowed for delta replay)" if replay_slack else "")
    )
    assert all(n <= keep + replay_slack for n in per_ns.values()), f"kept {dict(per_ns)}"
    latest = await env.get_state(graph, config)
    root = await env.checkpoints(
        saver, {"configurable": {**config["configurable"], "checkpoint_ns": ""}}
    )
    assert ckpt_id(root[0].config) == ckpt_id(latest.config), "the newest checkpoint was not kept"
    history = await env.history(graph, config)
    assert len(history) == per_ns[""]


def namespace_shapes(tuples: list[CheckpointTuple]) -> list[tuple[str, int]]:
    """Checkpoints per namespace, namespaces with ids masked (independent of listing order)."""
    per_ns = Counter(t.config["configurable"]["checkpoint_ns"] for t in tuples)
    return sorted((mask_ids(ns), n) for ns, n in per_ns.items())


KEEP_LAST = pytest.mark.parametrize(
    "options", [{}, {"keep_last": 1}, {"keep_last": 3}], ids=["all", "keep1", "keep3"]
)
SHALLOW = pytest.mark.parametrize("options", [{}, {"keep_last": 1}], ids=["all", "keep1"])


# =============================================================================================
# 1. multi-turn add_messages chat (+ retention variants, scenario 9)


async def chat_turns(env: Env, *, options: dict[str, Any]) -> None:
    keep = env.retention(options.get("keep_last"))
    config = new_thread(user_id="user-1")
    async with env.open(**options) as saver:
        graph = chat_graph().compile(checkpointer=saver)
        for turn in range(5):
            out = env.see(f"turn {turn}", await env.invoke(graph, ask(turn), config))
            assert len(out["messages"]) == 2 * (turn + 1)
            assert out["messages"][-1].content == f"model#{2 * turn + 1}: HELLO {turn}"
            assert [m.id for m in out["messages"][-2:]] == [
                f"human-{turn}",
                f"model-{2 * turn + 1}",
            ]
            assert out["turns"] == turn + 1
        state = await env.get_state(graph, config)
        assert state.next == ()
        assert state.values == out
        env.see("state", state)
        if keep is None:
            history = env.see("history", await env.history(graph, config))
            # 4 checkpoints per turn: input, before model, before tally, done
            assert len(history) == 4 * 5
            assert [h.metadata["step"] for h in history] == list(range(18, -2, -1))
        else:
            await check_retention(env, saver, graph, config, keep)


@KEEP_LAST
def test_multi_turn_chat(compare: Callable[..., Env], options: dict[str, Any]) -> None:
    compare(chat_turns, options=options)


# =============================================================================================
# 2. restart: a new saver instance on the same storage continues the thread


async def restart_chat(env: Env, *, options: dict[str, Any]) -> None:
    config = new_thread()
    builder = chat_graph()
    async with env.open(**options) as saver:
        graph = builder.compile(checkpointer=saver)
        for turn in range(2):
            env.see(f"turn {turn}", await env.invoke(graph, ask(turn), config))
        before = env.see("state before restart", await env.get_state(graph, config))
        history_before = await env.history(graph, config)

    async with env.open(**options) as saver:
        graph = builder.compile(checkpointer=saver)
        after = env.see("state after restart", await env.get_state(graph, config))
        assert after.values == before.values
        assert ckpt_id(after.config) == ckpt_id(before.config)
        history_after = await env.history(graph, config)
        assert [ckpt_id(h.config) for h in history_after] == [
            ckpt_id(h.config) for h in history_before
        ]
        for turn in range(2, 4):
            out = env.see(f"turn {turn}", await env.invoke(graph, ask(turn), config))
        assert len(out["messages"]) == 8
        assert out["messages"][:4] == before.values["messages"]
        assert out["turns"] == 4
        env.see("history", await env.history(graph, config))


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"ttl": {"default_ttl": 60, "refresh_on_read": False}},
        {"ttl": {"default_ttl": 60, "refresh_on_read": True}},
    ],
    ids=["plain", "ttl", "ttl-refresh-on-read"],
)
def test_restart_continues_thread(compare: Callable[..., Env], options: dict[str, Any]) -> None:
    compare(restart_chat, options=options)


# =============================================================================================
# 3. interrupt() in a node, Command(resume=...) from a new saver instance (+ shallow, scenario 9)


async def interrupt_resume(env: Env, *, options: dict[str, Any]) -> None:
    keep = env.retention(options.get("keep_last"))
    calls: Counter[str] = Counter()
    builder = review_graph(calls)
    config = new_thread()
    async with env.open(**options) as saver:
        graph = builder.compile(checkpointer=saver)
        out = env.see("interrupted", await env.invoke(graph, ask(0, "ship it?"), config))
        assert [i.value["draft"] for i in out["__interrupt__"]] == ["draft#1: SHIP IT?"]
        state = env.see("pending", await env.get_state(graph, config))
        assert state.next == ("review",)
        assert [i.value["id"] for i in state.interrupts] == ["draft-1"]

    async with env.open(**options) as saver:  # another process answers
        graph = builder.compile(checkpointer=saver)
        state = env.see("pending after restart", await env.get_state(graph, config))
        assert state.next == ("review",)
        assert [i.value["id"] for i in state.interrupts] == ["draft-1"]
        out = env.see("resumed", await env.invoke(graph, Command(resume="approved"), config))
        assert "__interrupt__" not in out
        assert out["decisions"] == ["approved"]
        assert out["messages"][-1].content == "draft#1: SHIP IT? [approved]"
        out = env.see("second turn", await env.invoke(graph, ask(1, "and now?"), config))
        assert [i.value["draft"] for i in out["__interrupt__"]] == ["draft#4: AND NOW?"]

    async with env.open(**options) as saver:
        graph = builder.compile(checkpointer=saver)
        out = env.see("resumed again", await env.invoke(graph, Command(resume="rejected"), config))
        assert out["decisions"] == ["approved", "rejected"]
        assert [m.id for m in out["messages"]] == [
            "human-0", "draft-1", "review-draft-1", "human-1", "draft-4", "review-draft-4",
        ]  # fmt: skip
        state = await env.get_state(graph, config)
        assert state.next == ()
        assert state.interrupts == ()
        env.see("final state", state)
        if keep is None:
            env.see("history", await env.history(graph, config))
        else:
            await check_retention(env, saver, graph, config, keep)
    # the model ran once per turn; review ran twice per interrupt (raise, then resume)
    assert calls == Counter(model=2, review=4)
    env.see("calls", dict(calls))


@SHALLOW
def test_interrupt_resume_from_new_saver(
    compare: Callable[..., Env], options: dict[str, Any]
) -> None:
    compare(interrupt_resume, options=options)


# =============================================================================================
# 4. get_state_history, fork and replay from an older checkpoint


async def history_fork_replay(env: Env) -> None:
    calls: Counter[str] = Counter()
    builder = chat_graph(calls)
    config = new_thread(user_id="user-fork")
    async with env.open() as saver:
        graph = builder.compile(checkpointer=saver)
        for turn in range(3):
            env.see(f"turn {turn}", await env.invoke(graph, ask(turn), config))
        history = env.see("history", await env.history(graph, config))
        assert len(history) == 12
        assert [h.metadata["step"] for h in history] == list(range(10, -2, -1))
        sources = [h.metadata["source"] for h in history[:5]]
        assert sources == ["loop", "loop", "loop", "input", "loop"]
        head = history[0]

    async with env.open() as saver:  # fork and replay from another process
        graph = builder.compile(checkpointer=saver)
        again = await env.history(graph, config)
        assert [ckpt_id(h.config) for h in again] == [ckpt_id(h.config) for h in history]
        assert [h.values for h in again] == [h.values for h in history]
        env.see("history limit", await env.history(graph, config, limit=4))
        env.see(
            "history before", await env.history(graph, config, before=history[3].config, limit=3)
        )
        inputs = env.see(
            "history input", await env.history(graph, config, filter={"source": "input"})
        )
        assert [h.metadata["step"] for h in inputs] == [7, 3, -1]
        by_user = await env.history(graph, config, filter={"user_id": "user-fork", "step": 5})
        env.see("history by metadata", by_user)
        assert [h.metadata["step"] for h in by_user] == [5]

        # fork: new input on top of the checkpoint that ended turn 0
        end_of_turn_0 = next(h for h in history if h.metadata["step"] == 2)
        assert end_of_turn_0.next == ()
        forked = env.see(
            "fork",
            await env.invoke(graph, ask(9, "fork!"), end_of_turn_0.config),
        )
        assert [m.id for m in forked["messages"]] == ["human-0", "model-1", "human-9", "model-3"]
        assert forked["messages"][-1].content == "model#3: FORK!"
        assert forked["turns"] == 2
        fork_head = env.see("fork head", await env.get_state(graph, config))
        assert fork_head.values == forked
        env.see("fork head by id", await env.history(graph, fork_head.config))

        # the fork's parent chain leads to the fork point, not through the original branch
        chain: list[str] = []
        cursor = fork_head
        while cursor.parent_config is not None:
            cursor = await env.get_state(graph, cursor.parent_config)
            chain.append(ckpt_id(cursor.config))
        assert ckpt_id(end_of_turn_0.config) in chain
        assert ckpt_id(head.config) not in chain
        assert len(chain) == 7  # 3 new checkpoints of the fork, then steps 2..-1

        # replay: resume from an older checkpoint whose next node is still pending
        before_tally = next(h for h in history if h.metadata["step"] == 5)
        assert before_tally.next == ("tally",)
        tally_calls = calls["tally"]
        replayed = env.see("replay", await env.invoke(graph, None, before_tally.config))
        assert replayed["turns"] == 2
        assert replayed["messages"] == before_tally.values["messages"]
        assert calls["tally"] == tally_calls + 1  # the pending node runs again on replay
        env.see("calls after replay", dict(calls))

        # the original branch is intact
        original = env.see("original head", await env.get_state(graph, head.config))
        assert original.values == head.values
        assert len(original.values["messages"]) == 6
        env.see("latest", await env.get_state(graph, config))
        full = env.see("history after fork and replay", await env.history(graph, config))
        assert len(full) > len(history) + 3
        assert {ckpt_id(h.config) for h in history} <= {ckpt_id(h.config) for h in full}


def test_history_fork_and_replay(compare: Callable[..., Env]) -> None:
    compare(history_fork_replay)


# =============================================================================================
# 5. update_state (with and without as_node), static breakpoint, then continue


async def update_then_continue(env: Env) -> None:
    calls: Counter[str] = Counter()
    builder = chat_graph(calls)
    config = new_thread()
    async with env.open() as saver:
        graph = builder.compile(checkpointer=saver)
        env.see("turn 0", await env.invoke(graph, ask(0), config))
        # same id: add_messages replaces the model's answer
        edited = AIMessage(content="edited answer", id="model-1")
        env.see("update", await env.update_state(graph, config, {"messages": [edited]}))
        state = env.see("after update", await env.get_state(graph, config))
        assert state.metadata["source"] == "update"
        assert [m.content for m in state.values["messages"]] == ["hello 0", "edited answer"]
        assert state.next == ()

    async with env.open() as saver:
        paused = builder.compile(checkpointer=saver, interrupt_before=["tally"])
        env.see("paused turn", await env.invoke(paused, ask(1), config))
        state = env.see("paused state", await env.get_state(paused, config))
        assert state.next == ("tally",)
        assert state.values["turns"] == 1
        rewritten = AIMessage(content="rewritten", id="model-3")
        update = {"messages": [rewritten], "last_reply": "rewritten"}
        env.see("update as model", await env.update_state(paused, config, update, as_node="model"))
        state = env.see("after update as model", await env.get_state(paused, config))
        assert state.next == ("tally",)
        assert state.values["messages"][-1].content == "rewritten"
        assert len(state.values["messages"]) == 4
        out = env.see("continued", await env.invoke(paused, None, config))
        assert out["turns"] == 2
        assert out["last_reply"] == "rewritten"

    async with env.open() as saver:
        graph = builder.compile(checkpointer=saver)
        env.see("update as tally", await env.update_state(graph, config, {"turns": 10}, "tally"))
        state = env.see("after update as tally", await env.get_state(graph, config))
        assert state.next == ()
        assert state.values["turns"] == 12
        out = env.see("turn 2", await env.invoke(graph, ask(2), config))
        assert out["turns"] == 13
        assert [m.content for m in out["messages"]] == [
            "hello 0", "edited answer", "hello 1", "rewritten", "hello 2", "model#5: HELLO 2",
        ]  # fmt: skip
        env.see("history", await env.history(graph, config))
    assert calls == Counter(model=3, tally=3)


def test_update_state_then_continue(compare: Callable[..., Env]) -> None:
    compare(update_then_continue)


# =============================================================================================
# 6. subgraphs: interrupt inside a (nested) subgraph, get_state(subgraphs=True), resume


async def subgraph_interrupt(env: Env, *, options: dict[str, Any], nested: bool) -> None:
    keep = env.retention(options.get("keep_last"))
    where = "inner" if nested else "sub"
    calls: Counter[str] = Counter()
    builder = team_graph(calls, nested=nested)
    config = new_thread()
    thread = {"configurable": {"thread_id": config["configurable"]["thread_id"]}}
    async with env.open(**options) as saver:
        graph = builder.compile(checkpointer=saver)
        out = env.see("interrupted", await env.invoke(graph, ask(0, "plan"), config))
        assert [i.value for i in out["__interrupt__"]] == [{"where": where, "draft": "sub#1: PLAN"}]
        assert out["log"] == ["prepare:1"]

        state = env.see("state with subgraphs", await env.get_state(graph, config, subgraphs=True))
        assert state.next == ("sub",)
        sub = state.tasks[0].state
        assert isinstance(sub, StateSnapshot)
        sub_ns = sub.config["configurable"]["checkpoint_ns"]
        assert sub_ns.startswith("sub:")
        assert sub.values["trail"] == ["draft"]
        assert [m.id for m in sub.values["messages"]] == ["human-0", "sub-1"]
        if nested:
            inner = sub.tasks[0].state
            assert isinstance(inner, StateSnapshot)
            inner_ns = inner.config["configurable"]["checkpoint_ns"]
            assert inner_ns.startswith(sub_ns + "|inner:")
            assert inner.next == ("approve",)
        else:
            assert sub.next == ("approve",)
        assert [i.value["where"] for i in state.interrupts] == [where]

        plain = env.see("state without subgraphs", await env.get_state(graph, config))
        assert plain.tasks[0].state["configurable"]["checkpoint_ns"] == sub_ns
        direct = {"configurable": {**thread["configurable"], "checkpoint_ns": sub_ns}}
        env.see("subgraph state by namespace", await env.get_state(graph, direct))
        tuples = await env.checkpoints(saver, thread)
        expected_ns = {"", sub_ns} | ({inner_ns} if nested else set())
        assert {t.config["configurable"]["checkpoint_ns"] for t in tuples} == expected_ns
        if keep is None:
            env.see("namespaces", namespace_shapes(tuples))
            sub_tuples = await env.checkpoints(saver, direct)
            assert {t.config["configurable"]["checkpoint_ns"] for t in sub_tuples} == {sub_ns}
            env.see("subgraph checkpoints", sub_tuples)

    async with env.open(**options) as saver:  # resume from another process
        graph = builder.compile(checkpointer=saver)
        env.see("state after restart", await env.get_state(graph, config, subgraphs=True))
        out = env.see("resumed", await env.invoke(graph, Command(resume="yes"), config))
        assert out["log"] == ["prepare:1", "finish"]
        assert out["report"] == f"draft / {where}:approved=yes"
        assert "notes" not in out
        assert "trail" not in out
        assert [m.id for m in out["messages"]] == ["human-0", "sub-1", "finish-2"]
        state = env.see("done", await env.get_state(graph, config, subgraphs=True))
        assert state.next == ()
        assert state.tasks == ()
        out = env.see("second turn", await env.invoke(graph, ask(1, "again"), config))
        assert [i.value for i in out["__interrupt__"]] == [
            {"where": where, "draft": "sub#4: AGAIN"}
        ]

    async with env.open(**options) as saver:
        graph = builder.compile(checkpointer=saver)
        env.see("second pending", await env.get_state(graph, config, subgraphs=True))
        out = env.see("second resumed", await env.invoke(graph, Command(resume="no"), config))
        assert out["log"] == ["prepare:1", "finish", "prepare:4", "finish"]
        assert out["report"] == f"draft / {where}:approved=no"
        assert out["messages"][-1].content == out["report"]
        if keep is None:
            env.see("history", await env.history(graph, config))
            env.see("all namespaces", namespace_shapes(await env.checkpoints(saver, thread)))
        else:
            await check_retention(env, saver, graph, config, keep)
    # the drafts were not redone on resume: the subgraph really continued from its checkpoint
    assert calls == Counter(prepare=2, draft=2, finish=2, **{f"approve@{where}": 4})
    env.see("calls", dict(calls))


@SHALLOW
@pytest.mark.parametrize("nested", [False, True], ids=["subgraph", "nested-subgraph"])
def test_subgraph_interrupt_and_resume(
    compare: Callable[..., Env], options: dict[str, Any], nested: bool
) -> None:
    compare(subgraph_interrupt, options=options, nested=nested)


# =============================================================================================
# 7. a failing node does not make its successful sibling run again


async def failing_sibling(env: Env, *, options: dict[str, Any]) -> None:
    keep = env.retention(options.get("keep_last"))
    calls: Counter[str] = Counter()
    failing = {"flaky": True}
    builder = fan_graph(calls, failing)
    # One task at a time (fetch, then flaky): fetch has finished and its writes were handed to
    # the saver before flaky fails, in sync and async runs alike.
    config = new_thread()
    config["max_concurrency"] = 1
    async with env.open(**options) as saver:
        graph = builder.compile(checkpointer=saver)
        with pytest.raises(ValueError, match="flaky failed on r1"):
            await env.invoke(graph, {"request": "r1"}, config)
        assert calls == Counter(fetch=1, flaky=1)
        state = env.see("failed state", await env.get_state(graph, config))
        tasks = {task.name: task for task in state.tasks}
        assert tasks["fetch"].result == {"results": ["fetch(r1)"]}
        assert tasks["fetch"].error is None
        assert "flaky failed on r1" in str(tasks["flaky"].error)

    async with env.open(**options) as saver:  # retry in another process: fails again
        graph = builder.compile(checkpointer=saver)
        with pytest.raises(ValueError, match="flaky failed on r1"):
            await env.invoke(graph, None, config)
        assert calls == Counter(fetch=1, flaky=2)
        env.see("failed again", await env.get_state(graph, config))

    failing["flaky"] = False
    async with env.open(**options) as saver:
        graph = builder.compile(checkpointer=saver)
        out = env.see("recovered", await env.invoke(graph, None, config))
        assert out["results"] == ["fetch(r1)", "flaky(r1)", "join(2)"]
        assert calls == Counter(fetch=1, flaky=3, join=1)
        out = env.see("next request", await env.invoke(graph, {"request": "r2"}, config))
        assert out["results"][3:] == ["fetch(r2)", "flaky(r2)", "join(5)"]
        assert calls == Counter(fetch=2, flaky=4, join=2)
        if keep is None:
            env.see("history", await env.history(graph, config))
        else:
            await check_retention(env, saver, graph, config, keep)


@SHALLOW
def test_failed_node_keeps_sibling_writes(
    compare: Callable[..., Env], options: dict[str, Any]
) -> None:
    compare(failing_sibling, options=options)


# =============================================================================================
# 8. DeltaChannel state across restarts, update_state and retention


async def delta_channel_turns(env: Env, *, options: dict[str, Any], turns: int) -> None:
    keep = env.retention(options.get("keep_last"))
    builder = delta_graph()
    config = new_thread()
    items: list[str] = []
    message_ids: list[str] = []
    live: dict[str, Any] = {}  # checkpoint id -> values as the running graph had them

    async def turn(graph: Any, n: int) -> None:
        question = {"messages": [human(f"q{n}", f"human-{n}")], "items": [f"in-{n}"]}
        chunks = await env.stream(graph, question, config, stream_mode=["values", "checkpoints"])
        live.update(
            {ckpt_id(c["config"]): c["values"] for kind, c in chunks if kind == "checkpoints"}
        )
        out = env.see(f"turn {n}", [c for kind, c in chunks if kind == "values"][-1])
        position = len(message_ids) + 1
        items.extend([f"in-{n}", f"item-{len(items) + 1}"])
        message_ids.extend([f"human-{n}", f"delta-{position}"])
        assert out["items"] == items
        assert [m.id for m in out["messages"]] == message_ids
        assert out["messages"][-1].content == f"delta#{position}: Q{n}"

    half = turns // 2
    async with env.open(**options) as saver:
        graph = builder.compile(checkpointer=saver)
        for n in range(half):
            await turn(graph, n)
        before = env.see("state before restart", await env.get_state(graph, config))

    async with env.open(**options) as saver:
        graph = builder.compile(checkpointer=saver)
        state = await env.get_state(graph, config)
        assert state.values == before.values
        env.see("update", await env.update_state(graph, config, {"items": ["edited"]}, "tally"))
        items.append("edited")
        assert (await env.get_state(graph, config)).values["items"] == items
        for n in range(half, turns):
            await turn(graph, n)

    async with env.open(**options) as saver:  # read-only process: rebuilt from storage alone
        graph = builder.compile(checkpointer=saver)
        state = env.see("final state", await env.get_state(graph, config))
        assert state.values["items"] == items
        assert [m.id for m in state.values["messages"]] == message_ids
        assert state.values["turns"] == turns
        history = await env.history(graph, config)
        if keep is None:
            env.see("history", history)
        else:
            # A snapshot is stored at least every 3 updates of a channel, i.e. at least every
            # 2 turns (8 checkpoints); replay never needs more ancestors than that.
            await check_retention(env, saver, graph, config, keep, replay_slack=8)
        # every stored checkpoint, old or new, is rebuilt as the running graph had it
        checked = [h for h in history if ckpt_id(h.config) in live]
        assert len(checked) >= len(history) - 1  # all but the update_state checkpoint
        for h in checked:
            assert h.values == live[ckpt_id(h.config)], f"checkpoint at step {h.metadata['step']}"


@KEEP_LAST
def test_delta_channel_state(compare: Callable[..., Env], options: dict[str, Any]) -> None:
    compare(delta_channel_turns, options=options, turns=10)


# =============================================================================================
# 10. custom serde: EncryptedSerializer round-trips a chat


class XorTestCipher(CipherProtocol):
    """A test-only cipher (NOT secure): XOR with the key, plus a keyed tag so a wrong key fails."""

    def __init__(self, key: bytes) -> None:
        self.key = key
        self.encrypted = 0
        self.decrypted = 0

    def _xor(self, data: bytes) -> bytes:
        stream = (self.key * (len(data) // len(self.key) + 1))[: len(data)]
        return bytes(a ^ b for a, b in zip(data, stream, strict=True))

    def _tag(self, plaintext: bytes) -> bytes:
        return hashlib.sha256(self.key + plaintext).digest()[:8]

    def encrypt(self, plaintext: bytes) -> tuple[str, bytes]:
        self.encrypted += 1
        return "xor-test", self._tag(plaintext) + self._xor(plaintext)

    def decrypt(self, ciphername: str, ciphertext: bytes) -> bytes:
        assert ciphername == "xor-test"
        plaintext = self._xor(ciphertext[8:])
        if self._tag(plaintext) != ciphertext[:8]:
            raise ValueError("xor-test: wrong key or corrupted data")
        self.decrypted += 1
        return plaintext


def xor_serde(key: bytes) -> tuple[EncryptedSerializer, XorTestCipher | None]:
    cipher = XorTestCipher(key)
    return EncryptedSerializer(cipher, JsonPlusSerializer()), cipher


def aes_serde(key: bytes) -> tuple[EncryptedSerializer, XorTestCipher | None]:
    return EncryptedSerializer.from_pycryptodome_aes(key=key), None


async def encrypted_chat(env: Env, *, make_serde: Callable[[bytes], Any]) -> None:
    serde, cipher = make_serde(b"0123456789abcdef0123456789abcdef")
    config = new_thread()
    builder = chat_graph()
    async with env.open(serde=serde) as saver:
        graph = builder.compile(checkpointer=saver)
        for turn in range(2):
            env.see(f"turn {turn}", await env.invoke(graph, ask(turn, f"secret {turn}"), config))

    async with env.open(serde=serde) as saver:
        graph = builder.compile(checkpointer=saver)
        state = env.see("state after restart", await env.get_state(graph, config))
        assert [m.content for m in state.values["messages"]] == [
            "secret 0", "model#1: SECRET 0", "secret 1", "model#3: SECRET 1",
        ]  # fmt: skip
        out = env.see("turn 2", await env.invoke(graph, ask(2, "secret 2"), config))
        assert out["turns"] == 3
        env.see("history", await env.history(graph, config))
    if cipher is not None:
        assert cipher.encrypted > 0, "the serde passed to the saver was never used to write"
        assert cipher.decrypted > 0, "the serde passed to the saver was never used to read"

    if not env.reference:
        wrong, _ = make_serde(b"fedcba9876543210fedcba9876543210")
        async with env.open(serde=wrong) as saver:
            graph = builder.compile(checkpointer=saver)
            try:
                leaked = await env.get_state(graph, config)
            except Exception:
                leaked = None
            assert leaked is None, "a saver with the wrong key read the encrypted state"


def _aes_case() -> Any:
    missing = importlib.util.find_spec("Crypto") is None
    return pytest.param(
        aes_serde,
        id="aes",
        marks=pytest.mark.skipif(missing, reason="pycryptodome is not installed"),
    )


@pytest.mark.parametrize("make_serde", [pytest.param(xor_serde, id="xor-test"), _aes_case()])
def test_encrypted_serde_round_trip(
    compare: Callable[..., Env], make_serde: Callable[[bytes], Any]
) -> None:
    compare(encrypted_chat, make_serde=make_serde)


# =============================================================================================
# 11. stream / astream chunks


async def stream_chunks(env: Env) -> None:
    config = new_thread()
    team_config = new_thread()
    team = team_graph(nested=True)
    async with env.open() as saver:
        graph = chat_graph().compile(checkpointer=saver)
        for turn in range(3):
            chunks = env.see(
                f"values {turn}",
                await env.stream(graph, ask(turn), config, stream_mode="values"),
            )
            # input, after model, after tally; each turn starts from the stored history
            assert len(chunks) == 3
            assert len(chunks[0]["messages"]) == 2 * turn + 1
            assert chunks[-1]["turns"] == turn + 1
        env.see(
            "values+updates",
            await env.stream(graph, ask(3), config, stream_mode=["values", "updates"]),
        )
        chunks = env.see(
            "team values",
            await env.stream(
                team.compile(checkpointer=saver),
                ask(0, "plan"),
                team_config,
                stream_mode="values",
                subgraphs=True,
            ),
        )
        assert any("__interrupt__" in chunk for _, chunk in chunks)

    async with env.open() as saver:
        chunks = env.see(
            "team resumed",
            await env.stream(
                team.compile(checkpointer=saver),
                Command(resume="ok"),
                team_config,
                stream_mode=["values", "updates"],
                subgraphs=True,
            ),
        )
        namespaces = {len(ns) for ns, _, _ in chunks}
        assert namespaces == {0, 1, 2}
        final = [chunk for ns, kind, chunk in chunks if ns == () and kind == "values"][-1]
        assert final["log"][-1] == "finish"


def test_stream_values_chunks(compare: Callable[..., Env]) -> None:
    compare(stream_chunks)
