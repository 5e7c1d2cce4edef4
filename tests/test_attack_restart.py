"""Attacks on "a put whose parent went is put whole in a new transaction" (b28e9bd): the
first try's plan raises ``Restart``, its transaction rolls back, and ``put``/``aput`` run
a second plan with ``whole=True``.

Most tests remove the parent without a clock: ``keep_last=1``, checkpoints ``c1`` and
``c2`` on it (``c2``'s put trims ``c1``), then a put forked from ``c1`` that names ``c1``'s
rows (the blob of a channel it left unchanged): its first try finds ``c1`` gone and
restarts. ``_between`` wraps the saver's ``_put_plan`` so that something happens exactly
between the two tries (a takeover of the fence, an erasure hold, a cancellation).
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import sqlite3
import uuid
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from graphs import checkpoint_of
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.base import Checkpoint

from tests.conftest import AsyncSaverFactory, SaverFactory

SERVERS = ["sqlite", "postgres", "redis"]
KEY = bytes(range(32))


def _cfg(thread_id: str, **more: Any) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread_id, "checkpoint_ns": "", **more}}


KEPT = "kept " * 10


def _c1() -> tuple[Checkpoint, dict[str, str]]:
    versions = {"a": "1", "b": "1", "m": "1"}
    return checkpoint_of({"a": "one", "b": KEPT, "m": ["x", "y"]}, versions), versions


def _c2() -> tuple[Checkpoint, dict[str, str]]:
    return checkpoint_of(
        {"a": "two", "b": KEPT, "m": ["x", "y", "z"]}, {"a": "2", "b": "1", "m": "2"}
    ), {
        "a": "2",
        "m": "2",
    }


def _c3() -> tuple[Checkpoint, dict[str, str]]:
    """Forked from ``c1``: ``b`` unchanged, so it names ``c1``'s blob of ``b``."""
    return checkpoint_of(
        {"a": "three", "b": KEPT, "m": ["x", "y", "w"]}, {"a": "3", "b": "1", "m": "3"}
    ), {
        "a": "3",
        "m": "3",
    }


def _forked(saver: Any, cfg: dict[str, Any], meta: dict[str, Any] | None = None) -> Any:
    """``c1``, then ``c2`` on it (``keep_last=1`` trims ``c1``); ``c1``'s config."""
    meta = meta or {}
    c, nv = _c1()
    c1 = saver.put(cfg, c, {"step": 0, **meta}, nv)
    c, nv = _c2()
    saver.put(c1, c, {"step": 1, **meta}, nv)
    return c1


def _between(saver: Any, meanwhile: Callable[[], None] = lambda: None) -> list[bool]:
    """Run ``meanwhile`` between a put's two tries; the ``whole`` of each ``_put_plan``."""
    plan_of = saver._put_plan
    calls: list[bool] = []

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        calls.append(bool(kwargs.get("whole", False)))
        if kwargs.get("whole"):
            meanwhile()
        return plan_of(*args, **kwargs)

    saver._put_plan = wrapped
    return calls


def _latest(saver: Any, thread_id: str) -> Any:
    got = saver.get_tuple(_cfg(thread_id))
    return None if got is None else got.checkpoint["channel_values"]


# -- copy_thread (encryption on: the copy is puts, one plan) ------------------------------


@pytest.mark.parametrize("backend", SERVERS)
def test_an_encrypted_copy_of_a_forked_thread_with_keep_last_1_is_copied_not_restart(
    saver_factory: SaverFactory,
) -> None:
    """With encryption ``copy_thread`` re-puts each checkpoint in one plan. A source
    that forked (two children of ``c1``) copied by a ``keep_last=1`` saver: ``c2``'s put
    trims ``c1``, and ``c3``'s first try, built on ``c1``, restarts. The copy is one plan,
    so nobody caught the ``Restart``: ``copy_thread`` raised the internal exception
    (and on Redis left ``c1`` and ``c2`` copied)."""
    from langgraph_memory_plus.encryption import Encryption

    src, dst = f"cp-src-{uuid.uuid4().hex[:8]}", f"cp-dst-{uuid.uuid4().hex[:8]}"
    enc = Encryption({"k1": KEY})
    with saver_factory(encryption=enc) as saver:
        c1 = saver.put(_cfg(src), *_pair(_c1(), {"step": 0}))
        saver.put(c1, *_pair(_c2(), {"step": 1}))
        saver.put(c1, *_pair(_c3(), {"step": 1}))
    with saver_factory(encryption=enc, keep_last=1) as saver:
        saver.copy_thread(src, dst)
        assert _latest(saver, dst) == {"a": "three", "b": KEPT, "m": ["x", "y", "w"]}
        assert len(list(saver.list(_cfg(dst)))) == 1
    with saver_factory(encryption=Encryption({"k1": KEY})) as fresh:
        assert _latest(fresh, dst) == {"a": "three", "b": KEPT, "m": ["x", "y", "w"]}
        assert fresh.threads.get(dst)["size"]["checkpoints"] == 1


def _pair(
    made: tuple[Checkpoint, dict[str, str]], meta: dict[str, Any]
) -> tuple[Checkpoint, dict[str, Any], dict[str, str]]:
    return made[0], meta, made[1]


# -- the fence changes hands between the two tries ---------------------------------------


@pytest.mark.parametrize("backend", SERVERS)
@pytest.mark.parametrize("claim", ["lease", "run"])
def test_a_fence_taken_between_the_two_tries_refuses_the_whole_one(
    saver_factory: SaverFactory, claim: str
) -> None:
    """Another owner takes the thread after the first try restarted: the whole try is
    checked against the fence too and refused; nothing of the put is stored."""
    from langgraph_memory_plus.errors import FencedWriteError

    thread_id = f"fence-{claim}-{uuid.uuid4().hex[:8]}"
    with saver_factory(keep_last=1, fence=claim == "run") as saver:
        if claim == "lease":
            lease = saver.fence.acquire(thread_id, owner="A")
            c1 = lease.config(_forked(saver, lease.config(_cfg(thread_id))))
        else:
            c1 = _forked(saver, _cfg(thread_id, run_id="r1"))
            c1 = {"configurable": {**c1["configurable"], "run_id": "r1"}}
        calls = _between(saver, lambda: saver.fence.acquire(thread_id, owner="B", force=True))
        events: list[Any] = []
        saver.add_listener(events.append)
        c, nv = _c3()
        with pytest.raises(FencedWriteError):
            saver.put(c1, c, {"step": 1}, nv)
        assert calls == [False, True]
        saved = [e for e in events if type(e).__name__ == "CheckpointSaved"]
        assert [type(e.error).__name__ for e in saved] == ["FencedWriteError"]
        assert _latest(saver, thread_id) == {"a": "two", "b": KEPT, "m": ["x", "y", "z"]}
        assert len(list(saver.list(_cfg(thread_id)))) == 1


# -- an erasure between the two tries -----------------------------------------------------


@pytest.mark.parametrize("backend", SERVERS)
@pytest.mark.parametrize("how", ["hold", "erase_user"])
def test_an_erasure_between_the_two_tries_drops_the_whole_one_and_its_lists(
    saver_factory: SaverFactory, how: str
) -> None:
    """The user's erasure begins after the first try restarted: the whole try is
    dropped (no checkpoint, no CheckpointSaved event) and the saver forgets the lists it
    built for it. ``hold``: the hold alone (the thread stays, as the erasure leaves it
    until it reaches it); ``erase_user``: the whole erasure."""
    from langgraph_memory_plus.checkpoint.config import thread_key
    from langgraph_memory_plus.privacy.erasure import erase_user
    from langgraph_memory_plus.threads.core import index_value

    thread_id, user = f"er-{uuid.uuid4().hex[:8]}", f"u-{uuid.uuid4().hex[:8]}"
    events: list[Any] = []
    with saver_factory(keep_last=1) as saver:
        c1 = _forked(saver, _cfg(thread_id, user_id=user), {"user_id": user})
        c1 = {"configurable": {**c1["configurable"], "user_id": user}}

        def erase() -> None:
            if how == "hold":
                saver._run(saver._plans.hold_erased(index_value(user), 60.0))
            else:
                assert erase_user(user, checkpointer=saver).thread_ids == [thread_id]

        calls = _between(saver, erase)
        saver.add_listener(events.append)
        c, nv = _c3()
        saver.put(c1, c, {"step": 1, "user_id": user}, nv)
        assert calls == [False, True]
        assert not saver._lists._by_thread.get(thread_key(thread_id))
        latest = _latest(saver, thread_id)
        found = [r["thread_id"] for r in saver.threads.search(metadata={"user_id": user})]
        count = saver.threads.count(metadata={"user_id": user})
        record = saver.threads.get(thread_id)
    assert [e for e in events if type(e).__name__ == "CheckpointSaved"] == []
    if how == "hold":  # the thread as it was: c2, one checkpoint, the user's
        assert latest == {"a": "two", "b": KEPT, "m": ["x", "y", "z"]}
        assert found == [thread_id] and count == 1
        assert record is not None and record["size"]["checkpoints"] == 1
    else:  # erased, and nothing of the dropped put left in the index
        assert latest is None
        assert found == [] and count == 0 and record is None


# -- what one logical put leaves: events, transcript, index, metrics ----------------------


@pytest.mark.parametrize("backend", SERVERS)
def test_a_restarted_put_is_one_event_one_transcript_line_each_and_an_exact_index(
    saver_factory: SaverFactory,
) -> None:
    """Transcripts and a Prometheus listener on: the restarted put is one
    ``CheckpointSaved`` (no error, the whole encoding's bytes), each message line is
    recorded once, the index counts the one checkpoint kept, and the metrics count three
    puts and no failure."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from prometheus_client import CollectorRegistry

    from langgraph_memory_plus.observability.otel import OpenTelemetryListener
    from langgraph_memory_plus.observability.prometheus import PrometheusListener

    registry = CollectorRegistry()
    metrics = PrometheusListener(registry=registry, prefix="ar_")
    spans = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
    otel = OpenTelemetryListener(tracer_provider=tracer_provider)
    thread_id = f"tx-{uuid.uuid4().hex[:8]}"
    hi, one = HumanMessage("hi there", id="hi"), AIMessage("one", id="one")
    two, three = AIMessage("two", id="two"), AIMessage("three", id="three")
    events: list[Any] = []
    with saver_factory(keep_last=1, transcripts=True, listeners=[metrics, otel]) as saver:
        saver.add_listener(events.append)
        c1 = saver.put(
            _cfg(thread_id),
            checkpoint_of({"messages": [hi, one], "b": KEPT}, {"messages": "1", "b": "1"}),
            {"step": 0},
            {"messages": "1", "b": "1"},
        )
        saver.put(
            c1,
            checkpoint_of({"messages": [hi, one, two], "b": KEPT}, {"messages": "2", "b": "1"}),
            {"step": 1},
            {"messages": "2"},
        )
        calls = _between(saver)
        saver.put(
            c1,
            checkpoint_of({"messages": [hi, one, three], "b": KEPT}, {"messages": "3", "b": "1"}),
            {"step": 1},
            {"messages": "3"},
        )
        assert calls == [False, True]
        lines = saver.threads.transcript(thread_id)
        record = saver.threads.get(thread_id)
        got = saver.get_tuple(_cfg(thread_id))
        kind = type(saver).__name__
    saved = [e for e in events if type(e).__name__ == "CheckpointSaved"]
    assert len(saved) == 3 and [e.error for e in saved] == [None] * 3
    assert saved[-1].checkpoint_id == got.checkpoint["id"]
    assert [m.id for m in got.checkpoint["channel_values"]["messages"]] == ["hi", "one", "three"]
    assert [line["id"] for line in lines] == ["hi", "one", "two", "three"]
    assert record["status"] == "idle" and record["title"] == "hi there"
    assert record["size"]["checkpoints"] == 1
    if not kind.startswith("Redis"):  # Redis keeps a running total of bytes written
        assert record["size"]["bytes"] == saved[-1].bytes_written
    counts = {
        s.name: s.value
        for m in registry.collect()
        for s in m.samples
        if s.name in ("ar_checkpoint_bytes_count", "ar_write_failures_total")
    }
    assert counts.get("ar_checkpoint_bytes_count") == 3
    assert counts.get("ar_write_failures_total", 0) == 0
    otel.flush()
    put_spans = [sp for sp in spans.get_finished_spans() if "put" in sp.name.split()[0]]
    tracer_provider.shutdown()
    assert len(put_spans) == 3, [sp.name for sp in spans.get_finished_spans()]
    assert all(sp.status.is_ok for sp in put_spans)


# -- a caller's connection inside its own transaction -------------------------------------


@pytest.mark.parametrize("backend", ["postgres"])
@pytest.mark.parametrize("mode", ["in-transaction", "outer-block", "pipeline", "pipeline-auto"])
def test_pg_a_restart_on_the_caller_s_transaction_rolls_back_to_its_savepoint_only(
    pg_url: str, backend: str, mode: str
) -> None:
    """A caller's psycopg connection, inside a transaction of its own (or in pipeline
    mode): the first try rolls back to the runner's savepoint, the caller's own row and
    transaction survive, the whole put lands in it."""
    from langgraph_memory_plus import PostgresSaver

    schema = f"lgmp_a_restart_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(pg_url, autocommit=True) as admin:
        try:
            with PostgresSaver.from_conn_string(pg_url, schema=schema, pool_max_size=1) as s0:
                s0.setup()
            admin.execute(f'CREATE TABLE "{schema}".mine (x int)')
            auto = mode in ("outer-block", "pipeline-auto")
            with psycopg.connect(pg_url, autocommit=auto) as conn:
                saver = PostgresSaver(
                    conn, schema=schema, keep_last=1, pipeline=mode.startswith("pipeline")
                )
                thread_id = f"pgc-{uuid.uuid4().hex[:8]}"
                c1 = _forked(saver, _cfg(thread_id))
                if not auto:
                    conn.commit()
                calls = _between(saver)
                c, nv = _c3()
                outer = conn.transaction() if mode == "outer-block" else contextlib.nullcontext()
                with outer:
                    if mode != "pipeline-auto":
                        conn.execute(f'INSERT INTO "{schema}".mine VALUES (1)')
                    saver.put(c1, c, {"step": 1}, nv)
                    assert calls == [False, True]
                    assert _latest(saver, thread_id) == {
                        "a": "three",
                        "b": KEPT,
                        "m": ["x", "y", "w"],
                    }
                    if mode != "pipeline-auto":
                        assert conn.info.transaction_status.name == "INTRANS"
                        assert conn.execute(f'SELECT count(*) FROM "{schema}".mine').fetchone() == (
                            1,
                        )
                if not auto:
                    conn.commit()
            with PostgresSaver.from_conn_string(pg_url, schema=schema, pool_max_size=1) as fresh:
                assert _latest(fresh, thread_id) == {"a": "three", "b": KEPT, "m": ["x", "y", "w"]}
                assert len(list(fresh.list(_cfg(thread_id)))) == 1
            rows = admin.execute(f'SELECT count(*) FROM "{schema}".mine').fetchone()
            assert rows == ((0,) if mode == "pipeline-auto" else (1,))
        finally:
            admin.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


@pytest.mark.parametrize("backend", ["sqlite"])
@pytest.mark.parametrize("isolation", ["deferred", "autocommit"])
def test_sqlite_a_restart_on_the_caller_s_transaction_rolls_back_to_its_savepoint_only(
    tmp_path: Any, backend: str, isolation: str
) -> None:
    """A caller's ``sqlite3`` connection inside its own transaction: the restart rolls
    back the plan's savepoint only; the caller's row stays and the whole put is in."""
    from langgraph_memory_plus.checkpoint.sqlite import SqliteSaver

    path = str(tmp_path / "caller.db")
    conn = sqlite3.connect(
        path, check_same_thread=False, isolation_level="" if isolation == "deferred" else None
    )
    try:
        saver = SqliteSaver(conn, keep_last=1)
        saver.setup()
        conn.execute("CREATE TABLE mine (x int)")
        if conn.in_transaction:
            conn.commit()
        thread_id = f"sqc-{uuid.uuid4().hex[:8]}"
        c1 = _forked(saver, _cfg(thread_id))
        calls = _between(saver)
        if isolation == "autocommit":
            conn.execute("BEGIN")
        conn.execute("INSERT INTO mine VALUES (1)")
        c, nv = _c3()
        saver.put(c1, c, {"step": 1}, nv)
        assert calls == [False, True]
        assert conn.in_transaction
        assert conn.execute("SELECT count(*) FROM mine").fetchone() == (1,)
        conn.execute("COMMIT")
    finally:
        conn.close()
    with SqliteSaver.from_conn_string(path) as fresh:
        assert _latest(fresh, thread_id) == {"a": "three", "b": KEPT, "m": ["x", "y", "w"]}
        assert len(list(fresh.list(_cfg(thread_id)))) == 1


# -- asyncio cancellation between the two tries -------------------------------------------


@pytest.mark.parametrize("backend", SERVERS)
def test_an_aput_cancelled_between_the_two_tries_leaves_a_readable_thread(
    async_saver_factory: AsyncSaverFactory, backend: str
) -> None:
    """The task is cancelled as the whole try is built: ``aput`` raises
    ``CancelledError``; the thread reads as before (or, on Redis, where the script may
    be sent before the cancellation lands, with the whole put), and the saver's next
    put on the same parent is stored and reads back."""

    async def main() -> None:
        async with async_saver_factory(keep_last=1) as saver:
            thread_id = f"can-{uuid.uuid4().hex[:8]}"
            c, nv = _c1()
            c1 = await saver.aput(_cfg(thread_id), c, {"step": 0}, nv)
            c, nv = _c2()
            await saver.aput(c1, c, {"step": 1}, nv)
            task: asyncio.Task[Any] | None = None

            def cancel() -> None:
                assert task is not None
                task.cancel()

            calls = _between(saver, cancel)
            c, nv = _c3()
            task = asyncio.ensure_future(saver.aput(c1, c, {"step": 1}, nv))
            with pytest.raises(asyncio.CancelledError):
                await task
            assert calls == [False, True]
            got = await saver.aget_tuple(_cfg(thread_id))
            assert got is not None
            values = got.checkpoint["channel_values"]
            wanted = [{"a": "two", "b": KEPT, "m": ["x", "y", "z"]}]
            if backend == "redis":
                wanted.append({"a": "three", "b": KEPT, "m": ["x", "y", "w"]})
            assert values in wanted
            del saver._put_plan
            c, nv = _c3()
            await saver.aput(c1, c, {"step": 1}, nv)
            got = await saver.aget_tuple(_cfg(thread_id))
            assert got is not None
            assert got.checkpoint["channel_values"] == {
                "a": "three",
                "b": KEPT,
                "m": ["x", "y", "w"],
            }

    asyncio.run(asyncio.wait_for(main(), 60))


# -- import and migration into a keep_last=1 saver ----------------------------------------


def _forked_source() -> tuple[Any, str]:
    """A forked thread on LangGraph's in-memory saver (another storage than the target)."""
    from langgraph.checkpoint.memory import InMemorySaver

    thread_id = f"mig-{uuid.uuid4().hex[:8]}"
    source = InMemorySaver()
    c1 = source.put(_cfg(thread_id), *_pair(_c1(), {"step": 0}))
    source.put(c1, *_pair(_c2(), {"step": 1}))
    source.put(c1, *_pair(_c3(), {"step": 1}))
    return source, thread_id


@pytest.mark.parametrize("backend", SERVERS)
@pytest.mark.parametrize("how", ["jsonl", "copy_threads"])
def test_a_forked_thread_imported_into_a_keep_last_1_saver_ends_whole(
    saver_factory: SaverFactory, how: str
) -> None:
    """The CLI's JSON-lines import and ``copy_threads`` replay each checkpoint with
    ``put`` on its parent: into a ``keep_last=1`` saver the fork's parent is trimmed
    before its second child comes, which is put whole and reads back."""
    from langgraph_memory_plus.cli.jsonl import export_thread, import_thread
    from langgraph_memory_plus.transfer.migration import copy_threads

    source, thread_id = _forked_source()
    with saver_factory(keep_last=1) as target:
        calls = _between(target)
        if how == "jsonl":
            out = io.StringIO()
            export_thread(source, thread_id, out)
            _, n, _ = import_thread(target, io.StringIO(out.getvalue()))
            assert n == 3
        else:
            assert copy_threads(source, target, [thread_id]).checkpoints_copied == 3
        assert calls == [False, False, False, True]
        assert _latest(target, thread_id) == {"a": "three", "b": KEPT, "m": ["x", "y", "w"]}
        assert len(list(target.list(_cfg(thread_id)))) == 1
    with saver_factory() as fresh:
        assert _latest(fresh, thread_id) == {"a": "three", "b": KEPT, "m": ["x", "y", "w"]}


@pytest.mark.parametrize("backend", SERVERS)
def test_a_put_restarted_after_a_revival_leaves_an_index_true_to_what_is_stored(
    saver_factory: SaverFactory,
) -> None:
    """The TTL lapses and another saver's put revives the thread (purging the parent):
    the run's next put restarts and is put whole. The index counts and sizes what is
    stored (the reviving put and the whole one), keeps the title, and the transcript
    has each message once."""
    import time

    from langgraph.checkpoint.base import empty_checkpoint

    ttl_s = 0.3
    thread_id = f"rv-{uuid.uuid4().hex[:8]}"
    hi, one, two = (
        HumanMessage("hello title", id="hi"),
        AIMessage("one", id="one"),
        AIMessage("two", id="two"),
    )
    events: list[Any] = []
    ttl = {"default_ttl": ttl_s / 60}
    with saver_factory(ttl=ttl, transcripts=True) as saver, saver_factory(ttl=ttl) as other:
        saver.add_listener(events.append)
        other.add_listener(events.append)
        c1 = saver.put(
            _cfg(thread_id),
            checkpoint_of({"messages": [hi, one], "b": KEPT}, {"messages": "1", "b": "1"}),
            {"step": 0},
            {"messages": "1", "b": "1"},
        )
        time.sleep(ttl_s + 0.2)
        other.put(_cfg(thread_id), empty_checkpoint(), {"source": "input", "step": -1}, {})
        calls = _between(saver)
        saver.put(
            c1,
            checkpoint_of({"messages": [hi, one, two], "b": KEPT}, {"messages": "2", "b": "1"}),
            {"step": 1},
            {"messages": "2"},
        )
        assert calls == [False, True]
        record = saver.threads.get(thread_id)
        stored = list(saver.list(_cfg(thread_id)))
        lines = saver.threads.transcript(thread_id)
    saved = {e.checkpoint_id: e for e in events if type(e).__name__ == "CheckpointSaved"}
    assert [e.error for e in saved.values()] == [None] * 3
    assert record["status"] == "idle" and record["title"] == "hello title"
    assert record["size"]["checkpoints"] == len(stored) == 2
    assert record["size"]["bytes"] == sum(saved[t.checkpoint["id"]].bytes_written for t in stored)
    assert [line["id"] for line in lines] == ["hi", "one", "two"]


@pytest.mark.parametrize("backend", SERVERS)
def test_per_tenant_keys_seal_the_whole_put_and_its_copy_with_the_user_s_key(
    saver_factory: SaverFactory,
) -> None:
    """Per-tenant keys and transcripts: the restarted put is sealed whole with the
    user's key (a fresh saver opens it, its transcript too), and so is the copy of the
    forked thread by a ``keep_last=1`` saver; once the user's key is dropped neither
    opens."""
    from langgraph_memory_plus.encryption import Encryption, EncryptionError
    from tests.test_encryption import DictKeys

    keys = DictKeys()
    thread_id, user = f"ten-{uuid.uuid4().hex[:8]}", f"u-{uuid.uuid4().hex[:8]}"
    copy_id = f"{thread_id}-copy"

    def enc() -> Encryption:
        return Encryption({"k1": KEY}, tenant_keys=keys)

    hi = HumanMessage("secret hello", id="hi")
    with saver_factory(keep_last=1, encryption=enc(), transcripts=True) as saver:
        c1 = _forked(saver, _cfg(thread_id, user_id=user), {"user_id": user})
        c1 = {"configurable": {**c1["configurable"], "user_id": user}}
        calls = _between(saver)
        c = checkpoint_of(
            {"a": "three", "b": KEPT, "m": ["x", "y", "w"], "messages": [hi]},
            {"a": "3", "b": "1", "m": "3", "messages": "1"},
        )
        saver.put(c1, c, {"step": 1, "user_id": user}, {"a": "3", "m": "3", "messages": "1"})
        assert calls == [False, True]
    with saver_factory(encryption=enc()) as source:
        # the fork on an unlimited saver, then copied by a keep_last=1 one
        f1 = _forked(source, _cfg(copy_id + "-src", user_id=user), {"user_id": user})
        f1 = {"configurable": {**f1["configurable"], "user_id": user}}
        c, nv = _c3()
        source.put(f1, c, {"step": 1, "user_id": user}, nv)
    with saver_factory(keep_last=1, encryption=enc()) as saver:
        saver.copy_thread(copy_id + "-src", copy_id)
    wanted = {"a": "three", "b": KEPT, "m": ["x", "y", "w"]}
    with saver_factory(encryption=enc(), transcripts=True) as fresh:
        values = _latest(fresh, thread_id)
        assert [m.id for m in values.pop("messages")] == ["hi"]
        assert values == wanted
        assert [line["content"] for line in fresh.threads.transcript(thread_id)] == ["secret hello"]
        assert _latest(fresh, copy_id) == wanted
    keys.drop(user)
    with saver_factory(encryption=enc()) as shredded:
        for tid in (thread_id, copy_id):
            with pytest.raises(EncryptionError):
                shredded.get_tuple(_cfg(tid))


@pytest.mark.parametrize("backend", SERVERS)
def test_the_put_after_a_restarted_one_builds_on_the_whole_encoding(
    saver_factory: SaverFactory,
) -> None:
    """A long list (several pages) on a run whose put restarted: the run's next puts
    build on what the whole put stored (the list memory keeps that, not the first
    try's encoding on the gone parent); a fresh saver reads every step back."""
    thread_id = f"mem-{uuid.uuid4().hex[:8]}"
    base = [f"item {i} " * 4 for i in range(300)]
    with saver_factory(keep_last=1) as saver:
        cfg = _cfg(thread_id)
        c1 = saver.put(
            cfg,
            checkpoint_of({"m": base, "b": KEPT}, {"m": "1", "b": "1"}),
            {"step": 0},
            {"m": "1", "b": "1"},
        )
        saver.put(
            c1,
            checkpoint_of({"m": [*base, "two"], "b": KEPT}, {"m": "2", "b": "1"}),
            {"step": 1},
            {"m": "2"},
        )
        calls = _between(saver)
        m3 = [*base, "three"]
        c3 = saver.put(
            c1, checkpoint_of({"m": m3, "b": KEPT}, {"m": "3", "b": "1"}), {"step": 1}, {"m": "3"}
        )
        assert calls == [False, True]
        m = saver.get_tuple(c3).checkpoint["channel_values"]["m"]  # the view the run goes on with
        c4 = saver.put(
            c3,
            checkpoint_of({"m": [*m, "four"], "b": KEPT}, {"m": "4", "b": "1"}),
            {"step": 2},
            {"m": "4"},
        )
        saver.put(
            c4,
            checkpoint_of({"m": [*m, "four", "five"], "b": KEPT}, {"m": "5", "b": "1"}),
            {"step": 3},
            {"m": "5"},
        )
        assert calls == [False, True, False, False]
    with saver_factory() as fresh:
        assert _latest(fresh, thread_id) == {"m": [*base, "three", "four", "five"], "b": KEPT}
