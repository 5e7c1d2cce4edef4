"""Attacks on the short-turn trims of branch ``h39-pg-short``, by someone who did not
write them.

The branch memoizes small scalars' serialized form per codec, skips ``json_safe`` and
``json_exact`` calls for plain metadata values, packs task writes in one format, trims
the PostgreSQL write statement's result to what the fast path reads, sends empty array
parameters as NULL, reuses the checkpoint's metadata parameter for the thread index and
no longer wraps an autocommit pool connection in ``with conn``. These tests hold each
against what it must not change: values and types as LangGraph's ``InMemorySaver`` gives
them back (equal values of other types across steps, subclasses, more values than the
memo keeps, encryption on), exact metadata filters, the bytes of a packed record, the
tombstone, expiry and fence answers of the locked path, and a pool connection returned
clean after a server error mid-write.
"""

from __future__ import annotations

import enum
import logging
import os
import random
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.base.id import uuid6
from langgraph.checkpoint.memory import InMemorySaver
from psycopg_pool import AsyncConnectionPool, ConnectionPool

pytestmark = pytest.mark.storage


class _Text(str):
    pass


class _Number(int):
    pass


class _Level(enum.IntEnum):
    ONE = 1


# Equal across types (True == 1 == 1.0, 0 == False == -0.0 == 0.0), subclasses (not
# inlined), text of a number, NUL and non-ASCII text, the 64-bit bounds, floats the memo
# must not key (-0.0, exponent, inf), then more distinct values than the memo keeps, and
# the first ones again after it was cleared.
_SCALARS: list[Any] = [
    True, 1, 1.0, "1", 0, False, -0.0, 0.0, _Text("1"), _Number(1), _Level.ONE,
    2**63 - 1, -(2**63), None, "", "x\x00y", "中文", 1e300, float("inf"), 1e-7,
    *range(300), True, 1, 1.0, 0, False, -0.0,
]  # fmt: skip


def _cfg(thread_id: str, checkpoint_id: str | None = None, ns: str = "") -> Any:
    configurable: dict[str, Any] = {"thread_id": thread_id, "checkpoint_ns": ns}
    if checkpoint_id is not None:
        configurable["checkpoint_id"] = checkpoint_id
    return {"configurable": configurable}


def _scalar_steps() -> Iterator[tuple[Any, dict[str, Any], dict[str, Any]]]:
    """(checkpoint, metadata, new versions) of a thread whose channel ``c`` takes each of
    :data:`_SCALARS` in turn while ``d`` keeps its first value (unchanged, still inlined)."""
    for step, value in enumerate(_SCALARS):
        checkpoint = empty_checkpoint()
        checkpoint["id"] = str(uuid6(clock_seq=step))
        checkpoint["channel_values"] = {"c": value, "d": True}
        checkpoint["channel_versions"] = {"c": step + 1, "d": 1}
        new = {"c": step + 1, "d": 1} if step == 0 else {"c": step + 1}
        yield checkpoint, {"source": "loop", "step": step, "parents": {}}, new


def _shape(value: Any) -> tuple[str, str]:
    return type(value).__name__, repr(value)


def _scalars_in(saver: Any, thread_id: str) -> list[tuple[tuple[str, str], ...]]:
    config = _cfg(thread_id)
    configs = []
    for checkpoint, metadata, new in _scalar_steps():
        config = saver.put(config, checkpoint, metadata, new)
        configs.append(config)
    out = []
    for config in configs:
        found = saver.get_tuple(config)
        assert found is not None
        values = found.checkpoint["channel_values"]
        out.append((_shape(values.get("c")), _shape(values.get("d"))))
    return out


async def _ascalars_in(saver: Any, thread_id: str) -> list[tuple[tuple[str, str], ...]]:
    config = _cfg(thread_id)
    configs = []
    for checkpoint, metadata, new in _scalar_steps():
        config = await saver.aput(config, checkpoint, metadata, new)
        configs.append(config)
    out = []
    for config in configs:
        found = await saver.aget_tuple(config)
        assert found is not None
        values = found.checkpoint["channel_values"]
        out.append((_shape(values.get("c")), _shape(values.get("d"))))
    return out


@pytest.fixture(scope="module")
def scalars_in_memory() -> list[tuple[tuple[str, str], ...]]:
    return _scalars_in(InMemorySaver(), "in-memory")


@pytest.mark.parametrize("variant", ["plain", "encrypted", "pipeline"])
def test_pg_inline_scalars_come_back_as_in_memory_whatever_the_memo_saw(
    pg_url: str, scalars_in_memory: list[Any], variant: str
) -> None:
    """Every step's scalar comes back of its own type and value, as from
    ``InMemorySaver``: ``True`` after ``1`` after ``1.0``, ``-0.0`` after ``0``, ``"1"``,
    a str subclass, an ``IntEnum``, the 64-bit bounds, NUL and Chinese text, then 300
    distinct ints (the memo cleared past 256) and the first ones again; twice on the same
    saver (the second thread served from the memo). Held before and after the fix."""
    from langgraph_memory_plus.checkpoint.postgres import PostgresSaver
    from langgraph_memory_plus.encryption import Encryption

    options: dict[str, Any] = {"pool_max_size": 2, "pipeline": variant == "pipeline"}
    if variant == "encrypted":
        options["encryption"] = Encryption({"k1": os.urandom(32)})
    with PostgresSaver.from_conn_string(pg_url, **options) as saver:
        saver.setup()
        for _ in range(2):
            thread_id = f"pgshort-scalars-{uuid.uuid4().hex}"
            try:
                assert _scalars_in(saver, thread_id) == scalars_in_memory
            finally:
                saver.delete_thread(thread_id)


async def test_pg_inline_scalars_come_back_as_in_memory_async(
    pg_url: str, scalars_in_memory: list[Any]
) -> None:
    """The async saver, on the same values (held before and after the fix)."""
    from langgraph_memory_plus.checkpoint.postgres import AsyncPostgresSaver

    async with AsyncPostgresSaver.from_conn_string(pg_url, pool_max_size=2) as saver:
        await saver.setup()
        thread_id = f"pgshort-ascalars-{uuid.uuid4().hex}"
        try:
            assert await _ascalars_in(saver, thread_id) == scalars_in_memory
        finally:
            await saver.adelete_thread(thread_id)


def _inline_entries(conn: psycopg.Connection[Any], thread_ids: list[str]) -> list[Any]:
    from langgraph_memory_plus.checkpoint.config import thread_key

    rows = conn.execute(
        "SELECT channel_versions -> 'secret' FROM lgmp_checkpoints WHERE thread_key = ANY(%s)",
        ([thread_key(t) for t in thread_ids],),
    ).fetchall()
    return [row[0] for row in rows]


def test_pg_inline_scalar_under_langgraph_encrypted_serde_is_sealed_afresh_each_put(
    pg_url: str,
) -> None:
    """FIND. With LangGraph's own ``EncryptedSerializer`` as ``serde`` (AES with a fresh
    nonce per value), the same small secret put in two threads (two users, say) must not
    be stored as the same ciphertext: equal ciphertexts at rest tell which threads hold
    equal values. The memo reused the first put's ciphertext for every later put of the
    value (``_inline_memo`` assumed every serde serializes equal scalars alike).

    Before the fix: the two threads' inline entries were byte-identical (5 of 5 runs).
    Fixed: the memo is kept only for LangGraph's ``JsonPlusSerializer`` itself, whose
    scalar output is a function of type and value; any other serde serializes each put.
    A saver on the default serde beside it (same database) still reads its own values."""
    from langgraph.checkpoint.serde.encrypted import EncryptedSerializer

    from langgraph_memory_plus.checkpoint.postgres import PostgresSaver

    serde = EncryptedSerializer.from_pycryptodome_aes(key=os.urandom(16))
    thread_ids = [f"pgshort-aes-{uuid.uuid4().hex}" for _ in range(3)]
    with (
        PostgresSaver.from_conn_string(pg_url, pool_max_size=1, serde=serde) as sealed,
        PostgresSaver.from_conn_string(pg_url, pool_max_size=1) as plain,
        psycopg.connect(pg_url, autocommit=True) as conn,
    ):
        sealed.setup()
        try:
            for i, thread_id in enumerate(thread_ids):
                saver = plain if i == 2 else sealed
                checkpoint = empty_checkpoint()
                checkpoint["channel_values"] = {"secret": "yes"}
                checkpoint["channel_versions"] = {"secret": 1}
                saver.put(_cfg(thread_id), checkpoint, {}, {"secret": 1})
            entries = _inline_entries(conn, thread_ids[:2])
            assert len(entries) == 2 and all(e[1] == "msgpack+aes" for e in entries)
            assert entries[0] != entries[1], "equal ciphertexts for an equal secret"
            for i, thread_id in enumerate(thread_ids):
                found = (plain if i == 2 else sealed).get_tuple(_cfg(thread_id))
                assert found is not None
                assert found.checkpoint["channel_values"] == {"secret": "yes"}
        finally:
            for thread_id in thread_ids:
                sealed.delete_thread(thread_id)


# -- metadata: the plain-value fast path and the filters -------------------------------

_META_VALUES: list[Any] = [
    True, 1, 1.0, 0, False, -0.0, 0.0, "1", "a", "é", "中文", "a\x00b", None, 2**63 - 1,
    1e20, 1e-7, 1.5, {"x": 1}, {"x": True}, {"x": "é"}, {"中": "文"}, {"x": {"y": 1}},
    {"x": 1.0}, {"x": None}, {"x": "a\x00"}, {"a\x00": 1}, [1, 2], [True], {"x": -0.0},
    {"x": 1e20}, {"x": 2**63 - 1},
]  # fmt: skip
_META_KEYS = ["k", "中文", "k\x00z"]


def _fill_metadata(saver: Any, thread_id: str) -> list[str]:
    ids = []
    for step, value in enumerate(_META_VALUES):
        for key in _META_KEYS:
            checkpoint = empty_checkpoint()
            metadata: Any = {"source": "loop", "step": step, key: value, "parents": {}}
            saver.put(_cfg(thread_id), checkpoint, metadata, {})
            ids.append(checkpoint["id"])
    return ids


def _probe_metadata(saver: Any, thread_id: str, ids: list[str]) -> tuple[Any, Any]:
    def at(found: Any) -> int:
        return ids.index(found.checkpoint["id"])

    config = {"configurable": {"thread_id": thread_id}}
    filtered = {
        (key, repr(value)): sorted(at(t) for t in saver.list(config, filter={key: value}))
        for value in _META_VALUES
        for key in _META_KEYS
    }
    stored = sorted(
        (at(t), sorted((repr(k), _shape(v)) for k, v in t.metadata.items()))
        for t in saver.list(config)
    )
    return filtered, stored


@pytest.mark.parametrize("pipeline", [False, True])
def test_pg_metadata_and_its_filters_as_in_memory(pg_url: str, pipeline: bool) -> None:
    """Metadata values the fast path takes (ASCII text, ints, bools, None) and those it
    does not (non-ASCII, NUL, floats, -0.0, exponents, nested dicts, lists), under plain,
    Chinese and NUL keys: each ``list(filter=...)`` finds what ``InMemorySaver`` finds,
    and each metadata comes back with its types. Held before and after the fix."""
    from langgraph_memory_plus.checkpoint.postgres import PostgresSaver

    memory = InMemorySaver()
    want = _probe_metadata(memory, "m", _fill_metadata(memory, "m"))
    thread_id = f"pgshort-meta-{uuid.uuid4().hex}"
    with PostgresSaver.from_conn_string(pg_url, pool_max_size=2, pipeline=pipeline) as saver:
        saver.setup()
        try:
            got = _probe_metadata(saver, thread_id, _fill_metadata(saver, thread_id))
        finally:
            saver.delete_thread(thread_id)
    assert got == want


def test_json_plain_values_project_as_the_full_functions_do() -> None:
    """``_json_plain`` (the skip) agrees with ``json_safe``/``json_exact`` on every value it
    takes, inside a dict as at the top, and the dict paths equal the generic ones."""
    from langgraph_memory_plus.checkpoint import codec

    values = [*_META_VALUES, _Text("a"), _Number(2), _Level.ONE, "\ud800", "a\x00", 2**200]
    for value in values:
        if codec._json_plain(value):
            assert codec.json_safe(value) is value and codec.json_exact(value)
        wrapped = {"v": value, "k\x00": value, 3: value}
        assert codec.json_safe(wrapped) == {
            codec.json_safe(str(k)): codec.json_safe(v) for k, v in wrapped.items()
        }
        assert codec.json_exact({"v": value}) == codec.json_exact(value)


def test_task_writes_pack_gives_the_netstrings_it_gave() -> None:
    """The one-format ``pack`` gives the bytes of four netstrings a write, for random
    writes: negative indices (errors, interrupts), own paths, NUL, Chinese and lone
    surrogates in names, empty and binary data; and ``unpack`` reads them back."""
    from langgraph_memory_plus.checkpoint import task_writes

    def netstring(data: bytes) -> bytes:
        return b"%d:%s" % (len(data), data)

    def utf8(text: str) -> bytes:
        return text.encode("utf-8", "surrogatepass")

    rng = random.Random(39)
    alphabet = ["a", "中", "\x00", ":", "\ud800", "9", " "]
    for _ in range(300):
        path = "".join(rng.choices(alphabet, k=rng.randrange(4)))
        writes = [
            (
                rng.randrange(-3, 12),
                "".join(rng.choices(alphabet, k=rng.randrange(6))),
                rng.choice(["msgpack", "null", "", "类型"]),
                rng.randbytes(rng.randrange(30)),
                path if rng.random() < 0.5 else "".join(rng.choices(alphabet, k=3)),
            )
            for _ in range(rng.randrange(5))
        ]
        expected = b"".join(
            netstring(b"%d" % idx if own == path else b"%d %s" % (idx, utf8(own)))
            + netstring(utf8(channel))
            + netstring(utf8(typ))
            + netstring(data)
            for idx, channel, typ, data, own in writes
        )
        assert task_writes.pack(writes, path) == expected


# -- the locked path: deleted, expired, fenced ------------------------------------------


def test_pg_locked_path_answers_as_before(pg_url: str) -> None:
    """The slow statement's shorter result is read at the right columns: a deleted
    thread refuses a new checkpoint and writes to it (nothing stored), an expired thread
    takes the write and drops what it held, a stale fence's write raises
    ``FencedWriteError`` and stores nothing. Held before and after the fix."""
    from langgraph_memory_plus.checkpoint.config import thread_key
    from langgraph_memory_plus.checkpoint.postgres import PostgresSaver
    from langgraph_memory_plus.errors import FencedWriteError

    with (
        PostgresSaver.from_conn_string(pg_url, pool_max_size=2) as saver,
        psycopg.connect(pg_url, autocommit=True) as conn,
    ):
        saver.setup()
        gone, old, fenced = (f"pgshort-{what}-{uuid.uuid4().hex}" for what in "dxf")
        try:
            first = empty_checkpoint()
            for thread_id in (gone, old, fenced):
                saver.put(_cfg(thread_id), first, {"step": 0}, {})
            # deleted: a later checkpoint and its writes are refused
            saver.delete_thread(gone)
            later = empty_checkpoint()
            saver.put(_cfg(gone, first["id"]), later, {"step": 1}, {})
            saver.put_writes(_cfg(gone, later["id"]), [("a", 1)], "t1")
            assert saver.get_tuple(_cfg(gone)) is None
            assert list(saver.list(_cfg(gone))) == []
            # expired: the write revives the thread with only what it wrote
            conn.execute(
                "UPDATE lgmp_threads SET expires_at = now() - interval '1 second' "
                "WHERE thread_key = %s",
                (thread_key(old),),
            )
            fresh = empty_checkpoint()
            saver.put(_cfg(old), fresh, {"step": 5}, {})
            assert [t.checkpoint["id"] for t in saver.list(_cfg(old))] == [fresh["id"]]
            # fenced: a stale lease's writes raise and store nothing
            stale = saver.fence.acquire(fenced, owner="w1")
            saver.fence.acquire(fenced, owner="w2", force=True)
            with pytest.raises(FencedWriteError):
                saver.put(stale.config(_cfg(fenced, first["id"])), empty_checkpoint(), {}, {})
            with pytest.raises(FencedWriteError):
                saver.put_writes(stale.config(_cfg(fenced, first["id"])), [("a", 1)], "t1")
            found = saver.get_tuple(_cfg(fenced))
            assert found is not None and found.checkpoint["id"] == first["id"]
            assert found.pending_writes == []
        finally:
            for thread_id in (gone, old, fenced):
                saver.delete_thread(thread_id)


# -- a server error mid-write: the connection goes back clean ---------------------------


def _boom_trigger(schema: str) -> str:
    return f"""
        CREATE FUNCTION "{schema}".boom() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            IF EXISTS (SELECT 1 FROM "{schema}".lgmp_threads t
                       WHERE t.thread_key = NEW.thread_key
                         AND convert_from(t.thread_id, 'UTF8') LIKE 'boom-%%') THEN
                RAISE EXCEPTION 'boom';
            END IF;
            RETURN NEW;
        END $$;
        CREATE TRIGGER boom BEFORE INSERT ON "{schema}".lgmp_checkpoints
            FOR EACH ROW EXECUTE FUNCTION "{schema}".boom();
        CREATE TRIGGER boom BEFORE INSERT ON "{schema}".lgmp_task_writes
            FOR EACH ROW EXECUTE FUNCTION "{schema}".boom();"""


class _Warnings(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@pytest.fixture
def boom_schema(pg_url: str) -> Iterator[str]:
    """A schema of the savers' tables whose inserts fail for threads named ``boom-*``."""
    from langgraph_memory_plus.checkpoint.postgres import PostgresSaver

    schema = f"lgmp_pgshort_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(pg_url, autocommit=True) as conn:
        PostgresSaver(conn, schema=schema).setup()
        conn.execute(_boom_trigger(schema))
        try:
            yield schema
        finally:
            conn.execute(f'DROP SCHEMA "{schema}" CASCADE')


_WRITES = ["put", "put_writes", "put to an expired thread", "put with retention"]


def _failing_write(saver: Any, pool: ConnectionPool[Any], schema: str, call: str) -> None:
    from langgraph_memory_plus.checkpoint.config import thread_key

    thread_id = f"boom-{uuid.uuid4().hex}"
    first = empty_checkpoint()
    if call == "put to an expired thread":  # the locked path, in a transaction
        with pool.connection() as conn:
            conn.execute(
                f'INSERT INTO "{schema}".lgmp_threads (thread_key, thread_id, expires_at) '
                "VALUES (%s, %s, now() - interval '1 second')",
                (thread_key(thread_id), thread_id.encode()),
            )
    if call == "put_writes":
        saver.put_writes(_cfg(thread_id, first["id"]), [("a", 1)], "t1")
    else:
        saver.put(_cfg(thread_id), first, {}, {})


@pytest.mark.parametrize("autocommit", [True, False], ids=["autocommit", "transactions"])
@pytest.mark.parametrize("pipeline", [False, True], ids=["", "pipeline"])
def test_pg_server_error_mid_write_returns_the_connection_clean(
    pg_url: str, boom_schema: str, autocommit: bool, pipeline: bool
) -> None:
    """A write failing in the server (a trigger raises) on a pool of one connection, with
    and without autocommit, in pipeline mode or not: the error reaches the caller, the
    pool takes the connection back idle (no 'rolling back returned connection' warning:
    nothing was left open), nothing of the failed write is stored, and the next call on
    the same connection works. Held before and after the fix."""
    from langgraph_memory_plus.checkpoint.postgres import PostgresSaver

    warnings = _Warnings()
    logging.getLogger("psycopg").addHandler(warnings)
    kwargs = {"autocommit": True} if autocommit else {}
    try:
        with ConnectionPool(pg_url, min_size=1, max_size=1, kwargs=kwargs) as pool:
            saver = PostgresSaver(pool, schema=boom_schema, pipeline=pipeline)
            for call in _WRITES:
                if call == "put with retention":
                    saver = PostgresSaver(pool, schema=boom_schema, pipeline=pipeline, keep_last=1)
                with pytest.raises(psycopg.errors.RaiseException):
                    _failing_write(saver, pool, boom_schema, call)
                with pool.connection() as conn:
                    assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
                    stored = conn.execute(
                        f'SELECT count(*) FROM "{boom_schema}".lgmp_checkpoints c '
                        f'JOIN "{boom_schema}".lgmp_threads t USING (thread_key) '
                        "WHERE convert_from(t.thread_id, 'UTF8') LIKE 'boom-%%'"
                    ).fetchone()
                    assert stored == (0,), call
                thread_id = f"ok-{uuid.uuid4().hex}"
                saver.put(_cfg(thread_id), empty_checkpoint(), {}, {})
                assert saver.get_tuple(_cfg(thread_id)) is not None
    finally:
        logging.getLogger("psycopg").removeHandler(warnings)
    assert [m for m in warnings.messages if "returned connection" in m] == []


@pytest.mark.parametrize("autocommit", [True, False], ids=["autocommit", "transactions"])
async def test_pg_server_error_mid_write_returns_the_connection_clean_async(
    pg_url: str, boom_schema: str, autocommit: bool
) -> None:
    """The async runner, as above (held before and after the fix)."""
    from langgraph_memory_plus.checkpoint.postgres import AsyncPostgresSaver

    warnings = _Warnings()
    logging.getLogger("psycopg").addHandler(warnings)
    kwargs = {"autocommit": True} if autocommit else {}
    try:
        async with AsyncConnectionPool(
            pg_url, min_size=1, max_size=1, kwargs=kwargs, open=False
        ) as pool:
            saver = AsyncPostgresSaver(pool, schema=boom_schema)
            for call in ("aput", "aput_writes"):
                thread_id = f"boom-{uuid.uuid4().hex}"
                checkpoint = empty_checkpoint()
                with pytest.raises(psycopg.errors.RaiseException):
                    if call == "aput":
                        await saver.aput(_cfg(thread_id), checkpoint, {}, {})
                    else:
                        await saver.aput_writes(_cfg(thread_id, checkpoint["id"]), [("a", 1)], "t1")
                async with pool.connection() as conn:
                    assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
                ok = f"ok-{uuid.uuid4().hex}"
                await saver.aput(_cfg(ok), empty_checkpoint(), {}, {})
                assert await saver.aget_tuple(_cfg(ok)) is not None
    finally:
        logging.getLogger("psycopg").removeHandler(warnings)
    assert [m for m in warnings.messages if "returned connection" in m] == []


# -- erasure: writes naming their user (three places) and writes naming none ----------


@pytest.mark.parametrize("backend", ["postgres", "sqlite", "redis"], indirect=True)
def test_erased_users_writes_are_dropped_wherever_the_user_is_named(saver_factory: Any) -> None:
    """After ``erase_user``, pending writes of a run of the user are dropped whether the
    run names the user in ``configurable``, in the config's ``metadata`` or in its
    runtime context (LangGraph's ``ChainMap`` configurable included), while a write that
    names no user (it skips the erasure check now) and a write of another user are
    stored; the user's own thread is gone. Held before and after the fix."""
    from collections import ChainMap
    from types import SimpleNamespace

    from langgraph_memory_plus.checkpoint.context import RUNTIME
    from langgraph_memory_plus.erasure import erase_user

    tag = uuid.uuid4().hex[:8]
    user, other = f"张三.{tag}", f"other.{tag}"
    mine, shared = f"pgshort-mine-{tag}", f"pgshort-shared-{tag}"
    with saver_factory() as saver:
        owned, unowned = empty_checkpoint(), empty_checkpoint()
        saver.put(_cfg(mine) | {"metadata": {"user_id": user}}, owned, {"step": 0}, {})
        saver.put(_cfg(shared), unowned, {"step": 0}, {})
        assert erase_user(user, checkpointer=saver).thread_ids == [mine]
        at = _cfg(shared, unowned["id"])["configurable"]
        runs = {
            "configurable": {"configurable": {**at, "user_id": user}},
            "metadata": {"configurable": at, "metadata": {"user_id": user}},
            "context": {
                "configurable": ChainMap(
                    {RUNTIME: SimpleNamespace(context={"user_id": user})}, dict(at)
                )
            },
            "chain map": {"configurable": ChainMap({"user_id": user}, dict(at))},
            "no user": {"configurable": at},
            "another user": {"configurable": {**at, "user_id": other}},
        }
        for task, config in runs.items():
            saver.put_writes(config, [("ch", task)], task)
        found = saver.get_tuple(_cfg(shared))
        assert found is not None
        assert sorted(w[0] for w in found.pending_writes) == ["another user", "no user"]
        assert saver.get_tuple(_cfg(mine)) is None
        saver.delete_thread(shared)
