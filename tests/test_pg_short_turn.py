"""What issue 39's short-turn work on PostgreSQL changed, held to the behaviour before it.

- A codec remembers small scalars serialized (``CheckpointCodec._inline_memo``): every put
  stores every one of them, changed or not. Equal is not the same value (``True == 1 ==
  1.0``, ``-0.0 == 0.0``): each must come back as it was put, past the memo's size, and a
  saver given a new ``serde`` must serialize with it, not from the old codec's memo.
- A root put's metadata goes to the checkpoint and to the thread index's row as one
  parameter (``m_json``); a subgraph's put leaves the row's metadata alone.
- The fast write statement returns only the two flags the fast path reads; the locked
  path (a deleted or expired thread) reads its own, longer row.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from test_postgres_saver import cfg, flavour, make_checkpoint, open_mode, schema

from langgraph_memory_plus.checkpoint import codec as codec_module

pytestmark = pytest.mark.storage
__all__ = ["flavour", "schema"]

MODES = pytest.mark.parametrize("mode", ["sync-pool", "async-pool", "sync-conn-pipeline"])

# Pairs of equal values of which each must come back as itself.
LOOKALIKES: list[Any] = [True, 1, 1.0, -0.0, 0.0, 0, False, None, "1", "", 1, True, -0.0]


def _same(got: Any, want: Any) -> bool:
    if type(got) is not type(want) or got != want:
        return False
    return not isinstance(want, float) or math.copysign(1, got) == math.copysign(1, want)


async def _put_values(ops: Any, thread_id: str, values: list[Any]) -> list[Any]:
    """Each value put as the channel ``flag`` of a new checkpoint (with a counter that
    does not change: inlined at every put); what each latest read returned."""
    config = cfg(thread_id)
    seen = []
    for n, value in enumerate(values, start=1):
        ck = make_checkpoint({"flag": value, "same": 7}, {"flag": n, "same": 1})
        config = await ops.put(config, ck, {"source": "loop", "step": n}, {"flag": n})
        found = await ops.get_tuple(cfg(thread_id))
        assert found is not None
        assert found.checkpoint["channel_values"]["same"] == 7
        seen.append(found.checkpoint["channel_values"]["flag"])
    return seen


@MODES
async def test_equal_scalars_of_other_types_come_back_as_put(
    mode: str, pg_url: str, schema: str
) -> None:
    async with open_mode(mode, pg_url, schema) as ops:
        seen = await _put_values(ops, "t-lookalikes", LOOKALIKES)
    for got, want in zip(seen, LOOKALIKES, strict=True):
        assert _same(got, want), (got, want)


async def test_scalars_past_the_memo_size_come_back_as_put(
    pg_url: str, schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(codec_module, "INLINE_MEMO_SIZE", 3)
    values = [*range(8), *LOOKALIKES, *range(8)]
    async with open_mode("sync-pool", pg_url, schema) as ops:
        seen = await _put_values(ops, "t-overflow", values)
        assert len(ops.saver._codec._inline_memo) <= 3
    assert all(_same(got, want) for got, want in zip(seen, values, strict=True))


class _Tagging(JsonPlusSerializer):
    """Serializes strings with a mark of its own, to tell which serializer did it."""

    def dumps_typed(self, obj: Any) -> tuple[str, bytes]:
        if isinstance(obj, str):
            return "tagged", obj.encode()
        return super().dumps_typed(obj)

    def loads_typed(self, data: tuple[str, bytes]) -> Any:
        if data[0] == "tagged":
            return "tagged:" + data[1].decode()
        return super().loads_typed(data)


async def test_a_new_serde_serializes_scalars_the_old_codec_remembered(
    pg_url: str, schema: str
) -> None:
    async with open_mode("sync-pool", pg_url, schema) as ops:
        assert await _put_values(ops, "t-serde", ["hi", "hi"]) == ["hi", "hi"]
        ops.saver.serde = _Tagging()
        latest = await ops.get_tuple(cfg("t-serde"))
        assert latest is not None
        config = latest.config
        ck = make_checkpoint({"flag": "hi", "same": "hi"}, {"flag": 9, "same": 1})
        await ops.put(config, ck, {"source": "loop", "step": 9}, {"flag": 9})
        found = await ops.get_tuple(cfg("t-serde"))
    assert found.checkpoint["channel_values"] == {"flag": "tagged:hi", "same": "tagged:hi"}


@MODES
async def test_the_index_row_takes_root_metadata_and_keeps_it_past_a_subgraph(
    mode: str, pg_url: str, schema: str
) -> None:
    async with open_mode(mode, pg_url, schema) as ops:
        threads = ops.saver.threads

        async def record(thread_id: str) -> dict[str, Any]:
            found = await threads.aget(thread_id) if ops.is_async else threads.get(thread_id)
            assert found is not None
            return found

        # a thread whose first write is a subgraph's: a row without metadata
        await ops.put(cfg("t-sub", "child:1"), make_checkpoint({"x": 1}), {"x": "sub"}, {"x": 1})
        assert (await record("t-sub"))["metadata"] == {}
        root = {"user_id": "u1", "source": "loop", "step": 1, "nested": {"a": [1, "b"]}}
        config = await ops.put(cfg("t-root"), make_checkpoint({"x": 1}), root, {"x": 1})
        assert (await record("t-root"))["metadata"] == root
        await ops.put(cfg("t-root", "child:1"), make_checkpoint({"x": 2}), {"step": 5}, {"x": 2})
        assert (await record("t-root"))["metadata"] == root
        stored = await ops.get_tuple(config)
        assert stored is not None and stored.metadata == root


@MODES
async def test_writes_to_a_deleted_thread_take_the_locked_path_and_are_refused(
    mode: str, pg_url: str, schema: str
) -> None:
    """The fast statement declines (its two flags); the locked one reports the
    tombstone from its longer row: a late put of the old history stores nothing, a
    fresh start on the thread id does."""
    async with open_mode(mode, pg_url, schema) as ops:
        first = await ops.put(cfg("t-del"), make_checkpoint({"x": 1}), {"step": 1}, {"x": 1})
        await ops.delete_thread("t-del")
        await ops.put(first, make_checkpoint({"x": 2}, {"x": 2}), {"step": 2}, {"x": 2})
        await ops.put_writes(first, [("x", 3)], "task-late")
        assert await ops.get_tuple(cfg("t-del")) is None
        again = await ops.put(cfg("t-del"), make_checkpoint({"x": 9}), {"step": 1}, {"x": 1})
        await ops.put_writes(again, [("x", 10)], "task-1")
        # the task's second call: its new index is added, the stored one kept
        await ops.put_writes(again, [("x", 12), ("y", 11)], "task-1")
        found = await ops.get_tuple(cfg("t-del"))
    assert found is not None and found.checkpoint["channel_values"] == {"x": 9}
    assert sorted(w[1:] for w in found.pending_writes or []) == [("x", 10), ("y", 11)]
