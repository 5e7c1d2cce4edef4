"""What namespace tombstones cost a store put, on each backend.

``python -m benchmarks.tombstones --pg URL --redis URL [--redis-cluster URL] [--puts 300]
[--rounds 10] [--tombstones 1000] [--baseline DIR]``

Per backend, stores on storage of their own: this code without tombstones; this code
holding ``--tombstones`` of them (erased users ``("users", "gone-<i>")``, as
``erase_user`` leaves them, plus one on a sibling namespace in every put's own shard, so
on Redis the put's shard has a tombstone key to look at); and, with ``--baseline DIR``
(a checkout from before tombstones, e.g. ``git worktree add DIR main``), that code's
store, imported in this same process as a renamed copy. Rounds alternate between the
stores, in reversed order every other round, so load on the machine hits them alike; each
put is one ``store.put(("users", "u-<n>", "prefs"), key, value)`` of a small JSON value,
timed alone. Reported: put p50 per store and its ratio to the first column.
"""

from __future__ import annotations

import argparse
import importlib
import os
import re
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

import langgraph_memory_plus

from .erasure import _pg_database
from .targets import check_pg_url, check_redis_url

USERS = 50
BASELINE = "lgmp_baseline"


def _baseline(checkout: str, into: str) -> Any:
    """The package of ``checkout``, copied as ``lgmp_baseline`` and imported."""
    target = os.path.join(into, BASELINE)
    shutil.copytree(os.path.join(checkout, "langgraph_memory_plus"), target)
    for folder, _, files in os.walk(target):
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                with open(path, encoding="utf-8") as f:
                    text = f.read()
                with open(path, "w", encoding="utf-8") as f:
                    f.write(re.sub(r"\blanggraph_memory_plus\b", BASELINE, text))
    sys.path.insert(0, into)
    return importlib.import_module(BASELINE)


def _tombstoned(count: int) -> list[tuple[str, ...]]:
    erased = [("users", f"gone-{i}") for i in range(count)]
    return erased + [("users", f"u-{u}", "erased-drafts") for u in range(USERS)]


@contextmanager
def _store(package: Any, name: str, url: str, stack: ExitStack) -> Iterator[Any]:
    """A store of ``package`` on storage of its own for ``name``'s backend."""
    if name == "PostgreSQL":
        yield stack.enter_context(package.from_url(stack.enter_context(_pg_database(url)))).store
    elif name.startswith("Redis"):
        prefix = f"lgmp-bench-tomb-{uuid.uuid4().hex[:8]}"
        memory = stack.enter_context(package.from_url(url, key_prefix=prefix))
        try:
            yield memory.store
        finally:  # no keys left on a shared server
            for u in range(USERS):
                memory.store.delete_namespace(("users", f"u-{u}"))
    else:
        tmp = stack.enter_context(tempfile.TemporaryDirectory())
        path = os.path.join(tmp, "b.db")
        yield stack.enter_context(package.from_url(f"sqlite:///{path}")).store


def _measure(name: str, url: str, args: argparse.Namespace, baseline: Any) -> str:
    with ExitStack() as stack:
        stores: dict[str, Any] = {}
        if baseline is not None:
            stores["baseline"] = stack.enter_context(_store(baseline, name, url, stack))
        stores["plain"] = stack.enter_context(_store(langgraph_memory_plus, name, url, stack))
        tombed = stores["tombed"] = stack.enter_context(
            _store(langgraph_memory_plus, name, url, stack)
        )
        for namespace in _tombstoned(args.tombstones):
            tombed.tombstone_namespace(namespace, hold_seconds=3600)
        took: dict[str, list[float]] = {key: [] for key in stores}
        for r in range(args.rounds + 1):  # round 0 warms up and is not counted
            order = list(stores.items())
            for key, store in order if r % 2 else reversed(order):
                for n in range(args.puts):
                    value = {"seat": "aisle", "meal": "veg", "n": n}
                    started = time.perf_counter()
                    store.put(("users", f"u-{n % USERS}", "prefs"), f"r{r}-{n}", value)
                    if r:
                        took[key].append(time.perf_counter() - started)
        late = ("users", "u-0", "erased-drafts")
        tombed.put(late, "x", {"late": True})
        assert tombed.get(late, "x") is None, "a put under a tombstone was kept"
        for namespace in _tombstoned(args.tombstones):  # no keys left on a shared Redis
            tombed.lift_tombstone(namespace)
    p50 = {key: statistics.median(values) * 1e6 for key, values in took.items()}
    first = next(iter(p50.values()))
    return f"| {name} | " + " | ".join(f"{v:.0f} ({v / first:.2f})" for v in p50.values()) + " |"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pg", help="PostgreSQL admin URL (databases are created)")
    parser.add_argument("--redis", help="Redis URL")
    parser.add_argument("--redis-cluster", help="redis+cluster:// URL")
    parser.add_argument("--no-sqlite", action="store_true")
    parser.add_argument("--puts", type=int, default=300, help="puts per round and store")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--tombstones", type=int, default=1000)
    parser.add_argument("--baseline", help="a checkout from before tombstones")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        baseline = None if args.baseline is None else _baseline(args.baseline, tmp)
        heads = ["before tombstones"] if baseline is not None else []
        heads += ["no tombstones", f"{args.tombstones} + {USERS} tombstones"]
        rows = [
            "| backend | " + " | ".join(f"put p50 (µs), {h}" for h in heads) + " |",
            "| --- |" + " ---: |" * len(heads),
        ]
        if args.pg:
            check_pg_url(args.pg)
            rows.append(_measure("PostgreSQL", args.pg, args, baseline))
        for name, url in (("Redis", args.redis), ("Redis Cluster", args.redis_cluster)):
            if url:
                check_redis_url(url.replace("redis+cluster://", "redis://", 1))  # loopback only
                rows.append(_measure(name, url, args, baseline))
        if not args.no_sqlite:
            rows.append(_measure("SQLite", "", args, baseline))
    print("\n".join(rows))


if __name__ == "__main__":
    main()
