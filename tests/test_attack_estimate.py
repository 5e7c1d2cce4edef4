"""Attacks on the list memory's byte estimate (commit 8b9e06e: a view's estimate goes on
from its base's cached sums, ``ListVersion.data`` and ``ListView.fields``).

Its promises: every remembered view's estimate is the full count of its elements, fields
and item sizes (an item the channel has since dropped still counts with its real size);
the memory stays within its cap as tracemalloc sees it; nothing stored or returned
changes. The finds here, fixed on this branch:

- A sum cached while some of the version's items were not in the channel (evicted, or
  the channel dropped and made again between a put's base and its ``remember``, which a
  concurrent read or another list channel's put does at a small cap) counted those items
  as 0, and every later put that went on from it kept the 0 (an estimate below a full
  count that the item is back in the channel for). A view counted with missing items
  also kept its short estimate when a later read brought them back (this one predates
  8b9e06e).
- An item a read fetched counted its *stored* size: compressed (deflate with a preset
  dictionary), a few times smaller than the message the read's objects hold. A saver
  that reads stored chats (a restarted worker) held ~2.5 times its cap. With encryption
  even a put's items counted their compressed, sealed size (both predate 8b9e06e).
  Counted at their serialized size, a read-back saver still held 1.1 times its estimate:
  each template kept a frozenset of its fields of its own (~600 bytes, now shared), and
  what every channel, view and version holds whatever its length was not counted.

The rest are attacks that found nothing, kept as guards: long lists across page
boundaries, elements without fingerprints, edits, removals, forks, copies and deletes at
caps that evict at every put, and writers and readers of one thread at once.
"""

from __future__ import annotations

import gc
import os
import threading
import tracemalloc
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import Annotated, Any

import pytest
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, RemoveMessage
from langgraph.graph import START, StateGraph
from langgraph.graph.message import REMOVE_ALL_MESSAGES, add_messages
from test_list_memory import _chat, _fill_and_measure, _full, traced  # noqa: F401 (a fixture)
from typing_extensions import TypedDict

from langgraph_memory_plus.checkpoint.lists import (
    ListMemory,
    chunk_list,
    remember_stored,
)
from langgraph_memory_plus.checkpoint.sqlite import SqliteSaver
from langgraph_memory_plus.encryption import Encryption

MIB = 1024 * 1024


class Chat(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


class Mixed(TypedDict, total=False):
    messages: Annotated[list[AnyMessage], add_messages]
    bag: list[Any]  # replaced whole: dicts, strings, tuples, objects without __dict__


def _wrong_estimates(saver: Any) -> list[tuple[str, int, int, int]]:
    """Views whose estimate is not the full count: below it ever, or off it while every
    item of the view is in its channel (the by-design exception is an item dropped)."""
    wrong = []
    memory = saver._lists if hasattr(saver, "_lists") else saver
    with memory._lock:
        for key, channel in memory._channels.items():
            for view in channel.views:
                estimate = channel.view_bytes[id(view)]
                now = _full(view, channel.sizes.get)
                missing = sum(1 for i in view.version.item_ids if i not in channel.sizes)
                if estimate < now or (not missing and estimate != now):
                    wrong.append((key[2], estimate, now, missing))
    return wrong


def _dump(value: Any) -> tuple[str, bytes]:
    return "repr", repr(value).encode()


KEY = (b"k" * 16, "", "bag")


def _dropped_then_back(memory: ListMemory) -> tuple[list[Any], Any]:
    """Two items stored; a put that prepends one finds its base, then the channel is
    dropped before it is remembered (its reused items are then counted as 0), then a read
    elsewhere stores the two items in the channel again. The put's values and its list."""
    a, b = {"a": "x" * 300}, {"b": "y" * 300}
    first = chunk_list(KEY[0], [a, b], None, _dump)
    remember_stored(memory, KEY, first, "c0")
    values = [{"c": "z" * 200}, a, b]
    base = memory.base(KEY, values, "c0")
    assert base is not None
    memory.forget(KEY)
    second = chunk_list(KEY[0], values, base, _dump)
    remember_stored(memory, KEY, second, "c1")
    assert _wrong_estimates(memory) == []  # a and b are not in the channel: counted 0
    again = chunk_list(KEY[0], [dict(a), dict(b)], None, _dump)
    remember_stored(memory, KEY, again, "cx")
    return values, second


def test_a_sum_cached_with_items_missing_is_not_carried_on_once_they_are_back() -> None:
    """A put's base is looked up before its ``remember``; meanwhile the channel may be
    dropped (another channel's put over the cap, a concurrent reader's) and made again.
    The put's version then counts the items it reuses as 0; a read or put that brings
    them back into the channel must not leave that view, or a put going on from it,
    short of the full count."""
    memory = ListMemory()
    values, second = _dropped_then_back(memory)
    # the next step appends to what the second put was given
    values = [*values, {"d": "w" * 100}]
    base = memory.base(KEY, values, "c1")
    assert base is second.view
    third = chunk_list(KEY[0], values, base, _dump)
    remember_stored(memory, KEY, third, "c2")
    channel = memory._channels[KEY]
    # every item of the third put is in the channel: its estimate is the full count
    assert all(i in channel.sizes for i in third.view.version.item_ids)
    assert channel.view_bytes[id(third.view)] == _full(third.view, channel.sizes.get)


def test_a_view_counted_without_its_items_is_recounted_when_they_come_back() -> None:
    """Before 8b9e06e too: a view's estimate was taken once, at its ``remember``; items
    it counted as 0 that came back later left it short."""
    memory = ListMemory()
    _dropped_then_back(memory)
    assert _wrong_estimates(memory) == []
    assert memory.bytes == sum(c.total for c in memory._channels.values())


def _fill(path: Path, threads: int = 24, turns: int = 6, **options: Any) -> None:
    with SqliteSaver.from_conn_string(str(path), **options) as saver:
        saver.setup()
        graph = _chat().compile(checkpointer=saver)
        for t in range(threads):
            config: Any = {"configurable": {"thread_id": f"t{t}"}}
            for turn in range(turns):
                graph.invoke({"messages": [HumanMessage(f"question {turn} " + "y" * 150)]}, config)
                if turn % 3 == 0:
                    graph.get_state(config)


def _held(memory: Any) -> tuple[int, int]:
    """(what the list memory holds by tracemalloc, its estimate)."""
    gc.collect()
    held = tracemalloc.get_traced_memory()[0]
    estimate = memory.bytes
    memory.clear()
    gc.collect()
    return held - tracemalloc.get_traced_memory()[0], estimate


@pytest.mark.usefixtures("traced")
def test_a_saver_reading_stored_chats_stays_within_its_cap_by_tracemalloc(
    tmp_path: Path,
) -> None:
    """A restarted worker: every list it holds was read from storage, where items are
    compressed. Each item counted its compressed size while the read's objects (and the
    item's template) hold the whole message: 1.29 MB held under a cap of 0.5 MiB."""
    path = tmp_path / "r.db"
    tracemalloc.stop()
    _fill(path)
    tracemalloc.start()
    with SqliteSaver.from_conn_string(str(path), list_memory_mib=0.5) as saver:
        graph = _chat().compile(checkpointer=saver)
        for t in range(24):
            graph.get_state({"configurable": {"thread_id": f"t{t}"}})
        del graph
        held, estimate = _held(saver._lists)
    print(f"read back: {held} bytes held, estimated {estimate}")
    assert estimate <= MIB // 2
    assert held <= estimate
    assert held <= MIB // 2 + 64 * 1024


@pytest.mark.usefixtures("traced")
def test_an_encrypted_saver_stays_within_its_cap_by_tracemalloc(tmp_path: Path) -> None:
    """With encryption a put's items are kept as stored (compressed, then sealed): they
    counted that size, not the message's. 656 KB held under a cap of 0.5 MiB."""
    held, estimate, _ = _fill_and_measure(
        tmp_path / "e.db", list_memory_mib=0.5, encryption=Encryption({"k1": os.urandom(32)})
    )
    print(f"encrypted: {held} bytes held, estimated {estimate}")
    assert estimate <= MIB // 2
    assert held <= estimate
    assert held <= MIB // 2 + 64 * 1024


def _mixed() -> Any:
    def model(state: Mixed) -> dict[str, Any]:
        n = len(state.get("messages", []))
        bag = list(state.get("bag", []))
        if n % 5 == 4:
            bag = bag[1:]  # shrinks: not an append
        bag += [{"n": n, "t": "x" * (n % 40)}, f"s{n}", (n, "t"), b"b%d" % n, None]
        bag.append(datetime(2026, 1, 1 + n % 28, tzinfo=timezone.utc))
        bag.append(uuid.UUID(int=n))
        return {"messages": [AIMessage(f"answer {n} " + "x" * (n % 300))], "bag": bag}

    b = StateGraph(Mixed)
    b.add_node("model", model)
    b.add_edge(START, "model")
    return b


def _check(saver: Any, where: str) -> None:
    memory = saver._lists
    assert _wrong_estimates(saver) == [], where
    with memory._lock:
        assert memory.bytes == sum(c.total for c in memory._channels.values()), where
        assert memory.bytes <= memory.max_bytes, where


@pytest.mark.parametrize("cap", [0.01, 0.2, 64])
def test_every_estimate_is_the_full_count_through_long_lists_edits_and_forks(
    tmp_path: Path, cap: float
) -> None:
    """Not a find: through a list of over 1,000 messages crossing page boundaries, a bag
    of elements without fingerprints that grows and shrinks, a message replaced and one
    removed in the middle, all removed, forks from older checkpoints, history and old
    reads, ``copy_thread`` and ``delete_thread``, with a cap that evicts at every put or
    none, every view's estimate is the full count (or above it only by items dropped),
    and what a fresh saver reads back is what this one returns."""
    path = str(tmp_path / "m.db")
    with SqliteSaver.from_conn_string(path, list_memory_mib=cap) as saver:
        saver.setup()
        graph = _mixed().compile(checkpointer=saver)
        config: Any = {"configurable": {"thread_id": "t"}}
        for turn in range(3):
            graph.invoke({"messages": [HumanMessage(f"q{turn}", id=f"h{turn}")]}, config)
            _check(saver, f"turn {turn}")
        early = graph.get_state(config).config
        many = [HumanMessage(f"m{i}", id=f"m{i}") for i in range(1017)]
        graph.update_state(config, {"messages": many})  # 1,023 messages
        _check(saver, "many")
        for turn in range(3, 7):  # past 1,024 and 1,040
            graph.invoke({"messages": [HumanMessage(f"q{turn}", id=f"h{turn}")]}, config)
            _check(saver, f"turn {turn}")
        graph.update_state(config, {"messages": [HumanMessage("edited", id="m500")]})
        _check(saver, "edit")
        graph.invoke({"messages": [HumanMessage("after the edit")]}, config)
        graph.update_state(config, {"messages": [RemoveMessage(id="m16")]})
        _check(saver, "remove")
        graph.invoke({"messages": [HumanMessage("after the removal")]}, config)
        old = [s.config for s in graph.get_state_history(config, limit=12)]
        _check(saver, "history")
        graph.get_state(old[-1])
        graph.invoke({"messages": [HumanMessage("a fork")]}, old[5])
        graph.invoke({"messages": [HumanMessage("an early fork")]}, early)
        _check(saver, "forks")
        saver.copy_thread("t", "copy")
        copy: Any = {"configurable": {"thread_id": "copy"}}
        graph.invoke({"messages": [HumanMessage("on the copy")]}, copy)
        graph.invoke({"messages": [HumanMessage("on the original")]}, config)
        _check(saver, "copy")
        graph.update_state(
            config, {"messages": [RemoveMessage(id=REMOVE_ALL_MESSAGES), HumanMessage("anew")]}
        )
        graph.invoke({"messages": [HumanMessage("after all removed")]}, config)
        _check(saver, "remove all")
        saver.delete_thread("copy")
        _check(saver, "delete")
        graph.invoke({"messages": [HumanMessage("again")]}, copy)
        _check(saver, "after delete")
        shown = {
            t: graph.get_state({"configurable": {"thread_id": t}}).values for t in ["t", "copy"]
        }
    with SqliteSaver.from_conn_string(path) as fresh:
        graph = _mixed().compile(checkpointer=fresh)
        for t, values in shown.items():
            assert graph.get_state({"configurable": {"thread_id": t}}).values == values


def test_estimates_hold_with_writers_and_readers_of_one_thread_at_once(tmp_path: Path) -> None:
    """Not a find: two threads running turns of the same chat (each reads the latest
    checkpoint and puts on it: forks when they overlap) and two reading its state and
    history, at a cap that evicts all the time. Every view's estimate is the full count
    (or above it only by items dropped) afterwards and the memory's total is its parts."""
    path = str(tmp_path / "c.db")
    errors: list[BaseException] = []
    with SqliteSaver.from_conn_string(path, list_memory_mib=0.02) as saver:
        saver.setup()
        graph = _mixed().compile(checkpointer=saver)
        config: Any = {"configurable": {"thread_id": "t"}}
        graph.invoke({"messages": [HumanMessage("start")]}, config)
        done = threading.Event()

        def write(name: str) -> None:
            try:
                for turn in range(15):
                    graph.invoke({"messages": [HumanMessage(f"{name}{turn}")]}, config)
            except BaseException as exc:
                errors.append(exc)

        def read() -> None:
            try:
                while not done.is_set():
                    graph.get_state(config)
                    list(graph.get_state_history(config, limit=4))
            except BaseException as exc:
                errors.append(exc)

        writers = [threading.Thread(target=write, args=(n,)) for n in "ab"]
        readers = [threading.Thread(target=read) for _ in range(2)]
        for t in readers + writers:
            t.start()
        for t in writers:
            t.join()
        done.set()
        for t in readers:
            t.join()
        assert errors == []
        _check(saver, "after the race")
        graph.invoke({"messages": [HumanMessage("last")]}, config)
        _check(saver, "after the race and a turn")
        shown = graph.get_state(config).values
    with SqliteSaver.from_conn_string(path) as fresh:
        assert _mixed().compile(checkpointer=fresh).get_state(config).values == shown
