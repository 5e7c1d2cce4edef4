"""The thread index's fast paths: what they read, and that they stay exact.

A search or a count by an indexed key reads one covering index on SQL (the thread's
expiry and the key's value copied into the index row) and, on Redis, a count checks a
few fields per entry of the key's set. These tests check the copies follow every change
(a thread that moves to another user, expiry, an upgrade from a schema without them) and
that the SQL indexes really answer by themselves.
"""

from __future__ import annotations

import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from chat_support import chat_graph, run_config
from conftest import PG_ADMIN_URL, _saver_target
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.base.id import uuid6

from langgraph_memory_plus import SetupRequiredError
from langgraph_memory_plus.checkpoint.config import thread_key
from langgraph_memory_plus.checkpoint.postgres.plans import CHECKPOINT_MIGRATIONS
from langgraph_memory_plus.drivers.postgres import Query as PgQuery
from langgraph_memory_plus.drivers.redis import Batch
from langgraph_memory_plus.drivers.sqlite import Query as SqliteQuery
from langgraph_memory_plus.threads.core import index_value
from langgraph_memory_plus.threads.postgres import key_column as pg_key_column
from langgraph_memory_plus.threads.redis import TIX_ADD_SHA
from langgraph_memory_plus.threads.sqlite import key_column as sqlite_key_column

ROOT = Path(__file__).resolve().parent.parent


def _run(saver: Any, *commands: Any) -> Any:
    def plan() -> Any:
        reply = None
        for command in commands:
            reply = yield command
        return reply

    return saver._run(plan())


def _say(graph: Any, tid: str, user: str, text: str = "hi") -> None:
    message = HumanMessage(content=text, id=f"{tid}-{uuid.uuid4().hex[:6]}")
    graph.invoke({"messages": [message]}, run_config(tid, user))


def test_a_thread_that_changes_user_is_counted_for_its_new_user_only(saver_factory: Any) -> None:
    tag = uuid.uuid4().hex[:8]
    old, new, tid = f"old-{tag}", f"new-{tag}", f"mv-{tag}"
    with saver_factory() as saver:
        graph = chat_graph(str.upper).compile(checkpointer=saver)
        _say(graph, tid, old)
        _say(graph, f"stay-{tag}", old)
        assert saver.threads.count(metadata={"user_id": old}) == 2
        _say(graph, tid, new)
        for _ in range(2):  # the second time after any mending the first did
            assert saver.threads.count(metadata={"user_id": old}) == 1
            assert saver.threads.count(metadata={"user_id": new}) == 1
            assert saver.threads.count(metadata={"user_id": new}, status="idle") == 1
            assert saver.threads.count(metadata={"user_id": old}, status="idle") == 1
            assert [r["thread_id"] for r in saver.threads.sessions(new)] == [tid]
            assert [r["thread_id"] for r in saver.threads.sessions(old)] == [f"stay-{tag}"]
        _say(graph, tid, new, "ask")
        assert saver.threads.count(metadata={"user_id": new}, status="interrupted") == 1
        assert saver.threads.count(metadata={"user_id": new}, status="idle") == 0
        assert saver.threads.count(metadata={"user_id": old}, status="interrupted") == 0


def test_counts_by_user_leave_out_expired_threads(saver_factory: Any) -> None:
    tag = uuid.uuid4().hex[:8]
    user = f"eu-{tag}"
    with saver_factory(ttl={"default_ttl": 0.02}) as saver:  # 1.2 s
        graph = chat_graph(str.upper).compile(checkpointer=saver)
        _say(graph, f"e1-{tag}", user)
        _say(graph, f"e2-{tag}", user, "ask")
        assert saver.threads.count(metadata={"user_id": user}) == 2
        assert saver.threads.count(metadata={"user_id": user}, status="interrupted") == 1
        time.sleep(1.5)
        assert saver.threads.count(metadata={"user_id": user}) == 0
        assert saver.threads.count(metadata={"user_id": user}, status="interrupted") == 0
        assert saver.threads.search(metadata={"user_id": user}, offset=0) == []
        _say(graph, f"e1-{tag}", user)  # written again: listed again
        assert saver.threads.count(metadata={"user_id": user}) == 1


def test_postgres_rows_carry_their_threads_expiry(saver_factory: Any, storage: Any) -> None:
    """Every write path that creates or moves a thread's expiry leaves the index row's
    copy equal to the thread's own (the reads trust the copy)."""
    if storage.kind != "postgres":
        return
    tag = uuid.uuid4().hex[:8]
    user = f"xu-{tag}"
    with saver_factory(ttl={"default_ttl": 60}) as saver:
        graph = chat_graph(str.upper).compile(checkpointer=saver)
        _say(graph, f"x1-{tag}", user)
        _say(graph, f"x2-{tag}", user, "ask")
        saver.copy_thread(f"x1-{tag}", f"x3-{tag}")
        tks = [thread_key(f"x{i}-{tag}") for i in (1, 2, 3)]
        # a drifted expiry (as an old write or an admin left it) is copied when it moves
        _run(
            saver,
            PgQuery(
                "UPDATE lgmp_threads SET expires_at = now() + interval '1 hour' "
                "WHERE thread_key = %s",
                (tks[1],),
            ),
        )
        rows = _run(
            saver,
            PgQuery(
                """SELECT i.thread_key, i.expires_at = t.expires_at FROM lgmp_thread_index i
                JOIN lgmp_threads t USING (thread_key) WHERE i.thread_key = ANY(%s)""",
                (tks,),
                fetch=True,
            ),
        )
        assert len(rows) == 3 and all(same for _, same in rows)
        _run(
            saver,
            PgQuery(
                "UPDATE lgmp_threads SET expires_at = now() - interval '1 s' WHERE thread_key = %s",
                (tks[0],),
            ),
        )
        assert saver.threads.count(metadata={"user_id": user}) == 2
        listed = {r["thread_id"] for r in saver.threads.search(metadata={"user_id": user})}
        assert listed == {f"x2-{tag}", f"x3-{tag}"}


def test_postgres_upgrade_copies_expiry_into_the_index(saver_factory: Any, storage: Any) -> None:
    """A schema from before the copy (no expires_at column, version 5): setup() adds it
    from each thread's row, so an expired thread stays unlisted after the upgrade.

    In a schema of its own: rebuilt indexes of a table with HOT chains wait for older
    snapshots before a plan may use them, so other tests of the run's shared schema
    would see sequential scans for a while."""
    if storage.kind != "postgres":
        return
    tag = uuid.uuid4().hex[:8]
    user = f"up-{tag}"
    schema = f"upgrade_{tag}"
    in_schema = PgQuery(f"SET LOCAL search_path TO {schema}")
    with saver_factory(ttl={"default_ttl": 60}, schema=schema) as saver:
        graph = chat_graph(str.upper).compile(checkpointer=saver)
        _say(graph, f"u1-{tag}", user)
        _say(graph, f"u2-{tag}", user)
        _run(
            saver,
            in_schema,
            PgQuery("ALTER TABLE lgmp_thread_index DROP COLUMN expires_at CASCADE"),
            PgQuery("DROP FUNCTION lgmp_thread_index_expiry() CASCADE"),
            # version 6 and the ones after it (they only add tables and a column: replayed)
            PgQuery("DELETE FROM lgmp_checkpoint_migrations WHERE v >= 6"),
            PgQuery(
                "UPDATE lgmp_threads SET expires_at = now() - interval '1 s' WHERE thread_key = %s",
                (thread_key(f"u1-{tag}"),),
            ),
        )
    with saver_factory(ttl={"default_ttl": 60}, schema=schema) as saver:  # setup() migrates
        assert saver.threads.count(metadata={"user_id": user}) == 1
        assert [r["thread_id"] for r in saver.threads.sessions(user)] == [f"u2-{tag}"]
        [[version]] = _run(
            saver, in_schema, PgQuery("SELECT max(v) FROM lgmp_checkpoint_migrations", fetch=True)
        )
        _run(saver, PgQuery(f"DROP SCHEMA {schema} CASCADE"))
        assert version == len(CHECKPOINT_MIGRATIONS) - 1


def test_sql_counts_and_pages_by_user_read_the_index_alone(
    saver_factory: Any, storage: Any
) -> None:
    """The plan of a count and of a page by user and by user and status: an index-only
    scan (PostgreSQL, with the alternatives turned off, as on a table too small to
    prefer it) or a covering index (SQLite)."""
    if storage.kind == "redis":
        return
    with saver_factory() as saver:
        graph = chat_graph(str.upper).compile(checkpointer=saver)
        _say(graph, f"p-{uuid.uuid4().hex[:8]}", "pu")
        if storage.kind == "postgres":
            col, now, mark = pg_key_column("user_id"), "now()", "%s"
        else:
            col, now, mark = sqlite_key_column("user_id"), "1e12", "?"
        listed = f"(i.expires_at IS NULL OR i.expires_at > {now})"
        queries = [
            f"SELECT count(*) FROM lgmp_thread_index i WHERE i.{col} = {mark} AND {listed}",
            f"""SELECT i.thread_key FROM lgmp_thread_index i WHERE i.{col} = {mark}
                AND i.status = 'idle' AND {listed}
                ORDER BY i.updated_at DESC, i.thread_key DESC LIMIT 10 OFFSET 5""",
        ]
        if storage.kind == "postgres":
            form = index_value("pu")
            for sql in queries:
                plan = _run(
                    saver,
                    PgQuery("SET LOCAL enable_seqscan = off"),
                    PgQuery("SET LOCAL enable_bitmapscan = off"),
                    PgQuery("EXPLAIN " + sql.replace("%s", "%s::jsonb"), (form,), fetch=True),
                )
                assert "Index Only Scan" in " ".join(r[0] for r in plan), plan
        else:
            for sql in queries:
                plan = _run(saver, SqliteQuery("EXPLAIN QUERY PLAN " + sql, ("pu",), fetch=True))
                assert "COVERING INDEX" in " ".join(str(r) for r in plan), plan
        # and what the saver runs gives the answer those plans give
        assert saver.threads.count(metadata={"user_id": "pu"}) >= 1


def test_redis_count_leaves_out_and_mends_stale_entries(saver_factory: Any, storage: Any) -> None:
    """Entries a crash left in a user's set (a deleted thread's, one never written) are
    not counted, and the count removes them; one of a write in flight (newer than
    ``IN_FLIGHT_MS``) is not counted and stays."""
    from langgraph_memory_plus.threads.redis import IN_FLIGHT_MS

    if storage.kind != "redis":
        return
    tag = uuid.uuid4().hex[:8]
    user = f"ru-{tag}"
    with saver_factory() as saver:
        graph = chat_graph(str.upper).compile(checkpointer=saver)
        _say(graph, f"r1-{tag}", user)
        _say(graph, f"r2-{tag}", user)
        index = saver.threads._plans
        key = index.set_key("user_id", index_value(user))
        ghosts = [f"gone-{tag}".encode(), f"r2-{tag}".encode()]
        saver.delete_thread(f"r2-{tag}")
        crashed = int(time.time() * 1000) - IN_FLIGHT_MS - 1000
        _run(saver, Batch([("ZADD", key, crashed, g) for g in ghosts]))
        flying = f"flying-{tag}".encode()
        _run(saver, Batch([("ZADD", key, int(time.time() * 1000), flying)]))
        assert saver.threads.count(metadata={"user_id": user}) == 1
        scores = _run(saver, Batch([("ZSCORE", key, g) for g in [*ghosts, flying]]))
        assert scores[:2] == [None, None] and scores[2] is not None
        assert saver.threads.count(metadata={"user_id": user}) == 1
        assert [r["thread_id"] for r in saver.threads.sessions(user)] == [f"r1-{tag}"]


def test_the_thread_written_last_comes_first_even_within_a_second(saver_factory: Any) -> None:
    """A, B, then A again, in quick succession: A is the newest (a new input moves a
    thread's ``updated_at`` on every backend, also where a run's steps share one time)."""
    tag = uuid.uuid4().hex[:8]
    user = f"ab-{tag}"
    with saver_factory() as saver:
        graph = chat_graph(str.upper).compile(checkpointer=saver)
        for tid in (f"a-{tag}", f"b-{tag}", f"a-{tag}"):
            _say(graph, tid, user)
            time.sleep(0.005)  # distinct milliseconds (Redis keeps ms)
        assert [r["thread_id"] for r in saver.threads.sessions(user)] == [f"a-{tag}", f"b-{tag}"]


class _Commands:
    """The commands a Redis saver's runner executes (counted by kind)."""

    def __init__(self, saver: Any) -> None:
        self.seen: list[Any] = []
        runner = saver._runner
        execute = runner._execute

        def counted(command: Any) -> Any:
            self.seen.append(command)
            return execute(command)

        runner._execute = counted

    def index_steps(self) -> int:
        # a step: ZADD of the thread's entries (the user sets' through TIX_ADD, whose
        # expiry only grows)
        return sum(
            1
            for c in self.seen
            if isinstance(c, Batch)
            and any(
                a[0] == "ZADD" or (a[0] == "EVALSHA" and a[1] == TIX_ADD_SHA) for a in c.commands
            )
        )


def test_redis_a_runs_later_puts_reuse_its_index_step(saver_factory: Any, storage: Any) -> None:
    """One sorted-set step per chat turn (its input's), not one per put; the record's
    time still equals its entries' scores."""
    if storage.kind != "redis":
        return
    tag = uuid.uuid4().hex[:8]
    tid, user = f"rs-{tag}", f"rsu-{tag}"
    with saver_factory() as saver:
        graph = chat_graph(str.upper).compile(checkpointer=saver)
        _say(graph, tid, user)
        commands = _Commands(saver)
        _say(graph, tid, user, "again")
        puts = [c for c in commands.seen if getattr(c, "script", None) == "put"]
        assert len(puts) >= 2 and commands.index_steps() == 1
        index = saver.threads._plans
        [u] = _run(saver, Batch([("HGET", index._record_key(tid), b"u")]))
        keys = [index.all_key, index.set_key("user_id", index_value(user))]
        scores = _run(saver, Batch([("ZSCORE", k, tid.encode()) for k in keys]))
        assert [int(float(s)) for s in scores] == [int(u)] * 2


def test_redis_a_reused_index_step_is_refused_once_the_record_moved(
    saver_factory: Any, storage: Any
) -> None:
    """A put that would reuse its run's step 1 after the record was re-derived (flag x,
    as a prune or a copy leaves it) or written by someone else makes a step 1 of its own:
    the thread's entries then carry the put's new time."""
    if storage.kind != "redis":
        return
    tag = uuid.uuid4().hex[:8]
    with saver_factory() as saver:
        index = saver.threads._plans
        for n, meddle in enumerate(
            [("HSET", "x", "1"), ("HSET", "u", "1")]  # re-derived; another writer's time
        ):
            tid, user = f"rr{n}-{tag}", f"rru-{tag}"
            graph = chat_graph(str.upper).compile(checkpointer=saver)
            _say(graph, tid, user)
            config = saver.get_tuple(run_config(tid, user)).config
            before = _run(saver, Batch([("ZSCORE", index.all_key, tid.encode())]))[0]
            _run(saver, Batch([(meddle[0], index._record_key(tid), *meddle[1:])]))
            time.sleep(0.005)
            latest = saver.get_tuple(config)
            assert latest is not None
            # a newer id, as LangGraph makes them (a random uuid4 sorted below the latest
            # about half the time, and the put was then not the thread's latest)
            checkpoint = {**latest.checkpoint, "id": str(uuid6())}
            commands = _Commands(saver)
            saver.put(config, checkpoint, {"source": "loop", "step": 9, "user_id": user}, {})
            assert commands.index_steps() == 1  # the refused reuse, then a step 1
            [u, x] = _run(saver, Batch([("HMGET", index._record_key(tid), b"u", b"x")]))[0]
            after = _run(saver, Batch([("ZSCORE", index.all_key, tid.encode())]))[0]
            assert x is None and int(u) == int(float(after)) > int(float(before))
            assert saver.threads.count(metadata={"user_id": user}, ids=[tid]) == 1


def test_turn_benchmark_takes_the_index_out_of_the_off_savers(storage: Any) -> None:
    """``benchmarks.threads.turn_row`` at a tiny size: its ``off`` savers write no index
    (it checks that only the ``on`` threads are listed), on every backend's own storage."""
    if str(ROOT) not in sys.path:  # benchmarks/ is not installed; it lives beside tests/
        sys.path.insert(0, str(ROOT))
    from benchmarks.threads import turn_row

    if storage.kind == "postgres":
        url = PG_ADMIN_URL  # it makes a database of its own there
    else:
        url = storage.url if storage.kind == "redis" else ""
    row = turn_row(storage.kind, url, rounds=3, turns=2)
    assert row["rounds"] == 3 and set(row) >= {"on paired", "off_again paired"}


def test_sql_search_by_a_key_setup_has_not_added_asks_for_setup(
    saver_factory: Any, storage: Any
) -> None:
    """An indexed key added to ``thread_index_keys`` needs ``setup()`` (its column): on
    PostgreSQL a search by it before that says so, and works after it; SQLite sets itself
    up before its first plan."""
    if storage.kind == "redis":
        return
    tag = uuid.uuid4().hex[:8]
    key = f"team_{tag}"
    with saver_factory() as saver:
        graph = chat_graph(str.upper).compile(checkpointer=saver)
        _say(graph, f"k-{tag}", "ku")
        options = {**storage.options, "thread_index_keys": ["user_id", key]}
        with type(saver).from_conn_string(_saver_target(storage), **options) as fresh:
            if storage.kind == "postgres":
                with pytest.raises(SetupRequiredError, match=r"setup\(\)"):
                    fresh.threads.count(metadata={key: "a"})
                fresh.setup()
            assert fresh.threads.count(metadata={key: "a"}) == 0
            assert fresh.threads.count(metadata={"user_id": "ku"}) >= 1
