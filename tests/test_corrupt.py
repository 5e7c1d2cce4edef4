"""Damaged stored data raises ``CorruptDataError`` naming where it lives, on every backend.

Rows and keys are corrupted directly in the storage (an UPDATE of the bytea/BLOB columns,
an HSET of every field of the thread's Redis hashes), then read through the saver: the
error names the thread id (and where known the namespace, checkpoint id and channel) and
carries the decoder's own error as its cause. A later write and read of another thread
still work: nothing hangs and nothing half-decoded is handed out.
"""

from __future__ import annotations

import sqlite3
from typing import Any

import ormsgpack
import psycopg
import pytest
from backends import BACKENDS
from backends_support import Space, open_async, open_sync, space_for
from langgraph.checkpoint.base import empty_checkpoint

from langgraph_memory_plus.errors import CorruptDataError

GARBAGE = b"\xc1\x00not-a-value"


def put_thread(saver: Any, thread_id: str) -> dict[str, Any]:
    cp = empty_checkpoint()
    cp["channel_values"] = {"messages": ["hello", "world"], "count": 3}
    cp["channel_versions"] = {"messages": 1, "count": 1}
    config = saver.put(
        {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}},
        cp,
        {"source": "input", "step": -1, "parents": {}},
        {"messages": 1, "count": 1},
    )
    saver.put_writes(config, [("count", 4)], "task-1")
    return config


def corrupt(space: Space, saver: Any, thread_id: str) -> None:
    if space.backend in ("redis", "redis-cluster"):
        client = saver.client
        for key in saver._plans.keys(thread_id):
            if client.type(key) == b"hash":
                for field, value in client.hgetall(key).items():
                    try:  # only the serialized values, not the scripts' bookkeeping
                        shaped = isinstance(ormsgpack.unpackb(value), list)
                    except ormsgpack.MsgpackDecodeError:
                        shaped = False
                    if shaped:
                        client.hset(key, field, GARBAGE)
    elif space.backend == "postgres":
        with psycopg.connect(space.url, autocommit=True) as conn:
            schema = space.options["schema"]
            for table, column in (("lgmp_checkpoints", "checkpoint"), ("lgmp_blobs", "blob")):
                conn.execute(
                    f'UPDATE "{schema}".{table} SET {column} = %s WHERE {column} IS NOT NULL',
                    (GARBAGE,),
                )
    else:
        with sqlite3.connect(space.url) as conn:
            for table, column in (("lgmp_checkpoints", "checkpoint"), ("lgmp_blobs", "blob")):
                conn.execute(
                    f"UPDATE {table} SET {column} = ? WHERE {column} IS NOT NULL", (GARBAGE,)
                )


@pytest.mark.parametrize("backend", list(BACKENDS))
def test_a_corrupt_checkpoint_names_where_it_is(
    backend: str, request: pytest.FixtureRequest
) -> None:
    space = space_for(backend, request)
    with open_sync(space, "saver") as saver:
        config = put_thread(saver, "damaged")
        corrupt(space, saver, "damaged")
    with open_sync(space, "saver") as saver:  # a fresh saver: nothing remembered
        for read in (
            lambda: saver.get_tuple({"configurable": {"thread_id": "damaged"}}),
            lambda: saver.get_tuple(config),
            lambda: list(saver.list({"configurable": {"thread_id": "damaged"}})),
        ):
            with pytest.raises(CorruptDataError, match="thread_id='damaged'") as info:
                read()
            assert info.value.__cause__ is not None
            assert "checkpoint" in str(info.value) or "channel" in str(info.value)
        put_thread(saver, "after")  # the saver still works
        after = saver.get_tuple({"configurable": {"thread_id": "after"}})
        assert after.checkpoint["channel_values"]["count"] == 3


@pytest.mark.parametrize("backend", list(BACKENDS))
async def test_a_corrupt_checkpoint_async(backend: str, request: pytest.FixtureRequest) -> None:
    space = space_for(backend, request)
    with open_sync(space, "saver") as saver:
        put_thread(saver, "damaged")
        corrupt(space, saver, "damaged")
    async with open_async(space, "saver") as asaver:
        with pytest.raises(CorruptDataError, match="thread_id='damaged'"):
            await asaver.aget_tuple({"configurable": {"thread_id": "damaged"}})


class _Tagged:
    """A serde that writes its own type tags, as an encrypting serde does."""

    def __init__(self) -> None:
        from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

        self.inner = JsonPlusSerializer()

    def dumps_typed(self, obj: Any) -> tuple[str, bytes]:
        typ, data = self.inner.dumps_typed(obj)
        return f"{typ}+sealed", data

    def loads_typed(self, data: tuple[str, bytes]) -> Any:
        typ, raw = data
        return self.inner.loads_typed((typ.removesuffix("+sealed"), raw))


@pytest.mark.parametrize("backend", list(BACKENDS))
def test_a_checkpoint_of_another_serde_names_where_it_is(
    backend: str, request: pytest.FixtureRequest
) -> None:
    """Read with a serde that does not know the stored type (an encrypting serde's data read
    without it): CorruptDataError naming the thread, not the serde's NotImplementedError."""
    space = space_for(backend, request)
    with open_sync(space, "saver", serde=_Tagged()) as saver:
        put_thread(saver, "sealed")
    with open_sync(space, "saver") as saver:
        for read in (
            lambda: saver.get_tuple({"configurable": {"thread_id": "sealed"}}),
            lambda: list(saver.list({"configurable": {"thread_id": "sealed"}})),
        ):
            with pytest.raises(CorruptDataError, match="thread_id='sealed'") as info:
                read()
            assert isinstance(info.value.__cause__, NotImplementedError)


def test_a_corrupt_sqlite_store_item_names_its_namespace_and_key(
    request: pytest.FixtureRequest,
) -> None:
    space = space_for("sqlite", request)
    with open_sync(space, "store") as store:
        store.put(("users", "u1"), "fact", {"text": "likes trains"})
        store.put(("users", "u2"), "fact", {"text": "fine"})
    with sqlite3.connect(space.url) as conn:
        conn.execute("UPDATE lgmp_store SET value = '{\"text\": ' WHERE prefix LIKE '%u1%'")
    with open_sync(space, "store") as store:
        with pytest.raises(CorruptDataError, match=r"namespace=.*'u1'.*key='fact'") as info:
            store.get(("users", "u1"), "fact")
        assert info.value.__cause__ is not None
        with pytest.raises(CorruptDataError, match="search"):
            store.search(("users",))
        assert store.get(("users", "u2"), "fact").value == {"text": "fine"}
