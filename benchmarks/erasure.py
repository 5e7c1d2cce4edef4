"""How long ``erase_user`` takes for a user with many long threads, on each backend.

``python -m benchmarks.erasure --pg URL --redis URL [--redis-cluster URL] [--threads 1000]
[--turns 50] [--batch-size 100]``

Seeding: one thread of ``--turns`` chat turns is run through a real one-node graph
(``add_messages``, ``transcripts=True``), then copied ``--threads - 1`` times with the
saver's own ``copy_thread`` (the copies are what the saver writes: every checkpoint,
blob, list item and index record; the user id comes with the metadata). Transcript
lines are not copied by ``copy_thread``, so only the first thread has a transcript.
Three store items (profile, memory, draft) complete the user. A second user of the same
shape but one thread stays, so the erasure works among other data.

Measured: the wall time of one ``erase_user`` (``--batch-size`` threads per index page),
then of a second call (nothing left: the cost of checking). Loopback servers only; each
backend uses storage of its own (a fresh database, a key prefix, a temporary file).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated, Any

import psycopg
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langgraph.graph import END, START, StateGraph, add_messages
from typing_extensions import TypedDict

from langgraph_memory_plus import from_url
from langgraph_memory_plus.privacy.erasure import erase_user

from .targets import check_pg_url, check_redis_url


class State(TypedDict, total=False):
    messages: Annotated[list[AnyMessage], add_messages]


def _graph() -> Any:
    def chat(state: State) -> dict[str, Any]:
        last = state["messages"][-1]
        return {"messages": [AIMessage(f"answer to {last.content}", id=f"ai-{last.id}")]}

    builder = StateGraph(State)
    builder.add_node("chat", chat)
    builder.add_edge(START, "chat")
    builder.add_edge("chat", END)
    return builder


@contextmanager
def _pg_database(url: str) -> Iterator[str]:
    name = f"lgmp_bench_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield f"{url.rsplit('/', 1)[0]}/{name}"
    finally:
        with psycopg.connect(url, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _seed(memory: Any, user: str, threads: int, turns: int) -> float:
    started = time.perf_counter()
    app = _graph().compile(checkpointer=memory.checkpointer, store=memory.store)
    first = f"{user}-0"
    config = {"configurable": {"thread_id": first, "user_id": user}}
    for turn in range(turns):
        text = f"turn {turn} of {user}: " + "words " * 20
        app.invoke({"messages": [HumanMessage(text, id=f"h-{turn}")]}, config)
    for i in range(1, threads):
        memory.checkpointer.copy_thread(first, f"{user}-{i}")
    for ns, key in (((), "profile"), (("memories",), "m1"), (("pending_tasks",), "d1")):
        memory.store.put(("users", user, *ns), key, {"text": f"{key} of {user}"})
    return time.perf_counter() - started


def _measure(name: str, url: str, options: dict[str, Any], args: argparse.Namespace) -> str:
    with from_url(url, transcripts=True, **options) as memory:
        seeded = _seed(memory, "bench-user", args.threads, args.turns)
        _seed(memory, "other-user", 1, args.turns)
        checkpoints = memory.checkpointer.threads.get("bench-user-0")["size"]["checkpoints"]
        started = time.perf_counter()
        report = erase_user("bench-user", memory=memory, batch_size=args.batch_size)
        erase_s = time.perf_counter() - started
        started = time.perf_counter()
        again = erase_user("bench-user", memory=memory, batch_size=args.batch_size)
        again_s = time.perf_counter() - started
        assert report.counts["threads"] == args.threads and again.counts["threads"] == 0
        assert memory.checkpointer.threads.count(metadata={"user_id": "other-user"}) == 1
        erase_user("other-user", memory=memory)  # leaves no key behind on a shared Redis
    per_thread_ms = erase_s / args.threads * 1000
    return (
        f"| {name} | {args.threads} | {checkpoints} | {report.counts['checkpoints']} "
        f"| {report.counts['transcript_messages']} | {erase_s:.2f} | {per_thread_ms:.2f} "
        f"| {again_s * 1000:.1f} | {seeded:.1f} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pg", help="PostgreSQL admin URL (a database is created)")
    parser.add_argument("--redis", help="Redis URL")
    parser.add_argument("--redis-cluster", help="redis+cluster:// URL")
    parser.add_argument("--no-sqlite", action="store_true")
    parser.add_argument("--threads", type=int, default=1000)
    parser.add_argument("--turns", type=int, default=50)
    parser.add_argument("--batch-size", type=int, default=100)
    args = parser.parse_args()
    rows = [
        "| backend | threads | checkpoints per thread | checkpoints erased "
        "| transcript lines erased | erase (s) | per thread (ms) | second call (ms) "
        "| seeding (s) |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    if args.pg:
        check_pg_url(args.pg)
        with _pg_database(args.pg) as url:
            rows.append(_measure("PostgreSQL", url, {}, args))
    for name, url in (("Redis", args.redis), ("Redis Cluster", args.redis_cluster)):
        if url:
            check_redis_url(url.replace("redis+cluster://", "redis://", 1))  # loopback only
            prefix = f"lgmp-bench-erase-{uuid.uuid4().hex[:8]}"
            rows.append(_measure(name, url, {"key_prefix": prefix}, args))
    if not args.no_sqlite:
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "bench.db")
            rows.append(_measure("SQLite", f"sqlite:///{path}", {}, args))
    print("\n".join(rows))


if __name__ == "__main__":
    main()
