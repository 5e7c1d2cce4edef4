"""Migration speed: ``copy_threads`` from LangGraph's own PostgreSQL saver into each target.

::

    python -m benchmarks.migration --pg postgresql://postgres@127.0.0.1:5432/test \\
        --redis redis://127.0.0.1:6379/0 [--threads 20] [--turns 25] [--markdown out.md]

One source for every target, in one run: a fresh database written by
``langgraph-checkpoint-postgres``'s ``PostgresSaver`` with ``--threads`` chat threads of
``--turns`` turns each (the chat graph of the other benchmarks: 4 checkpoints a turn).
Each target gets storage of its own (a database, a key prefix, a file), removed afterwards.
Targets: LangGraph's PostgreSQL saver itself (the baseline of the ratio column: the same
copy into the saver the user already has), ours on PostgreSQL, Redis and SQLite. Measured:
checkpoints per second of the copy, then of ``verify_threads`` (which reads every
checkpoint on both sides), and of a re-run that finds everything copied (the cost of
resuming). Loopback servers only.
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any
from urllib.parse import urlsplit

import psycopg

from langgraph_memory_plus import PostgresSaver, RedisSaver, SqliteSaver
from langgraph_memory_plus.transfer.migration import copy_threads, verify_threads

from .targets import _is_loopback
from .workloads import chat_graph, user_message


@contextmanager
def _database(admin: str, name: str) -> Iterator[str]:
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield psycopg.conninfo.make_conninfo(admin, dbname=name)
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _official_pg(url: str) -> AbstractContextManager[Any]:
    from langgraph.checkpoint.postgres import PostgresSaver as Official

    @contextmanager
    def opened() -> Iterator[Any]:
        with Official.from_conn_string(url) as saver:
            saver.setup()
            yield saver

    return opened()


def _ours(cls: Any, target: str, **options: Any) -> AbstractContextManager[Any]:
    @contextmanager
    def opened() -> Iterator[Any]:
        with cls.from_conn_string(target, **options) as saver:
            saver.setup()
            yield saver

    return opened()


def _redis_cleanup(url: str, prefix: str) -> None:
    import redis

    client = redis.Redis.from_url(url)
    for key in client.scan_iter(match=f"{prefix}*", count=1000):
        client.unlink(key)


def populate(saver: Any, threads: int, turns: int) -> int:
    graph = chat_graph().compile(checkpointer=saver)
    for t in range(threads):
        config = {"configurable": {"thread_id": f"bench-{t}"}}
        for turn in range(turns):
            graph.invoke({"messages": [user_message(turn)]}, config)
    return sum(1 for _ in saver.list(None))


def measure(source: Any, target: Any, checkpoints: int, batch: int) -> dict[str, float]:
    start = time.perf_counter()
    report = copy_threads(source, target, batch_size=batch)
    copy_s = time.perf_counter() - start
    assert report.checkpoints_copied == checkpoints, report
    start = time.perf_counter()
    again = copy_threads(source, target, batch_size=batch)
    resume_s = time.perf_counter() - start
    assert again.checkpoints_copied == 0 and again.checkpoints_skipped == checkpoints
    start = time.perf_counter()
    differences = verify_threads(source, target, batch_size=batch)
    verify_s = time.perf_counter() - start
    assert differences == [], differences[:5]
    return {
        "copy": checkpoints / copy_s,
        "resume": checkpoints / resume_s,
        "verify": checkpoints / verify_s,
        "copy_s": copy_s,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pg", default="postgresql://postgres@127.0.0.1:5432/test")
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--threads", type=int, default=20)
    parser.add_argument("--turns", type=int, default=25)
    parser.add_argument("--batch-size", type=int, default=100)
    parser.add_argument("--markdown", help="also write the report here")
    args = parser.parse_args(argv)
    for url in (args.pg, args.redis):
        if not _is_loopback(urlsplit(url).hostname):
            parser.error(f"only loopback servers: {url}")
    run_id = uuid.uuid4().hex[:8]
    rows: list[tuple[str, dict[str, float]]] = []
    load_start = os.getloadavg()[0]
    with (
        _database(args.pg, f"lgmp_bench_migsrc_{run_id}") as src_url,
        _official_pg(src_url) as source,
    ):
        start = time.perf_counter()
        checkpoints = populate(source, args.threads, args.turns)
        print(f"source: {checkpoints} checkpoints in {time.perf_counter() - start:.1f} s",
              file=sys.stderr)  # fmt: skip
        workdir = tempfile.mkdtemp(prefix="lgmp-bench-mig-")
        prefix = f"lgmpb{run_id}mig"
        targets: list[tuple[str, Callable[[], AbstractContextManager[Any]]]] = [
            ("LangGraph PostgresSaver", lambda: _official_pg(dst_url)),
            ("ours PostgreSQL", lambda: _ours(PostgresSaver, dst_url)),
            ("ours Redis", lambda: _ours(RedisSaver, args.redis, key_prefix=prefix)),
            ("ours SQLite", lambda: _ours(SqliteSaver, os.path.join(workdir, "t.db"))),
        ]
        try:
            for name, opener in targets:
                with _database(args.pg, f"lgmp_bench_migdst_{run_id}") as dst_url, opener() as t:
                    print(f"{name} ...", file=sys.stderr)
                    rows.append((name, measure(source, t, checkpoints, args.batch_size)))
        finally:
            _redis_cleanup(args.redis, prefix)
    base = rows[0][1]["copy"]
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()  # fmt: skip
    lines = [
        f"# Migration speed ({time.strftime('%Y-%m-%d')}, commit {commit})",
        "",
        f"`python -m benchmarks.migration --threads {args.threads} --turns {args.turns} "
        f"--batch-size {args.batch_size}`; source: LangGraph's `PostgresSaver` "
        f"(langgraph-checkpoint-postgres), {checkpoints} checkpoints in {args.threads} "
        f"threads. {platform.python_implementation()} {platform.python_version()}, "
        f"{os.cpu_count()} CPUs, load average {load_start:.2f} -> {os.getloadavg()[0]:.2f}.",
        "",
        "| target | copy (checkpoints/s) | vs LangGraph PG target | resume re-run (checkpoints/s)"
        " | verify (checkpoints/s) | copy time (s) |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name, m in rows:
        lines.append(
            f"| {name} | {m['copy']:.0f} | {m['copy'] / base:.2f}x | {m['resume']:.0f} | "
            f"{m['verify']:.0f} | {m['copy_s']:.2f} |"
        )
    report = "\n".join(lines) + "\n"
    print(report)
    if args.markdown:
        with open(args.markdown, "w") as out:
            out.write(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
