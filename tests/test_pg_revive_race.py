"""Expired threads written again while the run's other writes race on them (PostgreSQL)."""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any

import pytest
from chat_support import chat_graph, run_config
from langchain_core.messages import HumanMessage
from pg_race_support import checkpoint as _checkpoint
from pg_race_support import saver_in_schema as _saver_in_schema
from pg_race_support import waiting_for_a_lock as _waiting_for_a_lock

pytestmark = pytest.mark.storage


def _say(graph: Any, tid: str, user: str, text: str) -> None:
    message = HumanMessage(content=text, id=f"{tid}-{uuid.uuid4().hex[:6]}")
    graph.invoke({"messages": [message]}, run_config(tid, user))


def test_pg_threads_revived_by_racing_writes_stay_listed_and_whole(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Several threads at once: each written, left to expire, written again; right after,
    each is counted for its user, found by ``get`` and ``sessions``, and its state holds
    the second run's answer (no racing write of the run purged another's). Each revival
    purges once: the run's put and put_writes race on the expired thread, and before the
    fix the writes that waited behind the reviver took the thread as still expired and
    purged again (2 or 3 purges in about half the revivals here; the lost rows and the
    missing index row need a write of a later step to land in between, which only a
    loaded machine did, see the deterministic test below). About 4 s."""
    from langgraph_memory_plus.checkpoint.postgres.plans import PostgresCheckpointPlans

    ttl = 0.3
    workers, rounds = 6, 4
    problems: list[str] = []
    purged: dict[bytes, int] = {}
    purge = PostgresCheckpointPlans._purge_expired

    def counted_purge(self: Any, tk: bytes, ns: str, checkpoint_id: str) -> Any:
        purged[tk] = purged.get(tk, 0) + 1
        return (yield from purge(self, tk, ns, checkpoint_id))

    monkeypatch.setattr(PostgresCheckpointPlans, "_purge_expired", counted_purge)
    with _saver_in_schema(
        pg_url, "lgmp_revive", pool_max_size=8, ttl={"default_ttl": ttl / 60}
    ) as (
        saver,
        _schema_name,
        _other,
    ):
        graph = chat_graph(str.upper).compile(checkpointer=saver)

        def run(w: int) -> None:
            for r in range(rounds):
                tag = uuid.uuid4().hex[:8]
                user, tid = f"ru-{w}-{tag}", f"rt-{w}-{tag}"
                try:
                    _say(graph, tid, user, "one")
                    time.sleep(ttl + 0.15)
                    _say(graph, tid, user, "two")
                    count = saver.threads.count(metadata={"user_id": user})
                    got = saver.threads.get(tid)
                    sessions = [s["thread_id"] for s in saver.threads.sessions(user)]
                    state = graph.get_state(run_config(tid, user))
                    texts = [m.content for m in state.values.get("messages", [])]
                except Exception as exc:  # reported below
                    problems.append(f"{tid}: {exc!r}")
                    continue
                if count != 1 or got is None or sessions != [tid]:
                    problems.append(f"{tid} r{r}: count {count}, get {got}, sessions {sessions}")
                if texts[-2:] != ["two", "TWO"]:
                    problems.append(f"{tid} r{r}: state {texts}")

        threads = [threading.Thread(target=run, args=(w,), daemon=True) for w in range(workers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
            assert not t.is_alive()
    assert not problems, f"{len(problems)} of {workers * rounds}: " + "; ".join(problems[:6])
    assert sorted(purged.values()) == [1] * workers * rounds, "revived more than once"


def test_pg_a_write_that_waited_behind_a_revival_does_not_revive_again(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An expired thread written by two writers at once, as a step's put and its tasks'
    put_writes run side by side: the put revives it (stopped, thread row held, before it
    purges the expired history), the next checkpoint's put_writes declines on the expired
    row and waits for the thread row. Once the revival commits, the waiting write must see
    the thread as revived, not expired: before, it read ``was_expired`` from its
    statement's snapshot (the pre-revival row), purged all but its own checkpoint's rows
    (the reviver's new checkpoint with them), and refreshed the index from what was left
    (nothing: the index row deleted, the thread unlisted though it has checkpoints)."""
    from langgraph_memory_plus.checkpoint.config import thread_key
    from langgraph_memory_plus.checkpoint.postgres.plans import PostgresCheckpointPlans

    tag = uuid.uuid4().hex[:8]
    thread_id, user = f"revive-{tag}", f"ru-{tag}"
    tk = thread_key(thread_id)
    entered, go = threading.Event(), threading.Event()
    purges: list[str] = []
    purge = PostgresCheckpointPlans._purge_expired

    def stopped_purge(self: Any, tk_: bytes, ns: str, checkpoint_id: str) -> Any:
        purges.append(checkpoint_id)
        if len(purges) == 1:  # the reviver: stop it with the thread row held
            entered.set()
            assert go.wait(30)
        return (yield from purge(self, tk_, ns, checkpoint_id))

    monkeypatch.setattr(PostgresCheckpointPlans, "_purge_expired", stopped_purge)
    errors: list[BaseException] = []
    with _saver_in_schema(pg_url, "lgmp_revive", pool_max_size=4, ttl={"default_ttl": 1.0}) as (
        saver,
        schema,
        other,
    ):
        s = f'"{schema}"'
        cfg = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
        meta = {"user_id": user, "step": 0}
        old = saver.put(cfg, _checkpoint("old", "1"), meta, {"a": "1"})
        other.execute(
            f"UPDATE {s}.lgmp_threads SET expires_at = now() - interval '1 second' "
            "WHERE thread_key = %s",
            (tk,),
        )
        assert saver.threads.count(metadata={"user_id": user}) == 0
        revived = _checkpoint("new", "2")
        following = _checkpoint("next", "3")

        def revive() -> None:
            try:
                saver.put(cfg, revived, {**meta, "step": 1}, {"a": "2"})
            except BaseException as exc:  # reported below
                errors.append(exc)

        def write_next() -> None:
            try:
                target = {"configurable": {**cfg["configurable"], "checkpoint_id": following["id"]}}
                saver.put_writes(target, [("a", "w")], "task-1")
            except BaseException as exc:  # reported below
                errors.append(exc)

        reviver = threading.Thread(target=revive, daemon=True)
        reviver.start()
        assert entered.wait(30)
        writer = threading.Thread(target=write_next, daemon=True)
        writer.start()
        _waiting_for_a_lock(other, 1)  # the write waits for the reviver's thread row
        go.set()
        reviver.join(30)
        writer.join(30)
        assert not reviver.is_alive() and not writer.is_alive()
        assert not errors, repr(errors[0])
        got = saver.get_tuple(cfg)
        found = {
            "latest": None if got is None else got.checkpoint["id"],
            "pending": None if got is None else [w[1:] for w in got.pending_writes or []],
            "listed": saver.threads.get(thread_id) is not None,
            "count": saver.threads.count(metadata={"user_id": user}),
            "sessions": [r["thread_id"] for r in saver.threads.sessions(user)],
            "purged for": purges,
        }
    assert old["configurable"]["checkpoint_id"] != revived["id"]
    assert found == {
        "latest": revived["id"],  # the revival's checkpoint kept
        "pending": [],
        "listed": True,
        "count": 1,
        "sessions": [thread_id],
        "purged for": [revived["id"]],  # the waiting write revived nothing
    }
