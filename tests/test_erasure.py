"""``erase_user``: everything of one user gone, on every backend, proven by a full scan.

Two users get threads from a real graph (chats, a pending interrupt, thread ids that say
nothing about the user), transcripts, store items with vectors and task drafts. One is
erased; then every row of every table (PostgreSQL: the whole test database; SQLite: the
file) or every key of the test's prefix (Redis, each node of a cluster) is dumped,
compressed values inflated, and searched for the erased user's id, thread ids and
message texts. The other user's rows (per element, for Redis hashes and sets) are the
same bytes before and after.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import subprocess
import sys
import textwrap
import threading
import uuid
import zlib
from collections.abc import Iterator
from datetime import datetime, timezone
from typing import Any

import psycopg
import pytest
from backends import ALL_SERVERS
from backends_support import Space, open_sync
from chat_support import State, chat_graph, run_config
from conftest import PG_ADMIN_URL, _fresh_database
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.config import get_store
from langgraph.graph import END, START, StateGraph
from langgraph.store.base import PutOp

from langgraph_memory_plus import InvalidConfigError, from_url
from langgraph_memory_plus.approvals import Approvals, DecisionRecord, TaskDrafts
from langgraph_memory_plus.approvals.queue import DEFAULT_NAMESPACE
from langgraph_memory_plus.checkpoint.compression import DICTIONARY, SUFFIX
from langgraph_memory_plus.privacy.erasure import ErasureProgress, aerase_user, erase_user

pytestmark = pytest.mark.storage


def embed(texts: list[str]) -> list[list[float]]:
    """Deterministic: letter counts of a-f."""
    return [[float(t.count(c)) for c in "abcdef"] for t in texts]


INDEX: Any = {"dims": 6, "embed": embed, "fields": ["text"]}
APPROVALS = DEFAULT_NAMESPACE
CANCELLATION = {
    "type": "object",
    "properties": {"flight": {"type": "string"}, "passport": {"type": "string"}},
    "required": ["flight", "passport"],
}


def graph() -> StateGraph:
    return chat_graph(lambda text: f"reply to {text}")


class User:
    """A user's id, thread ids and message texts: the markers a scan looks for."""

    def __init__(self, name: str) -> None:
        self.id = f"{name}-{uuid.uuid4().hex[:8]}"
        self.threads = [str(uuid.uuid4()) for _ in range(3)] + [f"chat-of-{self.id}"]
        self.texts: list[str] = []
        self.approval: dict[str, Any] = {}

    def text(self, what: str) -> str:
        out = f"{what} {uuid.uuid4().hex}"
        self.texts.append(out)
        return out

    @property
    def markers(self) -> list[bytes]:
        return [m.encode() for m in (self.id, *self.threads, *self.texts)]


def seed(memory: Any, user: User) -> None:
    app = graph().compile(checkpointer=memory.checkpointer, store=memory.store)
    for n, tid in enumerate(user.threads):
        for turn in range(3):
            said = user.text(f"turn {turn}")
            app.invoke(
                {"messages": [HumanMessage(said, id=f"h-{tid}-{turn}")]}, run_config(tid, user.id)
            )
        if n == 0:  # left waiting for a human
            ask = user.text("ask")
            app.invoke(
                {"messages": [HumanMessage(ask, id=f"h-{tid}-ask")]}, run_config(tid, user.id)
            )
    store = memory.store
    store.put(("users", user.id), "profile", {"text": user.text("profile abc")})
    store.put(("users", user.id, "memories"), "m1", {"text": user.text("memory bcd")})
    drafts = TaskDrafts(store, {"cancellation": CANCELLATION})
    drafts.create(user.id, "cancellation", {"flight": user.text("flight")}, draft_id="d1")
    # A decision record as ``Approvals.decide`` writes it (its own shape and namespace).
    record = DecisionRecord(
        approval_id=f"approval-{uuid.uuid4().hex}",
        thread_id=user.threads[0],
        user_id=user.id,
        decision="edit",
        by="reviewer-1",
        decided_at=datetime(2026, 12, 1, 10, tzinfo=timezone.utc),
        args={"passport": user.text("edited passport"), "seats": [1, 2]},
        message=user.text("reviewer note"),
        actions=({"name": "book_flight", "args": {"passport": user.text("passport")}},),
        resumed_at=datetime(2026, 12, 1, 10, 0, 1, tzinfo=timezone.utc),
    ).as_value()
    store.put(APPROVALS, record["approval_id"], record, index=False)
    user.approval = record


# -- dumping storage --------------------------------------------------------------------------


def _inflated(data: bytes) -> list[bytes]:
    """``data`` and, where it holds a compressed value, the value inflated.

    Compressed values sit at the start of a column (PostgreSQL, SQLite) or inside packed
    records and netstrings (pending writes, Redis): every start position is tried."""
    out = [data]
    if SUFFIX.encode() not in data and len(data) < 48:
        return out
    for start in range(len(data)):
        unpacker = zlib.decompressobj(-12, zdict=DICTIONARY)
        try:
            raw = unpacker.decompress(data[start:], 1 << 21)
        except zlib.error:
            continue
        if len(raw) > 8:
            out.append(raw)
    return out


def _as_bytes(value: Any) -> bytes:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    return repr(value).encode("utf-8", "surrogatepass")


Row = tuple[str, bytes]
"""(where: table or key, the row's / element's bytes)."""


def dump_sql(connection: Any, tables: list[str], quote: str = '"') -> list[Row]:
    rows: list[Row] = []
    for table in tables:
        for row in connection.execute(f"SELECT * FROM {table}").fetchall():
            rows.append((table, b"\x1f".join(_as_bytes(v) for v in row)))
    return rows


def dump_postgres(url: str) -> list[Row]:
    import psycopg

    with psycopg.connect(url) as conn:
        tables = [
            f'"{s}"."{t}"'
            for s, t in conn.execute(
                "SELECT table_schema, table_name FROM information_schema.tables "
                "WHERE table_schema NOT IN ('pg_catalog', 'information_schema') "
                "AND table_type = 'BASE TABLE'"
            ).fetchall()
        ]
        assert tables
        return dump_sql(conn, tables)


def dump_sqlite(path: str) -> list[Row]:
    import sqlite3

    conn = sqlite3.connect(path)
    try:
        tables = [
            f'"{t}"' for (t,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
        ]
        assert tables
        return dump_sql(conn, tables)
    finally:
        conn.close()


def dump_redis(url: str, prefix: str) -> list[Row]:
    """Every key of ``prefix`` (SCAN on every node), one row per element of a collection."""
    from langgraph_memory_plus.drivers.redis import sync_client_from_url

    client: Any = sync_client_from_url(url)
    rows: list[Row] = []
    try:
        keys = set(client.scan_iter(match=f"{prefix}*", count=500))  # every primary
        for key in sorted(keys):
            kind = client.type(key).decode()
            name = key.decode("utf-8", "surrogateescape")
            rows.append((name, b"key " + key))
            if kind == "string":
                rows.append((name, client.get(key) or b""))
            elif kind == "hash":
                rows.extend((name, f + b"\x1f" + v) for f, v in client.hgetall(key).items())
            elif kind == "zset":
                rows.extend((name, m) for m, _ in client.zrange(key, 0, -1, withscores=True))
            elif kind == "set":
                rows.extend((name, m) for m in client.smembers(key))
            elif kind == "list":
                rows.extend((name, m) for m in client.lrange(key, 0, -1))
            elif kind == "none":  # expired since the scan (a hold, a tombstone)
                rows.pop()
            else:
                raise AssertionError(f"unexpected key type {kind} for {key!r}")
    finally:
        client.close()
    return rows


def mentions(rows: list[Row], markers: list[bytes]) -> list[tuple[str, bytes]]:
    found = []
    for where, data in rows:
        for text in _inflated(data):
            hit = next((m for m in markers if m in text), None)
            if hit is not None:
                found.append((where, hit))
                break
    return found


def owned_by(rows: list[Row], markers: list[bytes]) -> list[Row]:
    return sorted(r for r in rows if mentions([r], markers))


# -- backends ---------------------------------------------------------------------------------


class Target:
    def __init__(self, url: str, options: dict[str, Any], dump: Any) -> None:
        self.url, self.options, self.dump = url, options, dump

    def open(self, **more: Any) -> Any:
        return from_url(self.url, transcripts=True, index=INDEX, **self.options, **more)


@pytest.fixture
def target(backend: str, request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[Target]:
    if backend == "postgres":
        with _fresh_database(PG_ADMIN_URL, "PostgreSQL") as url:
            dbname = psycopg.conninfo.conninfo_to_dict(url)["dbname"]
            pg = f"{PG_ADMIN_URL.rsplit('/', 1)[0]}/{dbname}"
            yield Target(pg, {}, lambda: dump_postgres(url))
        return
    if backend == "sqlite":
        path = str(tmp_path / "memory.db")
        yield Target(f"sqlite:///{path}", {}, lambda: dump_sqlite(path))
        return
    url = request.getfixturevalue(
        "redis_cluster_url" if backend == "redis-cluster" else "redis_url"
    )
    prefix = f"lgmp-erasure-{uuid.uuid4().hex[:10]}"
    yield Target(url, {"key_prefix": prefix}, lambda: dump_redis(url, prefix))
    from langgraph_memory_plus.drivers.redis import sync_client_from_url

    client: Any = sync_client_from_url(url)
    for row in dump_redis(url, prefix):
        if row[1].startswith(b"key "):
            client.delete(row[1][4:])
    client.close()


# -- the tests ----------------------------------------------------------------------------------


def test_erase_user_leaves_nothing_of_them_and_the_other_user_untouched(target: Target) -> None:
    alice, bob = User("alice"), User("bob")
    with target.open() as memory:
        seed(memory, alice)
        seed(memory, bob)
        # A thread deleted before erasure: its transcript outlives it, erasure finds it.
        gone = str(uuid.uuid4())
        alice.threads.append(gone)
        app = graph().compile(checkpointer=memory.checkpointer)
        app.invoke(
            {"messages": [HumanMessage(alice.text("old"), id="h-old")]}, run_config(gone, alice.id)
        )
        memory.checkpointer.delete_thread(gone)
    before = target.dump()
    assert mentions(before, [m for m in alice.markers]), "the scan finds the seeded data"
    assert mentions(before, [alice.texts[0].encode()]), "the scan finds message text"
    bob_before = owned_by(before, bob.markers)

    with target.open() as memory:
        saver = memory.checkpointer
        assert saver.threads.transcript(alice.threads[0], user_id=alice.id)
        dry = erase_user(alice.id, memory=memory, dry_run=True)
        assert sorted(target.dump()) == sorted(before)
        seen: list[ErasureProgress] = []
        report = erase_user(alice.id, memory=memory, progress=seen.append, batch_size=2)
        again = erase_user(alice.id, memory=memory)

    expected_threads = sorted(alice.threads[:4])
    assert dry.dry_run and not report.dry_run
    assert sorted(dry.thread_ids) == sorted(report.thread_ids) == expected_threads
    assert dry.counts == report.counts
    assert report.counts["threads"] == 4
    assert report.counts["checkpoints"] > 4 * 3
    # 4 threads x 3 turns x (human + ai), the answered "ask" of thread 0 is pending, and the
    # deleted thread's two lines.
    assert report.counts["transcript_messages"] == 4 * 3 * 2 + 1 + 2
    assert report.counts["store_items"] == 2 and report.counts["drafts"] == 1
    assert report.counts["approvals_anonymized"] == 1
    assert sorted(report.namespaces) == [("memories", alice.id), ("users", alice.id)]
    assert report.duration_s > 0
    assert {p.kind for p in seen} >= {"threads", "store_items"}
    assert [p.done for p in seen if p.kind == "threads"] == [2, 4]
    assert set(again.counts.values()) == {0} and again.thread_ids == []

    after = target.dump()
    assert mentions(after, alice.markers) == []
    assert owned_by(after, bob.markers) == bob_before
    with target.open() as memory:
        assert memory.checkpointer.threads.sessions(alice.id) == []
        assert len(memory.checkpointer.threads.sessions(bob.id)) == 4
        assert memory.store.search(("users", alice.id)) == []
        assert len(memory.store.search(("users", bob.id))) == 3
        assert memory.store.search(("users",), query="abc")  # bob's vectors still answer
        # The audit survives: who decided what, when, on which action; nothing of alice.
        kept = memory.store.get(APPROVALS, alice.approval["approval_id"])
        assert kept is not None
        left = kept.value
        opaque = left["user_id"]
        assert opaque.startswith("erased:") and len(opaque) > len("erased:") + 8
        assert left["thread_id"] == opaque
        assert left["args"] == {"passport": "[erased]", "seats": ["[erased]", "[erased]"]}
        assert left["actions"] == [{"name": "book_flight", "args": {"passport": "[erased]"}}]
        assert left["message"] == "[erased]"
        same = ("approval_id", "decision", "by", "decided_at", "resumed_at", "status")
        assert {k: left[k] for k in same} == {k: alice.approval[k] for k in same}
        assert memory.store.get(APPROVALS, bob.approval["approval_id"]).value == bob.approval
        # The approvals module still reads the anonymized record: the audit is usable.
        approvals = Approvals(memory.checkpointer, memory.store)
        audited = approvals.get(alice.approval["approval_id"])
        assert audited.status == "edited" and audited.user_id == opaque
        assert approvals.list(user_id=alice.id, status=None) == []
        assert TaskDrafts(memory.store, {"cancellation": CANCELLATION}).list(alice.id) == []
        assert len(TaskDrafts(memory.store, {"cancellation": CANCELLATION}).list(bob.id)) == 1


def test_aerase_user_matches_the_sync_report(target: Target) -> None:
    carol = User("carol")
    with target.open() as memory:
        seed(memory, carol)
    before = target.dump()

    async def go() -> tuple[Any, Any]:
        async with target.open() as memory:
            dry = await aerase_user(carol.id, memory=memory, dry_run=True)
            return dry, await aerase_user(carol.id, memory=memory, batch_size=3)

    dry, report = asyncio.run(go())
    assert sorted(report.thread_ids) == sorted(carol.threads) == sorted(dry.thread_ids)
    assert report.counts == dry.counts and report.counts["transcript_messages"] == 4 * 3 * 2 + 1
    assert mentions(before, carol.markers) and mentions(target.dump(), carol.markers) == []


def test_a_run_still_going_during_erasure_cannot_bring_the_thread_back(target: Target) -> None:
    """A node is running when the user is erased; its checkpoint must be refused."""
    dave = User("dave")
    dave.threads = [dave.threads[0]]
    with target.open() as memory:
        seed(memory, dave)
        ready, release = threading.Event(), threading.Event()

        def slow(state: State) -> dict[str, Any]:
            ready.set()
            assert release.wait(20)
            return {"messages": [AIMessage(dave.text("late reply"), id="ai-late")]}

        builder = StateGraph(State)
        builder.add_node("slow", slow)
        builder.add_edge(START, "slow")
        builder.add_edge("slow", END)
        app = builder.compile(checkpointer=memory.checkpointer)
        errors: list[BaseException] = []

        def run() -> None:
            try:
                late = HumanMessage(dave.text("late question"), id="h-late")
                app.invoke({"messages": [late]}, run_config(dave.threads[0], dave.id))
            except BaseException as exc:
                errors.append(exc)

        worker = threading.Thread(target=run)
        worker.start()
        assert ready.wait(20)
        report = erase_user(dave.id, memory=memory)
        release.set()
        worker.join(30)
        assert not worker.is_alive() and not errors
        assert report.thread_ids == dave.threads
        assert memory.checkpointer.get_tuple(run_config(dave.threads[0], dave.id)) is None
        assert memory.checkpointer.threads.sessions(dave.id) == []
        assert memory.checkpointer.threads.transcript(dave.threads[0]) == []
    # The texts of the turn that ran during erasure included: none of it came back.
    assert mentions(target.dump(), dave.markers) == []


def test_writes_of_a_checkpoint_in_flight_at_deletion_stay_out(target: Target) -> None:
    """LangGraph puts a step's checkpoint and its tasks' writes side by side, so the writes
    may come first. A tombstone bounded by the newest *stored* checkpoint took those of a
    checkpoint made before the deletion (newer than anything stored) for a new run's: they
    were kept and the thread's id came back (seen on SQLite, the test above). Bounded by the
    deletion's instant they are refused, while a run started after the deletion still keeps
    writes that come before its put."""
    from langgraph.checkpoint.base import Checkpoint
    from langgraph.checkpoint.base.id import uuid6

    def checkpoint(value: str) -> Checkpoint:
        return Checkpoint(
            v=4,
            id=str(uuid6(clock_seq=-1)),
            ts=datetime.now(timezone.utc).isoformat(),
            channel_values={"a": value},
            channel_versions={"a": 1},
            versions_seen={},
            updated_channels=None,
        )

    thread = f"in-flight-{uuid.uuid4().hex[:8]}"
    config = run_config(thread, "ivy")
    meta = {"source": "loop", "step": 0, "parents": {}}
    with target.open() as memory:
        saver = memory.checkpointer
        first = saver.put(config, checkpoint("stored-marker"), meta, {"a": 1})
        in_flight = checkpoint("in-flight-marker")  # made before the deletion, put after it
        saver.delete_thread(thread)
        at = {"configurable": {**config["configurable"], "checkpoint_id": in_flight["id"]}}
        saver.put_writes(at, [("a", "in-flight-write-marker")], "task-1")
        saver.put(first, in_flight, meta, {"a": 2})
        assert saver.get_tuple(config) is None
        assert mentions(target.dump(), [b"in-flight", thread.encode()]) == []

        fresh = checkpoint("fresh-marker")
        at = {"configurable": {**config["configurable"], "checkpoint_id": fresh["id"]}}
        saver.put_writes(at, [("a", "fresh-write-marker")], "task-2")
        saver.put(config, fresh, meta, {"a": 1})
        found = saver.get_tuple(config)
        assert found is not None and found.checkpoint["id"] == fresh["id"]
        assert [(t, c, v) for t, c, v in found.pending_writes] == [
            ("task-2", "a", "fresh-write-marker")
        ]


def test_a_run_still_going_during_erasure_cannot_bring_store_items_back(
    target: Target, caplog: pytest.LogCaptureFixture
) -> None:
    """A node writes the user's store items after ``erase_user`` returned: every put under
    an erased namespace is dropped (a short prefix too, which on Redis spans shards), other
    namespaces still take puts, and once the hold time is over writes work again."""
    gina, hal = User("gina"), User("hal")
    gina.threads, hal.threads = gina.threads[:1], hal.threads[:1]
    templates = [("users", "{user_id}"), ("{user_id}",)]
    hold_hours = 3 / 3600
    with target.open() as memory:
        seed(memory, gina)
        seed(memory, hal)
        memory.store.put((gina.id, "notes"), "n1", {"text": gina.text("note")})
    hal_before = owned_by(target.dump(), hal.markers)

    with target.open() as memory:
        store = memory.store
        dry = erase_user(gina.id, memory=memory, namespaces=templates, dry_run=True)
        ready, release = threading.Event(), threading.Event()

        def late(state: State) -> dict[str, Any]:
            ready.set()
            assert release.wait(20)
            writer = get_store()
            writer.put(("users", gina.id, "preferences"), "seat", {"text": gina.text("aisle")})
            writer.put(("users", gina.id), "profile", {"text": gina.text("late profile")})
            writer.put((gina.id, "notes"), "n2", {"text": gina.text("late note")})
            writer.put(("users", gina.id, "drafts"), "d", {"v": gina.text("x")}, expected_version=0)
            writer.batch(
                [
                    PutOp(("users", gina.id, "memories"), "m9", {"text": gina.text("late")}),
                    PutOp(("shared", "counters"), "runs", {"n": 1}),
                ]
            )
            return {"messages": [AIMessage("done", id="ai-late-store")]}

        builder = StateGraph(State)
        builder.add_node("late", late)
        builder.add_edge(START, "late")
        builder.add_edge("late", END)
        app = builder.compile(store=store)
        errors: list[BaseException] = []

        def run() -> None:
            try:
                app.invoke({"messages": [HumanMessage("go", id="h-go")]})
            except BaseException as exc:
                errors.append(exc)

        worker = threading.Thread(target=run)
        worker.start()
        assert ready.wait(20)
        report = erase_user(
            gina.id, memory=memory, namespaces=templates, tombstone_hours=hold_hours
        )
        with caplog.at_level(logging.WARNING, logger="langgraph_memory_plus.store"):
            release.set()
            worker.join(30)
        assert not worker.is_alive() and not errors

        assert report.counts == dry.counts and report.counts["store_items"] == 3
        assert store.search(("users", gina.id)) == [] and store.search((gina.id,)) == []
        assert store.get(("shared", "counters"), "runs") is not None  # not under a tombstone
        assert any("tombstoned" in r.getMessage() for r in caplog.records)
        assert set(
            erase_user(gina.id, memory=memory, namespaces=templates, dry_run=True).counts.values()
        ) == {0}
        again = erase_user(gina.id, memory=memory, namespaces=templates, tombstone_hours=hold_hours)
        assert set(again.counts.values()) == {0}
    after = target.dump()
    assert mentions(after, gina.markers) == []
    assert owned_by(after, hal.markers) == hal_before

    with target.open() as memory:
        # The hold ends: the same user id may sign up again.
        back = ("users", gina.id)
        for _ in range(300):
            memory.store.put(back, "profile", {"text": "signed up again"})
            if memory.store.get(back, "profile") is not None:
                break
            threading.Event().wait(0.1)
        assert memory.store.get(back, "profile") is not None
        memory.store.put((gina.id, "notes"), "n3", {"text": "new"})
        assert memory.store.get((gina.id, "notes"), "n3") is not None


def test_a_tombstone_is_lifted_early_and_checked(target: Target) -> None:
    """The async API, and the lift: a user who signs up again need not wait."""
    ns = ("users", f"ivy-{uuid.uuid4().hex[:8]}")

    async def go() -> None:
        async with target.open() as memory:
            store = memory.store
            await store.aput(ns, "k", {"v": 1})
            report = await aerase_user(ns[1], memory=memory)
            assert report.counts["store_items"] == 1
            await store.aput(ns, "k", {"v": 2})
            await store.aput((*ns, "deeper"), "k", {"v": 2})
            assert await store.asearch(ns) == []
            assert await store.alift_tombstone(ns) is True
            assert await store.alift_tombstone(ns) is False
            await store.aput((*ns, "deeper"), "k", {"v": 3})
            assert (await store.aget((*ns, "deeper"), "k")).value == {"v": 3}
            # No tombstone: the put that follows is kept.
            await aerase_user(ns[1], memory=memory, tombstone_hours=None)
            await store.aput(ns, "k", {"v": 4})
            assert (await store.aget(ns, "k")).value == {"v": 4}
            for bad in (-1, float("inf"), "24"):
                with pytest.raises(InvalidConfigError, match="tombstone_hours"):
                    await aerase_user(ns[1], memory=memory, tombstone_hours=bad)  # type: ignore[arg-type]
                with pytest.raises(InvalidConfigError, match="hold_seconds"):
                    await store.atombstone_namespace(ns, hold_seconds=bad)  # type: ignore[arg-type]
            with pytest.raises(InvalidConfigError, match="non-empty"):
                await store.atombstone_namespace(())
            assert (await store.aget(ns, "k")).value == {"v": 4}

    asyncio.run(go())


def _live_tombstones(target: Target, store: Any, prefixes: list[tuple[str, ...]]) -> int:
    """How many tombstone records the storage still holds (expired or not): rows of the
    SQL stores' table, fields of the Redis keys where ``prefixes`` would have theirs."""
    if "key_prefix" in target.options:
        from langgraph_memory_plus.store.redis.lua import REGISTRY_KINDS, SHARD_KINDS

        plans = store._plans
        keys = {plans.shard(p).keys[SHARD_KINDS.index("tomb")] for p in prefixes}
        keys.add(plans.registry[REGISTRY_KINDS.index("tombs")])
        return sum(int(store.client.hlen(key)) for key in keys)  # HLEN expires a key first
    rows = [r for r in target.dump() if r[0].strip('"').endswith("lgmp_store_tombstones")]
    return len(rows)


def test_expired_tombstones_never_block_and_do_not_pile_up(target: Target) -> None:
    run = uuid.uuid4().hex[:8]
    old = [("users", f"old-{i}-{run}") for i in range(5)] + [(f"short-{run}",)]
    with target.open() as memory:
        store = memory.store
        for prefix in old:
            store.tombstone_namespace(prefix, hold_seconds=1)
        store.put((*old[0], "x"), "k", {"v": 1})
        store.put((*old[-1], "x"), "k", {"v": 1})
        assert store.get((*old[0], "x"), "k") is None and store.get((*old[-1], "x"), "k") is None
        assert _live_tombstones(target, store, old) == len(old)
        # The holds end (each 1 s after its own placement): puts are kept again, before
        # any sweep, under a long prefix and a short one alike.
        for _ in range(300):
            for prefix in (old[0], old[-1]):
                store.put((*prefix, "x"), "k", {"v": 2})
            if all(store.get((*p, "x"), "k") is not None for p in (old[0], old[-1])):
                break
            threading.Event().wait(0.05)
        assert all(store.get((*p, "x"), "k") is not None for p in (old[0], old[-1]))
        # Expired tombstones go: with the sweep, with the next placed, or (Redis) by expiry.
        store.sweep_ttl()
        fresh = ("users", f"fresh-{run}")
        store.tombstone_namespace(fresh, hold_seconds=60)
        assert _live_tombstones(target, store, [*old, fresh]) == 1
        assert store.lift_tombstone(fresh) is True
        assert _live_tombstones(target, store, [*old, fresh]) == 0
        for prefix in old:
            store.delete_namespace(prefix)


@ALL_SERVERS
def test_tombstones_work_on_every_server(storage: Any) -> None:
    """The tombstone scripts and statements on every server of the matrix (Redis 6.2,
    Valkey, PgBouncer's transaction pooling, PostgreSQL 16 and 18 too)."""
    run = uuid.uuid4().hex[:8]
    options = dict(storage.options)
    url = storage.url
    if storage.kind == "postgres":
        options["schema"] = f"t{run}"
    elif storage.kind == "redis":
        options["key_prefix"] = f"{options.get('key_prefix', 'lgmp-test')}-{run}"
    else:
        url = os.path.join(storage.url, f"t{run}.db")
    erased, short = ("users", f"u-{run}"), (f"s-{run}",)
    with open_sync(Space(storage.kind, url, options), "store") as store:
        store.put((*erased, "a"), "kept", {"v": 1})
        store.tombstone_namespace(erased, hold_seconds=600)
        store.tombstone_namespace(short, hold_seconds=600)
        store.put((*erased, "a"), "kept", {"v": 2})
        store.put((*short, "b"), "k", {"v": 2})
        store.put(("users", f"other-{run}"), "k", {"v": 2})
        assert store.get((*erased, "a"), "kept").value == {"v": 1}  # not overwritten
        assert store.get((*short, "b"), "k") is None
        assert store.get(("users", f"other-{run}"), "k") is not None
        store.delete((*erased, "a"), "kept")  # deletes still work
        assert store.get((*erased, "a"), "kept") is None
        assert store.lift_tombstone(erased) and store.lift_tombstone(short)
        store.put((*erased, "a"), "kept", {"v": 3})
        store.put((*short, "b"), "k", {"v": 3})
        assert store.get((*erased, "a"), "kept").value == {"v": 3}
        assert store.get((*short, "b"), "k").value == {"v": 3}
        for prefix in (erased, short, ("users", f"other-{run}")):
            store.delete_namespace(prefix)


KILLED = textwrap.dedent(
    """
    import json, os, signal, sys
    from langgraph_memory_plus import from_url
    from langgraph_memory_plus.privacy.erasure import erase_user
    url, options, user = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]

    def progress(p):
        if p.kind == "threads" and p.done >= 10:
            os.kill(os.getpid(), signal.SIGKILL)

    with from_url(url, transcripts=True, **options) as memory:
        erase_user(user, memory=memory, progress=progress, batch_size=5)
    """
)


def test_an_erasure_killed_midway_finishes_when_repeated(target: Target) -> None:
    erin = User("erin")
    erin.threads = [f"t-{i}-{uuid.uuid4().hex[:6]}" for i in range(30)]
    with target.open() as memory:
        seed(memory, erin)
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    done = subprocess.run(
        [sys.executable, "-c", KILLED, target.url, json.dumps(target.options), erin.id],
        env=env,
        capture_output=True,
        timeout=120,
    )
    assert done.returncode == -signal.SIGKILL, done.stderr.decode()[-2000:]
    with target.open() as memory:
        left = memory.checkpointer.threads.count(metadata={"user_id": erin.id})
        assert 0 < left <= 20  # killed after at least two batches, before the end
        report = erase_user(erin.id, memory=memory, batch_size=7)
        assert report.counts["threads"] == left
        assert len(report.thread_ids) == left
    assert mentions(target.dump(), erin.markers) == []


def test_bad_arguments_are_refused_before_anything_goes(tmp_path: Any) -> None:
    with from_url(f"sqlite:///{tmp_path}/m.db") as memory:
        memory.store.put(("users", "u"), "k", {"v": 1})
        for bad in ("", None, 3):
            with pytest.raises(InvalidConfigError, match="user_id"):
                erase_user(bad, memory=memory)  # type: ignore[arg-type]
        with pytest.raises(InvalidConfigError, match="user_id"):
            erase_user("u", memory=memory, namespaces=[("users",)])
        with pytest.raises(InvalidConfigError, match="batch_size"):
            erase_user("u", memory=memory, batch_size=0)
        with pytest.raises(InvalidConfigError, match="not both"):
            erase_user("u", memory=memory, store=memory.store)
        assert memory.store.get(("users", "u"), "k") is not None


def test_cli_erase_user_asks_dry_runs_and_reports_json(target: Target) -> None:
    from test_cli import as_json, run

    from langgraph_memory_plus.cli.output import REFUSED

    frank = User("frank")
    frank.threads = frank.threads[:2]
    with target.open() as memory:
        seed(memory, frank)
    url = target.url
    if "key_prefix" in target.options:
        url += f"?key_prefix={target.options['key_prefix']}"
    refused = run("erase-user", frank.id, "-u", url)
    assert refused.returncode == REFUSED and "--yes" in refused.stderr
    dry = as_json("erase-user", frank.id, "--dry-run", "-u", url)
    assert dry["dry_run"] and sorted(dry["thread_ids"]) == sorted(frank.threads)
    done = as_json("erase-user", frank.id, "--yes", "-u", url)
    assert not done["dry_run"] and done["counts"] == dry["counts"]
    assert done["counts"]["threads"] == 2 and done["counts"]["drafts"] == 1
    assert set(as_json("erase-user", frank.id, "--yes", "-u", url)["counts"].values()) == {0}
    assert mentions(target.dump(), frank.markers) == []
