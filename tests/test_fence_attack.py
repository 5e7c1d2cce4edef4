"""Adversarial tests of the fence (issue 37): what the first round of tests left out."""

from __future__ import annotations

import asyncio
import contextvars
import gc
import uuid
import weakref
from typing import Any

import pytest
from langgraph.checkpoint.base import empty_checkpoint

from langgraph_memory_plus import FencedWriteError

pytestmark = pytest.mark.storage


def _thread() -> str:
    return f"fence-attack-{uuid.uuid4().hex[:12]}"


def test_fence_async_takes_keep_no_closed_event_loop_alive(saver_factory: Any) -> None:
    """A sync saver called from ``asyncio.run`` per request (``aput_writes`` of a run
    racing its own first take): the lock that serializes the take must not keep every
    event loop it ever served alive."""
    with saver_factory(fence=True) as saver:
        loops: list[weakref.ref[asyncio.AbstractEventLoop]] = []
        for _ in range(3):
            tid = _thread()

            async def main() -> None:
                loops.append(weakref.ref(asyncio.get_running_loop()))
                cfg: Any = {"configurable": {"thread_id": tid, "checkpoint_ns": ""}}
                saved = await saver.aput(
                    {**cfg, "run_id": str(uuid.uuid4())}, empty_checkpoint(), {}, {}
                )
                writes = {**saved, "run_id": str(uuid.uuid4())}  # a new run: a take
                await asyncio.gather(
                    *(saver.aput_writes(writes, [("x", j)], f"task{j}") for j in range(3))
                )

            asyncio.run(main())
        gc.collect()
        # the newest may stay until the next loop comes: a bound, not a leak
        alive = [ref for ref in loops[:-1] if ref() is not None]
        assert not alive, f"{len(alive)} closed event loops kept alive by the saver"


def test_fence_writes_without_a_run_after_a_run_are_not_fenced(saver_factory: Any) -> None:
    """A run's context outlives the run (LangGraph's sync loop reads its checkpoint in the
    caller's context): a later write to a subgraph namespace of that thread that carries
    no owner (``update_state`` outside any run) must not be fenced as that old run's."""
    tid = _thread()
    with saver_factory(fence=True) as saver:

        def scenario() -> None:
            root: Any = {"configurable": {"thread_id": tid, "checkpoint_ns": ""}}
            saver.get_tuple({**root, "run_id": str(uuid.uuid4())})  # the run starts
            saver.put({**root, "run_id": str(uuid.uuid4())}, empty_checkpoint(), {}, {})
            # another worker's run takes the thread over
            saver.fence.acquire(tid, owner="another-worker", force=True)
            # later, outside any run: an owner-less write to a subgraph namespace
            sub: Any = {"configurable": {"thread_id": tid, "checkpoint_ns": "sub:1"}}
            saver.put(sub, empty_checkpoint(), {}, {})

        contextvars.copy_context().run(scenario)


def test_fence_sweep_of_an_expired_thread_removes_its_fence(
    saver_factory: Any, backend: str
) -> None:
    """TTL sweep deletes a thread as ``delete_thread`` does: its fence goes too (it was
    left behind on PostgreSQL, one row per fenced thread forever). Redis needs no sweep:
    its fence key expires by itself (a day after its lease)."""
    import time

    if backend.startswith("redis"):
        pytest.skip("Redis has no sweep: the fence key carries its own expiry")
    tid = _thread()
    with saver_factory(fence=True, ttl={"default_ttl": 0.01}) as saver:  # 0.6 s
        root: Any = {"configurable": {"thread_id": tid, "checkpoint_ns": ""}}
        saver.put({**root, "run_id": str(uuid.uuid4())}, empty_checkpoint(), {}, {})
        assert saver.fence.get(tid) is not None
        time.sleep(0.8)
        assert saver.get_tuple(root) is None
        assert saver.sweep_expired() >= 1
        assert saver.fence.get(tid) is None
