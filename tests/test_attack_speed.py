"""Attacks on issue 39's faster write and read paths, by someone who did not write them.

The speed work changed how a put and a read reach storage (one read and multi-row
``INSERT`` statements on SQLite, one-statement reads outside transactions, binary arrays
on PostgreSQL, our own packing of Redis commands, msgpack templates for list elements)
and who runs the async calls (a runner's own worker threads). These tests send what the
fast paths were not written for: many rows (past SQLite's 999 parameters), odd ids,
many pending writes, edits of what a read handed out, closed savers still held, and
check the answers against LangGraph's ``InMemorySaver``.
"""

from __future__ import annotations

import asyncio
import threading
import time
import weakref
from typing import Any

import pytest
from graphs import checkpoint_of
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.base import Checkpoint
from langgraph.checkpoint.memory import InMemorySaver

pytestmark = pytest.mark.storage


def _small(storage: Any) -> dict[str, Any]:
    """Options of a saver that takes few of the shared PostgreSQL server's connections."""
    return {"pool_max_size": 2} if storage.kind == "postgres" else {}


def _cfg(thread_id: str, ns: str = "") -> Any:
    return {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns}}


def _shown(found: Any) -> Any:
    """What a checkpoint tuple shows, comparable across savers."""
    if found is None:
        return None
    values = found.checkpoint["channel_values"]
    return (
        {k: _plain(v) for k, v in values.items()},
        found.checkpoint["channel_versions"],
        found.metadata,
        sorted((t, c, repr(v)) for t, c, v in found.pending_writes or []),
    )


def _plain(value: Any) -> Any:
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if hasattr(value, "model_dump"):
        return (type(value).__name__, value.model_dump())
    return value


ODD_IDS = ["a.b/c", "线程/一", "x" * 200 + "/.."]


@pytest.mark.parametrize("thread_id", ODD_IDS)
def test_puts_past_sqlites_parameter_limit_read_back_as_in_memory(
    saver_factory: Any, storage: Any, thread_id: str
) -> None:
    """A put of 400 channels (2,400 blob parameters), a 3,000-message list (items and
    pages past 999 parameters many times) and 300 pending writes of one task (2,700
    parameters): the multi-row ``INSERT`` splits must lose, duplicate or misplace
    nothing, through the writing saver and a fresh one, as ``InMemorySaver`` keeps it."""
    values: dict[str, Any] = {f"ch.{i}/é": f"value {i}" for i in range(400)}
    values["messages"] = [
        HumanMessage(f"m{i} 中文", id=f"m{i}") if i % 2 else AIMessage(f"a{i}", id=f"a{i}")
        for i in range(3000)
    ]
    versions = {ch: f"{1:032}.{i:016}" for i, ch in enumerate(values)}
    checkpoint = checkpoint_of(values, versions)
    meta: Any = {"source": "loop", "step": 1, "parents": {}}
    writes = [(f"w{i}", {"n": i, "t": "写"}) for i in range(300)]
    memory = InMemorySaver()
    expected_cfg = memory.put(_cfg(thread_id), checkpoint, meta, versions)
    memory.put_writes(expected_cfg, writes, "task-1", "path")
    expected = _shown(memory.get_tuple(_cfg(thread_id)))
    with saver_factory(**_small(storage)) as saver:
        saver.delete_thread(thread_id)
        stored = saver.put(_cfg(thread_id), checkpoint, meta, versions)
        saver.put_writes(stored, writes, "task-1", "path")
        assert _shown(saver.get_tuple(_cfg(thread_id))) == expected
        with saver_factory(**_small(storage)) as fresh:
            assert _shown(fresh.get_tuple(_cfg(thread_id))) == expected
            assert [_shown(t) for t in fresh.list(_cfg(thread_id))] == [expected]
        saver.delete_thread(thread_id)


def _vandalize(found: Any) -> None:
    """Edit every nested container of what a read returned, in place."""
    for value in found.checkpoint["channel_values"].values():
        if isinstance(value, dict):
            value["nested"]["list"].append("edited")
            value["added"] = True
            continue
        for element in value:
            if isinstance(element, dict):
                element["inner"]["k"].append("edited")
                element["inner"]["new"] = 1
            else:
                element.additional_kwargs.setdefault("extra", {})["k"] = "edited"
                element.additional_kwargs["nested"]["list"].append("edited")
                element.response_metadata["seen"] = True
        value.append("appended")


def test_what_a_read_returns_is_never_what_a_later_read_returns(
    saver_factory: Any, storage: Any
) -> None:
    """Reads build list elements from msgpack templates and models by ``map``: each read
    must still hand out objects of its own down to every nested dict and list. Edited in
    place, in this thread or another, a later read (same saver, list read, by id) shows
    the stored values; so does the put's own objects edited after the put."""
    thread_id = "isolation"
    messages = [
        AIMessage(
            f"m{i}",
            id=f"m{i}",
            additional_kwargs={"nested": {"list": [1, 2]}},
            response_metadata={"model": "x"},
        )
        for i in range(300)
    ]
    dicts = [{"n": i, "inner": {"k": [i]}} for i in range(40)]
    state = {"nested": {"list": [1, {"deep": [2]}]}, "n": 1}
    values = {"messages": messages, "dicts": dicts, "state": state}
    versions = {"messages": "1", "dicts": "1", "state": "1"}
    meta: Any = {"source": "loop", "step": 1, "parents": {}}
    memory = InMemorySaver()
    memory.put(_cfg(thread_id), checkpoint_of(values, versions), meta, versions)
    expected = _shown(memory.get_tuple(_cfg(thread_id)))
    with saver_factory(**_small(storage)) as saver:
        saver.delete_thread(thread_id)
        stored = saver.put(_cfg(thread_id), checkpoint_of(values, versions), meta, versions)
        by_id = {"configurable": {**stored["configurable"]}}
        # the put's own objects edited after it
        given = type("Given", (), {"checkpoint": {"channel_values": values}})
        _vandalize(given)
        for _ in range(3):
            first = saver.get_tuple(_cfg(thread_id))
            assert _shown(first) == expected
            _vandalize(first)
            assert _shown(saver.get_tuple(by_id)) == expected
            listed = next(iter(saver.list(_cfg(thread_id))))
            assert _shown(listed) == expected
            _vandalize(listed)
            seen: list[Any] = []
            reader = threading.Thread(target=lambda out=seen: out.append(saver.get_tuple(by_id)))
            reader.start()
            reader.join()
            assert _shown(seen[0]) == expected
            _vandalize(seen[0])
        saver.delete_thread(thread_id)


def test_the_same_put_and_writes_sent_twice_match_in_memory(
    saver_factory: Any, storage: Any
) -> None:
    """A retried call (a lost reply, a redelivered step) sends the same put and the same
    ``put_writes`` twice, with an interrupt written twice in one call (one multi-row
    statement on SQLite and PostgreSQL, where the later must win as in memory)."""
    from langgraph._internal._constants import INTERRUPT

    meta: Any = {"source": "loop", "step": 1, "parents": {}}
    versions = {"a": 1, "b": 2}  # integer versions, as LangGraph's own savers make
    checkpoint = checkpoint_of({"a": "one", "b": "x"}, versions)
    with saver_factory(**_small(storage)) as saver:
        saver.delete_thread("twice")
        memory = InMemorySaver()
        for s in (saver, memory, saver):
            c = s.put(_cfg("twice"), checkpoint, meta, versions)
            s.put_writes(c, [(INTERRUPT, "i1"), (INTERRUPT, "i2"), ("x", 1)], "task", "")
            s.put_writes(c, [(INTERRUPT, "i3")], "task", "")
        assert _shown(saver.get_tuple(_cfg("twice"))) == _shown(memory.get_tuple(_cfg("twice")))
        assert len(list(saver.list(_cfg("twice")))) == 1
        saver.delete_thread("twice")


def test_a_closed_async_sqlite_saver_keeps_no_threads(tmp_path: Any) -> None:
    """The async SQLite classes run plans on worker threads of their runner's own. A saver
    closed by ``from_conn_string`` but still referenced (a compiled graph, a list of
    per-request savers, ``from_url``'s memory) kept up to a thread per pool connection
    alive: ten savers held 38 threads. Closing the pool ends them, and a later call says
    it is closed."""
    from langgraph_memory_plus import from_url
    from langgraph_memory_plus.checkpoint.sqlite import AsyncSqliteSaver
    from langgraph_memory_plus.errors import InvalidConfigError

    def ours() -> int:
        return sum(t.name.startswith("lgmp-sqlite") for t in threading.enumerate())

    async def main() -> None:
        before = ours()
        held: list[Any] = []
        for i in range(6):
            async with AsyncSqliteSaver.from_conn_string(str(tmp_path / "m.db")) as saver:
                await asyncio.gather(*[saver.aget_tuple(_cfg(f"t{i}")) for _ in range(6)])
            held.append(saver)
            async with from_url(f"sqlite:///{tmp_path / 'u.db'}") as memory:
                await asyncio.gather(
                    *[memory.checkpointer.aget_tuple(_cfg(f"t{i}")) for _ in range(6)],
                    *[memory.store.aget(("n",), f"k{n}") for n in range(6)],
                )
            held.append(memory)
        deadline = time.monotonic() + 5
        while ours() > before and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        assert ours() == before
        with pytest.raises(InvalidConfigError, match="closed"):
            await held[0].aget_tuple(_cfg("t0"))

    asyncio.run(main())


def _lending(storage: Any) -> dict[str, Any]:
    """A pool of two (Redis: failing a borrower after two seconds)."""
    if storage.kind == "redis":
        return {"pool_max_size": 2, "pool_timeout": 2}
    return {"pool_max_size": 2}


async def test_cancelled_calls_leave_the_pool_whole(async_saver_factory: Any, storage: Any) -> None:
    """Calls cancelled while they wait for a pool connection, hold one, or await a reply
    (the async runners now borrow and return connections by hand, and the Redis one
    packs and reads its own replies) must all give their connections back: afterwards
    the pool of two serves a call at once, many times over, and what was put reads
    back whole."""
    meta: Any = {"source": "loop", "step": 1, "parents": {}}
    values = {"messages": [HumanMessage(f"m{i}", id=f"m{i}") for i in range(200)]}
    versions = {"messages": "1"}
    async with async_saver_factory(**_lending(storage)) as saver:
        for round_ in range(6):
            calls = [
                asyncio.ensure_future(
                    saver.aput(_cfg(f"cancel-{n}"), checkpoint_of(values, versions), meta, versions)
                    if n % 2
                    else saver.aget_tuple(_cfg(f"cancel-{n - 1}"))
                )
                for n in range(24)
            ]
            await asyncio.sleep(0.002 * round_)
            for call in calls:
                call.cancel()
            await asyncio.gather(*calls, return_exceptions=True)
        for n in range(1, 24, 2):
            stored = await asyncio.wait_for(
                saver.aput(_cfg(f"cancel-{n}"), checkpoint_of(values, versions), meta, versions),
                timeout=10,
            )
            found = await asyncio.wait_for(saver.aget_tuple(stored), timeout=10)
            assert len(found.checkpoint["channel_values"]["messages"]) == 200
            await saver.adelete_thread(f"cancel-{n}")


class _Cycle:
    """Cyclic garbage, which only the cyclic collector frees."""

    def __init__(self) -> None:
        self.me = self
        self.pad = [0] * 50


def test_overlapping_long_reads_do_not_keep_the_collector_off() -> None:
    """``build_all`` pauses the cyclic collector while a long list is built, counted
    across threads: while any build runs, it stays off. A server reading long threads in
    a dozen threads keeps some build under way at every moment, so the collector never
    ran again for as long as the load lasted, and cyclic garbage of the whole process
    (LangChain and LangGraph make plenty) piled up: 290,000 objects in 3 s, none freed.
    Now a pause collects at least every 50 ms, even while builds overlap."""
    import gc

    from langgraph_memory_plus.checkpoint.lists import Template, build_all

    templates = [Template.of(AIMessage(f"m{i}", id=f"m{i}")) for i in range(1000)]
    stop = threading.Event()

    def read() -> None:
        while not stop.is_set():
            build_all(templates)

    readers = [threading.Thread(target=read) for _ in range(12)]
    for reader in readers:
        reader.start()
    try:
        time.sleep(0.2)  # every reader under way
        before = gc.get_stats()[0]["collections"]
        made: list[weakref.ref[_Cycle]] = []
        deadline = time.monotonic() + 1.5
        while time.monotonic() < deadline:
            made.append(weakref.ref(_Cycle()))
        collections = gc.get_stats()[0]["collections"] - before
        alive = sum(ref() is not None for ref in made)  # readers still under way
    finally:
        stop.set()
        for reader in readers:
            reader.join()
    assert gc.isenabled()
    # the garbage made while builds overlapped was collected meanwhile, not piled up
    assert len(made) > 10_000 and collections >= 3, (len(made), collections)
    assert alive < len(made) // 2, (alive, len(made))


def _tagged(n: int, length: int) -> tuple[Checkpoint, dict[str, Any], dict[str, Any]]:
    """Checkpoint ``n``: every value (two blobs, a list of messages) names ``n``."""
    values = {
        "a": f"a{n}",
        "b": {"n": n},
        "messages": [HumanMessage(f"{n}:{i}", id=f"{n}-{i}") for i in range(length)],
    }
    versions = {"a": f"{n:08}", "b": f"{n:08}", "messages": f"{n:08}"}
    meta = {"source": "loop", "step": n, "parents": {}, "n": n}
    return checkpoint_of(values, versions), meta, versions


def _whole(found: Any) -> None:
    if found is None:
        return
    n = found.metadata["n"]
    values = found.checkpoint["channel_values"]
    assert values["a"] == f"a{n}" and values["b"] == {"n": n}, (n, values["a"], values["b"])
    texts = [m.content for m in values["messages"]]
    assert texts == [f"{n}:{i}" for i in range(len(texts))] and texts, (n, texts[:3])


def test_reads_racing_writers_and_deletion_return_one_whole_checkpoint(
    saver_factory: Any, storage: Any
) -> None:
    """Two writers (savers of their own, as two processes) put checkpoints of one thread
    whose every value names the checkpoint, a third deletes the thread now and then,
    and readers read the latest, by id and by ``list`` meanwhile: the one-statement read
    (no transaction on SQLite) and the list retry must hand out one checkpoint whole or
    nothing, never values of two."""
    thread_id = "race-whole"
    stop = threading.Event()
    errors: list[BaseException] = []
    seen = [0]

    def guard(work: Any) -> Any:
        def run() -> None:
            try:
                work()
            except BaseException as exc:  # reported by the test
                errors.append(exc)
                stop.set()

        return run

    def writer(first: int) -> Any:
        def work() -> None:
            with saver_factory(**_small(storage)) as saver:
                n = first
                while not stop.is_set():
                    checkpoint, meta, versions = _tagged(n, 20 + n % 40)
                    saver.put(_cfg(thread_id), checkpoint, meta, versions)
                    n += 2

        return work

    def deleter() -> None:
        with saver_factory(**_small(storage)) as saver:
            while not stop.is_set():
                time.sleep(0.05)
                saver.delete_thread(thread_id)

    def reader() -> None:
        with saver_factory(**_small(storage)) as saver:
            while not stop.is_set():
                found = saver.get_tuple(_cfg(thread_id))
                _whole(found)
                if found is not None:
                    _whole(saver.get_tuple(found.config))
                for listed in saver.list(_cfg(thread_id), limit=3):
                    _whole(listed)
                seen[0] += 1

    workers = [guard(writer(0)), guard(writer(1)), guard(deleter), guard(reader), guard(reader)]
    threads = [threading.Thread(target=w) for w in workers]
    for t in threads:
        t.start()
    stop.wait(3)
    stop.set()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    assert seen[0] > 5
    with saver_factory(**_small(storage)) as saver:
        saver.delete_thread(thread_id)


_CHILD = """
import json, sys
sys.path.insert(0, sys.argv[4])
from test_attack_speed import _tagged, _cfg
from langgraph_memory_plus import PostgresSaver, RedisSaver
from langgraph_memory_plus.checkpoint.sqlite import SqliteSaver
cls = {"postgres": PostgresSaver, "redis": RedisSaver, "sqlite": SqliteSaver}[sys.argv[1]]
with cls.from_conn_string(sys.argv[2], **json.loads(sys.argv[3])) as saver:
    saver.setup()
    n = int(sys.argv[5])
    while True:
        checkpoint, meta, versions = _tagged(n, 300 + n % 7)
        stored = saver.put(_cfg("crash"), checkpoint, meta, versions)
        saver.put_writes(stored, [(f"w{i}", n) for i in range(150)], "task", "")
        print(stored["configurable"]["checkpoint_id"], n, flush=True)
        n += 2
"""


def test_a_writer_killed_mid_put_leaves_whole_checkpoints_and_loses_none_acknowledged(
    saver_factory: Any, storage: Any, tmp_path: Any
) -> None:
    """Two writer processes put checkpoints of 300+ messages (SQLite: items in several
    multi-row ``INSERT`` statements) and 150 pending writes each, on one thread, and are
    killed with SIGKILL mid-write: every checkpoint they acknowledged reads back whole,
    with its writes, and nothing half-written is visible."""
    import json
    import os
    import signal
    import subprocess
    import sys

    target = str(tmp_path / "memory.db") if storage.kind == "sqlite" else storage.url
    options = {**storage.options, **_small(storage)}
    here = os.path.dirname(os.path.abspath(__file__))
    with saver_factory(**_small(storage)) as saver:
        saver.delete_thread("crash")
    acked: dict[str, int] = {}
    for round_ in range(2):
        children = [
            subprocess.Popen(
                [
                    *(sys.executable, "-c", _CHILD, storage.kind, target),
                    *(json.dumps(options), here, str(first + 1000 * round_)),
                ],
                stdout=subprocess.PIPE,
                text=True,
            )
            for first in (0, 1)
        ]
        for i, child in enumerate(children):
            assert child.stdout is not None
            for _ in range(3 + 2 * i + round_):
                line = child.stdout.readline()
                assert line, "a writer ended early"
                cid, n = line.split()
                acked[cid] = int(n)
        for child in children:
            os.kill(child.pid, signal.SIGKILL)
            child.wait()
            assert child.stdout is not None
            # acknowledged before the kill; a line the kill cut short was not
            for line in child.stdout.read().split("\n")[:-1]:
                cid, n = line.split()
                acked[cid] = int(n)
    with saver_factory(**_small(storage)) as saver:
        listed = list(saver.list(_cfg("crash")))
        for found in listed:
            _whole(found)
        assert set(acked) <= {t.config["configurable"]["checkpoint_id"] for t in listed}
        for cid, n in acked.items():
            found = saver.get_tuple(
                {"configurable": {"thread_id": "crash", "checkpoint_ns": "", "checkpoint_id": cid}}
            )
            assert found is not None and found.metadata["n"] == n
            _whole(found)
            assert sorted(found.pending_writes or []) == sorted(
                ("task", f"w{i}", n) for i in range(150)
            )
        saver.delete_thread("crash")


def _redis_server(tmp_path: Any, password: str | None = None) -> Any:
    from test_redis_saver import RedisServer

    extra = ("--requirepass", password) if password else ()
    server = RedisServer(tmp_path / "redis", *extra, password=password)
    server.start()
    return server


@pytest.mark.parametrize("where", ["single", "cluster"])
@pytest.mark.parametrize("flavour", ["sync", "async"])
def test_script_flush_storm_loses_no_write(
    tmp_path: Any, flavour: str, where: str, request: pytest.FixtureRequest
) -> None:
    """``SCRIPT FLUSH`` sent over and over while a thread is written (the runner packs
    ``EVALSHA`` itself, ``TIX_ADD`` in the put's round trip, a blocking cluster client
    sends a script straight to its node, and on ``NOSCRIPT`` the scripts are loaded and
    only what was refused is sent again): every call succeeds, every checkpoint
    acknowledged reads back whole with its writes, and the thread index counts each
    once (a resent step counted twice would show). On a private server with a password
    of URL delimiters, or on every node of the run's cluster."""
    from urllib.parse import quote

    import redis
    import redis.cluster

    from langgraph_memory_plus import AsyncRedisSaver, RedisSaver

    options: dict[str, Any] = {}
    if where == "single":
        password = "p/?#@:%w"
        server = _redis_server(tmp_path, password)
        url = server.url(auth=f":{quote(password, safe='')}@")
        admin: Any = server.admin()
        nodes: list[Any] = [None]
    else:
        server = None
        url = str(request.getfixturevalue("redis_cluster_url"))
        options["key_prefix"] = request.getfixturevalue("cluster_prefix")
        admin = redis.cluster.RedisCluster.from_url(url.replace("+cluster", ""))
        nodes = admin.get_primaries()
    stop = threading.Event()

    def flusher() -> None:
        while not stop.is_set():
            for node in nodes:
                if node is None:
                    admin.script_flush()
                else:
                    admin.execute_command("SCRIPT FLUSH", target_nodes=node)
            time.sleep(0.002)

    def check(saver: Any, acked: dict[str, int]) -> None:
        for cid, n in acked.items():
            found = saver.get_tuple(
                {"configurable": {"thread_id": "flush", "checkpoint_ns": "", "checkpoint_id": cid}}
            )
            _whole(found)
            assert found.metadata["n"] == n
            assert sorted(found.pending_writes) == [("task", f"w{i}", n) for i in range(3)]
        record = saver.threads.get("flush")
        assert record["size"]["checkpoints"] == len(acked)

    async def run_async(acked: dict[str, int]) -> None:
        async with AsyncRedisSaver.from_conn_string(url, **options) as saver:
            await saver.setup()
            for n in range(60):
                checkpoint, meta, versions = _tagged(n, 30)
                stored = await saver.aput(_cfg("flush"), checkpoint, meta, versions)
                await saver.aput_writes(stored, [(f"w{i}", n) for i in range(3)], "task", "")
                acked[stored["configurable"]["checkpoint_id"]] = n
                _whole(await saver.aget_tuple(_cfg("flush")))

    flushing = threading.Thread(target=flusher)
    acked: dict[str, int] = {}
    try:
        flushing.start()
        try:
            if flavour == "async":
                asyncio.run(run_async(acked))
            else:
                with RedisSaver.from_conn_string(url, **options) as saver:
                    saver.setup()
                    for n in range(60):
                        checkpoint, meta, versions = _tagged(n, 30)
                        stored = saver.put(_cfg("flush"), checkpoint, meta, versions)
                        saver.put_writes(stored, [(f"w{i}", n) for i in range(3)], "task", "")
                        acked[stored["configurable"]["checkpoint_id"]] = n
                        _whole(saver.get_tuple(_cfg("flush")))
        finally:
            stop.set()
            if flushing.is_alive():
                flushing.join()
        with RedisSaver.from_conn_string(url, **options) as saver:
            check(saver, acked)
            saver.delete_thread("flush")
    finally:
        admin.close()
        if server is not None:
            server.stop()


def test_first_writes_of_new_threads_racing_each_other_all_land(
    saver_factory: Any, storage: Any
) -> None:
    """A new thread's first step: its put and a ``put_writes`` of the same checkpoint
    race from two savers (PostgreSQL's write that meets the other's fresh thread row now
    waits for it within its one statement instead of taking a locked path; SQLite's put reads once
    before writing; Redis sends ``TIX_ADD`` in the put's round trip). Every write lands
    once: the checkpoint with all its writes, counted once by the thread index."""
    from langgraph._internal._constants import INTERRUPT

    ids = [f"first-{n}" for n in range(12)]
    with saver_factory(**_small(storage)) as one, saver_factory(**_small(storage)) as two:
        for thread_id in ids:
            one.delete_thread(thread_id)
        start = threading.Barrier(2)
        errors: list[BaseException] = []
        prepared = {t: _tagged(7, 20) for t in ids}

        def puts() -> None:
            try:
                for thread_id in ids:
                    checkpoint, meta_, versions = prepared[thread_id]
                    start.wait()
                    one.put(_cfg(thread_id), checkpoint, meta_, versions)
            except BaseException as exc:  # reported by the test
                errors.append(exc)

        def writes() -> None:
            try:
                for thread_id in ids:
                    checkpoint = prepared[thread_id][0]
                    stored = {**_cfg(thread_id)["configurable"], "checkpoint_id": checkpoint["id"]}
                    start.wait()
                    two.put_writes(
                        {"configurable": stored}, [("x", 1), (INTERRUPT, "stop")], "task", ""
                    )
            except BaseException as exc:  # reported by the test
                errors.append(exc)

        workers = [threading.Thread(target=puts), threading.Thread(target=writes)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        assert not errors, errors
        with saver_factory(**_small(storage)) as fresh:
            for thread_id in ids:
                found = fresh.get_tuple(_cfg(thread_id))
                _whole(found)
                assert sorted(found.pending_writes) == [
                    ("task", INTERRUPT, "stop"),
                    ("task", "x", 1),
                ], thread_id
                record = fresh.threads.get(thread_id)
                assert record["size"]["checkpoints"] == 1, (thread_id, record)
                assert record["status"] == "interrupted", (thread_id, record)
        for thread_id in ids:
            one.delete_thread(thread_id)


async def test_gathered_async_writes_of_one_thread_match_in_memory(
    async_saver_factory: Any, storage: Any
) -> None:
    """Thirty puts and their writes of one thread, gathered at once on one async saver
    (SQLite's own worker threads, PostgreSQL's hand-borrowed connections, Redis's own
    packing on pooled connections), then the same ones again (a retried batch): the
    history, each checkpoint and its writes are what ``InMemorySaver`` shows."""
    import random

    thread_id = "gathered"
    prepared = [_tagged(n, 10 + n) for n in range(30)]
    memory = InMemorySaver()
    for checkpoint, meta, versions in prepared:
        stored = memory.put(_cfg(thread_id), checkpoint, meta, versions)
        memory.put_writes(stored, [("w", meta["n"]), ("v", -meta["n"])], "task", "p")

    async def one(saver: Any, checkpoint: Any, meta: Any, versions: Any) -> None:
        stored = await saver.aput(_cfg(thread_id), checkpoint, meta, versions)
        await saver.aput_writes(stored, [("w", meta["n"]), ("v", -meta["n"])], "task", "p")

    async with async_saver_factory(**_lending(storage)) as saver:
        await saver.adelete_thread(thread_id)
        for _ in range(2):
            shuffled = random.sample(prepared, len(prepared))
            await asyncio.gather(*[one(saver, *p) for p in shuffled])
        ours = [_shown(t) async for t in saver.alist(_cfg(thread_id))]
        assert ours == [_shown(t) for t in memory.list(_cfg(thread_id))]
        assert _shown(await saver.aget_tuple(_cfg(thread_id))) == _shown(
            memory.get_tuple(_cfg(thread_id))
        )
        record = await saver.threads.aget(thread_id)
        assert record["size"]["checkpoints"] == 30
        await saver.adelete_thread(thread_id)


def _chain(exc: BaseException | None) -> str:
    """Every message and repr of an exception, its causes and contexts."""
    out = []
    while exc is not None:
        out += [str(exc), repr(exc), repr(exc.args)]
        exc = exc.__cause__ or exc.__context__
    return "\n".join(out)


async def _async_gone(cls: Any, url: str, server: Any, seen: list[str]) -> None:
    async with cls.from_conn_string(url) as saver:
        await saver.aput(_cfg("gone"), *_tagged(1, 5))
        seen.append(repr(saver))
        server.stop()
        for _ in range(2):
            for call in (saver.aput(_cfg("gone"), *_tagged(2, 5)), saver.aget_tuple(_cfg("gone"))):
                try:
                    await call
                except Exception as exc:  # what the application would log
                    seen.append(_chain(exc))
                else:
                    raise AssertionError("a call to a stopped server succeeded")
        server.start()
        stored = await saver.aput(_cfg("gone"), *_tagged(3, 5))
        _whole(await saver.aget_tuple(stored))


@pytest.mark.parametrize("flavour", ["sync", "async"])
def test_a_server_gone_mid_run_shows_no_password_and_is_used_again(
    tmp_path: Any, flavour: str
) -> None:
    """The runner's own wire reports a server that went away (stopped between calls)
    and comes back empty on its port: the errors meanwhile, their causes and the saver's
    repr never show the password (URL delimiters in it, raw or percent-encoded), and once
    the server is back the same saver writes and reads again (scripts loaded anew)."""
    from urllib.parse import quote

    from langgraph_memory_plus import AsyncRedisSaver, RedisSaver

    password = "s3/?#@:%cr3t"
    server = _redis_server(tmp_path, password)
    url = server.url(auth=f":{quote(password, safe='')}@")
    secrets = (password, quote(password, safe=""), quote(password))
    seen: list[str] = []

    def attempt(call: Any) -> None:
        try:
            call()
        except Exception as exc:  # what the application would log
            seen.append(_chain(exc))
        else:
            raise AssertionError("a call to a stopped server succeeded")

    try:
        if flavour == "sync":
            with RedisSaver.from_conn_string(url) as saver:
                saver.put(_cfg("gone"), *_tagged(1, 5))
                seen.append(repr(saver))
                server.stop()
                for _ in range(2):
                    attempt(lambda: saver.put(_cfg("gone"), *_tagged(2, 5)))
                    attempt(lambda: saver.get_tuple(_cfg("gone")))
                server.start()
                stored = saver.put(_cfg("gone"), *_tagged(3, 5))
                _whole(saver.get_tuple(stored))
        else:
            asyncio.run(_async_gone(AsyncRedisSaver, url, server, seen))
    finally:
        server.stop()
    text = "\n".join(seen)
    assert len(seen) >= 3
    for secret in secrets:
        assert secret not in text


@pytest.mark.parametrize("flavour", ["sync", "async"])
def test_postgres_connections_killed_between_calls_are_replaced(pg_url: str, flavour: str) -> None:
    """The server ends the saver's connections (``pg_terminate_backend``: a failover, an
    idle timeout) between calls: every later call works on a replacement (the async
    runner now borrows with ``getconn`` and returns with ``putconn`` by hand), nothing is
    left idle in a transaction, and the server never sees more of the saver's
    connections than its pool's two."""
    import uuid

    import psycopg

    from langgraph_memory_plus import AsyncPostgresSaver, PostgresSaver

    name = f"lgmp-a39-{uuid.uuid4().hex[:8]}"
    url = psycopg.conninfo.make_conninfo(pg_url, application_name=name)
    admin = psycopg.connect(pg_url, autocommit=True)

    def ours(where: str = "") -> list[Any]:
        return admin.execute(
            f"SELECT pid, state FROM pg_stat_activity WHERE application_name = %s {where}",
            [name],
        ).fetchall()

    def kill_all() -> None:
        killed = {pid for pid, _ in ours()}
        for pid in killed:
            admin.execute("SELECT pg_terminate_backend(%s)", [pid])
        # gone on the server: their sockets have the goodbye (noticed without a round trip)
        deadline = time.monotonic() + 5
        while killed & {pid for pid, _ in ours()} and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.05)

    most = [0]

    def note() -> None:
        most[0] = max(most[0], len(ours()))

    async def run_async() -> None:
        async with AsyncPostgresSaver.from_conn_string(url, pool_max_size=2) as saver:
            await saver.setup()
            for n in range(4):
                kill_all()
                stored = await saver.aput(_cfg("killed"), *_tagged(n, 20))
                _whole(await saver.aget_tuple(stored))
                note()

    try:
        if flavour == "sync":
            with PostgresSaver.from_conn_string(url, pool_max_size=2) as saver:
                saver.setup()
                for n in range(4):
                    kill_all()
                    stored = saver.put(_cfg("killed"), *_tagged(n, 20))
                    _whole(saver.get_tuple(stored))
                    note()
                saver.delete_thread("killed")
        else:
            asyncio.run(run_async())
        assert not ours("AND state LIKE 'idle in transaction%%'")
        assert most[0] <= 2
    finally:
        admin.close()
