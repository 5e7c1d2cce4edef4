"""Attacks on the promotion of a long read's objects (e53c468, issue 39) and on the
one-pass recall of a remembered list.

A read building a long list pauses the cyclic collector and ends by moving the young
generations to the oldest unwalked (``gc.freeze(); gc.unfreeze()``), with a full
collection once ``sys.getallocatedblocks()`` grew by a quarter. The promises: cyclic
garbage is freed about as CPython's own rule would, the collector is left as it was,
and every read hands out objects of its own, equal to what ``InMemorySaver`` gives.
Real servers throughout; the collector is driven by hand, never by timing.
"""

from __future__ import annotations

import gc
import operator
import subprocess
import sys
import textwrap
import threading
import uuid
import weakref
from typing import Annotated, Any

import pytest
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, StateGraph
from langgraph.graph.message import add_messages
from typing_extensions import TypedDict

from langgraph_memory_plus.checkpoint import lists

pytestmark = pytest.mark.storage

promotes = pytest.mark.skipif(
    not lists.PROMOTES, reason="the promotion is CPython 3.10-3.13's with the GIL"
)


@pytest.fixture(params=["postgres", "redis", "sqlite"])
def backend(request: pytest.FixtureRequest) -> str:
    """The machine's servers and SQLite (no Redis Cluster: these attack the saver's memory,
    not the driver)."""
    return str(request.param)


def _small(storage: Any) -> dict[str, Any]:
    return {"pool_max_size": 2} if storage.kind == "postgres" else {}


class State(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]
    items: Annotated[list[Any], operator.add]


def _graph(checkpointer: Any) -> Any:
    def model(state: State) -> dict[str, Any]:
        n = len(state["messages"])
        return {"messages": [AIMessage(f"answer {n}", id=f"ai-{n}")], "items": [{"turn": n}]}

    builder = StateGraph(State)
    builder.add_node("model", model)
    builder.add_edge(START, "model")
    return builder.compile(checkpointer=checkpointer)


def _config() -> dict[str, Any]:
    return {"configurable": {"thread_id": f"promote-{uuid.uuid4()}"}}


def _long_chat(graph: Any, config: dict[str, Any], n: int = lists.PAUSE_GC_FROM + 44) -> None:
    graph.invoke(
        {"messages": [HumanMessage(f"q{i}", id=f"h{i}") for i in range(n)], "items": []}, config
    )


class _Cycle:
    """Cyclic garbage holding a buffer the C allocator maps by itself (past pymalloc's 512
    bytes): what a dropped traceback, a request object or a parser leaves behind."""

    def __init__(self, size: int = 256 * 1024) -> None:
        self.me = self
        self.buffer = bytearray(size)


# -- cyclic garbage ----------------------------------------------------------------------


@promotes
def test_cycles_holding_large_buffers_do_not_pile_up_across_long_reads(
    saver_factory: Any, storage: Any
) -> None:
    """Between long reads the application drops a cycle holding 256 KiB. CPython's young
    collection frees each one during the next read's building (fdd12e3: none left after
    1,000 reads). The promotion moved each to the oldest generation unwalked, and the
    full collection waits for ``sys.getallocatedblocks()`` to grow by a quarter, which
    large buffers hardly move: 199 of 200 were alive (1,000 reads: 999, 341 MB RSS
    against 85 MB), without bound."""
    config = _config()
    with saver_factory(**_small(storage)) as saver:
        graph = _graph(saver)
        _long_chat(graph, config)
        gc.collect()
        alive: list[weakref.ref[_Cycle]] = []
        for _ in range(60):
            cycle = _Cycle()
            alive.append(weakref.ref(cycle))
            del cycle
            assert len(graph.get_state(config).values["messages"]) == lists.PAUSE_GC_FROM + 45
        held = sum(r() is not None for r in alive)
        saver.delete_thread(config["configurable"]["thread_id"])
    assert held <= 2, f"{held} of 60 cycles (15 MiB) still held after 60 reads"


@promotes
def test_cycles_that_survived_a_young_collection_are_freed_as_by_the_middle_one(
    saver_factory: Any, storage: Any
) -> None:
    """A cycle that outlived one young collection (it sits in the middle generation) and
    is dropped before a long read: CPython frees it by the middle generation's next
    collection, at most ten young ones later. The promotion took it to the oldest."""
    config = _config()
    with saver_factory(**_small(storage)) as saver:
        graph = _graph(saver)
        _long_chat(graph, config)
        gc.collect()
        alive: list[weakref.ref[_Cycle]] = []
        for _ in range(40):
            cycle = _Cycle()
            alive.append(weakref.ref(cycle))
            gc.collect(0)  # as an automatic young collection would, while it is in use
            del cycle
            graph.get_state(config)
        held = sum(r() is not None for r in alive)
        saver.delete_thread(config["configurable"]["thread_id"])
    assert held <= 11, f"{held} of 40 cycles still held after 40 reads"
