"""Shared helpers for the ``test_nodes_*`` tests (no tests of its own).

* ``ChatModel``: a deterministic chat model that records every input it gets. Told
  "remember: <text>" it calls the ``add_memory`` tool with that text once, then answers;
  anything else it answers at once. Its replies never contain profile text, so counting
  the profile in its inputs counts what the nodes put there.
* ``open_store`` / ``open_saver``: factories for *new* store and saver objects on the same
  storage (closing one and opening another is a restart), over PostgreSQL and Redis.
* Fault-injecting store wrappers: one that fails, one that hangs until released, one
  that makes readers meet at a barrier (to force two writers into a race).
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from contextlib import AbstractContextManager, asynccontextmanager, contextmanager
from typing import Any

import psycopg
import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langgraph.store.base import BaseStore, GetOp, Op, Result
from langgraph.store.memory import InMemoryStore
from messages_support import ScriptedModel
from pydantic import Field

from langgraph_memory_plus import PostgresStore
from langgraph_memory_plus.nodes import PROFILE_ID
from langgraph_memory_plus.store.postgres import AsyncPostgresStore

try:
    from langgraph_memory_plus.store.redis import AsyncRedisStore, RedisStore
except ImportError:  # the Redis store is being finished elsewhere
    RedisStore = AsyncRedisStore = None

STORE_BACKENDS = ["postgres", "redis"] if RedisStore is not None else ["postgres"]

OpenStore = Callable[..., AbstractContextManager[Any]]


class ChatModel(ScriptedModel):
    """Answers every question; saves "remember: ..." text with the add_memory tool."""

    inputs: list[list[BaseMessage]] = Field(default_factory=list)

    def bind_tools(self, tools: Any, **kwargs: Any) -> ChatModel:  # type: ignore[override]
        return self

    def reply(self, messages: list[BaseMessage]) -> AIMessage:
        self.inputs.append(list(messages))
        question = next(m for m in reversed(messages) if isinstance(m, HumanMessage))
        text = question.text
        if text.startswith("remember:") and not isinstance(messages[-1], ToolMessage):
            call = {
                "name": "add_memory",
                "args": {"content": text[9:].strip()},
                "id": "c-" + str(question.id),
            }
            return AIMessage("", id=f"{question.id}-call", tool_calls=[call])
        return AIMessage(f"Noted ({len(messages)} messages in).", id=f"{question.id}-answer")


def human(text: str, mid: str) -> dict[str, Any]:
    return {"messages": [HumanMessage(text, id=mid)]}


def profile_count(model_input: Iterable[BaseMessage], marker: str = "User profile:") -> int:
    """How often the injected profile appears in a model input (by id and by text)."""
    messages = list(model_input)
    by_id = sum(m.id == PROFILE_ID for m in messages)
    by_text = sum(m.text.count(marker) for m in messages)
    assert by_id == by_text, f"profile message ids ({by_id}) and texts ({by_text}) disagree"
    return by_id


def text_of(model_input: Iterable[BaseMessage]) -> str:
    return "\n".join(m.text for m in model_input)


# -- stores and savers on real storage ----------------------------------------------------


@pytest.fixture(params=STORE_BACKENDS)
def store_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def store_target(store_backend: str, request: pytest.FixtureRequest) -> Iterator[dict[str, Any]]:
    """The store class pair and the options that put a store on this test's own storage
    (a PostgreSQL schema or a Redis key prefix), removed afterwards."""
    tag = uuid.uuid4().hex[:10]
    if store_backend == "postgres":
        url = request.getfixturevalue("pg_url")
        yield {"classes": (PostgresStore, AsyncPostgresStore), "url": url, "schema": f"nodes_{tag}"}
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "nodes_{tag}" CASCADE')
    else:
        prefix = f"{request.getfixturevalue('redis_prefix')}-nodes-{tag}"
        url = request.getfixturevalue("redis_url")
        yield {"classes": (RedisStore, AsyncRedisStore), "url": url, "key_prefix": prefix}


def _location(target: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    return target["url"], {k: v for k, v in target.items() if k not in ("classes", "url")}


@pytest.fixture
def open_store(store_target: dict[str, Any]) -> OpenStore:
    """``open_store(**options)`` opens a new sync store on this test's storage."""
    cls, (url, defaults) = store_target["classes"][0], _location(store_target)

    @contextmanager
    def factory(**options: Any) -> Iterator[Any]:
        with cls.from_conn_string(url, **defaults, **options) as store:
            store.setup()
            yield store

    return factory


@pytest.fixture
def open_async_store(store_target: dict[str, Any]) -> Callable[..., Any]:
    """``open_async_store(**options)``: the async twin of ``open_store``."""
    cls, (url, defaults) = store_target["classes"][1], _location(store_target)

    @asynccontextmanager
    async def factory(**options: Any) -> AsyncIterator[Any]:
        async with cls.from_conn_string(url, **defaults, **options) as store:
            await store.setup()
            yield store

    return factory


# -- fault injection ----------------------------------------------------------------------


class MemoryStore(InMemoryStore):
    """``InMemoryStore`` without ``__slots__``, so :class:`Interference` can patch it."""


class Interference:
    """Patches one store *instance* so its calls can fail, hang or meet at a barrier.

    The instance keeps its class (the nodes check ``isinstance`` to know whether a store
    takes conditional writes), only ``batch``/``abatch`` go through here; ``abatch`` runs
    the patched ``batch`` in a thread, like a sync store's async methods do.
    """

    def __init__(self, store: BaseStore) -> None:
        self.store = store
        self.original = store.batch
        self.calls = 0
        self.lock = threading.Lock()
        store.batch = self.batch  # type: ignore[method-assign]
        store.abatch = self.abatch  # type: ignore[method-assign]

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        ops = list(ops)
        with self.lock:
            self.calls += 1
        self.before(ops)
        result = self.original(ops)
        self.after(ops)
        return result

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        return await asyncio.to_thread(self.batch, list(ops))

    def before(self, ops: list[Op]) -> None:
        pass

    def after(self, ops: list[Op]) -> None:
        pass


class Broken(Interference):
    """Every call fails, as with a store whose server is down."""

    def before(self, ops: list[Op]) -> None:
        raise ConnectionError("store is down")


class Hanging(Interference):
    """Every call blocks until ``release()``, as with a store that stopped answering."""

    def __init__(self, store: BaseStore) -> None:
        super().__init__(store)
        self.gate = threading.Event()

    def before(self, ops: list[Op]) -> None:
        self.gate.wait(30)

    def release(self) -> None:
        self.gate.set()


class Racing(Interference):
    """The first ``parties`` reads wait for each other after reading, so every racer has
    read the same version before any of them writes: a lost update unless writes are
    conditional."""

    def __init__(self, store: BaseStore, parties: int = 2) -> None:
        super().__init__(store)
        self.barrier = threading.Barrier(parties, timeout=20)
        self.reads = 0

    def after(self, ops: list[Op]) -> None:
        if not all(isinstance(op, GetOp) for op in ops):
            return
        with self.lock:
            self.reads += 1
            first_round = self.reads <= self.barrier.parties
        if first_round:
            self.barrier.wait()
