"""A smoke run of ``benchmarks/ladder.py``: the rungs are savers that keep a conversation.

Not a benchmark: nothing here depends on speed. It proves that every rung of the feature
ladder reads back what the chat graph wrote (so its time is that of a saver that stores it),
that the features the rungs add do what they stand for (the thread index's row and status,
rung 4's tombstone and expiry, rung 5's lists stored as new items only, read back whole
after many turns, forks, edits and an expiry, rung 6's filters answered by the store, its
thread index keys and indexes used, a re-put counted once and the status read from the
pending writes), and that one run reports every saver and leaves nothing behind.
"""

from __future__ import annotations

import contextlib
import json
import math
import sys
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TypedDict

import pytest
from langchain_core.messages import BaseMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base.id import uuid6
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt

from langgraph_memory_plus.threads.core import INTERRUPT

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # benchmarks/ is not installed; it lives beside tests/
    sys.path.insert(0, str(ROOT))

from test_benchmarks_smoke import assert_nothing_left  # noqa: E402

from benchmarks import ladder, workloads  # noqa: E402
from benchmarks import targets as tg  # noqa: E402

pytestmark = pytest.mark.storage

RUNGS = [t for _, _, rungs, _ in ladder.BACKENDS for t in rungs]
INDEXED = [t for t in RUNGS if ladder.level_of(t) >= 3]
FENCED = [t for t in RUNGS if ladder.level_of(t) >= 4]
DELTA = [t for t in RUNGS if ladder.level_of(t) >= ladder.DELTA]
FILTERED = [t for t in RUNGS if ladder.level_of(t) >= ladder.FILTERS]


def _chat(saver: Any, thread_id: str, turns: int) -> Any:
    graph = workloads.chat_graph().compile(checkpointer=saver)
    config: RunnableConfig = {"configurable": {"thread_id": thread_id}}
    for turn in range(1, turns + 1):
        graph.invoke({"messages": [workloads.user_message(turn)]}, config)
    return graph


def _thread_row(saver: Any, thread_id: str) -> tuple[Any, ...]:
    """(latest checkpoint id, status, title, checkpoint count) of the thread index."""
    if isinstance(saver, ladder.LadderSqliteSaver):
        sql = "SELECT checkpoint_id, status, title, checkpoints FROM threads WHERE thread_id = ?"
        return tuple(saver.conn.execute(sql, (thread_id,)).fetchone())
    if isinstance(saver, ladder.LadderPostgresSaver):
        sql = "SELECT checkpoint_id, status, title, checkpoints FROM threads WHERE thread_id = %s"
        with saver.pool.connection() as conn:
            return tuple(conn.execute(sql, (thread_id,)).fetchone() or ())
    row = saver.client.hgetall(saver._thread(thread_id))
    return (
        row[b"checkpoint"].decode(),
        row[b"status"].decode(),
        row[b"title"].decode() if b"title" in row else None,
        int(row[b"count"]),
    )


@pytest.mark.parametrize("target", RUNGS, ids=lambda t: t.slug)
def test_rungs_keep_a_conversation(target: tg.Target, pg_url: str, redis_url: str) -> None:
    env = tg.Env(pg=pg_url, redis=redis_url)
    with ladder.open_saver(target, env) as (saver, marker):
        config: RunnableConfig = {"configurable": {"thread_id": f"{marker}-chat"}}
        graph = _chat(saver, f"{marker}-chat", 3)
        state = graph.get_state(config)
        assert len(workloads._check_conversation(dict(state.values), 3, target.name)) == 6
        history = list(graph.get_state_history(config))
        assert [t.config for t in saver.list(config)] == [h.config for h in history]
        assert len(list(saver.list(config, before=history[1].config))) == len(history) - 2
        assert [h.parent_config for h in history[:-1]] == [h.config for h in history[1:]]
        first = next(h for h in history if h.values.get("turns") == 1 and not h.next)
        assert len(graph.get_state(first.config).values["messages"]) == 2
        # the checkpoint before remember ran holds remember's writes, in order
        middle = next(h for h in history if h.next == ("remember",))
        pending = saver.get_tuple(middle.config)
        assert pending is not None
        assert [w[1:] for w in pending.pending_writes] == [("turns", 1), ("last_reply_chars", 190)]
        other: RunnableConfig = {"configurable": {"thread_id": f"{marker}-none"}}
        assert saver.get_tuple(other) is None


class _Asked(TypedDict):
    x: int


def _asking() -> StateGraph:
    def ask(state: _Asked) -> dict[str, Any]:
        return {"x": interrupt("?")}

    builder = StateGraph(_Asked)
    builder.add_node("ask", ask)
    builder.add_edge(START, "ask")
    builder.add_edge("ask", END)
    return builder


@pytest.mark.parametrize("target", INDEXED, ids=lambda t: t.slug)
def test_thread_index_row(target: tg.Target, pg_url: str, redis_url: str) -> None:
    env = tg.Env(pg=pg_url, redis=redis_url)
    with ladder.open_saver(target, env) as (saver, marker):
        chat = f"{marker}-chat"
        _chat(saver, chat, 2)
        latest = saver.get_tuple({"configurable": {"thread_id": chat}})
        checkpoint_id, status, title, count = _thread_row(saver, chat)
        assert checkpoint_id == latest.config["configurable"]["checkpoint_id"]
        assert status == "idle" and count == len(
            list(saver.list({"configurable": {"thread_id": chat}}))
        )
        assert title and workloads.user_message(1).content.startswith(title.rstrip("\u2026"))

        graph = _asking().compile(checkpointer=saver)
        config: RunnableConfig = {"configurable": {"thread_id": f"{marker}-asked"}}
        graph.invoke({"x": 0}, config)
        assert _thread_row(saver, f"{marker}-asked")[1] == "interrupted"
        graph.invoke(Command(resume=5), config)
        assert _thread_row(saver, f"{marker}-asked")[1] == "idle"


@pytest.mark.parametrize("target", FENCED, ids=lambda t: t.slug)
def test_tombstone_and_expiry(
    target: tg.Target, pg_url: str, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = tg.Env(pg=pg_url, redis=redis_url)
    with ladder.open_saver(target, env) as (saver, marker):
        gone = f"{marker}-gone"
        graph = _chat(saver, gone, 1)
        saver.delete_thread(gone)
        config: RunnableConfig = {"configurable": {"thread_id": gone}}
        assert saver.get_tuple(config) is None
        with pytest.raises(ladder.Refused):
            graph.invoke({"messages": [workloads.user_message(1)]}, config)
        assert saver.get_tuple(config) is None

        # a thread whose expiry has passed loses its data on the next write
        old = f"{marker}-old"
        monkeypatch.setattr(ladder, "TTL_SECONDS", -1.0)
        _chat(saver, old, 1)
        monkeypatch.setattr(ladder, "TTL_SECONDS", 3600.0)
        _chat(saver, old, 1)
        checkpoints = list(saver.list({"configurable": {"thread_id": old}}))
        assert len(checkpoints) == 4  # one fresh turn's, the expired turn's are gone
        assert _thread_row(saver, old)[3] == 4
        # the fresh turn's messages only (the expired ones went with the purge), read back
        # whole by a saver that remembers nothing
        with _reopened(saver, target, marker) as fresh:
            latest = fresh.get_tuple({"configurable": {"thread_id": old}})
        assert latest is not None
        assert [m.id for m in latest.checkpoint["channel_values"]["messages"]] == [
            workloads.user_message_id(1),
            workloads.model_message_id(1),
        ]


@contextlib.contextmanager
def _reopened(saver: Any, target: tg.Target, marker: str) -> Iterator[Any]:
    """A second saver on ``saver``'s storage: it remembers nothing, so what it reads is
    what is stored."""
    level = ladder.level_of(target)
    other: Any
    if isinstance(saver, ladder.LadderSqliteSaver):
        path = saver.conn.execute("PRAGMA database_list").fetchone()[2]
        other = ladder.LadderSqliteSaver(path, level)
    elif isinstance(saver, ladder.LadderPostgresSaver):
        other = ladder.LadderPostgresSaver(saver.pool.conninfo, level, max_size=2)
    else:
        url = saver.client.connection_pool.connection_kwargs
        other = ladder.LadderRedisSaver(
            f"redis://{url['host']}:{url['port']}/{url.get('db', 0)}", saver.prefix, level
        )
    try:
        yield other
    finally:
        other.close()


def _items(saver: Any) -> int:
    """How many list items ``saver``'s storage holds."""
    if isinstance(saver, ladder.LadderSqliteSaver):
        return int(saver.conn.execute("SELECT count(*) FROM items").fetchone()[0])
    if isinstance(saver, ladder.LadderPostgresSaver):
        with saver.pool.connection() as conn:
            return int((conn.execute("SELECT count(*) FROM items").fetchone() or (0,))[0])
    keys = saver.client.scan_iter(f"{saver.prefix}:*:items")
    return sum(int(saver.client.hlen(key)) for key in keys)


@pytest.mark.parametrize("target", DELTA, ids=lambda t: t.slug)
def test_delta_lists(
    target: tg.Target, pg_url: str, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = tg.Env(pg=pg_url, redis=redis_url)
    with ladder.open_saver(target, env) as (saver, marker):
        chat = f"{marker}-chat"
        config: RunnableConfig = {"configurable": {"thread_id": chat}}
        graph = _chat(saver, chat, 11)
        # a turn serializes its two new messages only (the user's may be serialized
        # twice: LangGraph stores the input task's writes and the next checkpoint on
        # executor threads, and when the writes come second the put after them takes
        # the message as returned by a task, as the rules say; seen under load)
        dump = saver.serde.dumps_typed
        dumped: list[Any] = []
        monkeypatch.setattr(saver.serde, "dumps_typed", lambda v: dumped.append(v) or dump(v))
        graph.invoke({"messages": [workloads.user_message(12)]}, config)
        monkeypatch.undo()
        ids = [v.id for v in dumped if isinstance(v, BaseMessage)]
        new = [workloads.user_message_id(12), workloads.model_message_id(23)]
        assert ids in (new, [new[0], *new]), ids
        # each message stored once, as an item; the blobs name them
        assert _items(saver) == 24
        assert (
            len(workloads._check_conversation(dict(graph.get_state(config).values), 12, chat)) == 24
        )
        with _reopened(saver, target, marker) as fresh:
            reread = fresh.get_tuple(config)
            assert reread is not None
            values = dict(reread.checkpoint["channel_values"])
            whole = [m.id for m in workloads._check_conversation(values, 12, chat)]
            # every checkpoint of the history reads back its own part of the conversation
            for tup in fresh.list(config):
                values = tup.checkpoint["channel_values"]
                ids = [m.id for m in values.get("messages", [])]
                assert ids == whole[: len(ids)]
                assert 0 <= len(ids) - 2 * values.get("turns", 0) <= 2
        # reads never share objects
        first, second = saver.get_tuple(config), saver.get_tuple(config)
        assert first is not None and second is not None
        one, two = (t.checkpoint["channel_values"]["messages"] for t in (first, second))
        assert one == two and not any(a is b for a, b in zip(one, two, strict=True))

        # a fork from turn 3: the new branch holds turns 1-3 and its own, the old one stays
        history = list(graph.get_state_history(config))
        third = next(h for h in history if h.values.get("turns") == 3 and not h.next)
        graph.invoke({"messages": [workloads.user_message(4)]}, third.config)
        forked = graph.get_state(config).values["messages"]
        assert [m.id for m in forked][:6] == [m.id for m in third.values["messages"]]
        assert len(forked) == 8 and len(graph.get_state(history[0].config).values["messages"]) == 24

        # edits of messages read back, a field reassigned and one changed deep inside a
        # message a task returned (put_writes), are stored: those elements are serialized
        # again, the rest keep their items
        tup = saver.get_tuple(config)
        assert tup is not None
        messages = tup.checkpoint["channel_values"]["messages"]
        messages[5].content = "edited"
        messages[3].additional_kwargs["note"] = "deep"
        saver.put_writes(tup.config, [("messages", [messages[3]])], "task")
        version = saver.get_next_version(tup.checkpoint["channel_versions"]["messages"], None)
        checkpoint = {
            **tup.checkpoint,
            "id": str(uuid6(clock_seq=-2)),
            "channel_versions": {**tup.checkpoint["channel_versions"], "messages": version},
        }
        before = _items(saver)
        saver.put(tup.config, checkpoint, {"source": "update", "step": 99}, {"messages": version})
        assert _items(saver) == before + 2
        with _reopened(saver, target, marker) as fresh:
            latest = fresh.get_tuple(config)
        assert latest is not None
        stored = latest.checkpoint["channel_values"]["messages"]
        assert stored[5].content == "edited" and stored[3].additional_kwargs["note"] == "deep"
        assert [m.id for m in stored] == [m.id for m in forked]

        # a put that builds on messages read before the thread expired stores them all
        # again: the purge took their items
        monkeypatch.setattr(ladder, "TTL_SECONDS", -1.0)
        saver.put_writes(latest.config, [("turns", 1)], "expiring")
        monkeypatch.setattr(ladder, "TTL_SECONDS", 3600.0)
        tup = saver.get_tuple(config)
        assert tup is not None
        messages = [*tup.checkpoint["channel_values"]["messages"], workloads.user_message(9)]
        version = saver.get_next_version(tup.checkpoint["channel_versions"]["messages"], None)
        checkpoint = {
            **tup.checkpoint,
            "id": str(uuid6(clock_seq=-2)),
            "channel_values": {**tup.checkpoint["channel_values"], "messages": messages},
            "channel_versions": {**tup.checkpoint["channel_versions"], "messages": version},
        }
        saver.put(tup.config, checkpoint, {"source": "update", "step": 100}, {"messages": version})
        assert _items(saver) == 9
        with _reopened(saver, target, marker) as fresh:
            latest = fresh.get_tuple(config)
        assert latest is not None
        assert [m.id for m in latest.checkpoint["channel_values"]["messages"]] == [
            m.id for m in messages
        ]


def _user_turns(saver: Any, thread_id: str, users: list[str | None], run: str = "") -> Any:
    """One chat turn per user (metadata ``user_id``; None: none), run ids ``run<turn>``."""
    graph = workloads.chat_graph().compile(checkpointer=saver)
    for turn, user in enumerate(users, start=1):
        metadata: dict[str, Any] = {"run_id": f"{run}{turn}"}
        if user is not None:
            metadata["user_id"] = user
        config: RunnableConfig = {"configurable": {"thread_id": thread_id}, "metadata": metadata}
        graph.invoke({"messages": [workloads.user_message(turn)]}, config)
    return graph


@pytest.mark.parametrize("target", FILTERED, ids=lambda t: t.slug)
def test_filters_answered_by_the_store(
    target: tg.Target, pg_url: str, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rung 6 narrows ``list(filter=...)`` in the store: with the saver's exact check in
    Python turned off, a filter still returns only the matching checkpoints (a rung that
    filtered in Python alone returns them all)."""
    env = tg.Env(pg=pg_url, redis=redis_url)
    with ladder.open_saver(target, env) as (saver, marker):
        chat = f"{marker}-chat"
        _user_turns(saver, chat, ["alice", "bob"], run=f"{marker}-run")
        config: RunnableConfig = {"configurable": {"thread_id": chat}}
        every = list(saver.list(config))
        alice = [t for t in every if t.metadata.get("user_id") == "alice"]
        assert len(every) == 8 and len(alice) == 4
        exact = ladder.mn._Minimal._first
        monkeypatch.setattr(saver, "_first", lambda tuples, _, limit: exact(tuples, None, limit))
        found = list(saver.list(config, filter={"user_id": "alice"}))
        assert [t.config for t in found] == [t.config for t in alice]
        assert [t.metadata for t in found] == [t.metadata for t in alice]
        assert list(saver.list(config, filter={"user_id": "carol"})) == []
        if not isinstance(saver, ladder.LadderRedisSaver):  # across threads: the run_id index
            run = list(saver.list(None, filter={"run_id": f"{marker}-run2"}))
            assert [t.config for t in run] == [t.config for t in every if t not in alice]


@pytest.mark.parametrize("target", FILTERED, ids=lambda t: t.slug)
def test_metadata_kept_exactly(target: tg.Target, pg_url: str, redis_url: str) -> None:
    """Metadata JSON cannot hold exactly comes back as it was put (PostgreSQL keeps the
    packed bytes only for such metadata, and JSON alone for the rest)."""
    env = tg.Env(pg=pg_url, redis=redis_url)
    with ladder.open_saver(target, env) as (saver, marker):
        chat = f"{marker}-chat"
        _user_turns(saver, chat, ["alice"])
        config: RunnableConfig = {"configurable": {"thread_id": chat}}
        latest = saver.get_tuple(config)
        assert latest is not None and latest.metadata["user_id"] == "alice"
        odd = {"source": "update", "step": 9, "parents": {}, "x": 1e300}
        odd["when"] = datetime(2026, 12, 6, tzinfo=timezone.utc)
        checkpoint = {**latest.checkpoint, "id": str(uuid6(clock_seq=-2))}
        stored = saver.put(latest.config, checkpoint, odd, {})  # type: ignore[arg-type]
        back = saver.get_tuple(stored)
        assert back is not None and back.metadata == odd
        if isinstance(saver, ladder.LadderPostgresSaver):
            with saver.pool.connection() as conn:
                packed = conn.execute(
                    "SELECT count(*) FILTER (WHERE length(meta) = 0), count(*) FROM checkpoints"
                ).fetchone()
            assert packed == (4, 5)  # JSON alone but for the odd one


def _plans(saver: Any, sql: str, params: tuple[Any, ...]) -> str:
    """The query plan of ``sql`` on ``saver``'s storage (PostgreSQL: no sequential or bitmap
    scans and no sorts, as on a table of many threads; on a few rows the planner may read any
    index and sort, whatever the statistics of the moment say: CI saw a bitmap scan)."""
    if isinstance(saver, ladder.LadderSqliteSaver):
        rows = saver.conn.execute("EXPLAIN QUERY PLAN " + sql, params).fetchall()
        return "\n".join(str(r[-1]) for r in rows)
    with saver.pool.connection() as conn, conn.transaction():
        for setting in ("enable_seqscan", "enable_bitmapscan", "enable_sort"):
            conn.execute(f"SET LOCAL {setting} = off")
        rows = conn.execute("EXPLAIN " + sql.replace("?", "%s"), params).fetchall()
    return "\n".join(r[0] for r in rows)


@pytest.mark.parametrize("target", FILTERED, ids=lambda t: t.slug)
def test_thread_index_keys(target: tg.Target, pg_url: str, redis_url: str) -> None:
    """Rung 6's thread index: the user key's value in its column (Redis: its sorted set)
    with covering indexes by user, by user and status, by status and by time, which a
    search by them reads; the owner stays when a turn's metadata lacks the key; the run
    id's index."""
    env = tg.Env(pg=pg_url, redis=redis_url)
    with ladder.open_saver(target, env) as (saver, marker):
        chat, other = f"{marker}-chat", f"{marker}-other"
        _user_turns(saver, chat, ["alice", None])
        _user_turns(saver, other, ["bob"])
        if isinstance(saver, ladder.LadderRedisSaver):
            tix = saver._tix()
            assert saver.client.zrevrange(f"{tix}:all", 0, -1) == [other.encode(), chat.encode()]
            assert saver.client.zrange(f'{tix}:user:"alice"', 0, -1) == [chat.encode()]
            assert saver.client.zrange(f'{tix}:user:"bob"', 0, -1) == [other.encode()]
            meta = saver.client.hget(saver._thread(chat), "metadata")
            assert json.loads(meta)["user_id"] == "alice"  # kept: the turn had none
            saver.delete_thread(other)
            assert saver.client.zrange(f"{tix}:all", 0, -1) == [chat.encode()]
            assert saver.client.zrange(f'{tix}:user:"bob"', 0, -1) == []
            return
        by_user = "SELECT thread_id FROM threads WHERE user_id = ? ORDER BY updated_at DESC"
        pg = isinstance(saver, ladder.LadderPostgresSaver)
        alice = json.dumps("alice") if pg else "alice"
        if pg:
            with saver.pool.connection() as conn:
                rows = conn.execute(by_user.replace("?", "%s") + ", thread_id", (alice,))
                found = [r[0] for r in rows.fetchall()]
                meta = conn.execute(
                    "SELECT metadata FROM threads WHERE thread_id = %s", (chat,)
                ).fetchone()
            assert meta is not None and meta[0]["user_id"] == "alice"
        else:
            found = [r[0] for r in saver.conn.execute(by_user, (alice,))]
            meta = saver.conn.execute(
                "SELECT metadata FROM threads WHERE thread_id = ?", (chat,)
            ).fetchone()
            assert json.loads(meta[0])["user_id"] == "alice"  # kept: the turn had none
        assert found == [chat]
        for sql, params, index in [
            (by_user, (alice,), "threads_user"),
            (
                "SELECT thread_id FROM threads WHERE user_id = ? AND status = ? "
                "ORDER BY updated_at DESC",
                (alice, "interrupted"),
                "threads_user_status",
            ),
            (
                "SELECT thread_id FROM threads WHERE status = ? ORDER BY updated_at DESC",
                ("interrupted",),
                "threads_status",
            ),
            (
                "SELECT thread_id FROM threads ORDER BY updated_at DESC LIMIT 10",
                (),
                "threads_updated",
            ),
            (
                "SELECT checkpoint_id FROM checkpoints WHERE run_id = ?",
                ("run1",),
                "checkpoints_run_id",
            ),
        ]:
            plan = _plans(saver, sql, params)
            assert index in plan, plan
            if "threads" in index:  # the index alone answers
                assert ("Index Only Scan" if pg else "COVERING INDEX") in plan, plan


@pytest.mark.parametrize("target", FILTERED, ids=lambda t: t.slug)
def test_reput_counts_once(target: tg.Target, pg_url: str, redis_url: str) -> None:
    """A put of a checkpoint the thread holds already (a retried put) does not count it
    again in the thread index."""
    env = tg.Env(pg=pg_url, redis=redis_url)
    with ladder.open_saver(target, env) as (saver, marker):
        chat = f"{marker}-chat"
        _chat(saver, chat, 1)
        latest = saver.get_tuple({"configurable": {"thread_id": chat}})
        assert latest is not None and latest.parent_config is not None
        assert _thread_row(saver, chat)[3] == 4
        saver.put(latest.parent_config, latest.checkpoint, latest.metadata, {})
        assert _thread_row(saver, chat)[3] == 4
        again = saver.get_tuple(latest.config)
        assert again is not None and again.checkpoint == latest.checkpoint


@pytest.mark.parametrize(
    "target",
    [t for t in FILTERED if t.backend != "postgres"],
    ids=lambda t: t.slug,
)
def test_status_read_from_pending_writes(target: tg.Target, pg_url: str, redis_url: str) -> None:
    """On SQLite and Redis (as ours), a put reads its checkpoint's interrupt writes stored
    before it for the thread's status, without rung 3's record of the interrupt."""
    env = tg.Env(pg=pg_url, redis=redis_url)
    with ladder.open_saver(target, env) as (saver, marker):
        chat = f"{marker}-chat"
        _chat(saver, chat, 1)
        latest = saver.get_tuple({"configurable": {"thread_id": chat}})
        assert latest is not None
        checkpoint = {**latest.checkpoint, "id": str(uuid6(clock_seq=-2))}
        written: RunnableConfig = {
            "configurable": {"thread_id": chat, "checkpoint_ns": "",
                             "checkpoint_id": checkpoint["id"]}
        }  # fmt: skip
        saver.put_writes(written, [(INTERRUPT, "?")], "task")
        if isinstance(saver, ladder.LadderSqliteSaver):  # rung 3's record of it gone
            saver.conn.execute("UPDATE threads SET interrupted_at = NULL")
        else:
            saver.client.hdel(saver._thread(chat), "interrupted")
        saver.put(latest.config, checkpoint, latest.metadata, {})  # type: ignore[arg-type]
        row = _thread_row(saver, chat)
        assert row[:2] == (checkpoint["id"], "interrupted")


def test_ladder_run_reports_every_saver(
    pg_url: str, redis_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    report = ladder.main(
        ["--pg", pg_url, "--redis", redis_url, "--turns", "1", "--turns-sample", "3",
         "--warmup", "1", "--rounds", "1"]
    )  # fmt: skip
    printed = capsys.readouterr().out
    savers = report["savers"]["1"]
    assert set(savers) == {t.name for t in ladder.SAVERS}
    for metrics in savers.values():
        assert math.isfinite(metrics["cpu ms/turn"]) and metrics["turn p50 ms"] > 0
    for target in ladder.SAVERS[1:]:
        assert f"| {target.name} | 1 |" in printed
    assert_nothing_left(pg_url, redis_url, report["meta"]["run_id"])


def test_call_split_reports_each_call(
    pg_url: str, redis_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    report = ladder.main(
        ["--pg", pg_url, "--redis", redis_url, "--turns", "1", "--turns-sample", "4",
         "--warmup", "1", "--rounds", "1", "--calls", "min_sqlite,lad_sqlite5"]
    )  # fmt: skip
    printed = capsys.readouterr().out
    savers = report["savers"]["1"]
    assert set(savers) == {"minimal SqliteSaver", "ladder SQLite 5: +delta lists"}
    for name, split in savers.items():
        # a T=1 turn of the chat graph: four puts, three put_writes, one read
        calls = [split[f"{call} calls"] for call in ladder.CALLS]
        assert calls == [4, 3, 1]
        assert all(split[call] > 0 for call in ladder.CALLS)
        parts = sum(split[part] for part in (*ladder.CALLS, "outside"))
        assert math.isclose(split["turn"], parts)
        assert f"| {name} | 1 |" in printed
    assert_nothing_left(pg_url, redis_url, report["meta"]["run_id"])
