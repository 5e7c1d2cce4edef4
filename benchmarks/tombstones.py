"""What namespace tombstones cost a store put, on each backend.

``python -m benchmarks.tombstones --pg URL --redis URL [--redis-cluster URL] [--puts 2000]
[--rounds 5] [--tombstones 1000]``

Two stores per backend, each on storage of its own: one without tombstones, one holding
``--tombstones`` of them (erased users ``("users", "gone-<i>")``, as ``erase_user``
leaves them, plus one on a sibling namespace of the put's own shard, so on Redis the put's
shard has a tombstone key to look at). Rounds alternate between the two stores, so load
on the machine hits both alike; each put is one ``store.put(("users", "u-<n>", "prefs"),
key, value)`` of a small JSON value, timed alone. Reported: put p50 of each store over all
rounds and their ratio.

Run under an older checkout (``PYTHONPATH`` to one without tombstones), only the first
column is measured: the put of the code before tombstones, for comparison across runs.
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
from typing import Any

from langgraph_memory_plus import from_url

from .erasure import _pg_database
from .targets import check_pg_url, check_redis_url

USERS = 50


def _tombstoned(count: int) -> list[tuple[str, ...]]:
    erased = [("users", f"gone-{i}") for i in range(count)]
    # A tombstone in every put's own shard, on a sibling namespace.
    return erased + [("users", f"u-{u}", "erased-drafts") for u in range(USERS)]


def _round(store: Any, puts: int, tag: str) -> list[float]:
    took: list[float] = []
    for n in range(puts):
        value = {"seat": "aisle", "meal": "veg", "n": n}
        started = time.perf_counter()
        store.put(("users", f"u-{n % USERS}", "prefs"), f"{tag}-{n}", value)
        took.append(time.perf_counter() - started)
    return took


@contextmanager
def _storage(name: str, url: str, stack: ExitStack) -> Iterator[Any]:
    """A store on storage of its own for ``name``'s backend."""
    if name == "PostgreSQL":
        own = stack.enter_context(_pg_database(url))
        yield stack.enter_context(from_url(own)).store
    elif name.startswith("Redis"):
        prefix = f"lgmp-bench-tomb-{uuid.uuid4().hex[:8]}"
        memory = stack.enter_context(from_url(url, key_prefix=prefix))
        try:
            yield memory.store
        finally:
            for u in range(USERS):
                memory.store.delete_namespace(("users", f"u-{u}"))
    else:
        tmp = stack.enter_context(tempfile.TemporaryDirectory())
        yield stack.enter_context(from_url(f"sqlite:///{os.path.join(tmp, 'b.db')}")).store


def _measure(name: str, url: str, args: argparse.Namespace) -> str:
    with ExitStack() as stack:
        plain = stack.enter_context(_storage(name, url, stack))
        tombed = stack.enter_context(_storage(name, url, stack))
        supported = hasattr(tombed, "tombstone_namespace")
        if supported:
            for namespace in _tombstoned(args.tombstones):
                tombed.tombstone_namespace(namespace, hold_seconds=3600)
        _round(plain, 100, "warm")
        if supported:
            _round(tombed, 100, "warm")
        without: list[float] = []
        with_: list[float] = []
        for r in range(args.rounds):
            without += _round(plain, args.puts, f"r{r}")
            if supported:
                with_ += _round(tombed, args.puts, f"r{r}")
        if supported:
            dropped = tombed.get(("users", "u-0", "erased-drafts"), "x")
            tombed.put(("users", "u-0", "erased-drafts"), "x", {"late": True})
            assert dropped is None and tombed.get(("users", "u-0", "erased-drafts"), "x") is None
            for namespace in _tombstoned(args.tombstones):  # no keys left on a shared Redis
                tombed.lift_tombstone(namespace)
    p50 = statistics.median(without) * 1e6
    if not supported:
        return f"| {name} | {p50:.0f} | (no tombstones in this code) | |"
    p50_t = statistics.median(with_) * 1e6
    return f"| {name} | {p50:.0f} | {p50_t:.0f} | {p50_t / p50:.2f} |"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pg", help="PostgreSQL admin URL (databases are created)")
    parser.add_argument("--redis", help="Redis URL")
    parser.add_argument("--redis-cluster", help="redis+cluster:// URL")
    parser.add_argument("--no-sqlite", action="store_true")
    parser.add_argument("--puts", type=int, default=2000, help="puts per round and store")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--tombstones", type=int, default=1000)
    args = parser.parse_args()
    rows = [
        f"| backend | put p50, no tombstones (µs) | put p50, {args.tombstones} + {USERS} "
        "tombstones (µs) | ratio |",
        "| --- | ---: | ---: | ---: |",
    ]
    if args.pg:
        check_pg_url(args.pg)
        rows.append(_measure("PostgreSQL", args.pg, args))
    for name, url in (("Redis", args.redis), ("Redis Cluster", args.redis_cluster)):
        if url:
            check_redis_url(url.replace("redis+cluster://", "redis://", 1))  # loopback only
            rows.append(_measure(name, url, args))
    if not args.no_sqlite:
        rows.append(_measure("SQLite", "", args))
    print("\n".join(rows))


if __name__ == "__main__":
    main()
