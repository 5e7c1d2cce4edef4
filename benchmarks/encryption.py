"""What encryption at rest costs: a chat turn's time and CPU, store calls, and footprint.

``python -m benchmarks.encryption --pg URL --redis URL [--redis-cluster URL] [--threads 4]
[--turns 40] [--rounds 3] [--items 200]``

Per backend, two memories on storage of their own, the same code: without encryption and
with ``Encryption`` (AES-256-GCM). A turn is ``graph.invoke`` of one human message on a
chat graph whose node answers with one AI message (``transcripts=True``, the thread
index on, as in production), so each turn stores a checkpoint, its writes, the new list
items, the index title and two transcript lines. Rounds alternate the two memories (in
reversed order every other round) so load on the machine hits them alike; round 0 warms
up and is not counted. Reported per backend: turn p50 (wall) and CPU per turn (this
process: encryption runs here, not in the database), store put / get / search p50 (a
search with a filter: with encryption the filter applies after decryption), and the
footprint after the run (SQLite: file pages; PostgreSQL: database size; Redis: the
``MEMORY USAGE`` of every key).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Annotated, Any

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langgraph.graph import END, START, StateGraph, add_messages
from typing_extensions import TypedDict

from langgraph_memory_plus import from_url
from langgraph_memory_plus.encryption import Encryption

from .erasure import _pg_database
from .targets import check_pg_url, check_redis_url

TEXT = (
    "Could you move my Thursday flight to the morning and keep the aisle seat? "
    "My booking reference is in the last email; the card ending 4242 is fine."
)


class State(TypedDict, total=False):
    messages: Annotated[list[AnyMessage], add_messages]


def _graph() -> Any:
    def answer(state: State) -> dict[str, Any]:
        n = len(state["messages"])
        return {"messages": [AIMessage(f"Done, turn {n}: {TEXT[::-1]}", id=f"ai-{n}")]}

    builder = StateGraph(State)
    builder.add_node("answer", answer)
    builder.add_edge(START, "answer")
    builder.add_edge("answer", END)
    return builder.compile


@contextmanager
def _memory(name: str, url: str, stack: ExitStack, encrypted: bool) -> Iterator[Any]:
    """A memory on storage of its own; yields (memory, footprint function)."""
    options: dict[str, Any] = {"transcripts": True}
    options["encryption"] = Encryption({"k1": os.urandom(32)}) if encrypted else None
    if name == "PostgreSQL":
        db = stack.enter_context(_pg_database(url))
        memory = stack.enter_context(from_url(db, **options))

        def size() -> int:
            import psycopg

            with psycopg.connect(db) as conn:
                row = conn.execute("SELECT pg_database_size(current_database())").fetchone()
                return int(row[0]) if row else 0

        yield memory, size
    elif name.startswith("Redis"):
        prefix = f"lgmp-bench-enc-{uuid.uuid4().hex[:8]}"
        memory = stack.enter_context(from_url(url, key_prefix=prefix, **options))
        from langgraph_memory_plus.drivers.redis import sync_client_from_url

        client: Any = sync_client_from_url(url)

        def keys() -> list[bytes]:
            return list(client.scan_iter(match=f"{prefix}*", count=1000))

        def size() -> int:
            return sum(int(client.memory_usage(k) or 0) for k in keys())

        try:
            yield memory, size
        finally:  # no keys left on a shared server
            for key in keys():
                client.delete(key)
            client.close()
    else:
        tmp = stack.enter_context(tempfile.TemporaryDirectory())
        path = os.path.join(tmp, "b.db")
        memory = stack.enter_context(from_url(f"sqlite:///{path}", **options))

        def size() -> int:
            import sqlite3

            conn = sqlite3.connect(path)
            try:
                conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                return int(os.path.getsize(path))
            finally:
                conn.close()

        yield memory, size


def _p50(values: list[float]) -> float:
    return statistics.median(values) * 1e3 if values else float("nan")


def measure(name: str, url: str, args: argparse.Namespace) -> dict[str, dict[str, float]]:
    """Per configuration (``plain``, ``encrypted``): turn p50 and CPU (ms), store p50s
    (ms) and the footprint (bytes)."""
    out: dict[str, dict[str, float]] = {}
    with ExitStack() as stack:
        memories = {
            key: stack.enter_context(_memory(name, url, stack, key == "encrypted"))
            for key in ("plain", "encrypted")
        }
        turns: dict[str, list[float]] = {k: [] for k in memories}
        cpu: dict[str, list[float]] = {k: [] for k in memories}
        store_ops: dict[str, dict[str, list[float]]] = {
            k: {"put": [], "get": [], "search": []} for k in memories
        }
        apps = {
            k: _graph()(checkpointer=m.checkpointer, store=m.store)
            for k, (m, _) in memories.items()
        }
        for r in range(args.rounds + 1):  # round 0 warms up
            order = list(memories)
            for key in order if r % 2 else reversed(order):
                memory = memories[key][0]
                for t in range(args.threads):
                    config = {"configurable": {"thread_id": f"r{r}-t{t}", "user_id": f"u{t}"}}
                    for n in range(args.turns):
                        said = HumanMessage(f"{n}: {TEXT}", id=f"h-{n}")
                        wall, proc = time.perf_counter(), time.process_time()
                        apps[key].invoke({"messages": [said]}, config)
                        if r:
                            turns[key].append(time.perf_counter() - wall)
                            cpu[key].append(time.process_time() - proc)
                ops = store_ops[key]
                for i in range(args.items):
                    ns = ("users", f"u{i % 10}", "memories")
                    value = {"text": f"{TEXT} #{i}", "kind": "fact" if i % 2 else "pref"}
                    started = time.perf_counter()
                    memory.store.put(ns, f"r{r}-{i}", value)
                    took = time.perf_counter() - started
                    started = time.perf_counter()
                    memory.store.get(ns, f"r{r}-{i}")
                    took_get = time.perf_counter() - started
                    if r:
                        ops["put"].append(took)
                        ops["get"].append(took_get)
                for u in range(10):
                    started = time.perf_counter()
                    memory.store.search(("users", f"u{u}"), filter={"kind": "fact"}, limit=10)
                    if r:
                        ops["search"].append(time.perf_counter() - started)
        for key, (_, size) in memories.items():
            out[key] = {
                "turn_p50_ms": _p50(turns[key]),
                "turn_cpu_ms": statistics.mean(cpu[key]) * 1e3 if cpu[key] else float("nan"),
                "put_p50_ms": _p50(store_ops[key]["put"]),
                "get_p50_ms": _p50(store_ops[key]["get"]),
                "search_p50_ms": _p50(store_ops[key]["search"]),
                "footprint_bytes": float(size()),
            }
    return out


def table(results: dict[str, dict[str, dict[str, float]]]) -> str:
    rows = [
        "| backend | turn p50 ms (plain / enc) | CPU per turn ms | store put p50 ms | "
        "store get p50 ms | store search p50 ms | footprint KiB |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    cells = ("turn_p50_ms", "turn_cpu_ms", "put_p50_ms", "get_p50_ms", "search_p50_ms")
    for name, res in results.items():
        p, e = res["plain"], res["encrypted"]
        parts = [f"{p[c]:.2f} / {e[c]:.2f} ({e[c] / p[c]:.2f}x)" for c in cells]
        kib = f"{p['footprint_bytes'] / 1024:.0f} / {e['footprint_bytes'] / 1024:.0f}"
        rows.append(f"| {name} | " + " | ".join([*parts, kib]) + " |")
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--pg", help="PostgreSQL admin URL (databases are created)")
    parser.add_argument("--redis", help="Redis URL")
    parser.add_argument("--redis-cluster", help="redis+cluster:// URL")
    parser.add_argument("--no-sqlite", action="store_true")
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--turns", type=int, default=40, help="turns per thread and round")
    parser.add_argument("--items", type=int, default=200, help="store puts per round")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    results: dict[str, dict[str, dict[str, float]]] = {}
    if args.pg:
        check_pg_url(args.pg)
        results["PostgreSQL"] = measure("PostgreSQL", args.pg, args)
    for name, url in (("Redis", args.redis), ("Redis Cluster", args.redis_cluster)):
        if url:
            check_redis_url(url.replace("redis+cluster://", "redis://", 1))  # loopback only
            results[name] = measure(name, url, args)
    if not args.no_sqlite:
        results["SQLite"] = measure("SQLite", "", args)
    print(table(results))


if __name__ == "__main__":
    main()
