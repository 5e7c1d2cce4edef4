"""Retention against late pending writes, on every backend.

LangGraph stores a step's pending writes on background threads: a task's ``put_writes``
may land after the next checkpoints' puts, so after ``keep_last`` (or ``prune``) deleted
its checkpoint. Such a write is never read again (``get_tuple`` of the checkpoint is
``None``, delta replay never reaches below the trim's floor), so the next trim or prune
must take it, as it takes the writes of the checkpoints it deletes; otherwise it stays
stored until the thread is deleted. Writes that come before their checkpoint (its put on
its way, newer than anything stored) must stay.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import uuid
from contextlib import closing
from typing import Any

import pytest
from conftest import SaverFactory, Storage
from test_postgres_saver import cfg, make_checkpoint

pytestmark = pytest.mark.storage

WRITERS = 4
ROUNDS = 6


def _small(storage: Storage) -> dict[str, Any]:
    """Options of a saver that takes few of the shared PostgreSQL server's connections."""
    return {"pool_max_size": WRITERS + 1} if storage.kind == "postgres" else {}


Ids = set[tuple[str, str]]


def stored(storage: Storage, saver: Any, thread_id: str) -> tuple[Ids, Ids]:
    """The ``(namespace, checkpoint id)`` of the thread's stored checkpoints (replay-only
    ones too) and of its stored pending writes, read from storage directly."""
    from langgraph_memory_plus.checkpoint.config import thread_key

    tk = thread_key(thread_id)
    parts: list[Ids]
    if storage.kind == "redis":
        from langgraph_memory_plus.checkpoint.redis.plans import KINDS
        from langgraph_memory_plus.drivers.redis import sync_client_from_url

        keys = dict(zip(KINDS, saver._plans.keys(thread_id), strict=True))
        client: Any = sync_client_from_url(storage.url)
        try:
            # fields: namespace NUL checkpoint id (NUL task id, for writes)
            fields = [client.hkeys(keys[kind]) for kind in ("ck", "writes")]
        finally:
            client.close()
        parts = [
            {(ns.decode(), cid.decode()) for ns, cid, *_ in (f.split(b"\0") for f in part)}
            for part in fields
        ]
        return parts[0], parts[1]
    sql = "SELECT DISTINCT checkpoint_ns, checkpoint_id FROM {} WHERE thread_key = ?"
    if storage.kind == "sqlite":
        with closing(sqlite3.connect(os.path.join(storage.url, "memory.db"))) as conn:
            parts = [
                set(conn.execute(sql.format(t), (tk,)).fetchall())
                for t in ("lgmp_checkpoints", "lgmp_writes")
            ]
        return parts[0], parts[1]
    import psycopg

    with psycopg.connect(storage.url, autocommit=True) as pg:
        parts = [
            set(pg.execute(sql.format(t).replace("?", "%s"), (tk,)).fetchall())
            for t in (saver._plans._ck, saver._plans._wr)
        ]
    return parts[0], parts[1]


def orphans(storage: Storage, saver: Any, thread_id: str) -> Ids:
    """Stored writes of checkpoints that are not stored."""
    checkpoints, writes = stored(storage, saver, thread_id)
    return writes - checkpoints


def _at(config: Any, checkpoint_id: str) -> Any:
    return cfg(config["configurable"]["thread_id"], config["configurable"]["checkpoint_ns"],
               checkpoint_id)  # fmt: skip


def _writer(
    n: int,
    saver: Any,
    new: Any,
    old: Any,
    start: threading.Barrier,
    put_done: threading.Event,
    errors: list[BaseException],
) -> None:
    """One task of a round: its write to the checkpoint being put (maybe before the put
    lands), to the one the put trims (maybe before the trim), and a late one after it."""
    try:
        start.wait()
        saver.put_writes(new, [("a", n)], f"w{n}")
        saver.put_writes(old, [("a", n)], f"early{n}")
        put_done.wait()
        saver.put_writes(old, [("a", n)], f"late{n}")
    except BaseException as exc:
        errors.append(exc)


@pytest.mark.parametrize("ns", ["", "sub:1"])
@pytest.mark.parametrize("collector", ["put", "prune"])
def test_a_write_to_a_trimmed_checkpoint_is_collected_by_the_next_trim(
    saver_factory: SaverFactory, storage: Storage, collector: str, ns: str
) -> None:
    """Late writes to a checkpoint ``keep_last=1`` deleted are taken by the next put's
    trim, or by ``prune`` (also when it deletes no checkpoint: the last put was the run's
    last). A write that came before its checkpoint (a newer one, its put on its way) is
    kept through the same trim and read with it."""
    tid = f"late-{uuid.uuid4().hex}"
    with saver_factory(keep_last=1, **_small(storage)) as saver:
        first = saver.put(cfg(tid, ns), make_checkpoint({"a": 1}), {"step": 0}, {"a": 1})
        second = saver.put(first, make_checkpoint({"a": 2}, {"a": 2}), {"step": 1}, {"a": 2})
        saver.put_writes(first, [("a", 5)], "late")
        saver.put_writes(first, [("__interrupt__", "stop")], "late")  # SQLite's full path
        assert saver.get_tuple(first) is None
        assert orphans(storage, saver, tid) == {(ns, first["configurable"]["checkpoint_id"])}
        if collector == "prune":
            saver.prune([tid])
            assert orphans(storage, saver, tid) == set()
            return
        third = make_checkpoint({"a": 3}, {"a": 3})
        saver.put_writes(_at(second, third["id"]), [("a", 6)], "early")
        stored_third = saver.put(second, third, {"step": 2}, {"a": 3})
        assert orphans(storage, saver, tid) == set()
        found = saver.get_tuple(stored_third)
        assert found is not None and found.pending_writes == [("early", "a", 6)]


def test_writers_racing_keep_last_leave_no_write_of_a_deleted_checkpoint(
    saver_factory: SaverFactory, storage: Storage
) -> None:
    """Real threads: each round, ``WRITERS`` threads write to the checkpoint the round's
    put trims (before it, and again after it returned: late) and to the checkpoint being
    put (its writes may come first), while the main thread puts it with ``keep_last=2``.
    Every write of a kept checkpoint is read back; once a last put trimmed again, no
    write of a deleted checkpoint is left."""
    tid = f"race-{uuid.uuid4().hex}"
    errors: list[BaseException] = []
    with saver_factory(keep_last=2, **_small(storage)) as saver:
        configs = [saver.put(cfg(tid), make_checkpoint({"a": 0}), {"step": 0}, {"a": 0})]
        configs.append(
            saver.put(configs[0], make_checkpoint({"a": 1}, {"a": 1}), {"step": 1}, {"a": 1})
        )
        for step in range(2, ROUNDS + 2):
            old, coming = configs[-2], make_checkpoint({"a": step}, {"a": step})
            start, put_done = threading.Barrier(WRITERS + 1), threading.Event()
            new = _at(configs[-1], coming["id"])
            args = (saver, new, old, start, put_done, errors)
            workers = [threading.Thread(target=_writer, args=(n, *args)) for n in range(WRITERS)]
            for w in workers:
                w.start()
            start.wait()
            configs.append(saver.put(configs[-1], coming, {"step": step}, {"a": step}))
            put_done.set()
            for w in workers:
                w.join()
            assert not errors, errors
            assert saver.get_tuple(old) is None
            found = saver.get_tuple(configs[-1])
            assert found is not None
            assert sorted(found.pending_writes) == [(f"w{n}", "a", n) for n in range(WRITERS)]
        last = make_checkpoint({"a": 99}, {"a": 99})
        configs.append(saver.put(configs[-1], last, {"step": ROUNDS + 2}, {"a": 99}))
        assert orphans(storage, saver, tid) == set()
        checkpoints, _ = stored(storage, saver, tid)
        kept = {("", c["configurable"]["checkpoint_id"]) for c in configs[-2:]}
        assert checkpoints == kept
        found = saver.get_tuple(configs[-2])
        assert found is not None
        assert sorted(found.pending_writes) == [(f"w{n}", "a", n) for n in range(WRITERS)]
