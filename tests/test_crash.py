"""Crash tests: writers killed with SIGKILL at random moments, and Redis servers killed too.

A writer is a forked process running a real graph on its own saver, turn after turn on a
few threads; it logs a turn once ``invoke`` returned (so the turn is committed). The test
kills it at a random moment, starts the next one (``keep_last`` cycling through 1, 3 and
None, each value with threads of its own), and afterwards reads everything back with a
fresh saver: every checkpoint of every thread holds a prefix of the turns' sequence, the
latest at least every turn logged, every listed parent exists, ``keep_last`` holds, and no
read fails. On Redis the server itself is killed and restarted too, with and without
``appendonly`` (without, a restart loses everything: what is left must still be whole).

Seeds differ per run; set ``LGMP_CRASH_SEED`` to replay one (a failure names its seed).
"""

from __future__ import annotations

import multiprocessing
import operator
import os
import random
import signal
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Annotated, Any, TypedDict

import psycopg
import pytest
from langgraph.graph import END, START, StateGraph
from psycopg import sql

# Private redis-server processes, as the Redis saver tests start them.
from test_redis_saver import RedisServer

from langgraph_memory_plus import PostgresSaver, RedisSaver
from langgraph_memory_plus.checkpoint.sqlite import SqliteSaver

pytestmark = pytest.mark.storage

KEEPS: list[int | None] = [1, 3, None]
THREADS_PER_KEEP = 3
SEED = int(os.environ.get("LGMP_CRASH_SEED") or random.SystemRandom().randrange(2**32))

Opener = Callable[..., AbstractContextManager[Any]]


class State(TypedDict):
    n: int
    log: Annotated[list[str], operator.add]


def graph() -> StateGraph[Any]:
    def step(state: State) -> dict[str, Any]:
        return {"n": state.get("n", 0) + 1, "log": [f"s{state.get('n', 0)}"]}

    builder = StateGraph(State)
    builder.add_node("step", step)
    builder.add_edge(START, "step")
    builder.add_edge("step", END)
    return builder


def expected(turns: int) -> list[str]:
    return [entry for i in range(turns) for entry in (f"u{i}", f"s{i}")]


def threads_of(keep: int | None) -> list[str]:
    return [f"crash-{keep}-{i}" for i in range(THREADS_PER_KEEP)]


def _write(open_saver: Opener, keep: int | None, log_path: str, seed: int, ready: Any) -> None:
    """A writer's life (in the forked child): turns on its threads until it is killed.
    ``ready`` is set once its saver is open: the kill's random moment counts from there,
    so a loaded machine's slow start does not eat the time meant for writing."""
    rng = random.Random(seed)
    with open_saver(keep_last=keep) as saver, open(log_path, "a") as log:
        app = graph().compile(checkpointer=saver)
        ready.set()
        while True:
            thread = rng.choice(threads_of(keep))
            config: Any = {"configurable": {"thread_id": thread}}
            if app.get_state(config).tasks:  # a turn a killed writer left half done
                app.invoke(None, config)
            turns = app.get_state(config).values.get("n", 0)
            app.invoke({"log": [f"u{turns}"]}, config)
            log.write(f"{thread} {turns + 1}\n")
            log.flush()


def opener(cls: Any, url: str, defaults: dict[str, Any]) -> Opener:
    """``open_saver(**options)``: a new saver of ``cls`` on the test's storage."""

    @contextmanager
    def open_saver(**options: Any) -> Iterator[Any]:
        with cls.from_conn_string(url, **{**defaults, **options}) as saver:
            yield saver

    return open_saver


def _child(
    target: tuple[Any, str, dict[str, Any]], keep: int | None, log: str, seed: int, ready: Any
) -> None:
    try:
        _write(opener(*target), keep, log, seed, ready)
    finally:
        os._exit(1)  # a writer stops only when killed


def start_writer(
    target: tuple[Any, str, dict[str, Any]], keep: int | None, log_path: Path, seed: int
) -> multiprocessing.process.BaseProcess:
    """A writer process, forked from a server process that has langgraph imported (so it
    writes from its first moment) and no threads (a fork of pytest's process could
    inherit a lock another thread holds); returned once its saver is open."""
    ready = _FORKS.Event()
    process = _FORKS.Process(target=_child, args=(target, keep, str(log_path), seed, ready))
    process.start()
    ready.wait(WRITER_START_SECONDS)
    return process


WRITER_START_SECONDS = 60.0  # only a writer that cannot open its saver takes this long


_FORKS = multiprocessing.get_context("forkserver")
_FORKS.set_forkserver_preload(["langgraph.graph", "langgraph_memory_plus", "test_crash"])


def kill(process: multiprocessing.process.BaseProcess) -> None:
    assert process.pid is not None
    if process.is_alive():
        os.kill(process.pid, signal.SIGKILL)
    process.join(timeout=30)


def logged(log_path: Path) -> dict[str, int]:
    """The most turns each thread was logged to have committed."""
    done: dict[str, int] = {}
    if log_path.exists():
        for line in log_path.read_text().splitlines():
            parts = line.split()
            if len(parts) == 2 and parts[1].isdigit():  # a kill may cut the last line
                done[parts[0]] = max(done.get(parts[0], 0), int(parts[1]))
    return done


def check(open_saver: Opener, log_path: Path, what: str) -> int:
    """Read every thread back with a fresh saver; returns the checkpoints read."""
    done = logged(log_path)
    read = 0
    with open_saver() as saver:
        app = graph().compile(checkpointer=saver)
        for keep in KEEPS:
            for thread in threads_of(keep):
                config: Any = {"configurable": {"thread_id": thread}}
                where = f"{what}, thread {thread}, seed={SEED}"
                state = app.get_state(config)
                turns = state.values.get("n", 0)
                assert turns >= done.get(thread, 0), f"committed turns lost: {where}: {state}"
                tuples = list(saver.list(config))
                read += len(tuples)
                if keep is not None:
                    assert len(tuples) <= keep, f"keep_last={keep} broken: {where}"
                for tup in tuples:
                    values = tup.checkpoint["channel_values"]
                    log = values.get("log", [])
                    steps = sum(1 for entry in log if entry.startswith("s"))
                    assert log == expected(steps + 1)[: len(log)], f"not a prefix: {where}: {log}"
                    assert values.get("n", 0) == steps, f"n and log disagree: {where}"
                    if tup.parent_config is not None:
                        assert saver.get_tuple(tup.parent_config) is not None, (
                            f"listed parent missing: {where}"
                        )
    return read


def crash_rounds(
    target: tuple[Any, str, dict[str, Any]],
    tmp_path: Path,
    rounds: int,
    *,
    server: RedisServer | None = None,
    appendonly: bool = True,
) -> None:
    """``rounds`` writer kills; with ``server``, every third round kills the server too
    (without ``appendonly`` its restart loses everything, so the log starts anew)."""
    rng = random.Random(SEED)
    open_saver = opener(*target)
    log_path = tmp_path / "committed.log"
    print(f"crash test seed={SEED} (LGMP_CRASH_SEED={SEED} replays it)")
    with open_saver() as saver:  # setup once, before any writer
        saver.setup()
    wiped = 0  # turns logged before a restart without appendonly lost them
    for r in range(rounds):
        keep = KEEPS[r % len(KEEPS)]
        writer = start_writer(target, keep, log_path, rng.randrange(2**32))
        time.sleep(rng.uniform(0.2, 1.2))
        if r == rounds - 1:  # a loaded machine may commit nothing in time: wait for one
            deadline = time.monotonic() + WRITER_START_SECONDS
            while not wiped + sum(logged(log_path).values()) and time.monotonic() < deadline:
                time.sleep(0.05)
        if server is not None and r % 3 == 2:
            assert server.process is not None
            server.process.kill()  # SIGKILL, our own child, by its pid
            server.process.wait()
            server.process = None
            kill(writer)
            if not appendonly:
                if log_path.exists():
                    wiped += sum(logged(log_path).values())
                log_path.unlink(missing_ok=True)
            server.start()
            check(open_saver, log_path, f"after the server's kill in round {r}")
        else:
            kill(writer)
    read = check(open_saver, log_path, f"after {rounds} rounds")
    turns = wiped + sum(logged(log_path).values())
    print(f"{rounds} writers killed, {turns} turns logged, {read} checkpoints read back")
    assert turns > 0, f"no writer committed a turn, seed={SEED}"


# --------------------------------------------------------------------------------------------
# One test per backend
# --------------------------------------------------------------------------------------------


def test_postgres_survives_killed_writers(pg_url: str, tmp_path: Path) -> None:
    schema = f"lgmp_crash_{uuid.uuid4().hex[:12]}"
    try:
        crash_rounds((PostgresSaver, pg_url, {"schema": schema}), tmp_path, 8)
    finally:
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


def test_sqlite_survives_killed_writers(tmp_path: Path) -> None:
    crash_rounds((SqliteSaver, str(tmp_path / "crash.db"), {}), tmp_path, 8)


@pytest.mark.parametrize("appendonly", ["yes", "no"])
def test_redis_survives_killed_writers_and_servers(tmp_path: Path, appendonly: str) -> None:
    server = RedisServer(tmp_path / "redis", "--appendonly", appendonly)
    server.start()
    try:
        crash_rounds(
            (RedisSaver, server.url(), {"key_prefix": "crash"}), tmp_path,
            9 if appendonly == "yes" else 8, server=server, appendonly=appendonly == "yes",
        )  # fmt: skip
    finally:
        server.stop()


def test_redis_cluster_survives_killed_writers(redis_cluster_url: str, tmp_path: Path) -> None:
    prefix = f"lgmp-crash-{uuid.uuid4().hex[:8]}"
    crash_rounds((RedisSaver, redis_cluster_url, {"key_prefix": prefix}), tmp_path, 6)
