"""How fast any saver could make the chat graph at concurrency 8 on this machine::

    python -m benchmarks.floor [--pg URL] [--redis URL] [--threads 200] [--rounds 3]

The throughput section compares savers with each other and with the ceiling
(``InMemorySaver``: the LangGraph runtime alone). This measures the parts that bound any
saver that stores over a network from one Python process, in one run:

1. the runtime's client CPU per turn (``InMemorySaver`` through ``ainvoke``, concurrency 8);
2. how many saver calls LangGraph makes per turn of the chat graph (counted);
3. the client CPU of the cheapest call possible at concurrency 8: a bare round trip
   (``SELECT 1`` through psycopg's async pool, ``PING`` through redis-py's asyncio client);
4. the official async PostgreSQL saver's turns/s at concurrency 8, and ours (async
   PostgreSQL and Redis): client CPU per turn and turns/s.

The bound is the turns/s of a saver whose every call cost only a bare round trip and no
encoding at all: ``1 / (runtime + calls x round trip)``, also as a share of the ceiling
(``of ceiling``: what issue 22's goals at concurrency 8 are stated in). The process is
CPU-bound at concurrency 8 (one event loop under the GIL), so client CPU per turn sets the
rate: ``storage cpu ms/turn`` is a saver's CPU per turn beyond the runtime's.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import redis.asyncio
from langgraph.checkpoint.memory import InMemorySaver
from psycopg_pool import AsyncConnectionPool

from . import targets as tg
from . import workloads as wl

CONCURRENCY = 8
TURNS_PER_THREAD = 5
OURS = {"pg": tg.OURS_PG_ASYNC, "redis": tg.OURS_REDIS_ASYNC}


class CountingSaver(InMemorySaver):
    """``InMemorySaver`` that counts the calls LangGraph makes."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: Counter[str] = Counter()

    async def aget_tuple(self, config: Any) -> Any:
        self.calls["get_tuple"] += 1
        return await super().aget_tuple(config)

    async def aput(self, *args: Any, **kwargs: Any) -> Any:
        self.calls["put"] += 1
        return await super().aput(*args, **kwargs)

    async def aput_writes(self, *args: Any, **kwargs: Any) -> Any:
        self.calls["put_writes"] += 1
        return await super().aput_writes(*args, **kwargs)


def calls_per_turn() -> dict[str, float]:
    """Saver calls per turn of the chat graph, on fresh 5-turn threads."""
    saver = CountingSaver()
    graph = wl.chat_graph().compile(checkpointer=saver)

    async def run() -> None:
        for thread in range(4):
            config = {"configurable": {"thread_id": f"count-{thread}"}}
            for turn in range(1, TURNS_PER_THREAD + 1):
                await graph.ainvoke({"messages": [wl.user_message(turn)]}, config)

    asyncio.run(run())
    turns = 4 * TURNS_PER_THREAD
    return {name: n / turns for name, n in sorted(saver.calls.items())}


def turn_cpu(target: tg.Target, env: tg.Env, threads: int) -> tuple[float, float]:
    """(client CPU ms per turn, turns/s) of ``target`` at concurrency 8."""
    with tg.open_session(target, env, pool_size=CONCURRENCY) as session:
        wl.throughput(session, CONCURRENCY, TURNS_PER_THREAD, CONCURRENCY, time.perf_counter() + 60)
        session.marker += "m"  # the measured threads are new ones
        cpu = time.process_time()
        metrics, _ = wl.throughput(
            session, threads, TURNS_PER_THREAD, CONCURRENCY, time.perf_counter() + 600
        )
        cpu = time.process_time() - cpu
    turns = threads * TURNS_PER_THREAD
    return cpu / turns * 1000.0, metrics[(f"turns/s @c={CONCURRENCY}", "turns/s")]


async def _call_cpu(call: Callable[[], Awaitable[Any]], calls: int) -> float:
    """Client CPU in microseconds per ``call``, ``CONCURRENCY`` of them in flight."""

    async def worker(n: int) -> None:
        for _ in range(n):
            await call()

    await asyncio.gather(*(worker(20) for _ in range(CONCURRENCY)))  # warm up
    cpu = time.process_time()
    await asyncio.gather(*(worker(calls // CONCURRENCY) for _ in range(CONCURRENCY)))
    return (time.process_time() - cpu) / calls * 1e6


async def bare_pg(url: str, calls: int) -> float:
    async with AsyncConnectionPool(
        url, min_size=CONCURRENCY, max_size=CONCURRENCY, kwargs={"autocommit": True}
    ) as pool:

        async def select_1() -> None:
            async with pool.connection() as conn:
                await (await conn.execute("SELECT 1")).fetchall()

        return await _call_cpu(select_1, calls)


async def bare_redis(url: str, calls: int) -> float:
    client = redis.asyncio.Redis.from_url(url, max_connections=CONCURRENCY)
    try:
        return await _call_cpu(client.ping, calls)
    finally:
        await client.aclose()


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks.floor", description=__doc__)
    p.add_argument("--pg", default="postgresql://postgres@127.0.0.1:5432/test")
    p.add_argument("--redis", default="redis://127.0.0.1:6379/0")
    p.add_argument("--threads", type=int, default=200, help="5-turn threads per measurement")
    p.add_argument("--rounds", type=int, default=3, help="medians over this many rounds")
    p.add_argument("--calls", type=int, default=4000, help="bare round trips per measurement")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> dict[str, float]:
    args = parse_args(argv)
    tg.check_pg_url(args.pg)
    tg.check_redis_url(args.redis)
    env = tg.Env(pg=args.pg, redis=args.redis)
    per_turn = calls_per_turn()
    calls = sum(per_turn.values())
    samples: dict[str, list[float]] = {}
    for _ in range(args.rounds):
        runtime_cpu, ceiling = turn_cpu(tg.MEMORY_SAVER.on_event_loop(), env, args.threads)
        official_cpu, official = turn_cpu(tg.OFF_PG_ASYNC, env, args.threads)
        ours = {name: turn_cpu(target, env, args.threads) for name, target in OURS.items()}
        for name, value in {
            "runtime cpu ms/turn": runtime_cpu,
            "ceiling turns/s": ceiling,
            "official cpu ms/turn": official_cpu,
            "official turns/s": official,
            "bare pg us/call": asyncio.run(bare_pg(args.pg, args.calls)),
            "bare redis us/call": asyncio.run(bare_redis(args.redis, args.calls)),
            **{f"ours {name} cpu ms/turn": cpu for name, (cpu, _) in ours.items()},
            **{f"ours {name} turns/s": rate for name, (_, rate) in ours.items()},
        }.items():
            samples.setdefault(name, []).append(value)
    out = {name: statistics.median(values) for name, values in samples.items()}
    out["calls/turn"] = calls
    for backend in ("pg", "redis"):
        floor_ms = out["runtime cpu ms/turn"] + calls * out[f"bare {backend} us/call"] / 1000.0
        bound = out[f"bound {backend} turns/s"] = 1000.0 / floor_ms
        out[f"bound {backend} vs official"] = bound / out["official turns/s"]
        out[f"bound {backend} of ceiling"] = bound / out["ceiling turns/s"]
    out["ceiling vs official"] = out["ceiling turns/s"] / out["official turns/s"]
    for name in ("official", *(f"ours {n}" for n in OURS)):
        out[f"{name} of ceiling"] = out[f"{name} turns/s"] / out["ceiling turns/s"]
        out[f"{name} storage cpu ms/turn"] = out[f"{name} cpu ms/turn"] - out["runtime cpu ms/turn"]
    print(f"saver calls per turn: {per_turn} (sum {calls:g})")
    for name, value in out.items():
        print(f"{name:28s} {value:10.2f}")
    return out


if __name__ == "__main__":
    main()
