"""Key rotation at scale: ``langgraph-memory rekey`` over N threads, killed midway, resumed.

``python -m benchmarks.rekey [--pg URL] [--no-sqlite] [--threads 10000] [--turns 2]
[--batch-size 500] [--kill-at 0.5]``

Per backend, on storage of its own: N threads of ``--turns`` chat turns each (transcripts
and the thread index on) are written with key ``k1``; then ``rekey`` runs in a child
process with ``k2`` current (as the CLI does: keys from ``LANGGRAPH_MEMORY_ENCRYPTION_KEYS``)
and is killed with SIGKILL once it has rewritten ``--kill-at`` of the rows; a second run
finishes. Reported: seeding time, the killed run's rows, the second run's rows and time,
a third run (nothing left to do), and a check that every thread reads with ``k2`` alone.
"""

from __future__ import annotations

import argparse
import base64
import os
import signal
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack

from langchain_core.messages import HumanMessage

from langgraph_memory_plus import Encryption, from_url
from langgraph_memory_plus.privacy.rekey import rekey

from .encryption import TEXT, _graph
from .erasure import _pg_database
from .targets import check_pg_url

K1, K2 = os.urandom(32), os.urandom(32)

CHILD = """
import os, signal, sys, time
from langgraph_memory_plus import from_url
from langgraph_memory_plus.privacy.rekey import rekey
url, kill_at, batch = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
started = time.monotonic()

def progress(p):
    if kill_at and p.rewritten >= kill_at:
        print(p.rewritten, p.examined, p.total, round(time.monotonic() - started, 2), flush=True)
        os.kill(os.getpid(), signal.SIGKILL)

with from_url(url) as memory:
    r = rekey(memory, batch_size=batch, progress=progress)
print(r.rewritten, r.examined, r.unreachable, round(r.seconds, 2), flush=True)
"""


def _env() -> dict[str, str]:
    keys = f"k2={base64.b64encode(K2).decode()},k1={base64.b64encode(K1).decode()}"
    return {**os.environ, "LANGGRAPH_MEMORY_ENCRYPTION_KEYS": keys, "PYTHONPATH": os.getcwd()}


def _child(url: str, kill_at: float, batch: int) -> tuple[int, list[str]]:
    done = subprocess.run(
        [sys.executable, "-c", CHILD, url, str(kill_at), str(batch)],
        env=_env(),
        capture_output=True,
        text=True,
        timeout=3600,
    )
    if done.returncode not in (0, -signal.SIGKILL):
        raise RuntimeError(done.stderr[-2000:])
    return done.returncode, done.stdout.split()


def measure(name: str, url: str, args: argparse.Namespace) -> str:
    seeded = time.perf_counter()
    with from_url(url, transcripts=True, encryption=Encryption({"k1": K1})) as memory:
        app = _graph()(checkpointer=memory.checkpointer, store=memory.store)
        for t in range(args.threads):
            config = {"configurable": {"thread_id": f"t{t}", "user_id": f"u{t % 100}"}}
            for n in range(args.turns):
                app.invoke({"messages": [HumanMessage(f"{n}: {TEXT}", id=f"h-{n}")]}, config)
    seeded = time.perf_counter() - seeded
    with from_url(url, encryption=Encryption({"k1": K1})) as memory:
        total = rekey(memory, batch_size=args.batch_size, progress=None).examined
    # rows to move = every sealed row; kill once `kill_at` of them are rewritten
    code, killed = _child(url, max(1, int(total * args.kill_at)), args.batch_size)
    assert code == -signal.SIGKILL, "the first run was to be killed"
    _, second = _child(url, 0, args.batch_size)
    _, third = _child(url, 0, args.batch_size)
    with from_url(url, transcripts=True, encryption=Encryption({"k2": K2})) as memory:
        for t in range(0, args.threads, max(1, args.threads // 50)):
            tup = memory.checkpointer.get_tuple({"configurable": {"thread_id": f"t{t}"}})
            assert tup is not None and memory.checkpointer.threads.transcript(f"t{t}")
    return (
        f"| {name} | {args.threads} x {args.turns} | {total} | {seeded:.0f} | "
        f"{killed[0]} rows in {killed[3]} s | {second[0]} rows in {second[3]} s | "
        f"{third[0]} rewritten of {third[1]} in {third[3]} s | yes |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--pg", help="PostgreSQL admin URL (a database is created)")
    parser.add_argument("--no-sqlite", action="store_true")
    parser.add_argument("--threads", type=int, default=10_000)
    parser.add_argument("--turns", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=500)
    parser.add_argument("--kill-at", type=float, default=0.5)
    args = parser.parse_args()
    rows = [
        "| backend | threads x turns | rows | seeding s | killed run | resumed run | "
        "third run | all read with k2 alone |",
        "| --- | --- | ---: | ---: | --- | --- | --- | --- |",
    ]
    with ExitStack() as stack:
        if args.pg:
            check_pg_url(args.pg)
            rows.append(measure("PostgreSQL", stack.enter_context(_pg_database(args.pg)), args))
        if not args.no_sqlite:
            tmp = stack.enter_context(tempfile.TemporaryDirectory())
            rows.append(measure("SQLite", f"sqlite:///{tmp}/r.db", args))
    print("\n".join(rows))


if __name__ == "__main__":
    main()
