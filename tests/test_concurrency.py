"""500 concurrent async calls on one saver and on one store, on every backend.

Mixed reads and writes on many threads (namespaces) at once, through one client or pool:
every call succeeds and every answer is the one a sequential run would give. On Redis
200 reads start at once, more than the pool has connections (redis-py's own pool raised
``MaxConnectionsError`` past 100), so callers must wait for a free connection; on a
cluster a fresh asyncio client must be initialized before its first concurrent commands.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from backends import BACKENDS
from backends_support import open_async, space_for
from langgraph.checkpoint.base import empty_checkpoint

CALLS = 500
THREADS = 50


def checkpoint(n: int) -> Any:
    cp = empty_checkpoint()
    cp["id"] = f"1ef00000-0000-6000-8000-{n:012d}"
    cp["channel_values"] = {"n": n}
    cp["channel_versions"] = {"n": n + 1}
    return cp


@pytest.mark.parametrize("backend", list(BACKENDS))
async def test_500_concurrent_saver_calls(backend: str, request: pytest.FixtureRequest) -> None:
    space = space_for(backend, request)
    async with open_async(space, "saver") as writer:  # so the tested saver remembers nothing
        first = [
            await writer.aput(
                {"configurable": {"thread_id": f"t{t}", "checkpoint_ns": ""}},
                checkpoint(0),
                {"source": "input", "step": -1, "parents": {}},
                {"n": 1},
            )
            for t in range(THREADS)
        ]
    async with open_async(space, "saver") as saver:

        async def call(i: int) -> tuple[str, Any]:
            t = i % THREADS
            config = first[t]
            kind = ("put", "get", "list", "writes", "get")[i % 5]
            if kind == "put":
                new = await saver.aput(
                    config,
                    checkpoint(i),
                    {"source": "loop", "step": i, "parents": {}},
                    {"n": i + 1},
                )
                return kind, (t, new["configurable"]["checkpoint_id"])
            if kind == "get":
                found = await saver.aget_tuple({"configurable": {"thread_id": f"t{t}"}})
                return kind, (t, found.checkpoint["channel_values"]["n"])
            if kind == "list":
                listed = [c async for c in saver.alist(config)]
                return kind, (t, [c.checkpoint["id"] for c in listed])
            await saver.aput_writes(config, [("n", i)], f"task-{i}")
            return kind, (t, i)

        results = await asyncio.gather(*(call(i) for i in range(CALLS)))
        for kind, (t, answer) in results:
            if kind == "get":  # the latest checkpoint: the first one, or one put meanwhile
                assert answer == 0 or (answer % THREADS == t and answer % 5 == 0)
            elif kind == "list":
                assert answer == [checkpoint(0)["id"]]  # alist(config) with an id: that one
        put_ids = {(t, cid) for kind, (t, cid) in results if kind == "put"}
        for t in range(THREADS):
            listed = [c async for c in saver.alist({"configurable": {"thread_id": f"t{t}"}})]
            expected = {cid for tt, cid in put_ids if tt == t} | {checkpoint(0)["id"]}
            assert {c.checkpoint["id"] for c in listed} == expected
            latest = await saver.aget_tuple({"configurable": {"thread_id": f"t{t}"}})
            assert latest.checkpoint["id"] == max(expected)
            tasks = {
                value
                for _, channel, value in (await saver.aget_tuple(first[t])).pending_writes
                if channel == "n"
            }
            assert tasks == {i for i in range(CALLS) if i % THREADS == t and i % 5 == 3}


@pytest.mark.parametrize("backend", list(BACKENDS))
async def test_500_concurrent_store_calls(backend: str, request: pytest.FixtureRequest) -> None:
    space = space_for(backend, request)
    async with open_async(space, "store") as writer:
        for t in range(THREADS):
            await writer.aput(("users", f"u{t}"), "base", {"n": -1})
    async with open_async(space, "store") as store:

        async def call(i: int) -> tuple[str, int, Any]:
            t = i % THREADS
            kind = ("put", "get", "search", "get")[i % 4]
            if kind == "put":
                await store.aput(("users", f"u{t}"), f"k{i}", {"n": i})
                return kind, t, None
            if kind == "get":
                item = await store.aget(("users", f"u{t}"), "base")
                return kind, t, item.value
            found = await store.asearch(("users", f"u{t}"), filter={"n": -1})
            return kind, t, [(it.key, it.value) for it in found]

        results = await asyncio.gather(*(call(i) for i in range(CALLS)))
        for kind, _, answer in results:
            if kind == "get":
                assert answer == {"n": -1}
            elif kind == "search":
                assert answer == [("base", {"n": -1})]
        for t in range(THREADS):
            found = await store.asearch(("users", f"u{t}"), limit=100)
            expected = {f"k{i}": {"n": i} for i in range(CALLS) if i % THREADS == t and i % 4 == 0}
            assert {it.key: it.value for it in found} == {**expected, "base": {"n": -1}}
