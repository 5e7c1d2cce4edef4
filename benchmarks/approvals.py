"""The reviewers' queue at scale: listing 10,000 pending approvals.

``python -m benchmarks.approvals --pg URL --redis URL [--redis-cluster URL] [--approvals N]``

Each backend gets ``--approvals`` interrupted threads (10,000 by default) spread over
``--users`` users, each written through the real saver API (``put`` of a checkpoint,
then ``put_writes`` of its ``__interrupt__``: a ``HumanInTheLoopMiddleware`` request, as
an agent writes it). Then p50 over ``--reps`` of ``Approvals.list(limit=20)`` (the first
page of the whole queue, oldest first), of the first page of one user's queue, and of
``count`` for one user. Side by side, what LangGraph's own ``InMemorySaver`` offers for
the same question: scanning ``list(None)`` for latest checkpoints with pending
interrupts (seeded alike). Loopback servers only; every backend uses storage of its own.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.store.memory import InMemoryStore
from langgraph.types import Interrupt

from .targets import check_pg_url, check_redis_url
from .threads import _pg_database


def _p50_ms(fn: Callable[[], Any], reps: int) -> float:
    fn()
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def _request(i: int) -> dict[str, Any]:
    return {
        "action_requests": [
            {
                "name": "book_flight",
                "args": {"flight": f"LH{i}", "seat": "12A"},
                "description": "Tool execution requires approval",
            }
        ],
        "review_configs": [
            {"action_name": "book_flight", "allowed_decisions": ["approve", "edit", "reject"]}
        ],
    }


def seed(saver: Any, n: int, users: int) -> None:
    """``n`` interrupted threads, through the saver's own ``put`` and ``put_writes``."""
    for i in range(n):
        config = {
            "configurable": {
                "thread_id": f"bench-{i:06d}",
                "checkpoint_ns": "",
                "user_id": f"user-{i % users}",
            }
        }
        checkpoint = empty_checkpoint()
        saved = saver.put(
            config, checkpoint, {"source": "loop", "step": 1, "user_id": f"user-{i % users}"}, {}
        )
        interrupt = Interrupt(value=_request(i), id=f"{i:032x}")
        saver.put_writes(saved, [("__interrupt__", [interrupt])], f"task-{i}")


def scan_in_memory(saver: InMemorySaver, limit: int) -> list[Any]:
    """The first ``limit`` pending interrupts the only way LangGraph offers: every
    thread's latest checkpoint and its pending writes."""
    seen: set[str] = set()
    found = []
    for item in saver.list(None):
        thread = item.config["configurable"]["thread_id"]
        if thread in seen:
            continue
        seen.add(thread)
        found += [v for _, ch, v in item.pending_writes or [] if ch == "__interrupt__"]
    return found[:limit]


def measure(name: str, saver: Any, store: Any, args: argparse.Namespace) -> dict[str, Any]:
    from langgraph_memory_plus.approvals import Approvals

    start = time.perf_counter()
    seed(saver, args.approvals, args.users)
    seeded = time.perf_counter() - start
    if name == "postgres":  # the statistics autovacuum keeps in a running deployment
        with saver.conn.connection() as conn:
            conn.execute("ANALYZE")
    queue = Approvals(saver, store)
    first = queue.list(limit=20)
    assert len(first) == 20 and first[0].action == "book_flight", first[:1]
    assert queue.count(user_id="user-0") == len(range(0, args.approvals, args.users))
    return {
        "backend": name,
        "seed_s": seeded,
        "first_page_ms": _p50_ms(lambda: queue.list(limit=20), args.reps),
        "user_page_ms": _p50_ms(lambda: queue.list(user_id="user-1", limit=20), args.reps),
        "user_count_ms": _p50_ms(lambda: queue.count(user_id="user-1"), args.reps),
    }


def _delete_keys(url: str, prefix: str) -> None:
    """No keys left on a shared server: the run's own, found by ``SCAN`` (every node of a
    cluster), deleted one key per command in pipelines (a cluster pipeline routes each)."""
    import redis
    from redis.cluster import RedisCluster

    match = f"{prefix}:*"
    if url.startswith("redis+cluster://"):
        client: Any = RedisCluster.from_url(url.replace("redis+cluster://", "redis://", 1))
        keys = client.scan_iter(match=match, count=1000, target_nodes=RedisCluster.PRIMARIES)
    else:
        client = redis.Redis.from_url(url)
        keys = client.scan_iter(match=match, count=1000)
    with client:
        pipe = client.pipeline(transaction=False)
        for n, key in enumerate(list(keys), 1):
            pipe.delete(key)
            if n % 500 == 0:
                pipe.execute()
        pipe.execute()


@contextmanager
def backends(args: argparse.Namespace) -> Iterator[list[tuple[str, Any, Any]]]:
    from contextlib import ExitStack

    from langgraph_memory_plus import PostgresSaver, RedisSaver, SqliteSaver

    with ExitStack() as stack:
        out = []
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        if not args.no_sqlite:
            sqlite = stack.enter_context(SqliteSaver.from_conn_string(str(tmp / "a.db")))
            sqlite.setup()
            out.append(("sqlite", sqlite, InMemoryStore()))
        if args.pg:
            check_pg_url(args.pg)
            url = stack.enter_context(_pg_database(args.pg))
            pg = stack.enter_context(PostgresSaver.from_conn_string(url))
            pg.setup()
            out.append(("postgres", pg, InMemoryStore()))
        for label, url in (("redis", args.redis), ("redis-cluster", args.redis_cluster)):
            if url:
                check_redis_url(url.replace("redis+cluster://", "redis://", 1))
                prefix = f"bench-appr-{uuid.uuid4().hex[:8]}"
                stack.callback(_delete_keys, url, prefix)  # runs after the saver is closed
                saver = stack.enter_context(RedisSaver.from_conn_string(url, key_prefix=prefix))
                saver.setup()
                out.append((label, saver, InMemoryStore()))
        yield out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pg")
    parser.add_argument("--redis")
    parser.add_argument("--redis-cluster")
    parser.add_argument("--no-sqlite", action="store_true", help="skip the SQLite run")
    parser.add_argument("--approvals", type=int, default=10_000)
    parser.add_argument("--users", type=int, default=100)
    parser.add_argument("--reps", type=int, default=30)
    args = parser.parse_args()
    rows = []
    memory = InMemorySaver()
    seed(memory, args.approvals, args.users)
    baseline = _p50_ms(lambda: scan_in_memory(memory, 20), max(3, args.reps // 5))
    with backends(args) as chosen:
        for name, saver, store in chosen:
            rows.append(measure(name, saver, store, args))
            print(rows[-1], flush=True)
    print(f"\n{args.approvals} pending approvals, {args.users} users, p50 of {args.reps}\n")
    print(
        "| backend | first page (20) | one user's first page | one user's count | "
        "vs InMemorySaver scan | seeding |"
    )
    print("|---|---|---|---|---|---|")
    print(f"| InMemorySaver list(None) scan | {baseline:.2f} ms | | | 1.00x | |")
    for r in rows:
        print(
            f"| {r['backend']} | {r['first_page_ms']:.2f} ms | {r['user_page_ms']:.2f} ms | "
            f"{r['user_count_ms']:.2f} ms | {r['first_page_ms'] / baseline:.3f}x | "
            f"{r['seed_s']:.1f} s |"
        )


if __name__ == "__main__":
    main()
