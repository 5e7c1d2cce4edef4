"""Attacks on the PostgreSQL revival of expired threads (fast write's touch order, the
slow write's locked ``was_expired``): revived once, whole, listed, final deletion."""

from __future__ import annotations

import operator
import threading
import time
import uuid
from typing import Annotated, Any, TypedDict

import psycopg
import pytest
from langchain_core.messages import AnyMessage
from langgraph.graph.message import add_messages
from pg_race_support import checkpoint as _checkpoint
from pg_race_support import config as _cfg
from pg_race_support import saver_in_schema as _saver_in_schema
from pg_race_support import schema as _schema
from pg_race_support import waiting_for_a_lock as _waiting_for_a_lock

pytestmark = pytest.mark.storage


class S(TypedDict, total=False):
    messages: Annotated[list[AnyMessage], add_messages]
    items: Annotated[list[str], operator.add]


def _expire(other: psycopg.Connection[Any], schema: str, thread_id: str) -> None:
    from langgraph_memory_plus.checkpoint.config import thread_key

    other.execute(
        f"UPDATE \"{schema}\".lgmp_threads SET expires_at = now() - interval '1 second' "
        "WHERE thread_key = %s",
        (thread_key(thread_id),),
    )


def _counting(monkeypatch: pytest.MonkeyPatch) -> list[list[bool]]:
    """Per put / put_writes call, its statements (whether each is standalone)."""
    from langgraph_memory_plus.checkpoint.postgres.plans import PostgresCheckpointPlans

    seen: list[list[bool]] = []
    for name in ("put", "put_writes"):
        original = getattr(PostgresCheckpointPlans, name)

        def wrapped(self: Any, *args: Any, _original: Any = original, **kwargs: Any) -> Any:
            plan = _original(self, *args, **kwargs)
            queries: list[bool] = []
            seen.append(queries)
            reply = None
            try:
                while True:
                    query = plan.send(reply)
                    queries.append(bool(query.standalone))
                    reply = yield query
            except StopIteration as stop:
                return stop.value

        monkeypatch.setattr(PostgresCheckpointPlans, name, wrapped)
    return seen


def test_pg_copy_onto_an_expired_thread_brings_back_none_of_its_history(pg_url: str) -> None:
    """copy_thread onto an expired target upserted the target's row (a fresh expiry)
    without purging its expired history: the expired checkpoints were listed again
    beside the copied ones (fixed: the copy purges an expired target first)."""

    tag = uuid.uuid4().hex[:8]
    src, dst = f"src-{tag}", f"dst-{tag}"
    with _saver_in_schema(pg_url, "lgmp_apgrev", pool_max_size=2, ttl={"default_ttl": 1.0}) as (
        saver,
        schema,
        other,
    ):
        old = saver.put(_cfg(dst), _checkpoint("old", "1"), {"user_id": "u-old"}, {"a": "1"})
        _expire(other, schema, dst)
        assert saver.get_tuple(_cfg(dst)) is None
        new = saver.put(_cfg(src), _checkpoint("new", "1"), {"user_id": "u-new"}, {"a": "1"})
        saver.copy_thread(src, dst)
        listed = [t.checkpoint["id"] for t in saver.list(_cfg(dst))]
    assert old["configurable"]["checkpoint_id"] not in listed
    assert listed == [new["configurable"]["checkpoint_id"]]


def _stopping_purge(
    monkeypatch: pytest.MonkeyPatch,
) -> tuple[threading.Event, threading.Event, list[str]]:
    from langgraph_memory_plus.checkpoint.postgres.plans import PostgresCheckpointPlans

    entered, go = threading.Event(), threading.Event()
    purges: list[str] = []
    purge = PostgresCheckpointPlans._purge_expired

    def stopped_purge(self: Any, tk_: bytes, ns: str, checkpoint_id: str) -> Any:
        purges.append(checkpoint_id)
        if len(purges) == 1:
            entered.set()
            assert go.wait(30)
        return (yield from purge(self, tk_, ns, checkpoint_id))

    monkeypatch.setattr(PostgresCheckpointPlans, "_purge_expired", stopped_purge)
    return entered, go, purges


def _in_thread(fn: Any, errors: list[BaseException]) -> threading.Thread:
    def run() -> None:
        try:
            fn()
        except BaseException as exc:  # reported by the test
            errors.append(exc)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def test_pg_put_writes_revives_first_and_the_put_that_waited_is_kept_and_listed(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reverse of test_pg_revive_race's interleaving: the step's put_writes revives
    the expired thread (stopped before its purge, thread row held), the put of the same
    checkpoint waits for the row. After: the checkpoint with its pending write, listed
    for the run's user, one purge, none of the expired history."""

    entered, go, purges = _stopping_purge(monkeypatch)
    tag = uuid.uuid4().hex[:8]
    tid, user = f"rev2-{tag}", f"ru2-{tag}"
    errors: list[BaseException] = []
    with _saver_in_schema(pg_url, "lgmp_apgrev", pool_max_size=3, ttl={"default_ttl": 1.0}) as (
        saver,
        schema,
        other,
    ):
        old = saver.put(
            _cfg(tid), _checkpoint("old", "1"), {"user_id": user, "step": 0}, {"a": "1"}
        )
        saver.put_writes(old, [("a", "x")], "task-0")
        _expire(other, schema, tid)
        new = _checkpoint("new", "2")
        w = _in_thread(
            lambda: saver.put_writes(_cfg(tid, new["id"]), [("a", "w")], "task-1"), errors
        )
        assert entered.wait(30)
        p = _in_thread(
            lambda: saver.put(_cfg(tid), new, {"user_id": user, "step": 1}, {"a": "2"}), errors
        )
        _waiting_for_a_lock(other, 1)
        go.set()
        w.join(30)
        p.join(30)
        assert not w.is_alive() and not p.is_alive()
        assert not errors, repr(errors[0])
        got = saver.get_tuple(_cfg(tid))
        found = {
            "latest": None if got is None else got.checkpoint["id"],
            "value": None if got is None else got.checkpoint["channel_values"].get("a"),
            "pending": None if got is None else [w[1:] for w in got.pending_writes or []],
            "list": [t.checkpoint["id"] for t in saver.list(_cfg(tid))],
            "listed": saver.threads.get(tid) is not None,
            "count": saver.threads.count(metadata={"user_id": user}),
            "sessions": [r["thread_id"] for r in saver.threads.sessions(user)],
            "purges": len(purges),
        }
    assert found == {
        "latest": new["id"],
        "value": "new",
        "pending": [("a", "w")],
        "list": [new["id"]],
        "listed": True,
        "count": 1,
        "sessions": [tid],
        "purges": 1,
    }


def test_pg_a_deletion_that_waited_behind_a_revival_stays_final(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An expired thread revived by a run's first put (stopped before its purge, row
    held) while delete_thread waits for the row: once both commit, nothing of the old or
    the reviving run is there, and the run's next writes are refused."""

    entered, go, _purges = _stopping_purge(monkeypatch)
    tag = uuid.uuid4().hex[:8]
    tid, user = f"rev3-{tag}", f"ru3-{tag}"
    errors: list[BaseException] = []
    with _saver_in_schema(pg_url, "lgmp_apgrev", pool_max_size=3, ttl={"default_ttl": 1.0}) as (
        saver,
        schema,
        other,
    ):
        saver.put(_cfg(tid), _checkpoint("old", "1"), {"user_id": user, "step": 0}, {"a": "1"})
        _expire(other, schema, tid)
        first = _checkpoint("new", "2")
        r = _in_thread(
            lambda: saver.put(_cfg(tid), first, {"user_id": user, "step": -1}, {"a": "2"}),
            errors,
        )
        assert entered.wait(30)
        d = _in_thread(lambda: saver.delete_thread(tid), errors)
        _waiting_for_a_lock(other, 1)
        go.set()
        r.join(30)
        d.join(30)
        assert not r.is_alive() and not d.is_alive()
        assert not errors, repr(errors[0])
        # the run goes on: its next step's writes and checkpoint
        saver.put_writes(_cfg(tid, first["id"]), [("a", "w")], "task-1")
        nxt = _checkpoint("next", "3")
        saver.put(_cfg(tid, first["id"]), nxt, {"user_id": user, "step": 0}, {"a": "3"})
        found = {
            "got": saver.get_tuple(_cfg(tid)),
            "list": [t.checkpoint["id"] for t in saver.list(_cfg(tid))],
            "listed": saver.threads.get(tid),
            "count": saver.threads.count(metadata={"user_id": user}),
        }
    assert found == {"got": None, "list": [], "listed": None, "count": 0}


def test_pg_a_write_on_a_live_thread_is_one_statement_also_when_it_refreshes(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fast path stays one standalone statement per put and per put_writes on a
    live thread, whether the expiry needs its refresh (touch) or not, and the refresh
    lands."""
    from langgraph_memory_plus.checkpoint.config import thread_key

    seen = _counting(monkeypatch)
    tid = f"fast-{uuid.uuid4().hex[:8]}"
    with _saver_in_schema(pg_url, "lgmp_apgrev", pool_max_size=2, ttl={"default_ttl": 60.0}) as (
        saver,
        schema,
        other,
    ):
        cfg = saver.put(_cfg(tid), _checkpoint("a", "1"), {"user_id": "u"}, {"a": "1"})
        seen.clear()
        for k in range(3):
            other.execute(  # due for a refresh every other write
                f'UPDATE "{schema}".lgmp_threads SET expires_at = now() + interval '
                f"'{30 if k % 2 == 0 else 59.99} minutes' WHERE thread_key = %s",
                (thread_key(tid),),
            )
            saver.put_writes(cfg, [("a", f"w{k}")], f"task-{k}")
            cfg = saver.put(
                cfg, _checkpoint(f"v{k}", str(k + 2)), {"user_id": "u"}, {"a": str(k + 2)}
            )
        fresh = other.execute(
            f"SELECT expires_at > now() + interval '59 minutes' FROM \"{schema}\".lgmp_threads "
            "WHERE thread_key = %s",
            (thread_key(tid),),
        ).fetchone()
    assert seen == [[True]] * 6
    assert fresh == (True,)


def _revive_runs(pg_url: str, monkeypatch: pytest.MonkeyPatch, is_async: bool) -> None:
    import asyncio

    from langgraph_memory_plus.checkpoint.postgres import AsyncPostgresSaver, PostgresSaver
    from langgraph_memory_plus.checkpoint.postgres.plans import PostgresCheckpointPlans
    from tests.test_deletion_final import build, cfg, inputs

    ttl = 0.8
    workers, rounds = 3, 3
    purged: dict[bytes, int] = {}
    purge = PostgresCheckpointPlans._purge_expired

    def counted(self: Any, tk: bytes, ns: str, checkpoint_id: str) -> Any:
        purged[tk] = purged.get(tk, 0) + 1
        return (yield from purge(self, tk, ns, checkpoint_id))

    monkeypatch.setattr(PostgresCheckpointPlans, "_purge_expired", counted)
    problems: list[str] = []

    def check(saver: Any, graph: Any, tid: str, before: str, state: Any, listed: list[Any]) -> None:
        user = cfg(tid)["configurable"]["user_id"]
        items = state.values.get("items", [])
        texts = [m.content for m in state.values.get("messages", [])]
        ids = [t.checkpoint["id"] for t in listed]
        if "a" in items or "a" in texts or items[:2] != ["b", "slow"] or texts[:2] != ["b", "slow"]:
            problems.append(f"{tid}: state {items} {texts}")
        if not ids or min(ids) <= before:
            problems.append(f"{tid}: expired history listed ({len(ids)})")
        if saver.threads.get(tid) is None or saver.threads.count(metadata={"user_id": user}) != 1:
            problems.append(f"{tid}: not indexed")

    with _schema(pg_url, "lgmp_apgrev") as (schema, _other):
        opts = {"schema": schema, "pool_max_size": 5, "ttl": {"default_ttl": ttl / 60}}
        if not is_async:
            with PostgresSaver.from_conn_string(pg_url, **opts) as saver:
                saver.setup()
                graph = build(None, is_async=False).compile(checkpointer=saver)

                def run(w: int) -> None:
                    for r in range(rounds):
                        tid = f"rs-{w}-{r}-{uuid.uuid4().hex[:6]}"
                        try:
                            graph.invoke(inputs("a"), cfg(tid))
                            before = max(t.checkpoint["id"] for t in saver.list(cfg(tid)))
                            time.sleep(ttl + 0.3)
                            graph.invoke(inputs("b"), cfg(tid))
                            check(
                                saver,
                                graph,
                                tid,
                                before,
                                graph.get_state(cfg(tid)),
                                list(saver.list(cfg(tid))),
                            )
                        except Exception as exc:  # reported below
                            problems.append(f"{tid}: {exc!r}")

                ts = [threading.Thread(target=run, args=(w,), daemon=True) for w in range(workers)]
                for t in ts:
                    t.start()
                for t in ts:
                    t.join(120)
                    assert not t.is_alive()
        else:

            async def main() -> None:
                async with AsyncPostgresSaver.from_conn_string(pg_url, **opts) as saver:
                    await saver.setup()
                    graph = build(None, is_async=True).compile(checkpointer=saver)

                    async def run(w: int) -> None:
                        for r in range(rounds):
                            tid = f"ra-{w}-{r}-{uuid.uuid4().hex[:6]}"
                            try:
                                await graph.ainvoke(inputs("a"), cfg(tid))
                                before = max(
                                    [t.checkpoint["id"] async for t in saver.alist(cfg(tid))]
                                )
                                await asyncio.sleep(ttl + 0.3)
                                await graph.ainvoke(inputs("b"), cfg(tid))
                                state = await graph.aget_state(cfg(tid))
                                listed = [t async for t in saver.alist(cfg(tid))]
                                user = cfg(tid)["configurable"]["user_id"]
                                got = await saver.threads.aget(tid)
                                n = await saver.threads.acount(metadata={"user_id": user})
                                items = state.values.get("items", [])
                                ids = [t.checkpoint["id"] for t in listed]
                                if "a" in items or items[:2] != ["b", "slow"]:
                                    problems.append(f"{tid}: state {items}")
                                if not ids or min(ids) <= before:
                                    problems.append(f"{tid}: expired history listed")
                                if got is None or n != 1:
                                    problems.append(f"{tid}: not indexed")
                            except Exception as exc:  # reported below
                                problems.append(f"{tid}: {exc!r}")

                    await asyncio.wait_for(asyncio.gather(*(run(w) for w in range(workers))), 120)

            asyncio.run(main())
    assert not problems, f"{len(problems)}: " + "; ".join(problems[:6])
    assert sorted(purged.values()) == [1] * workers * rounds, "revived more than once"


@pytest.mark.parametrize("is_async", [False, True])
def test_pg_runs_with_send_and_subgraphs_revive_an_expired_thread_once_and_whole(
    pg_url: str, monkeypatch: pytest.MonkeyPatch, is_async: bool
) -> None:
    """Runs with two Send workers and nested subgraphs on threads left to expire: the
    second run revives each once; its state, its checkpoints only, indexed for its user."""
    _revive_runs(pg_url, monkeypatch, is_async)


def test_pg_fenced_runs_with_ms_ttl_and_retention_beside_maintenance_never_deadlock(
    pg_url: str,
) -> None:
    """Fenced runs (Send workers, nested subgraphs) on a few shared thread ids with a
    20 ms TTL and keep_last=2, while another caller deletes, sweeps, prunes, copies
    and erases users on the same ids: refusals only (a fence lost to a deletion, an
    erased user's dropped write), never DeadlockDetected, never a hang. About 4 s."""
    from langgraph_memory_plus.errors import ConflictError
    from langgraph_memory_plus.privacy.erasure import erase_user
    from tests.test_deletion_final import build, cfg, inputs

    ids = [f"chaos-{k}-{uuid.uuid4().hex[:6]}" for k in range(4)]
    unexpected: list[BaseException] = []
    runs, tried = [0], [0]
    stop = time.monotonic() + 4.0
    with _saver_in_schema(
        pg_url, "lgmp_apgrev", pool_max_size=6, ttl={"default_ttl": 0.02 / 60}, keep_last=2
    ) as (
        saver,
        _schema_name,
        _other,
    ):
        graph = build(None, is_async=False).compile(checkpointer=saver)

        def runner(w: int) -> None:
            k = 0
            while time.monotonic() < stop:
                tid = ids[(w + k) % len(ids)]
                k += 1
                tried[0] += 1
                try:
                    lease = saver.fence.acquire(tid, owner=f"w{w}", lease_s=30, force=True)
                    config = cfg(tid)
                    config["configurable"].update(lease.config()["configurable"])
                    graph.invoke(inputs("a"), config)
                    graph.invoke(inputs("b"), config)
                    runs[0] += 1
                except ConflictError:
                    pass
                except Exception as exc:  # reported below
                    unexpected.append(exc)

        def chaos() -> None:
            k = 0
            while time.monotonic() < stop:
                tid = ids[k % len(ids)]
                op = k % 5
                k += 1
                try:
                    if op == 0:
                        saver.delete_thread(tid)
                    elif op == 1:
                        saver.sweep_expired()
                    elif op == 2:
                        saver.prune([tid, ids[k % len(ids)]])
                    elif op == 3:
                        saver.copy_thread(tid, ids[k % len(ids)])
                    else:
                        erase_user(
                            cfg(tid)["configurable"]["user_id"],
                            checkpointer=saver,
                            tombstone_hours=0.0001,
                        )
                except ConflictError:
                    pass
                except Exception as exc:  # reported below
                    unexpected.append(exc)
                time.sleep(0.01)

        threads = [threading.Thread(target=runner, args=(w,), daemon=True) for w in range(2)]
        threads.append(threading.Thread(target=chaos, daemon=True))
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
            assert not t.is_alive(), "hung"
    assert not unexpected, f"{len(unexpected)}, first: {unexpected[0]!r}"
    # the races happened: runs tried (most may lose their fence to the deletions and
    # erasures, and on a loaded machine none may finish whole in the time: a run of the
    # suite met 1 of 5 asked, then 0 of 1)
    assert tried[0] >= 5, (tried, runs)


def test_pg_two_runs_at_once_on_an_expired_thread_revive_it_once(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two runs of one thread id started together after it expired: one purge per
    thread, no expired message in the state, nothing of the first run listed, indexed
    for the user."""
    from chat_support import chat_graph, run_config
    from langchain_core.messages import HumanMessage

    from langgraph_memory_plus.checkpoint.postgres.plans import PostgresCheckpointPlans

    ttl = 0.5
    purged: dict[bytes, int] = {}
    purge = PostgresCheckpointPlans._purge_expired

    def counted(self: Any, tk: bytes, ns: str, checkpoint_id: str) -> Any:
        purged[tk] = purged.get(tk, 0) + 1
        return (yield from purge(self, tk, ns, checkpoint_id))

    monkeypatch.setattr(PostgresCheckpointPlans, "_purge_expired", counted)
    problems: list[str] = []
    with _saver_in_schema(
        pg_url, "lgmp_apgrev", pool_max_size=5, ttl={"default_ttl": ttl / 60}
    ) as (
        saver,
        _schema_name,
        _other,
    ):
        graph = chat_graph(str.upper).compile(checkpointer=saver)
        tids = [f"two-{k}-{uuid.uuid4().hex[:6]}" for k in range(6)]
        before: dict[str, str] = {}
        for tid in tids:
            graph.invoke(
                {"messages": [HumanMessage("old", id=f"{tid}-o")]}, run_config(tid, f"u-{tid}")
            )
            before[tid] = max(t.checkpoint["id"] for t in saver.list(run_config(tid, "x")))
        time.sleep(ttl + 0.3)
        barrier = threading.Barrier(2)

        def run(k: int) -> None:
            for tid in tids:
                barrier.wait(10)
                try:
                    graph.invoke(
                        {"messages": [HumanMessage(f"r{k}", id=f"{tid}-{k}")]},
                        run_config(tid, f"u-{tid}"),
                    )
                except Exception as exc:  # reported below
                    problems.append(f"{tid}: {exc!r}")

        ts = [threading.Thread(target=run, args=(k,), daemon=True) for k in range(2)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(60)
            assert not t.is_alive()
        for tid in tids:
            state = graph.get_state(run_config(tid, f"u-{tid}"))
            texts = [m.content for m in state.values.get("messages", [])]
            ids = [t.checkpoint["id"] for t in saver.list(run_config(tid, "x"))]
            if "old" in texts or "OLD" in texts or not texts:
                problems.append(f"{tid}: state {texts}")
            if not ids or min(ids) <= before[tid]:
                problems.append(f"{tid}: expired history listed")
            if saver.threads.count(metadata={"user_id": f"u-{tid}"}) != 1:
                problems.append(f"{tid}: not indexed")
    assert not problems, "; ".join(problems[:6])
    assert sorted(purged.values()) == [1] * len(tids), "revived more than once"


_DELETED_STAYS_SLOW = pytest.mark.xfail(
    strict=True,
    reason="a thread deleted once keeps its tombstone bound (live_after) for good, and the "
    "fast statement declines on any live_after: every later write of the id, live again "
    "with a new run, takes the locked path (a transaction of 2+ statements) forever",
)


@pytest.mark.parametrize(
    "how", [pytest.param("deleted", marks=_DELETED_STAYS_SLOW), pytest.param("expired")]
)
def test_pg_a_thread_live_again_gets_the_fast_path_back(
    pg_url: str, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    """A thread id written again after its deletion, or after its expiry (a revival):
    its writes are one statement each again."""

    seen = _counting(monkeypatch)
    tid = f"{how}-{uuid.uuid4().hex[:8]}"
    with _saver_in_schema(pg_url, "lgmp_apgrev", pool_max_size=2, ttl={"default_ttl": 60.0}) as (
        saver,
        schema,
        other,
    ):
        saver.put(_cfg(tid), _checkpoint("a", "1"), {"user_id": "u"}, {"a": "1"})
        if how == "deleted":
            saver.delete_thread(tid)
        else:
            _expire(other, schema, tid)
        cfg = saver.put(_cfg(tid), _checkpoint("b", "1"), {"user_id": "u"}, {"a": "1"})
        assert saver.get_tuple(_cfg(tid)) is not None  # live again
        seen.clear()
        for k in range(3):
            saver.put_writes(cfg, [("a", f"w{k}")], f"task-{k}")
            cfg = saver.put(
                cfg, _checkpoint(f"v{k}", str(k + 2)), {"user_id": "u"}, {"a": str(k + 2)}
            )
        listed = len(list(saver.list(_cfg(tid))))
    assert listed == 4  # the new run's: nothing of the deleted or expired history
    assert seen == [[True]] * 6


@pytest.mark.parametrize("other_op", ["sweep", "erase", "prune", "copy_from", "copy_onto"])
def test_pg_maintenance_beside_a_revival_in_progress_waits_or_skips_and_keeps_it_whole(
    pg_url: str, monkeypatch: pytest.MonkeyPatch, other_op: str
) -> None:
    """A revival stopped before its purge (thread row held) while another caller sweeps,
    erases the user, prunes, or copies the thread (from or onto it): no deadlock, no
    hang; afterwards the revived thread holds the revival's checkpoint only (erasure:
    nothing), listed for its user."""
    from langgraph_memory_plus.privacy.erasure import erase_user

    entered, go, _purges = _stopping_purge(monkeypatch)
    tag = uuid.uuid4().hex[:8]
    tid, user, spare = f"mnt-{tag}", f"mu-{tag}", f"spare-{tag}"
    errors: list[BaseException] = []
    with _saver_in_schema(pg_url, "lgmp_apgrev", pool_max_size=3, ttl={"default_ttl": 1.0}) as (
        saver,
        schema,
        other,
    ):
        saver.put(_cfg(tid), _checkpoint("old", "1"), {"user_id": user}, {"a": "1"})
        saver.put(_cfg(spare), _checkpoint("spare", "1"), {"user_id": "other"}, {"a": "1"})
        _expire(other, schema, tid)
        new = _checkpoint("new", "2")
        r = _in_thread(lambda: saver.put(_cfg(tid), new, {"user_id": user}, {"a": "2"}), errors)
        assert entered.wait(30)
        ops = {
            "sweep": lambda: saver.sweep_expired(),
            "erase": lambda: erase_user(user, checkpointer=saver, tombstone_hours=0.0001),
            "prune": lambda: saver.prune([tid]),
            "copy_from": lambda: saver.copy_thread(tid, spare),
            "copy_onto": lambda: saver.copy_thread(spare, tid),
        }
        m = _in_thread(ops[other_op], errors)
        m.join(1.0)  # it may wait for the reviver or be done
        go.set()
        r.join(30)
        m.join(30)
        assert not r.is_alive() and not m.is_alive(), "hung"
        assert not errors, repr(errors[0])
        listed = [t.checkpoint["id"] for t in saver.list(_cfg(tid))]
        count = saver.threads.count(metadata={"user_id": user})
    if other_op == "erase":
        assert (listed, count) == ([], 0)
    elif other_op == "copy_onto":
        assert new["id"] in listed and count == 1
    else:
        assert (listed, count) == ([new["id"]], 1)


def test_pg_async_runs_with_ms_ttl_and_retention_beside_deletions_never_deadlock(
    pg_url: str,
) -> None:
    """The async saver's runs (Send workers, nested subgraphs; unfenced) on a few shared
    ids with a 15 ms TTL and keep_last=2, while a sync saver on the same schema deletes,
    sweeps and prunes them: no DeadlockDetected, no hang. About 3.5 s. Before the fix
    of prune (thread and index rows locked before its trim), 4-6 DeadlockDetected in
    each run: prune trimmed, then waited for the index row a put with retention held
    while that put's trim waited for the rows prune had deleted."""
    import asyncio

    from langgraph_memory_plus.checkpoint.postgres import AsyncPostgresSaver, PostgresSaver
    from langgraph_memory_plus.errors import CorruptDataError
    from tests.test_deletion_final import build, cfg, inputs

    ids = [f"achaos-{k}-{uuid.uuid4().hex[:6]}" for k in range(3)]
    unexpected: list[BaseException] = []
    stop = time.monotonic() + 3.5
    runs = [0]
    with _schema(pg_url, "lgmp_apgrev") as (schema, _other):
        opts: dict[str, Any] = {
            "schema": schema,
            "ttl": {"default_ttl": 0.015 / 60},
            "keep_last": 2,
        }
        with PostgresSaver.from_conn_string(pg_url, pool_max_size=2, **opts) as sync_saver:
            sync_saver.setup()

            def chaos() -> None:
                k = 0
                while time.monotonic() < stop:
                    tid = ids[k % len(ids)]
                    try:
                        [
                            lambda tid=tid: sync_saver.delete_thread(tid),
                            lambda: sync_saver.sweep_expired(),
                            lambda tid=tid: sync_saver.prune([tid]),
                        ][k % 3]()
                    except Exception as exc:  # reported below
                        unexpected.append(exc)
                    k += 1
                    time.sleep(0.015)

            async def main() -> None:
                async with AsyncPostgresSaver.from_conn_string(
                    pg_url, pool_max_size=4, **opts
                ) as saver:
                    graph = build(None, is_async=True).compile(checkpointer=saver)

                    async def runner(w: int) -> None:
                        k = 0
                        while time.monotonic() < stop:
                            tid = ids[(w + k) % len(ids)]
                            k += 1
                            try:
                                await graph.ainvoke(inputs("a"), cfg(tid))
                                await graph.ainvoke(inputs("b"), cfg(tid))
                                runs[0] += 1
                            except CorruptDataError:
                                pass  # test_pg_runs_sharing_ids_with_ms_ttl_never_read_corrupt_data
                            except Exception as exc:  # reported below
                                unexpected.append(exc)

                    await asyncio.wait_for(asyncio.gather(*(runner(w) for w in range(3))), 60)

            t = threading.Thread(target=chaos, daemon=True)
            t.start()
            asyncio.run(main())
            t.join(30)
            assert not t.is_alive(), "hung"
    assert not unexpected, f"{len(unexpected)}, first: {unexpected[0]!r}"
    assert runs[0] >= 1  # some whole (a loaded machine finishes few in the time)


def test_pg_prune_beside_puts_with_retention_never_deadlocks(pg_url: str) -> None:
    """prune (keep_latest) trims a thread's checkpoints, then refreshes its index row;
    a put with keep_last takes the index row (its statement's ix), then trims. Puts of
    one thread in a loop beside prunes of it: no DeadlockDetected. About 2.5 s."""

    tid = f"prune-{uuid.uuid4().hex[:8]}"
    unexpected: list[BaseException] = []
    stop = time.monotonic() + 2.5
    done = [0, 0]
    with _saver_in_schema(
        pg_url, "lgmp_apgrev", pool_max_size=4, ttl={"default_ttl": 60.0}, keep_last=2
    ) as (
        saver,
        _schema_name,
        _other,
    ):
        first = saver.put(_cfg(tid), _checkpoint("a", "1"), {"user_id": "u"}, {"a": "1"})

        def puts() -> None:
            cfg, k = first, 2
            while time.monotonic() < stop:
                try:
                    cfg = saver.put(
                        cfg, _checkpoint(f"v{k}", str(k)), {"user_id": "u"}, {"a": str(k)}
                    )
                    done[0] += 1
                except Exception as exc:  # reported below
                    unexpected.append(exc)
                k += 1

        def prunes() -> None:
            while time.monotonic() < stop:
                try:
                    saver.prune([tid])
                    done[1] += 1
                except Exception as exc:  # reported below
                    unexpected.append(exc)

        ts = [threading.Thread(target=f, daemon=True) for f in (puts, puts, prunes)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(30)
            assert not t.is_alive(), "hung"
    assert not unexpected, f"{len(unexpected)} of {done}, first: {unexpected[0]!r}"


def _slow_chat(ttl: float) -> Any:
    from langchain_core.messages import AIMessage
    from langgraph.graph import END, START, StateGraph

    def slow(state: S) -> dict[str, Any]:
        if state["messages"][-1].content == "slow please":
            time.sleep(ttl + 0.5)
        return {"messages": [AIMessage("slow done", id=f"s-{uuid.uuid4().hex[:6]}")]}

    b = StateGraph(S)
    b.add_node(
        "first", lambda s: {"messages": [AIMessage("first", id=f"f-{uuid.uuid4().hex[:6]}")]}
    )
    b.add_node("slow", slow)
    b.add_node("last", lambda s: {"messages": [AIMessage("last", id=f"l-{uuid.uuid4().hex[:6]}")]})
    b.add_edge(START, "first")
    b.add_edge("first", "slow")
    b.add_edge("slow", "last")
    b.add_edge("last", END)
    return b


def test_pg_a_run_outlived_by_its_threads_expiry_never_leaves_a_corrupt_checkpoint(
    pg_url: str,
) -> None:
    """Run B (a slow node outlasting the TTL) and run A started on the same thread id
    while B's node runs, after the expiry: A revives the thread. Whatever the expiry
    drops of B, the thread's latest checkpoint stays readable."""
    from langchain_core.messages import HumanMessage

    ttl = 0.4
    tid = f"outlived-{uuid.uuid4().hex[:8]}"
    config = {"configurable": {"thread_id": tid, "user_id": "u"}}
    errors: list[BaseException] = []
    with _saver_in_schema(
        pg_url, "lgmp_apgrev", pool_max_size=3, ttl={"default_ttl": ttl / 60}
    ) as (
        saver,
        _schema_name,
        _other,
    ):
        graph = _slow_chat(ttl).compile(checkpointer=saver)
        many = [HumanMessage(f"m{k}", id=f"m{k}") for k in range(40)]
        slow_run = _in_thread(
            lambda: graph.invoke(
                {"messages": [*many, HumanMessage("slow please", id="sp")]}, config
            ),
            errors,
        )
        time.sleep(ttl + 0.25)  # B is in its slow node, the thread expired
        graph.invoke({"messages": [HumanMessage("quick", id="q")]}, config)
        slow_run.join(30)
        assert not slow_run.is_alive()
        assert not errors, repr(errors[0])
        state = graph.get_state(config)
        texts = [m.content for m in state.values.get("messages", [])]
    assert texts[-1:] == ["last"]


def test_pg_a_subgraph_reviving_its_thread_mid_run_leaves_the_run_readable(pg_url: str) -> None:
    """One run: a message, then a subgraph whose node outlasts the thread's TTL, then a
    message. The subgraph's write revives the thread (once); after the run its state
    is readable (whatever the expiry dropped), never corrupt."""
    from langchain_core.messages import AIMessage, HumanMessage
    from langgraph.graph import END, START, StateGraph

    ttl = 0.4

    def slow(state: S) -> dict[str, Any]:
        time.sleep(ttl + 0.4)
        return {"items": ["slow"]}

    sb = StateGraph(S)
    sb.add_node("slow", slow)
    sb.add_edge(START, "slow")
    sb.add_edge("slow", END)
    b = StateGraph(S)
    b.add_node("first", lambda s: {"messages": [AIMessage("first", id="first")]})
    b.add_node("sub", sb.compile())
    b.add_node("last", lambda s: {"messages": [AIMessage("last", id="last")]})
    b.add_edge(START, "first")
    b.add_edge("first", "sub")
    b.add_edge("sub", "last")
    b.add_edge("last", END)
    tid = f"midrun-{uuid.uuid4().hex[:8]}"
    config = {"configurable": {"thread_id": tid, "user_id": "u"}}
    with _saver_in_schema(
        pg_url, "lgmp_apgrev", pool_max_size=3, ttl={"default_ttl": ttl / 60}
    ) as (
        saver,
        _schema_name,
        _other,
    ):
        graph = b.compile(checkpointer=saver)
        graph.invoke({"messages": [HumanMessage("hi", id="hi")]}, config)
        state = graph.get_state(config)
        texts = [m.content for m in state.values.get("messages", [])]
    assert texts[-1:] == ["last"]
