"""Attacks on two changes: Redis ``delete_thread`` always leaving its tombstone (also for an
id that had no keys: never written, or expired by TTL), and the PostgreSQL lock order of a
put's parent, ``delete_for_runs``, ``copy_thread`` onto an expired target and ``prune``
(thread rows, then index rows, then checkpoints)."""

from __future__ import annotations

import contextlib
import io
import json
import random
import threading
import time
import uuid
from typing import Any

import pytest
from pg_race_support import checkpoint as _ck
from pg_race_support import config as _cfg

DAY_MS = 24 * 3600 * 1000


REDIS = pytest.mark.parametrize("backend", ["redis", "redis-cluster"])
"""The tests of Redis tombstones run on the Redis backends only (CI fails on a skip)."""


@pytest.fixture
def space(storage: Any) -> tuple[dict[str, Any], str]:
    """Saver options with a key prefix of this test's own, and its CLI URL."""
    assert storage.kind == "redis", "a Redis test: mark it REDIS"
    prefix = f"{storage.options['key_prefix']}-{uuid.uuid4().hex[:8]}"
    return {"key_prefix": prefix}, f"{storage.url}?key_prefix={prefix}"


def _client(saver: Any) -> Any:
    return saver.client


def _tombstone_key(saver: Any, thread_id: str) -> bytes:
    return saver._plans.keys(thread_id)[0]


def _keys_of(saver: Any, thread_id: str) -> list[bytes]:
    """The thread's keys that exist (its eleven, and its fence)."""
    plans = saver._plans
    client = _client(saver)
    return [k for k in (*plans.keys(thread_id), plans.fence_key(thread_id)) if client.exists(k)]


def _put(saver: Any, thread_id: str, parent: dict[str, Any] | None = None, **meta: Any) -> Any:
    cfg = parent or _cfg(thread_id)
    n = len(list(saver.list(_cfg(thread_id)))) + 1
    return saver.put(
        cfg, _ck(f"v{n}", str(n)), {"step": n, "source": "loop", **meta}, {"a": str(n)}
    )


def _cli(url: str, *args: str) -> Any:
    from langgraph_memory_plus.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main([*args, "-u", url, "--json"])
    assert code == 0, out.getvalue()
    return json.loads(out.getvalue())


# -- Redis: tombstones of ids that had no keys -----------------------------------------------


@REDIS
def test_redis_deleting_unknown_ids_shows_nowhere_and_leaves_one_small_expiring_key(
    saver_factory: Any, space: Any
) -> None:
    """Deleting ids never written: searches, counts, sessions, ``get``, ``list(None)``,
    ``reindex`` and the CLI's ``threads ls`` and ``info`` see only the live thread; each
    id leaves one hash (under 256 bytes by ``MEMORY USAGE``) expiring within a day."""
    opts, url = space
    with saver_factory(**opts) as saver:
        live = f"live-{uuid.uuid4().hex[:6]}"
        _put(saver, live, user_id="u-tomb")
        unknown = [f"unk-{k}-{uuid.uuid4().hex[:6]}" for k in range(20)]
        for tid in unknown:
            saver.delete_thread(tid)
        client = _client(saver)
        for tid in unknown:
            assert _keys_of(saver, tid) == [_tombstone_key(saver, tid)]
            key = _tombstone_key(saver, tid)
            assert set(client.hkeys(key)) == {b"live_after", b"until"}
            assert DAY_MS - 60_000 < client.pttl(key) <= DAY_MS
            assert client.memory_usage(key, samples=0) < 256
            assert saver.threads.get(tid) is None
            assert saver.get_tuple(_cfg(tid)) is None
        assert [t["thread_id"] for t in saver.threads.search()] == [live]
        assert saver.threads.count() == 1
        assert [t["thread_id"] for t in saver.threads.sessions("u-tomb")] == [live]
        assert {t.config["configurable"]["thread_id"] for t in saver.list(None)} == {live}
        assert saver.threads.reindex().indexed == 0
    assert [r["thread_id"] for r in _cli(url, "threads", "ls")] == [live]
    assert _cli(url, "info")["threads"] == 1


@REDIS
def test_redis_delete_for_runs_and_prune_keep_a_tombstone_s_expiry(
    saver_factory: Any, space: Any
) -> None:
    """``delete_for_runs`` runs its script on every thread's keys (tombstones too) and
    ``prune(keep_latest)`` on the ids given; both ended with ``keep_expiry``, which made
    the keys of a thread without checkpoints PERSIST: every tombstone (now one per deleted
    id, known or not) lived forever from the first ``delete_for_runs`` on."""
    opts, _url = space
    with saver_factory(**opts) as saver:
        client = _client(saver)
        unknown = [f"unk-{k}-{uuid.uuid4().hex[:6]}" for k in range(3)]
        known = f"known-{uuid.uuid4().hex[:6]}"
        _put(saver, known)
        for tid in [*unknown, known]:
            saver.delete_thread(tid)
        saver.delete_for_runs(["no-such-run"])
        saver.prune(unknown[:1], strategy="keep_latest")
        for tid in [*unknown, known]:
            assert DAY_MS - 60_000 < client.pttl(_tombstone_key(saver, tid)) <= DAY_MS


@REDIS
def test_redis_a_thread_emptied_by_delete_for_runs_keeps_its_expiry(
    saver_factory: Any, space: Any
) -> None:
    """A thread (with a TTL) whose only run ``delete_for_runs`` removes: its thread hash
    (``id``) was made to PERSIST, a key without checkpoints that never expired and that
    the CLI's ``info`` counted as a thread. Now nothing of it is left."""
    opts, url = space
    with saver_factory(**opts, ttl={"default_ttl": 10}) as saver:
        tid = f"emptied-{uuid.uuid4().hex[:6]}"
        saver.put(_cfg(tid), _ck("x", "1"), {"step": 0, "run_id": "r-empty"}, {"a": "1"})
        assert _client(saver).pttl(_tombstone_key(saver, tid)) > 0
        saver.delete_for_runs(["r-empty"])
        assert saver.get_tuple(_cfg(tid)) is None
        assert _keys_of(saver, tid) == []
        assert saver.threads.get(tid) is None
    assert _cli(url, "info")["threads"] == 0


@REDIS
def test_redis_a_tombstone_of_an_unknown_id_expires_also_after_delete_for_runs(
    saver_factory: Any, space: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    opts, _url = space
    from langgraph_memory_plus.checkpoint.redis import plans

    monkeypatch.setattr(plans, "TOMBSTONE_MS", 300)
    with saver_factory(**opts) as saver:
        tid = f"unk-{uuid.uuid4().hex[:6]}"
        saver.delete_thread(tid)
        saver.delete_for_runs(["nothing"])
        saver.prune([tid], strategy="keep_latest")
        assert _keys_of(saver, tid) == [_tombstone_key(saver, tid)]
        time.sleep(0.5)
        assert _keys_of(saver, tid) == []


@REDIS
@pytest.mark.parametrize("ttl", [None, 10])
def test_redis_a_fresh_run_on_a_deleted_unknown_id_is_stored_listed_and_deletable(
    saver_factory: Any, space: Any, ttl: int | None
) -> None:
    """A run with no parent on an id deleted while unknown: accepted, read back, listed
    (``search``, ``list(None)``, CLI), continued; a run from before the deletion is
    refused; deleting it again leaves its tombstone only."""
    opts, url = space
    options = {} if ttl is None else {"ttl": {"default_ttl": ttl}}
    with saver_factory(**opts, **options) as saver:
        tid = f"fresh-{uuid.uuid4().hex[:6]}"
        stale = _ck("old", "1")  # an id from before the deletion
        saver.delete_thread(tid)
        first = _put(saver, tid, user_id="u-fresh")
        second = _put(saver, tid, first, user_id="u-fresh")
        got = saver.get_tuple(_cfg(tid))
        assert got is not None and got.config == second
        assert got.checkpoint["channel_values"] == {"a": "v2"}
        assert [t["thread_id"] for t in saver.threads.sessions("u-fresh")] == [tid]
        assert tid in {t.config["configurable"]["thread_id"] for t in saver.list(None)}
        # a run from before the deletion, building on a checkpoint that was never here
        saver.put(_cfg(tid, stale["id"]), _ck("late", "9"), {"step": 9}, {"a": "9"})
        assert saver.get_tuple(_cfg(tid)).config == second  # type: ignore[union-attr]
        saver.delete_for_runs(["none"])
        assert saver.get_tuple(_cfg(tid)).config == second  # type: ignore[union-attr]
        saver.delete_thread(tid)
        assert saver.get_tuple(_cfg(tid)) is None
        assert _keys_of(saver, tid) == [_tombstone_key(saver, tid)]
        assert saver.threads.get(tid) is None
    assert tid not in [r["thread_id"] for r in _cli(url, "threads", "ls")]


@REDIS
def test_redis_copy_thread_onto_and_from_a_tombstoned_unknown_id(
    saver_factory: Any, space: Any
) -> None:
    opts, _url = space
    with saver_factory(**opts) as saver:
        src = f"src-{uuid.uuid4().hex[:6]}"
        dst = f"dst-{uuid.uuid4().hex[:6]}"
        gone = f"gone-{uuid.uuid4().hex[:6]}"
        c = _put(saver, src, user_id="u-copy")
        c = _put(saver, src, c, user_id="u-copy")
        saver.delete_thread(dst)
        saver.delete_thread(gone)
        saver.copy_thread(gone, dst)  # from a tombstone: nothing
        assert saver.get_tuple(_cfg(dst)) is None
        assert saver.threads.get(dst) is None
        saver.copy_thread(src, dst)
        got = saver.get_tuple(_cfg(dst))
        assert got is not None and got.checkpoint["channel_values"] == {"a": "v2"}
        assert len(list(saver.list(_cfg(dst)))) == 2
        # the copy continues from its latest checkpoint (older than the deletion)
        nxt = _put(saver, dst, got.config, user_id="u-copy")
        assert saver.get_tuple(_cfg(dst)).config == nxt  # type: ignore[union-attr]
        saver.put_writes(nxt, [("a", "w")], "task-1")
        assert saver.get_tuple(nxt).pending_writes  # type: ignore[union-attr]
        assert saver.threads.count() == 2
        assert sorted(t["thread_id"] for t in saver.threads.sessions("u-copy")) == sorted(
            [src, dst]
        )
        saver.copy_thread(dst, gone)  # onto a tombstone: a new thread
        assert len(list(saver.list(_cfg(gone)))) == 3


@REDIS
def test_redis_erase_user_whose_index_names_threads_that_are_gone(
    saver_factory: Any, space: Any
) -> None:
    """The user's index entries outlive their threads' keys (TTL): erasure deletes ids
    with nothing behind them, then the user's new run is held; nothing shows after."""
    opts, _url = space
    from langgraph_memory_plus.privacy.erasure import erase_user

    user = f"u-erase-{uuid.uuid4().hex[:6]}"
    with saver_factory(**opts) as saver:
        ids = [f"er-{k}-{uuid.uuid4().hex[:6]}" for k in range(3)]
        for tid in ids:
            _put(saver, tid, user_id=user)
        client = _client(saver)
        for tid in ids[:2]:  # as if expired: every key of the thread goes
            client.delete(*saver._plans.keys(tid))
        report = erase_user(user, checkpointer=saver)
        assert report is not None
        for tid in ids:
            assert saver.get_tuple(_cfg(tid)) is None
            assert saver.threads.get(tid) is None
        assert saver.threads.sessions(user) == []
        assert saver.threads.count() == 0


@REDIS
def test_redis_two_savers_deleting_and_writing_one_id(saver_factory: Any, space: Any) -> None:
    """One saver deletes an id over and over (known or not at that moment); another runs
    fresh runs of two puts and a write on it. No error; a run that began before a
    deletion ends with nothing of it stored; after the last deletion a fresh run is
    stored whole."""
    opts, _url = space
    tid = f"race-{uuid.uuid4().hex[:6]}"
    errors: list[BaseException] = []
    stop = time.monotonic() + 2.0
    with saver_factory(**opts, ttl={"default_ttl": 1}) as a, saver_factory(**opts) as b:

        def deleter() -> None:
            rng = random.Random(1)
            while time.monotonic() < stop:
                try:
                    a.delete_thread(tid)
                except BaseException as exc:  # reported below
                    errors.append(exc)
                time.sleep(rng.random() * 0.004)

        def writer() -> None:
            while time.monotonic() < stop:
                try:
                    c1 = b.put(_cfg(tid), _ck("x", "1"), {"step": 0}, {"a": "1"})
                    b.put_writes(c1, [("a", "w")], "t1")
                    c2 = b.put(c1, _ck("y", "2"), {"step": 1}, {"a": "2"})
                    got = b.get_tuple(c2)
                    if got is not None:
                        assert got.checkpoint["channel_values"] == {"a": "y"}
                        assert got.parent_config == c1
                except BaseException as exc:  # reported below
                    errors.append(exc)

        workers = [threading.Thread(target=f, daemon=True) for f in (deleter, writer)]
        for w in workers:
            w.start()
        for w in workers:
            w.join(30)
        assert not errors, repr(errors[0])
        c1 = b.put(_cfg(tid), _ck("x", "1"), {"step": 0}, {"a": "1"})
        c2 = b.put(c1, _ck("y", "2"), {"step": 1}, {"a": "2"})
        got = a.get_tuple(_cfg(tid))
        assert got is not None and got.config == c2
        assert got.checkpoint["channel_values"] == {"a": "y"}
        assert a.threads.get(tid) is not None


# -- PostgreSQL: removers beside puts on shared thread ids (ms TTL, keep_last=2) -------------


def _pg_mix(pg_url: str, kinds: list[str], seconds: float, seed: int) -> dict[str, Any]:
    """Three runners (a run id spanning two of three shared thread ids; puts building on
    the latest checkpoint, naming only the changed channel; a write per step; each put
    read back) beside two removers of ``kinds``. Returns the errors met, by kind."""
    from datetime import datetime, timezone

    import psycopg
    from langgraph.checkpoint.base import Checkpoint
    from langgraph.checkpoint.base.id import uuid6
    from pg_race_support import saver_in_schema

    from langgraph_memory_plus.errors import CorruptDataError
    from langgraph_memory_plus.privacy.erasure import erase_user

    def ck(n: int) -> Checkpoint:
        return Checkpoint(
            v=4,
            id=str(uuid6(clock_seq=-1)),
            ts=datetime.now(timezone.utc).isoformat(),
            channel_values={"a": f"v{n}", "b": "kept"},
            channel_versions={"a": str(n), "b": "1"},
            versions_seen={},
            updated_channels=None,
        )

    ids = [f"mix{k}-{uuid.uuid4().hex[:4]}" for k in range(3)]
    users = ["ua", "ub"]
    errors: dict[str, str] = {}
    runs: list[str] = []
    stop = time.monotonic() + seconds

    def note(kind: str, exc: object) -> None:
        errors.setdefault(kind, str(exc)[:400])

    with saver_in_schema(
        pg_url, "lgmp_a_tomb", pool_max_size=6, keep_last=2, ttl={"default_ttl": 0.015 / 60}
    ) as (saver, _name, _other):

        def runner(w: int) -> None:
            rng = random.Random(seed * 100 + w)
            while time.monotonic() < stop:
                run_id = str(uuid.uuid4())
                runs.append(run_id)
                user = rng.choice(users)
                for tid in rng.sample(ids, 2):
                    try:
                        base = {"thread_id": tid, "checkpoint_ns": "", "user_id": user}
                        latest = saver.get_tuple({"configurable": base})
                        parent: dict[str, Any] = {"configurable": base}
                        n, new = 1, {"a": "1", "b": "1"}
                        if latest is not None:
                            cid = latest.config["configurable"]["checkpoint_id"]
                            parent = {"configurable": {**base, "checkpoint_id": cid}}
                            n = int(latest.checkpoint["channel_versions"].get("a", "0")) + 1
                            new = {"a": str(n)}
                        for _ in range(3):
                            meta = {"step": n, "source": "loop", "run_id": run_id}
                            c = saver.put(parent, ck(n), {**meta, "user_id": user}, new)
                            c["configurable"]["user_id"] = user
                            saver.put_writes(c, [("a", f"w{n}")], f"task-{n}")
                            got = saver.get_tuple(c)
                            values = None if got is None else got.checkpoint["channel_values"]
                            if values is not None and values != {"a": f"v{n}", "b": "kept"}:
                                note("lost channel", values)
                            parent, n, new = c, n + 1, {"a": str(n + 1)}
                    except psycopg.errors.DeadlockDetected as exc:
                        note("deadlock: put", exc)
                    except CorruptDataError as exc:
                        note("corrupt", exc)

        def remover(w: int) -> None:
            rng = random.Random(seed * 100 + 50 + w)
            while time.monotonic() < stop:
                what = rng.choice(kinds)
                try:
                    if what == "runs" and runs:
                        recent = runs[-6:]
                        rng.shuffle(recent)
                        saver.delete_for_runs(recent)
                    elif what == "prune":
                        saver.prune(rng.sample(ids, 2), strategy="keep_latest")
                    elif what == "copy":
                        saver.copy_thread(*rng.sample(ids, 2))
                    elif what == "delete":
                        saver.delete_thread(rng.choice(ids))
                    elif what == "sweep":
                        saver.sweep_expired()
                    elif what == "erase":
                        erase_user(rng.choice(users), checkpointer=saver, tombstone_hours=1e-5)
                except psycopg.errors.DeadlockDetected as exc:
                    note(f"deadlock: {what}", exc)
                except CorruptDataError as exc:
                    note(f"corrupt: {what}", exc)
                time.sleep(rng.random() * 0.01)

        workers = [threading.Thread(target=runner, args=(w,), daemon=True) for w in range(3)]
        workers += [threading.Thread(target=remover, args=(w,), daemon=True) for w in range(2)]
        for t in workers:
            t.start()
        for t in workers:
            t.join(60)
    return errors


@pytest.mark.storage
@pytest.mark.parametrize("seed", [11, 13])
def test_pg_delete_for_runs_prune_and_copy_beside_puts_never_deadlock(
    pg_url: str, seed: int
) -> None:
    """``delete_for_runs`` (two runs' ids spanning threads, shuffled), ``prune`` and
    ``copy_thread`` beside puts with ``keep_last=2`` and a 15 ms TTL. The removers took
    the thread rows key share, which lets puts in: a put whose thread's index row was
    gone (its checkpoints all removed once) inserted it after locking its parent, and a
    remover holding the parent's deletion waited for that row in its refresh
    (``DeadlockDetected`` in 5 of 6 runs of 4 s before; the thread rows are now taken
    ``FOR UPDATE``, as by a deletion). About 4 s."""
    errors = _pg_mix(pg_url, ["runs", "prune", "copy"], 4.0, seed)
    assert not errors, errors


@pytest.mark.storage
def test_pg_every_remover_beside_puts_never_deadlocks(pg_url: str) -> None:
    """Every remover (``delete_for_runs``, ``prune``, ``copy_thread``, ``delete_thread``,
    ``sweep_expired``, ``erase_user`` of the runs' users, whose writes take the erasure
    hold's lock) beside the same runs. About 2.5 s (a guard: clean before too, mostly)."""
    errors = _pg_mix(pg_url, ["runs", "prune", "copy", "delete", "sweep", "erase"], 2.5, 8)
    assert not errors, errors
