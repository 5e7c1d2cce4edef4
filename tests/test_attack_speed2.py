"""Attacks on issue 39's second speed pass, by someone who did not write it.

The pass changed how a PostgreSQL write meets a racing writer's new thread row (it now
waits for it inside its one statement, ``ON CONFLICT DO UPDATE``), how the sync
PostgreSQL runner borrows its connection, how the async Redis runner exchanges a script
call, and several shared micro-cuts (``decoding``, base-36 versions, the run's user
check, reads retrying while failures differ). These tests interleave what the changes
were not written for: a deletion between a fenced write's snapshot and its insert,
interrupts and killed backends on a pool of one, cancelled Redis calls whose replies
come late, and the shared helpers against their former definitions.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
import uuid
from typing import Any

import psycopg
import pytest

pytestmark = pytest.mark.storage


def _wait_for_lock_wait(conn: psycopg.Connection[Any], like: str) -> None:
    """Until a backend of this database waits on a lock in a statement matching ``like``."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
            "AND pid <> pg_backend_pid() AND datname = current_database() AND query LIKE %s",
            (like,),
        ).fetchone()
        if row and row[0]:
            return
        time.sleep(0.02)
    raise AssertionError(f"no statement like {like!r} ever waited on a lock")


# -- PostgreSQL: a fenced write of a new thread racing delete_thread ---------------------

_RACE_CALLS = [
    "put_writes",
    "put",
    # the write's statements share a transaction: a fence lock taken by the first
    # would be held while the next waits for the thread row
    "put with retention",
    "put with a user",
    "put_writes with a user",
    "put in pipeline mode",
    "put_writes in pipeline mode",
    "aput with retention",
    "aput_writes with a user",
    "put_writes on a connection outside autocommit",
    # the other takers of both locks: prune's deletion, and sweep_expired (on an
    # expired row, in a schema of its own: it sweeps every expired thread it sees)
    "put with retention, pruned",
    "put, swept",
    "put with retention, swept",
]


@pytest.mark.parametrize(
    ("call", "deleted"),
    [(call, True) for call in _RACE_CALLS]
    + [(call, False) for call in _RACE_CALLS if not call.endswith("swept")],
)
def test_pg_fenced_first_write_racing_a_new_thread_row_holds_no_fence_while_it_waits(
    pg_url: str, call: str, deleted: bool
) -> None:
    """A fenced write of a new thread whose snapshot missed the thread row another
    writer is inserting waits for that row holding no lock of the fence row: a
    deletion (thread row first, fence row second, as ``delete_thread``, ``prune`` and
    ``sweep_expired`` take them) is never blocked by it, so the two cannot deadlock,
    whatever statements share the write's transaction (retention's trim, a user's
    erasure check, pipeline mode, a caller's transaction, async). Deleted meanwhile,
    nothing of the write stays and the deletion succeeds; kept, the write lands once
    the other row commits (it is not declined and lost). ``sweep_expired`` is no
    deletion: the write revives the thread, before or after the sweep.

    Before (one statement that share-locked the fence, then declined on the conflict
    and was sent again): the fence row was locked while the write waited, and in a
    transaction ``DeadlockDetected`` after 1 s (10 of 13 of these variants)."""
    from langgraph.checkpoint.base import empty_checkpoint

    from langgraph_memory_plus.checkpoint.config import thread_key
    from langgraph_memory_plus.checkpoint.postgres import AsyncPostgresSaver, PostgresSaver
    from langgraph_memory_plus.errors import FencedWriteError

    thread_id = f"fence-race-{uuid.uuid4().hex}"
    tk = thread_key(thread_id)
    checkpoint = empty_checkpoint()
    outcome: dict[str, BaseException | None] = {}
    swept = call.endswith("swept")
    schema = f"lgmp_fence_sweep_{uuid.uuid4().hex[:8]}" if swept else "public"
    options: dict[str, Any] = {
        "pool_max_size": 3,
        "keep_last": 2 if "retention" in call else None,
        "pipeline": "pipeline" in call,
        "schema": schema,
    }
    with (
        PostgresSaver.from_conn_string(pg_url, **options) as saver,
        psycopg.connect(pg_url) as racer,
        psycopg.connect(pg_url) as probe,
        psycopg.connect(pg_url, autocommit=True) as other,
        contextlib.ExitStack() as cleanup,
    ):
        if swept:
            cleanup.callback(other.execute, f'DROP SCHEMA "{schema}" CASCADE')
        saver.setup()
        lease = saver.fence.acquire(thread_id, owner="w1")
        configurable = {
            "thread_id": thread_id,
            "checkpoint_ns": "",
            "checkpoint_id": checkpoint["id"],
        }
        if "user" in call:  # the erasure check opens the write's transaction
            configurable["user_id"] = "u1"
        config = lease.config({"configurable": configurable})
        metadata: Any = {"source": "loop", "step": 0}

        async def awrite() -> None:
            async with AsyncPostgresSaver.from_conn_string(pg_url, **options) as asaver:
                if call.startswith("aput_writes"):
                    await asaver.aput_writes(config, [("ch", 1)], "task-1")
                else:
                    await asaver.aput(config, checkpoint, metadata, {})

        def write() -> None:
            try:
                if call.startswith("a"):
                    asyncio.run(awrite())
                elif call.endswith("outside autocommit"):  # every call in a transaction
                    with psycopg.connect(pg_url) as own:
                        PostgresSaver(own).put_writes(config, [("ch", 1)], "task-1")
                elif call.startswith("put_writes"):
                    saver.put_writes(config, [("ch", 1)], "task-1")
                else:
                    saver.put(config, checkpoint, metadata, {})
                outcome["write"] = None
            except BaseException as exc:  # reported below
                outcome["write"] = exc

        def delete() -> None:
            try:
                if call.endswith("pruned"):
                    saver.prune([thread_id], strategy="delete")
                elif swept:
                    saver.sweep_expired()
                else:
                    saver.delete_thread(thread_id)
                outcome["delete"] = None
            except BaseException as exc:  # reported below
                outcome["delete"] = exc

        # Another writer's first write of the thread inserts its row, not committed yet
        # (expired already, for sweep_expired).
        racer.execute(
            f'INSERT INTO "{schema}".lgmp_threads (thread_key, thread_id, expires_at) '
            "VALUES (%s, %s, CASE WHEN %s THEN now() - interval '1 second' END)",
            (tk, thread_id.encode(), swept),
        )
        writer = threading.Thread(target=write, daemon=True)
        writer.start()
        _wait_for_lock_wait(other, "WITH %")
        # The write waits for that row: it must hold no lock of the fence row.
        probe.execute("SET lock_timeout = '1s'")
        probe.execute(
            f'SELECT 1 FROM "{schema}".lgmp_fences WHERE thread_key = %s FOR UPDATE NOWAIT',
            (tk,),
        )
        probe.rollback()
        if deleted:
            racer.commit()
            deleter = threading.Thread(target=delete, daemon=True)
            deleter.start()
            deleter.join(30)
            assert not deleter.is_alive()
        else:
            racer.commit()
        writer.join(30)
        assert not writer.is_alive()
        stored = other.execute(
            f'SELECT (SELECT count(*) FROM "{schema}".lgmp_task_writes WHERE thread_key = %s)'
            f' + (SELECT count(*) FROM "{schema}".lgmp_checkpoints WHERE thread_key = %s)',
            (tk, tk),
        ).fetchone()
    if swept:
        assert outcome["delete"] is None, repr(outcome["delete"])
        assert outcome["write"] is None, repr(outcome["write"])
        assert stored == (1,)
    elif deleted:
        assert outcome["delete"] is None, repr(outcome["delete"])
        # refused, or written before the deletion took it
        assert outcome["write"] is None or isinstance(outcome["write"], FencedWriteError), repr(
            outcome["write"]
        )
        assert stored == (0,)
    else:
        assert outcome["write"] is None, repr(outcome["write"])
        assert stored == (1,)


# -- PostgreSQL sync runner: the pool connection after failures ---------------------------


def _rows_table(table: str) -> tuple[Any, Any]:
    """Plans on ``table``: a write then ``last`` (one transaction), and a count."""
    from langgraph_memory_plus.drivers.postgres import Query

    def write_then(last: str, then: BaseException | None = None) -> Any:
        yield Query(f"INSERT INTO {table} VALUES (1)")
        yield Query(last, fetch=True)
        if then is not None:
            raise then

    def count() -> Any:
        rows = yield Query(f"SELECT count(*) FROM {table}", fetch=True)
        return rows[0][0]

    return write_then, count


@pytest.fixture
def ctrl_c() -> Any:
    """``_thread.interrupt_main`` delivers a Ctrl-C only if Python handles SIGINT: a suite
    started in the background of a shell without job control (``cmd &`` in a script)
    inherits SIGINT ignored, and the interrupt is then dropped. Python's own handler for
    the test's length, whatever the suite was started from."""
    import signal

    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def test_pg_sync_runner_returns_its_one_connection_clean_after_every_kind_of_failure(
    pg_url: str, ctrl_c: None
) -> None:
    """The sync runner borrows and returns the pool connection itself now: after a
    statement error inside a transaction, a ``KeyboardInterrupt`` (raised by the plan, and
    delivered while a statement runs), a ``BaseException`` of the plan's and the server
    killing the backend mid-statement, the pool of one lends a connection at once, idle,
    with nothing of the failed plans committed; fifty failures leak nothing."""
    import _thread

    from langgraph_memory_plus.drivers.postgres import PgRunner, open_pool

    table = f"lgmp_a392_{uuid.uuid4().hex[:10]}"
    with (
        open_pool(pg_url, min_size=1, max_size=1, prepare_threshold=0) as pool,
        psycopg.connect(pg_url, autocommit=True) as other,
    ):
        pool.timeout = 5.0
        runner = PgRunner(pool, pipeline=False, owner="test")
        other.execute(f"CREATE TABLE {table} (x int)")
        write_then, count = _rows_table(table)
        try:
            for _ in range(50):
                with pytest.raises(psycopg.errors.DivisionByZero):
                    runner.run(write_then("SELECT 1 / 0"))
            assert runner.run(count()) == 0
            for exc in (KeyboardInterrupt(), SystemExit(3), GeneratorExit()):
                with pytest.raises(type(exc)):
                    runner.run(write_then("SELECT 1", exc))
                assert runner.run(count()) == 0
            # Ctrl-C while the server runs the statement
            timer = threading.Timer(0.5, _thread.interrupt_main)
            timer.start()
            try:
                with pytest.raises(KeyboardInterrupt):
                    runner.run(write_then("SELECT pg_sleep(20)"))
            finally:
                timer.cancel()
            assert runner.run(count()) == 0

            # the server ends the backend mid-statement
            def kill() -> None:
                deadline = time.monotonic() + 10
                while time.monotonic() < deadline:
                    row = other.execute(
                        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                        "WHERE datname = current_database() AND query LIKE 'SELECT pg_sleep(19)%'"
                        " AND pid <> pg_backend_pid()"
                    ).fetchone()
                    if row and row[0]:
                        return
                    time.sleep(0.05)

            killer = threading.Thread(target=kill)
            killer.start()
            with pytest.raises(Exception) as failed:
                runner.run(write_then("SELECT pg_sleep(19)"))
            killer.join(15)
            assert not isinstance(failed.value, AssertionError)
            started = time.monotonic()
            assert runner.run(count()) == 0
            assert time.monotonic() - started < 4.0  # not the pool's timeout
            with pool.connection() as conn:
                assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
            runner.run(write_then("SELECT 1"))
            assert runner.run(count()) == 1
        finally:
            other.execute(f"DROP TABLE {table}")


# -- async Redis: a reply that comes late, a call cancelled while it waits -----------------


class _SlowProxy:
    """A loopback TCP proxy to a Redis server whose replies wait ``delay`` seconds."""

    def __init__(self, host: str, port: int) -> None:
        self.upstream = (host, port)
        self.delay = 0.0
        self.server: asyncio.AbstractServer | None = None
        self.tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return int(self.server.sockets[0].getsockname()[1])

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(*self.upstream)

        async def pump(src: asyncio.StreamReader, dst: asyncio.StreamWriter, slow: bool) -> None:
            with contextlib.suppress(Exception):
                while data := await src.read(65536):
                    if slow and self.delay:
                        await asyncio.sleep(self.delay)
                    dst.write(data)
                    await dst.drain()
            with contextlib.suppress(Exception):
                dst.close()

        for task in (
            asyncio.ensure_future(pump(reader, up_writer, False)),
            asyncio.ensure_future(pump(up_reader, writer, True)),
        ):
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)

    async def stop(self) -> None:
        assert self.server is not None
        self.server.close()
        for task in list(self.tasks):
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)


async def _proxy(redis_url: str) -> tuple[_SlowProxy, str]:
    from urllib.parse import urlsplit

    parts = urlsplit(redis_url)
    proxy = _SlowProxy(parts.hostname or "127.0.0.1", parts.port or 6379)
    port = await proxy.start()
    return proxy, f"redis://127.0.0.1:{port}{parts.path or '/0'}"


@pytest.mark.parametrize("protocol", [2, 3])
async def test_async_redis_call_cancelled_while_its_reply_is_late_leaves_no_stale_reply(
    redis_url: str, protocol: int
) -> None:
    """``task.cancel()`` and ``asyncio.wait_for`` around a call whose reply is on its way:
    the next call on the pool's only connection reads its own reply, not the cancelled
    call's; a reply later than the socket timeout ends as ``TimeoutError``."""
    import redis

    from langgraph_memory_plus.drivers.redis import _AsyncWire, _plain, async_client_from_url

    proxy, url = await _proxy(redis_url)
    client = async_client_from_url(url, protocol=protocol, socket_timeout=0.5, pool_max_size=1)
    try:
        wire = _AsyncWire(client)
        conn = await client.connection_pool.get_connection()
        assert _plain(conn)
        await client.connection_pool.release(conn)
        assert await wire.send([("ECHO", b"warm")]) == [b"warm"]
        for round_ in range(3):
            proxy.delay = 0.4
            call = asyncio.ensure_future(wire.send([("ECHO", b"cancelled"), ("ECHO", b"too")]))
            await asyncio.sleep(0.1)
            call.cancel()
            with pytest.raises(asyncio.CancelledError):
                await call
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(wire.send([("ECHO", b"timed out")]), 0.1)
            proxy.delay = 0.0
            await asyncio.sleep(0.5)  # the late replies arrive meanwhile
            assert await wire.send([("ECHO", f"next {round_}".encode())]) == [
                f"next {round_}".encode()
            ]
        proxy.delay = 0.8  # past the socket timeout, every retry
        with pytest.raises(redis.TimeoutError):
            await wire.send([("ECHO", b"late")])
        proxy.delay = 0.0
        await asyncio.sleep(0.9)
        assert await wire.send([("ECHO", b"after")]) == [b"after"]
    finally:
        await client.aclose()
        await proxy.stop()


async def test_async_redis_saver_read_after_a_cancelled_put_is_its_own(
    redis_url: str, redis_prefix: str
) -> None:
    """The saver's calls are scripts: a put cancelled while its reply is late, then a read
    on the same (only) connection, returns the read's checkpoint and the put either
    happened whole or not at all."""
    from langgraph.checkpoint.base import empty_checkpoint

    from langgraph_memory_plus import AsyncRedisSaver

    proxy, url = await _proxy(redis_url)
    prefix = f"{redis_prefix}-a392-{uuid.uuid4().hex[:10]}"  # removed by the fixture
    try:
        async with AsyncRedisSaver.from_conn_string(
            url, key_prefix=prefix, pool_max_size=1
        ) as saver:
            await saver.setup()
            cfg: Any = {"configurable": {"thread_id": "t/一.x", "checkpoint_ns": ""}}
            first = empty_checkpoint()
            first["channel_values"] = {"a": "one"}
            first["channel_versions"] = {"a": 1}
            saved = await saver.aput(cfg, first, {"step": 0}, {"a": 1})
            for n in range(3):
                second = empty_checkpoint()
                second["channel_values"] = {"a": f"two {n}"}
                second["channel_versions"] = {"a": 2 + n}
                proxy.delay = 0.3
                with pytest.raises(asyncio.TimeoutError):
                    await asyncio.wait_for(
                        saver.aput(saved, second, {"step": 1 + n}, {"a": 2 + n}), 0.1
                    )
                proxy.delay = 0.0
                got = await saver.aget_tuple(cfg)
                assert got is not None
                assert got.checkpoint["id"] in (first["id"], second["id"])
                want = "one" if got.checkpoint["id"] == first["id"] else f"two {n}"
                assert got.checkpoint["channel_values"] == {"a": want}
                listed = [c.checkpoint["id"] async for c in saver.alist(cfg)]
                assert first["id"] in listed
    finally:
        await proxy.stop()


# -- PostgreSQL: what a new thread's first write meets ------------------------------------


@pytest.mark.parametrize("fenced", [False, True])
@pytest.mark.parametrize("other_row", ["tombstone", "rolled back", "expired"])
def test_pg_first_write_waiting_on_a_racing_thread_row_acts_on_the_row_as_committed(
    pg_url: str, other_row: str, fenced: bool
) -> None:
    """The write whose snapshot has no thread row waits for another transaction's insert
    of it. Whatever that insert turns out to be, the write acts on it as committed: a
    tombstone (a deletion's row) refuses a put continuing the deleted run (deletion is
    final), a rolled-back insert
    leaves the write to create the row (with its expiry, and the index row's), an expired
    row is a thread that expired (purged and revived)."""
    from langgraph.checkpoint.base import empty_checkpoint

    from langgraph_memory_plus.checkpoint.config import thread_key
    from langgraph_memory_plus.checkpoint.postgres import PostgresSaver

    thread_id = f"first-{other_row}-{uuid.uuid4().hex}"
    tk = thread_key(thread_id)
    checkpoint = empty_checkpoint()
    checkpoint["channel_values"] = {"a": "v"}
    checkpoint["channel_versions"] = {"a": 1}
    failed: list[BaseException] = []
    with (
        PostgresSaver.from_conn_string(pg_url, ttl={"default_ttl": 60}, pool_max_size=2) as saver,
        psycopg.connect(pg_url) as other,
        psycopg.connect(pg_url, autocommit=True) as look,
    ):
        saver.setup()
        config: Any = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
        if other_row == "tombstone":  # a run of the deleted thread going on: a parent
            config["configurable"]["checkpoint_id"] = empty_checkpoint()["id"]
        if fenced:
            config = saver.fence.acquire(thread_id, owner="w1").config(config)

        def write() -> None:
            try:
                saver.put(config, checkpoint, {"source": "input", "step": -1}, {"a": 1})
            except BaseException as exc:  # reported below
                failed.append(exc)

        if other_row == "tombstone":
            other.execute(
                "INSERT INTO public.lgmp_threads (thread_key, thread_id, expires_at, "
                "deleted_at, live_after) VALUES (%s, NULL, NULL, now(), %s)",
                (tk, "z" * 32),
            )
        else:
            expiry = (
                "now() - interval '1 hour'"
                if other_row == "expired"
                else "now() + interval '1 hour'"
            )
            other.execute(
                "INSERT INTO public.lgmp_threads (thread_key, thread_id, expires_at) "
                f"VALUES (%s, %s, {expiry})",
                (tk, thread_id.encode()),
            )
        writer = threading.Thread(target=write)
        writer.start()
        _wait_for_lock_wait(look, "%lgmp_threads%")
        if other_row == "rolled back":
            other.rollback()
        else:
            other.commit()
        writer.join(20)
        assert not writer.is_alive() and not failed, failed
        stored = look.execute(
            "SELECT count(*) FROM public.lgmp_checkpoints WHERE thread_key = %s", (tk,)
        ).fetchone()
        rows = look.execute(
            "SELECT t.thread_id IS NOT NULL, t.expires_at > now(), i.expires_at = t.expires_at,"
            " i.checkpoints FROM public.lgmp_threads t "
            "LEFT JOIN public.lgmp_thread_index i USING (thread_key) WHERE thread_key = %s",
            (tk,),
        ).fetchall()
        got = saver.get_tuple({"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}})
        listed = saver.threads.count()
        saver.delete_thread(thread_id)
    if other_row == "tombstone":
        assert stored == (0,) and got is None
        assert rows[0][0] is False
    else:
        assert stored == (1,)
        assert got is not None and got.checkpoint["channel_values"] == {"a": "v"}
        assert rows == [(True, True, True, 1)]
        assert listed >= 1


@pytest.mark.parametrize("fenced", [False, True])
def test_pg_many_new_threads_first_step_put_and_writes_side_by_side(
    pg_url: str, fenced: bool
) -> None:
    """Every new thread's first step: its put and its put_writes at once, on many fresh
    threads from several workers. Each thread ends with its checkpoint, its writes, one
    index row counting one checkpoint and carrying the thread's expiry."""
    from concurrent.futures import ThreadPoolExecutor

    from langgraph.checkpoint.base import empty_checkpoint

    from langgraph_memory_plus.checkpoint.config import thread_key
    from langgraph_memory_plus.checkpoint.postgres import PostgresSaver

    run = uuid.uuid4().hex[:8]
    ids = [f"fan-{run}-{n}" for n in range(24)]
    with (
        PostgresSaver.from_conn_string(pg_url, ttl={"default_ttl": 60}, pool_max_size=4) as saver,
        psycopg.connect(pg_url, autocommit=True) as look,
    ):
        saver.setup()

        def step(thread_id: str) -> list[Any]:
            config: Any = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
            if fenced:
                config = saver.fence.acquire(thread_id, owner="w").config(config)
            checkpoint = empty_checkpoint()
            at = {"configurable": {**config["configurable"], "checkpoint_id": checkpoint["id"]}}
            with ThreadPoolExecutor(2) as two:
                both = [
                    two.submit(saver.put, config, checkpoint, {"source": "loop", "step": 0}, {}),
                    two.submit(saver.put_writes, at, [("ch", 1)], "task-1"),
                ]
                return [f.result() for f in both]

        with ThreadPoolExecutor(3) as pool:
            list(pool.map(step, ids))
        tks = [thread_key(t) for t in ids]
        rows = look.execute(
            "SELECT count(*) FILTER (WHERE i.expires_at = t.expires_at AND i.checkpoints = 1"
            " AND t.expires_at > now()), count(*) FROM public.lgmp_threads t "
            "JOIN public.lgmp_thread_index i USING (thread_key) WHERE thread_key = ANY(%s)",
            (tks,),
        ).fetchone()
        writes = look.execute(
            "SELECT count(DISTINCT thread_key) FROM public.lgmp_task_writes "
            "WHERE thread_key = ANY(%s)",
            (tks,),
        ).fetchone()
        for thread_id in ids:
            got = saver.get_tuple({"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}})
            assert got is not None and got.pending_writes == [("task-1", "ch", 1)]
            saver.delete_thread(thread_id)
    assert rows == (len(ids), len(ids))
    assert writes == (len(ids),)


async def test_async_redis_script_error_replies_are_the_sync_savers(redis_url: str) -> None:
    """Each of a thread's keys holding the wrong type (``WRONGTYPE`` inside the scripts):
    the async saver's put and read fail as the sync saver's (whose exchange did not
    change), with the same error class and text, and work again once the key is back."""
    import redis as redis_py
    from langgraph.checkpoint.base import empty_checkpoint

    from langgraph_memory_plus import AsyncRedisSaver, RedisSaver

    prefix = f"lgmp-a392-{uuid.uuid4().hex[:10]}"
    admin = redis_py.Redis.from_url(redis_url)
    cfg: Any = {"configurable": {"thread_id": "线程/a.b", "checkpoint_ns": ""}}

    def outcome(call: Any) -> Any:
        try:
            call()
        except Exception as exc:
            return type(exc), str(exc)
        return "ok"

    async def aoutcome(call: Any) -> Any:
        try:
            await call()
        except Exception as exc:
            return type(exc), str(exc)
        return "ok"

    try:
        with RedisSaver.from_conn_string(redis_url, key_prefix=prefix) as sync:
            sync.setup()
            sync.put(cfg, empty_checkpoint(), {}, {})
            keys = sorted(admin.scan_iter(match=f"{prefix}*"))
            assert keys
            async with AsyncRedisSaver.from_conn_string(redis_url, key_prefix=prefix) as saver:
                for key in keys:
                    dumped = admin.dump(key)
                    admin.delete(key)
                    admin.set(key, b"x")
                    want = [
                        outcome(lambda: sync.put(cfg, empty_checkpoint(), {}, {})),
                        outcome(lambda: sync.get_tuple(cfg)),
                    ]
                    got = [
                        await aoutcome(lambda: saver.aput(cfg, empty_checkpoint(), {}, {})),
                        await aoutcome(lambda: saver.aget_tuple(cfg)),
                    ]
                    assert got == want, key
                    admin.delete(key)
                    admin.restore(key, 0, dumped)
                    assert await saver.aget_tuple(cfg) is not None
    finally:
        for key in admin.scan_iter(match=f"{prefix}*"):
            admin.delete(key)
        admin.close()


def test_pg_first_write_waiting_on_a_killed_writers_row_goes_on(pg_url: str) -> None:
    """The other writer of a new thread is a process killed (SIGKILL) while its
    transaction holds the new thread row: the write waiting for that row inside its
    statement goes on once the server drops the dead session, and stores the thread
    whole (its row, expiry and index row)."""
    import signal
    import subprocess
    import sys

    from langgraph.checkpoint.base import empty_checkpoint

    from langgraph_memory_plus.checkpoint.config import thread_key
    from langgraph_memory_plus.checkpoint.postgres import PostgresSaver

    thread_id = f"killed-{uuid.uuid4().hex}"
    tk = thread_key(thread_id)
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time, psycopg\n"
            "conn = psycopg.connect(sys.argv[1])\n"
            "conn.execute('INSERT INTO public.lgmp_threads (thread_key, thread_id, expires_at)"
            " VALUES (%s, %s, now() + interval \\'1 day\\')', (bytes.fromhex(sys.argv[2]),"
            " sys.argv[3].encode()))\n"
            "print('ready', flush=True)\n"
            "time.sleep(120)\n",
            pg_url,
            tk.hex(),
            thread_id,
        ],
        stdout=subprocess.PIPE,
    )
    failed: list[BaseException] = []
    try:
        with (
            PostgresSaver.from_conn_string(
                pg_url, ttl={"default_ttl": 60}, pool_max_size=2
            ) as saver,
            psycopg.connect(pg_url, autocommit=True) as look,
        ):
            saver.setup()
            assert child.stdout is not None and child.stdout.readline().strip() == b"ready"
            checkpoint = empty_checkpoint()
            config: Any = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}

            def write() -> None:
                try:
                    saver.put(config, checkpoint, {"source": "input", "step": -1}, {})
                except BaseException as exc:  # reported below
                    failed.append(exc)

            writer = threading.Thread(target=write)
            writer.start()
            _wait_for_lock_wait(look, "%lgmp_threads%")
            child.send_signal(signal.SIGKILL)
            child.wait(10)
            writer.join(30)
            assert not writer.is_alive() and not failed, failed
            rows = look.execute(
                # the saver's expiry (60 minutes), not the dead writer's (a day)
                "SELECT t.expires_at > now() + interval '30 minutes', "
                "t.expires_at < now() + interval '2 hours', i.expires_at = t.expires_at, "
                "i.checkpoints FROM public.lgmp_threads t JOIN public.lgmp_thread_index i "
                "USING (thread_key) WHERE thread_key = %s",
                (tk,),
            ).fetchall()
            assert saver.get_tuple(config) is not None
            saver.delete_thread(thread_id)
        assert rows == [(True, True, True, 1)]
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(10)


# -- shared path: decoding, the run's user -------------------------------------------------


@pytest.mark.parametrize("read", ["get_tuple", "list"])
def test_pg_driver_error_inside_a_list_read_passes_through_unchanged(
    pg_url: str, monkeypatch: pytest.MonkeyPatch, read: str
) -> None:
    """``decoding`` is a class now; a driver error thrown into the plan while it resolves
    a list's items (inside ``with decoding(...)``) still reaches the caller as itself,
    once: not ``CorruptDataError``, and not read again as a race with deletion."""
    from langchain_core.messages import HumanMessage
    from langgraph.checkpoint.base import empty_checkpoint

    from langgraph_memory_plus.checkpoint.postgres import PostgresSaver
    from langgraph_memory_plus.drivers import postgres as runner_module

    execute = runner_module._execute
    failed: list[str] = []

    def failing(cur: Any, query: Any) -> Any:
        if "WITH pages AS" in query.sql:  # a list's items (``_fetch_list``)
            failed.append(query.sql)
            raise psycopg.OperationalError("server closed the connection unexpectedly")
        return execute(cur, query)

    thread_id = f"driver-{uuid.uuid4().hex}"
    config: Any = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
    with PostgresSaver.from_conn_string(pg_url, pool_max_size=2) as saver:
        saver.setup()
        checkpoint = empty_checkpoint()
        checkpoint["channel_values"] = {"messages": [HumanMessage(f"m{n}") for n in range(60)]}
        checkpoint["channel_versions"] = {"messages": 1}
        saver.put(config, checkpoint, {}, {"messages": 1})
    # another process's saver: it knows none of the list's items
    with PostgresSaver.from_conn_string(pg_url, pool_max_size=2) as saver:
        monkeypatch.setattr(runner_module, "_execute", failing)
        with pytest.raises(psycopg.OperationalError) as raised:
            if read == "get_tuple":
                saver.get_tuple(config)
            else:
                list(saver.list(config))
        monkeypatch.undo()
        assert "corrupt" not in str(raised.value)
        assert len(failed) == 1
        got = saver.get_tuple(config)
        assert got is not None and len(got.checkpoint["channel_values"]["messages"]) == 60
        saver.delete_thread(thread_id)


@pytest.mark.parametrize(
    "value",
    ["a\x00b", b"bytes", 1.5, True, ["u"], {"u": 1}, object()],
    ids=["nul", "bytes", "float", "bool", "list", "dict", "object"],
)
@pytest.mark.parametrize("place", ["configurable", "metadata", "context"])
def test_run_user_id_refused_as_check_user_id_refuses_it(value: Any, place: str) -> None:
    """``run_value`` skips the check for plain text without a NUL: every other id is
    refused in every place it can be given, with ``check_user_id``'s message naming
    that place; a ``str`` subclass holding a NUL too."""
    from langgraph_memory_plus.checkpoint.context import run_value
    from langgraph_memory_plus.errors import InvalidConfigError
    from langgraph_memory_plus.threads.core import check_user_id

    where = {
        "configurable": "config['configurable']['user_id']",
        "metadata": "config['metadata']['user_id']",
        "context": "the runtime context's user_id",
    }[place]
    with pytest.raises(InvalidConfigError) as expected:
        check_user_id(value, where)
    with pytest.raises(InvalidConfigError) as raised:
        run_value("user_id", **{place: {"user_id": value}})
    assert str(raised.value) == str(expected.value)

    class Text(str):
        pass

    with pytest.raises(InvalidConfigError):
        run_value("user_id", **{place: {"user_id": Text("x\x00y")}})


@pytest.mark.parametrize("autocommit", [True, False])
def test_pg_sync_runner_on_one_connection_leaves_it_idle_after_failures(
    pg_url: str, autocommit: bool, ctrl_c: None
) -> None:
    """The runner on a single ``Connection`` (not a pool), autocommit or not: a statement
    error inside the plan's transaction, a ``KeyboardInterrupt`` of the plan's and one
    delivered while the server runs a statement, and a failing standalone statement each
    leave the connection idle with nothing committed."""
    import _thread

    from langgraph_memory_plus.drivers.postgres import PgRunner, Query

    table = f"lgmp_a392_{uuid.uuid4().hex[:10]}"
    write_then, count = _rows_table(table)

    def standalone_fails() -> Any:
        yield Query("SELECT 1 / 0", fetch=True, standalone=True)

    with (
        psycopg.connect(pg_url, autocommit=True) as other,
        psycopg.connect(pg_url, autocommit=autocommit) as conn,
    ):
        other.execute(f"CREATE TABLE {table} (x int)")
        runner = PgRunner(conn, pipeline=False, owner="test")
        idle = psycopg.pq.TransactionStatus.IDLE
        try:
            with pytest.raises(psycopg.errors.DivisionByZero):
                runner.run(write_then("SELECT 1 / 0"))
            assert conn.info.transaction_status == idle and runner.run(count()) == 0
            with pytest.raises(KeyboardInterrupt):
                runner.run(write_then("SELECT 1", KeyboardInterrupt()))
            assert conn.info.transaction_status == idle and runner.run(count()) == 0
            with pytest.raises(psycopg.errors.DivisionByZero):
                runner.run(standalone_fails())
            assert conn.info.transaction_status == idle and runner.run(count()) == 0
            timer = threading.Timer(0.5, _thread.interrupt_main)
            timer.start()
            try:
                with pytest.raises(KeyboardInterrupt):
                    runner.run(write_then("SELECT pg_sleep(20)"))
            finally:
                timer.cancel()
            assert conn.info.transaction_status == idle and runner.run(count()) == 0
            runner.run(write_then("SELECT 1"))
            assert conn.info.transaction_status == idle and runner.run(count()) == 1
        finally:
            other.execute(f"DROP TABLE {table}")


@pytest.mark.parametrize("call", ["put", "put_writes"])
def test_pg_fenced_first_write_of_a_new_thread_takes_the_locked_path(
    pg_url: str, monkeypatch: pytest.MonkeyPatch, call: str
) -> None:
    """Fenced, the fast statement inserts no thread row (a refusal after it would leave
    the row committed, see tests/test_attack_fence_order.py): a new thread's first write,
    here racing another writer's new row, declines and takes the locked path, which waits
    for that row in a transaction holding no fence lock meanwhile (see the race above):
    two statements, one transaction, and its rows are stored."""
    from langgraph.checkpoint.base import empty_checkpoint

    from langgraph_memory_plus.checkpoint.config import thread_key
    from langgraph_memory_plus.checkpoint.postgres import PostgresSaver
    from langgraph_memory_plus.drivers import postgres as runner_module

    sent: list[str] = []
    opened: list[bool] = []
    execute = runner_module._execute
    transaction = psycopg.Connection.transaction

    def counting(cur: Any, query: Any) -> Any:
        sent.append(query.sql)
        return execute(cur, query)

    def counted(self: psycopg.Connection[Any], *args: Any, **kwargs: Any) -> Any:
        opened.append(True)
        return transaction(self, *args, **kwargs)

    thread_id = f"fenced-race-{uuid.uuid4().hex}"
    tk = thread_key(thread_id)
    checkpoint = empty_checkpoint()
    failed: list[BaseException] = []
    with (
        PostgresSaver.from_conn_string(pg_url, ttl={"default_ttl": 60}, pool_max_size=2) as saver,
        psycopg.connect(pg_url) as other,
        psycopg.connect(pg_url, autocommit=True) as look,
    ):
        saver.setup()
        lease = saver.fence.acquire(thread_id, owner="w1")
        config: Any = lease.config({"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}})

        def write() -> None:
            try:
                if call == "put":
                    saver.put(config, checkpoint, {"source": "input", "step": -1}, {})
                else:
                    at = {
                        "configurable": {
                            **config["configurable"],
                            "checkpoint_id": checkpoint["id"],
                        }
                    }
                    saver.put_writes(at, [("ch", 1)], "task-1")
            except BaseException as exc:  # reported below
                failed.append(exc)

        other.execute(
            "INSERT INTO public.lgmp_threads (thread_key, thread_id, expires_at) "
            "VALUES (%s, %s, now() + interval '1 hour')",
            (tk, thread_id.encode()),
        )
        monkeypatch.setattr(runner_module, "_execute", counting)
        monkeypatch.setattr(psycopg.Connection, "transaction", counted)
        writer = threading.Thread(target=write)
        writer.start()
        _wait_for_lock_wait(look, "%lgmp_threads%")
        other.commit()
        writer.join(20)
        monkeypatch.undo()
        assert not failed and not writer.is_alive(), failed
        table = "lgmp_checkpoints" if call == "put" else "lgmp_task_writes"
        stored = look.execute(
            f"SELECT count(*) FROM public.{table} WHERE thread_key = %s", (tk,)
        ).fetchone()
        saver.delete_thread(thread_id)
    assert stored == (1,)
    assert len(sent) == 2 and sent[0] != sent[1]
    assert opened == [True]
