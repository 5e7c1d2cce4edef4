"""Adversarial tests of encryption at rest (issue 37): what the first round missed.

Key material in errors, ids that are hard to encode, an interrupt resumed and a ``Send``
fan-out, threads copied into an encrypted database through the CLI, rekeys racing.
"""

from __future__ import annotations

import base64
import json
import operator
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, ClassVar

import pytest
from langgraph.checkpoint.base.id import uuid6
from langgraph.graph import END, START, StateGraph
from langgraph.types import Send, interrupt
from test_erasure import Target, mentions, target
from typing_extensions import TypedDict

from langgraph_memory_plus.checkpoint.config import thread_key
from langgraph_memory_plus.checkpoint.lists import NODE_TYPE
from langgraph_memory_plus.checkpoint.redis.plans import KINDS
from langgraph_memory_plus.encryption import ENV_KEYS, Encryption, EncryptionError
from langgraph_memory_plus.errors import InvalidConfigError
from langgraph_memory_plus.store.base import SEALED_FIELD

pytestmark = pytest.mark.storage
__all__ = ["target"]

K1, K2 = os.urandom(32), os.urandom(32)
BLOB = " (over 40 characters: stored as a blob, never inline)"
"""Makes a seeded string a blob row on every backend (PostgreSQL keeps shorter scalars
inline in the checkpoint row), for the attacks that move blobs."""
A_ONE, A_TWO, B_ONE = "a one" + BLOB, "a two" + BLOB, "b one" + BLOB


def _b64(key: bytes) -> str:
    return base64.b64encode(key).decode()


def _leaks(text: str, key: bytes) -> bool:
    """Whether ``text`` shows any common rendering of ``key`` (or a good part of one)."""
    forms = [_b64(key), key.hex(), repr(key), base64.urlsafe_b64encode(key).decode()]
    return any(form[2:14] in text for form in forms)


# -- key material never in an error ----------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    [
        "{b64}",  # the bare key, no id (the most common mistake)
        "k1:{b64}",  # the wrong separator
        "k1={b64},{b64}",  # a second entry without an id
        "{b64}=k1",  # swapped
        "k1={b64}x",  # a key that is not valid base64
        "k1={short}",  # a key of the wrong length
        "k1={b64},k1={b64}",  # an id given twice
    ],
)
def test_a_malformed_key_variable_is_a_clear_error_without_the_key(value: str) -> None:
    raw = value.format(b64=_b64(K1), short=_b64(K1[:20]))
    with pytest.raises(InvalidConfigError) as caught:
        Encryption.from_env({ENV_KEYS: raw})
    assert ENV_KEYS in str(caught.value)
    assert not _leaks(str(caught.value), K1), str(caught.value)
    assert not _leaks(repr(caught.value), K1)


@pytest.mark.parametrize(
    "keys",
    [
        lambda: {K1: "k1"},  # swapped key and id
        lambda: {_b64(K1): K1},  # the key's text as its id
        lambda: {"k1": _b64(K1)},  # a key as base64 text
        lambda: {"k1": K1.hex()},  # a key as hex text
        lambda: {"k1": K1[:31]},  # short
        lambda: {"k1=" + _b64(K1): K1},  # a key id with '='
    ],
)
def test_a_wrong_key_argument_is_a_clear_error_without_the_key(keys: Any) -> None:
    with pytest.raises(InvalidConfigError) as caught:
        Encryption(keys())
    assert not _leaks(str(caught.value), K1), str(caught.value)


# -- hard ids, Send, interrupt and resume, then a rotation -----------------------------------

ODD_IDS = ["a.b/c", "x:y:{z}", "nul\x00id", "会话-一", "../..", "e" * 200]


class FanState(TypedDict, total=False):
    topics: list[str]
    notes: Annotated[list[str], operator.add]
    answer: str


def _fanout_graph(memory: Any) -> Any:
    """A ``Send`` fan-out whose branches write user text, then an interrupt resumed."""

    def fan(state: FanState) -> list[Send]:
        return [Send("branch", {"topics": [t]}) for t in state["topics"]]

    def branch(state: FanState) -> dict[str, Any]:
        return {"notes": [f"note on {state['topics'][0]}"]}

    def ask(state: FanState) -> dict[str, Any]:
        return {"answer": interrupt({"question": f"confirm {state['notes'][0]}"})}

    builder = StateGraph(FanState)
    builder.add_node("branch", branch)
    builder.add_node("ask", ask)
    builder.add_conditional_edges(START, fan, ["branch"])
    builder.add_edge("branch", "ask")
    builder.add_edge("ask", END)
    return builder.compile(checkpointer=memory.checkpointer, store=memory.store)


def _label(tid: str) -> str:
    """A namespace label for ``tid`` (LangGraph refuses '.' and NUL in labels)."""
    return tid.replace(".", "_").replace("\x00", "0")


def test_hard_ids_send_and_resume_are_sealed_and_rekeyed(target: Target) -> None:
    """Thread ids and store keys with '.', '/', ':', braces, NUL, Chinese, a long one; a
    ``Send`` fan-out and an interrupt answered with ``Command(resume=...)``: zero hits at
    rest, a rotation k1 -> k2 moves every row, and only k2 then reads everything."""
    from langchain_core.messages import AIMessage, HumanMessage
    from langgraph.types import Command

    from langgraph_memory_plus.privacy.rekey import key_ids, rekey

    secrets: list[str] = []

    def secret(what: str) -> str:
        secrets.append(f"{what}-{os.urandom(5).hex()}")
        return secrets[-1]

    ids = ODD_IDS if "postgres" not in target.url else [i for i in ODD_IDS if "\x00" not in i]
    plan: dict[str, tuple[str, str, str]] = {}
    with target.open(encryption=Encryption({"k1": K1})) as memory:
        app = _fanout_graph(memory)
        for tid in ids:
            topics = [secret("topic"), secret("topic")]
            resume = secret("resume")
            config = {
                "configurable": {"thread_id": tid, "user_id": f"u/{tid}".replace("\x00", "0")}
            }
            out = app.invoke({"topics": topics}, config)
            assert "__interrupt__" in out
            app.invoke(Command(resume=resume), config)
            memory.store.put(("users", _label(tid)), tid, {"text": secret("value")})
            plan[tid] = (topics[0], resume, secrets[-1])
        said = secret("said")
        chat = {"configurable": {"thread_id": ids[0] + "-chat", "user_id": "u"}}
        from test_erasure_complete import chat_with_subgraph

        chat_app = chat_with_subgraph().compile(
            checkpointer=memory.checkpointer, store=memory.store
        )
        call = {"name": "add_memory", "args": {"content": said, "key": "k"}, "id": "c-odd"}
        said_msgs = [HumanMessage(said, id="h-odd"), AIMessage("", tool_calls=[call], id="a")]
        chat_app.invoke({"messages": said_msgs}, chat)
    assert mentions(target.dump(), [s.encode() for s in secrets]) == []
    assert key_ids(r[1] for r in target.dump()) == {"k1"}
    with target.open(encryption=Encryption({"k2": K2, "k1": K1}, current="k2")) as memory:
        report = rekey(memory, batch_size=4)
        assert report.unreachable == 0
    assert key_ids(r[1] for r in target.dump()) == {"k2"}
    with target.open(encryption=Encryption({"k2": K2})) as memory:
        for tid, (topic, resume, value) in plan.items():
            state = memory.checkpointer.get_tuple({"configurable": {"thread_id": tid}})
            values = state.checkpoint["channel_values"]
            assert values["answer"] == resume and f"note on {topic}" in values["notes"]
            item = memory.store.get(("users", _label(tid)), tid)
            assert item is not None and item.value["text"] == value
        record = memory.checkpointer.threads.get(ids[0] + "-chat")
        assert record is not None and record["title"] == said


# -- copied into an encrypted database: the CLI's commands that write ------------------------


def _cli(*args: str, env: dict[str, str], stdin: str | None = None) -> Any:
    return subprocess.run(
        [sys.executable, "-m", "langgraph_memory_plus.cli", *args],
        env=env,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize("backend", ["sqlite", "postgres", "redis"], indirect=True)
def test_threads_copied_into_an_encrypted_database_are_sealed(
    target: Target, tmp_path: Path
) -> None:
    """``migrate --store`` and ``thread export | thread import`` from a plain database into
    one where ``LANGGRAPH_MEMORY_ENCRYPTION_KEYS`` is set: zero hits in the target, and the
    copies read back with the key."""
    from test_erasure_complete import Person, seed

    from langgraph_memory_plus import from_url

    person = Person("copy@example.com")
    source = f"sqlite:///{tmp_path / 'plain.db'}"
    with from_url(source, transcripts=True, encryption="off") as memory:
        seed(memory, person, tmp_path)
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("LANGGRAPH_MEMORY_")},
        ENV_KEYS: f"k1={_b64(K1)}",
        "PYTHONPATH": os.getcwd(),
    }
    url = target.url
    if "key_prefix" in target.options:
        url += f"?key_prefix={target.options['key_prefix']}"
    done = _cli("migrate", "--from", f"{source}?encryption=off", "--to", url, "--store", env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    chat = person.threads[0]
    exported = _cli("thread", "export", chat, "-u", f"{source}?encryption=off", env=env)
    assert exported.returncode == 0, exported.stderr[-3000:]
    imported = _cli(
        "thread", "import", "--thread", "imported-1", "-u", url, env=env, stdin=exported.stdout
    )
    assert imported.returncode == 0, imported.stderr[-3000:]
    texts = [t.encode() for t in person.texts]
    assert mentions(target.dump(), texts) == []
    with target.open(encryption=Encryption({"k1": K1})) as memory:
        for tid in (chat, "imported-1"):
            state = memory.checkpointer.get_tuple({"configurable": {"thread_id": tid}})
            assert person.name in str(state.checkpoint["channel_values"]["messages"][0].content)


# -- rekey: two at once, and racing a live graph ---------------------------------------------


def _rekey_env(*keys: tuple[str, bytes]) -> dict[str, str]:
    return {
        **{k: v for k, v in os.environ.items() if not k.startswith("LANGGRAPH_MEMORY_")},
        ENV_KEYS: ",".join(f"{k}={_b64(v)}" for k, v in keys),
        "PYTHONPATH": os.getcwd(),
    }


def _url(target: Target) -> str:
    if "key_prefix" in target.options:
        return f"{target.url}?key_prefix={target.options['key_prefix']}"
    return target.url


def test_two_rekeys_at_once_both_finish_and_move_every_row(target: Target, tmp_path: Path) -> None:
    """Two ``langgraph-memory rekey`` processes started together on the same database:
    both exit 0 (a row the other moved first is skipped, not an error), every row ends on
    the new key, everything reads with it alone."""
    from test_erasure_complete import Person, seed

    from langgraph_memory_plus.privacy.rekey import key_ids

    people = [Person("p1@example.com"), Person("p2@example.com")]
    with target.open(encryption=Encryption({"k1": K1})) as memory:
        for person in people:
            seed(memory, person, tmp_path)
    env = _rekey_env(("k2", K2), ("k1", K1))
    args = [sys.executable, "-m", "langgraph_memory_plus.cli", "rekey", "-u", _url(target)]
    procs = [
        subprocess.Popen(
            [*args, "--batch-size", "3", "--json"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=180) for p in procs]
    for proc, (out, err) in zip(procs, outs, strict=True):
        assert proc.returncode == 0, err[-3000:]
        assert json.loads(out)["unreachable"] == 0
    assert key_ids(r[1] for r in target.dump()) == {"k2"}
    from test_encryption import read_back

    with target.open(encryption=Encryption({"k2": K2})) as memory:
        for person in people:
            read_back(memory, person)


def _echo_graph(memory: Any) -> Any:
    from langchain_core.messages import AIMessage
    from test_erasure_complete import State

    def answer(state: State) -> dict[str, Any]:
        last = state["messages"][-1]
        return {"messages": [AIMessage(f"re: {last.content}", id=f"ai-{last.id}")]}

    builder = StateGraph(State)
    builder.add_node("answer", answer)
    builder.add_edge(START, "answer")
    builder.add_edge("answer", END)
    return builder.compile(checkpointer=memory.checkpointer, store=memory.store)


def test_rekey_racing_a_live_graph_loses_no_turn(target: Target) -> None:
    """While rekey moves k1 -> k2, a graph keeps taking turns on the same threads (writing
    with k2): every turn, title and transcript line is there afterwards, the thread index
    is not put back to an older record, and a second rekey leaves only k2."""
    import threading

    from langchain_core.messages import HumanMessage

    from langgraph_memory_plus.privacy.rekey import key_ids, rekey

    threads = [f"race-{i}" for i in range(6)]
    with target.open(encryption=Encryption({"k1": K1})) as memory:
        app = _echo_graph(memory)
        for tid in threads:
            config = {"configurable": {"thread_id": tid, "user_id": "racer"}}
            app.invoke({"messages": [HumanMessage(f"{tid} turn 0", id=f"{tid}-0")]}, config)
    rotated = Encryption({"k2": K2, "k1": K1}, current="k2")
    turns = 8
    stop = threading.Event()
    errors: list[BaseException] = []

    def writer() -> None:
        try:
            with target.open(encryption=rotated) as m:
                live = _echo_graph(m)
                for n in range(1, turns):
                    for tid in threads:
                        config = {"configurable": {"thread_id": tid, "user_id": "racer"}}
                        said = HumanMessage(f"{tid} turn {n}", id=f"{tid}-{n}")
                        live.invoke({"messages": [said]}, config)
        except BaseException as exc:
            errors.append(exc)
        finally:
            stop.set()

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        with target.open(encryption=rotated) as memory:
            while not stop.is_set():
                rekey(memory, batch_size=2)
    finally:
        thread.join(120)
    assert not errors, errors
    with target.open(encryption=rotated) as memory:
        rekey(memory)
        for tid in threads:
            state = memory.checkpointer.get_tuple({"configurable": {"thread_id": tid}})
            said = [m.content for m in state.checkpoint["channel_values"]["messages"]]
            want = [x for n in range(turns) for x in (f"{tid} turn {n}", f"re: {tid} turn {n}")]
            assert said == want
            record = memory.checkpointer.threads.get(tid)
            assert record is not None and record["title"] == f"{tid} turn 0"
            lines = memory.checkpointer.threads.transcript(tid)
            assert len(lines) == 2 * turns
    assert key_ids(r[1] for r in target.dump()) == {"k2"}


# -- a ciphertext moved inside one thread ----------------------------------------------------


class NoteState(TypedDict, total=False):
    note: str


def test_a_value_swapped_between_two_versions_of_one_thread_does_not_open(
    tmp_path: Path,
) -> None:
    import sqlite3

    from langgraph_memory_plus import from_url

    def keep(state: NoteState) -> dict[str, Any]:
        return {}

    builder = StateGraph(NoteState)
    builder.add_node("keep", keep)
    builder.add_edge(START, "keep")
    builder.add_edge("keep", END)
    path = tmp_path / "m.db"
    enc = Encryption({"k1": K1})
    config = {"configurable": {"thread_id": "t"}}
    with from_url(f"sqlite:///{path}", encryption=enc) as memory:
        app = builder.compile(checkpointer=memory.checkpointer)
        app.invoke({"note": "approved=no"}, config)
        app.invoke({"note": "approved=yes"}, config)
    conn = sqlite3.connect(path)
    with conn:
        rows = conn.execute(
            "SELECT version, blob FROM lgmp_blobs WHERE channel = 'note' ORDER BY version"
        ).fetchall()
        assert len(rows) == 2
        (_, old_blob), (new_v, _) = rows
        conn.execute("UPDATE lgmp_blobs SET blob = ? WHERE version = ?", (old_blob, new_v))
    conn.close()
    with (
        from_url(f"sqlite:///{path}", encryption=enc) as memory,
        pytest.raises(EncryptionError),
    ):
        state = memory.checkpointer.get_tuple(config)
        assert state.checkpoint["channel_values"]["note"] == "approved=no"  # rolled back


# -- a ciphertext moved inside one thread: every backend, every kind of sealed value ----------


class _Raw:
    """One thread's sealed checkpoint values as stored, on any backend: what someone with
    write access to the database can read and copy over each other. Rows are keyed by what
    identifies them inside the thread (``blobs``: channel, version; ``checkpoints``:
    checkpoint id; ``writes``: checkpoint id, task id and, on SQLite, the write index;
    ``items``: item id)."""

    SQL: ClassVar[dict[str, tuple[str, tuple[str, ...], tuple[str, ...]]]] = {
        "blobs": ("lgmp_blobs", ("channel", "version"), ("type", "blob")),
        "checkpoints": (
            "lgmp_checkpoints",
            ("checkpoint_id",),
            ("checkpoint_type", "checkpoint", "metadata_type", "metadata"),
        ),
        "items": ("lgmp_items", ("item_id",), ("type", "data")),
    }
    REDIS: ClassVar[dict[str, tuple[str, int]]] = {
        "blobs": ("blobs", 2),
        "checkpoints": ("ck", 1),
        "writes": ("writes", 2),
        "items": ("items", 1),
    }

    def __init__(self, target: Target, memory: Any, thread_id: str) -> None:
        from langgraph_memory_plus.checkpoint.config import thread_key

        self.url, self.tk = target.url, thread_key(thread_id)
        self.backend = (
            "sqlite" if self.url.startswith("sqlite") else
            "postgres" if self.url.startswith("postgres") else "redis"
        )  # fmt: skip
        if self.backend == "redis":
            from langgraph_memory_plus.checkpoint.redis.plans import KINDS

            self.keys = dict(zip(KINDS, memory.checkpointer._plans.keys(thread_id), strict=True))

    def _sql(self, part: str) -> tuple[str, tuple[str, ...], tuple[str, ...]]:
        if part != "writes":
            return self.SQL[part]
        if self.backend == "sqlite":
            return "lgmp_writes", ("checkpoint_id", "task_id", "idx"), ("type", "blob")
        return "lgmp_task_writes", ("checkpoint_id", "task_id"), ("writes",)

    def _query(self, sql: str, params: Sequence[Any]) -> list[Any]:
        if self.backend == "sqlite":
            import sqlite3

            conn = sqlite3.connect(self.url.removeprefix("sqlite:///"))
            with conn:
                rows = conn.execute(sql, params).fetchall()
            conn.close()
            return rows
        import psycopg

        with psycopg.connect(self.url, autocommit=True) as pg:
            cur = pg.execute(sql.replace("?", "%s"), params)
            return cur.fetchall() if cur.description else []

    def _redis(self) -> Any:
        from langgraph_memory_plus.drivers.redis import sync_client_from_url

        return sync_client_from_url(self.url)

    def rows(self, part: str) -> dict[tuple[Any, ...], tuple[Any, ...]]:
        if self.backend != "redis":
            table, key, cols = self._sql(part)
            found = self._query(
                f"SELECT {', '.join(key + cols)} FROM {table} WHERE thread_key = ?", [self.tk]
            )
            return {tuple(r[: len(key)]): tuple(r[len(key) :]) for r in found}
        name, n = self.REDIS[part]
        client = self._redis()
        try:
            fields = client.hgetall(self.keys[name])
        finally:
            client.close()
        out: dict[tuple[Any, ...], tuple[Any, ...]] = {}
        for field, value in fields.items():
            parts = field.split(b"\0", n)[1:]  # after the (root) namespace
            key = tuple(p if part == "items" else p.decode() for p in parts)
            out[key] = (value,)
        return out

    def set(self, part: str, key: tuple[Any, ...], values: tuple[Any, ...]) -> None:
        if self.backend != "redis":
            table, names, cols = self._sql(part)
            self._query(
                f"UPDATE {table} SET {', '.join(f'{c} = ?' for c in cols)} "
                f"WHERE thread_key = ? AND {' AND '.join(f'{k} = ?' for k in names)}",
                [*values, self.tk, *key],
            )
            return
        name, _ = self.REDIS[part]
        field = b"\0" + b"\0".join(k if isinstance(k, bytes) else k.encode() for k in key)
        client = self._redis()
        try:
            assert client.hexists(self.keys[name], field)
            client.hset(self.keys[name], field, values[0])
        finally:
            client.close()

    def copy(self, part: str, src: tuple[Any, ...], dst: tuple[Any, ...]) -> None:
        """The sealed value(s) of row ``src`` copied over row ``dst``."""
        rows = self.rows(part)
        assert src in rows and dst in rows, (src, dst, sorted(rows))
        self.set(part, dst, rows[src])

    def swap_write_index(self, checkpoint_id: str, task_id: str) -> None:
        """A task's write 0 copied over its write 1 (the same task, another index)."""
        from langgraph_memory_plus.checkpoint.task_writes import pack, split_head, unpack

        if self.backend == "sqlite":
            self.copy("writes", (checkpoint_id, task_id, 0), (checkpoint_id, task_id, 1))
            return
        (raw,) = self.rows("writes")[(checkpoint_id, task_id)]
        head = b""
        if self.backend == "redis":  # the task path leads, as a netstring
            path, raw = split_head(raw)
            head = b"%d:%s" % (len(path), path)
        writes = unpack(bytes(raw), "")
        (i0, _, typ, data, _), (i1, ch1, _, _, own1) = writes[0], writes[1]
        assert (i0, i1) == (0, 1)
        writes[1] = (i1, ch1, typ, data, own1)
        self.set("writes", (checkpoint_id, task_id), (head + pack(writes, ""),))


def _seed_swaps(memory: Any) -> tuple[str, str]:
    """Thread ``sw``: two checkpoints (channel ``a`` changed, ``b`` not, a list ``msgs``
    stored as items), then two tasks' pending writes on the second; its two ids."""
    from langgraph.checkpoint.base import empty_checkpoint

    saver = memory.checkpointer
    msgs = [f"message {n}" for n in range(20)]
    first = empty_checkpoint()
    first["channel_values"] = {"a": A_ONE, "b": B_ONE, "msgs": msgs}
    first["channel_versions"] = {"a": 1, "b": 1, "msgs": 1}
    config: Any = {"configurable": {"thread_id": "sw", "checkpoint_ns": ""}}
    c1 = saver.put(config, first, {"source": "loop", "step": 1}, {"a": 1, "b": 1, "msgs": 1})
    second = empty_checkpoint()
    second["channel_values"] = {"a": A_TWO, "b": B_ONE, "msgs": [*msgs, "message 20"]}
    second["channel_versions"] = {"a": 2, "b": 1, "msgs": 2}
    c2 = saver.put(c1, second, {"source": "loop", "step": 2}, {"a": 2, "msgs": 2})
    saver.put_writes(c2, [("a", "task a first"), ("b", "task a second")], "task-a")
    saver.put_writes(c2, [("a", "task b first")], "task-b")
    return c1["configurable"]["checkpoint_id"], c2["configurable"]["checkpoint_id"]


def _latest(memory: Any) -> Any:
    return memory.checkpointer.get_tuple({"configurable": {"thread_id": "sw"}})


@pytest.mark.parametrize(
    "swap",
    ["blob-version", "blob-channel", "checkpoint", "write-task", "write-index", "list-item"],
)
def test_a_value_copied_over_another_of_the_same_thread_does_not_open(
    target: Target, swap: str
) -> None:
    """Someone with write access to the database copies one sealed value of a thread over
    another of the same thread: an older version of the channel (a rollback), another
    channel's value, an older checkpoint's record (body and metadata), another task's
    pending write, the same task's other write, another list item. Each is refused where
    it is read (each was bound only to its thread before)."""
    enc = Encryption({"k1": K1})
    with target.open(encryption=enc) as memory:
        c1, c2 = _seed_swaps(memory)
        raw = _Raw(target, memory, "sw")
    with target.open(encryption=enc) as memory:  # the unswapped thread reads back whole
        found = _latest(memory)
        values = found.checkpoint["channel_values"]
        assert (values["a"], values["b"], len(values["msgs"])) == (A_TWO, B_ONE, 21)
        assert sorted(found.pending_writes) == [
            ("task-a", "a", "task a first"),
            ("task-a", "b", "task a second"),
            ("task-b", "a", "task b first"),
        ]
    if swap == "blob-version":
        raw.copy("blobs", ("a", "1"), ("a", "2"))
    elif swap == "blob-channel":
        raw.copy("blobs", ("b", "1"), ("a", "2"))
    elif swap == "checkpoint":
        raw.copy("checkpoints", (c1,), (c2,))
    elif swap == "write-task":
        packed = raw.backend != "sqlite"
        raw.copy(
            "writes",
            (c2, "task-a") if packed else (c2, "task-a", 0),
            (c2, "task-b") if packed else (c2, "task-b", 0),
        )
    elif swap == "write-index":
        raw.swap_write_index(c2, "task-a")
    else:
        # Two sealed items (PostgreSQL keeps a list's clear pages in the same table; a page
        # copied over an item fails closed too, as corrupt data, not as a moved value).
        items = raw.rows("items")
        first, second = sorted(k for k in items if items[k][0] != NODE_TYPE)[:2]
        raw.copy("items", first, second)
    with target.open(encryption=enc) as memory, pytest.raises(EncryptionError, match="moved"):
        _latest(memory)


def test_a_fork_reads_the_blobs_it_shares_with_its_parent(target: Target) -> None:
    """A checkpoint forked from an older one refers to that one's blobs (a channel that did
    not change in it): bound to their channel version, not to a checkpoint, they open."""
    enc = Encryption({"k1": K1})
    with target.open(encryption=enc) as memory:
        c1, _ = _seed_swaps(memory)
        saver = memory.checkpointer
        parent = saver.get_tuple({"configurable": {"thread_id": "sw", "checkpoint_id": c1}})
        fork = dict(parent.checkpoint)
        fork.update(id=str(uuid6()), channel_values={**fork["channel_values"], "b": "b fork"})
        fork["channel_versions"] = {**fork["channel_versions"], "b": 3}
        saver.put(parent.config, fork, {"source": "fork", "step": 2}, {"b": 3})
    with target.open(encryption=enc) as memory:
        values = _latest(memory).checkpoint["channel_values"]
        assert (values["a"], values["b"], len(values["msgs"])) == (A_ONE, "b fork", 20)


def test_a_title_or_transcript_line_of_another_thread_does_not_open(target: Target) -> None:
    """Titles and transcript lines are bound to their thread (and line id): copied from
    another thread's record, they are refused."""
    from langchain_core.messages import AIMessage, HumanMessage
    from langgraph.checkpoint.base import empty_checkpoint

    enc = Encryption({"k1": K1})
    with target.open(encryption=enc) as memory:
        for tid in ("one", "two"):
            ck = empty_checkpoint()
            ck["channel_values"] = {
                "messages": [HumanMessage(f"{tid} asks", id="h"), AIMessage("ok", id="a")]
            }
            ck["channel_versions"] = {"messages": 1}
            memory.checkpointer.put(
                {"configurable": {"thread_id": tid, "checkpoint_ns": ""}},
                ck, {"source": "loop", "step": 1}, {"messages": 1},
            )  # fmt: skip
        assert memory.checkpointer.threads.get("two")["title"] == "two asks"
        plans = memory.checkpointer._plans
    if target.url.startswith(("sqlite", "postgres")):
        raw = _Raw(target, None, "one")
        for table, column, key in (
            ("lgmp_thread_index", "title", ""),
            ("lgmp_transcripts", "content", " AND message_id = 'h'"),
        ):
            raw._query(
                f"UPDATE {table} SET {column} = (SELECT {column} FROM {table} "
                f"WHERE thread_key = ?{key}) WHERE thread_key = ?{key}",
                [thread_key("one"), thread_key("two")],
            )
    else:
        from langgraph_memory_plus.drivers.redis import sync_client_from_url

        keys = {t: dict(zip(KINDS, plans.keys(t), strict=True))["rec"] for t in ("one", "two")}
        client: Any = sync_client_from_url(target.url)
        try:
            client.hset(keys["two"], b"t", client.hget(keys["one"], b"t"))
            tx = {t: k[: -len(b"rec")] + b"tx" for t, k in keys.items()}
            client.hset(tx["two"], b"h", client.hget(tx["one"], b"h"))
        finally:
            client.close()
    with target.open(encryption=enc) as memory:
        assert memory.checkpointer.threads.get("one")["title"] == "one asks"
        with pytest.raises(EncryptionError, match="moved"):
            memory.checkpointer.threads.get("two")
        with pytest.raises(EncryptionError, match="moved"):
            memory.checkpointer.threads.transcript("two")


def test_a_store_value_of_another_key_does_not_open(target: Target) -> None:
    """A sealed store value copied over another key's, on every backend."""
    enc = Encryption({"k1": K1})
    with target.open(encryption=enc) as memory:
        memory.store.put(("a",), "one", {"text": "one"})
        memory.store.put(("a",), "two", {"text": "two"})
    if target.url.startswith(("sqlite", "postgres")):
        _Raw(target, None, "-")._query(
            "UPDATE lgmp_store SET value = (SELECT value FROM lgmp_store WHERE key = 'one') "
            "WHERE key = 'two'",
            [],
        )
    else:
        from langgraph_memory_plus.drivers.redis import sync_client_from_url

        client: Any = sync_client_from_url(target.url)
        try:
            marker = SEALED_FIELD.encode()
            for key in client.scan_iter(match=f"{target.options['key_prefix']}*", count=500):
                if client.type(key) != b"hash":
                    continue
                sealed = {f: v for f, v in client.hgetall(key).items() if marker in v}
                if len(sealed) == 2:
                    (f1, v1), (f2, v2) = sorted(sealed.items())
                    assert f1.endswith(b"one") and f2.endswith(b"two"), (f1, f2)
                    head2 = v2.partition(b"\n")[0]
                    client.hset(key, f2, head2 + b"\n" + v1.partition(b"\n")[2])
                    break
            else:
                raise AssertionError("no store shard with the two items")
        finally:
            client.close()
    with target.open(encryption=enc) as memory:
        assert memory.store.get(("a",), "one").value == {"text": "one"}
        with pytest.raises(EncryptionError, match="moved"):
            memory.store.get(("a",), "two")


# -- per-tenant keys ---------------------------------------------------------------------------


def test_a_later_turn_without_the_user_in_its_config_uses_the_owners_key(
    target: Target,
) -> None:
    from langchain_core.messages import HumanMessage
    from test_encryption import DictKeys

    from langgraph_memory_plus.privacy.rekey import key_ids

    tenants = DictKeys()
    enc = Encryption({"k1": K1}, tenant_keys=tenants)
    with target.open(encryption=enc) as memory:
        app = _echo_graph(memory)
        first = {"configurable": {"thread_id": "owned", "user_id": "alice"}}
        app.invoke({"messages": [HumanMessage("hello", id="m1")]}, first)
        assert memory.checkpointer.threads.get("owned")["metadata"]["user_id"] == "alice"
        later = {"configurable": {"thread_id": "owned"}}  # e.g. a worker resuming
        app.invoke({"messages": [HumanMessage("my card is 4242", id="m2")]}, later)
    assert key_ids(r[1] for r in target.dump()) == {tenants.by_user["alice"][0]}


def test_a_users_rows_do_not_open_with_another_users_key(target: Target) -> None:
    """With only bob's tenant key (and the shared one) configured, alice's thread and
    memories raise ``EncryptionError`` (unknown key), bob's read."""
    from langchain_core.messages import HumanMessage
    from test_encryption import DictKeys

    from langgraph_memory_plus.store.namespaces import user_namespace

    tenants = DictKeys()
    enc = Encryption({"k1": K1}, tenant_keys=tenants)
    ns = {u: user_namespace(("memories", "{user_id}"), u) for u in ("alice", "bob")}
    with target.open(encryption=enc) as memory:
        app = _echo_graph(memory)
        for user in ("alice", "bob"):
            config = {"configurable": {"thread_id": f"t-{user}", "user_id": user}}
            app.invoke({"messages": [HumanMessage(f"{user} secret", id="m")]}, config)
            memory.store.put(ns[user], "k", {"text": f"{user} memory"})
    only_bob = DictKeys()
    only_bob.by_user["bob"] = tenants.by_user["bob"]
    only_bob.by_id[tenants.by_user["bob"][0]] = tenants.by_user["bob"][1]
    with target.open(encryption=Encryption({"k1": K1}, tenant_keys=only_bob)) as memory:
        saver = memory.checkpointer
        with pytest.raises(EncryptionError, match="unknown key"):
            saver.get_tuple({"configurable": {"thread_id": "t-alice"}})
        with pytest.raises(EncryptionError, match="unknown key"):
            saver.threads.transcript("t-alice")
        with pytest.raises(EncryptionError, match="unknown key"):
            memory.store.get(ns["alice"], "k")
        state = saver.get_tuple({"configurable": {"thread_id": "t-bob"}})
        assert state.checkpoint["channel_values"]["messages"][0].content == "bob secret"
        assert memory.store.get(ns["bob"], "k").value == {"text": "bob memory"}


# -- the package's defaults, and encryption with the fence -----------------------------------


def test_from_url_gives_the_same_encryption_to_saver_and_store(target: Target) -> None:
    enc = Encryption({"k1": K1})
    with target.open(encryption=enc) as memory:
        assert memory.checkpointer.encryption is enc
        assert memory.store.encryption is enc


@pytest.mark.parametrize("backend", ["postgres", "redis", "redis-cluster"], indirect=True)
def test_the_key_variable_turns_encryption_on_for_server_urls_and_the_cli(
    target: Target,
) -> None:
    """``LANGGRAPH_MEMORY_ENCRYPTION_KEYS`` alone (no argument): from_url's saver and store
    and the CLI's commands are encrypted."""
    code = (
        "import sys; from langgraph_memory_plus import from_url\n"
        "with from_url(sys.argv[1]) as m:\n"
        "    print(m.checkpointer.encryption.current, m.store.encryption.current)\n"
        "    m.store.put(('env',), 'k', {'text': 'env var secret'})\n"
    )
    env = _rekey_env(("kenv", K2))
    done = subprocess.run(
        [sys.executable, "-c", code, _url(target)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.stdout.split() == ["kenv", "kenv"], done.stderr[-2000:]
    assert mentions(target.dump(), [b"env var secret"]) == []
    with target.open(encryption=Encryption({"kenv": K2})) as memory:
        assert memory.store.get(("env",), "k").value == {"text": "env var secret"}


def test_encryption_and_the_fence_together(target: Target) -> None:
    """With ``fence=True`` and encryption: runs write sealed rows, a superseded worker is
    refused with an error that holds no user text, and a rekey under the fence leaves
    the lineage whole."""
    import uuid

    from langchain_core.messages import HumanMessage

    from langgraph_memory_plus import FencedWriteError
    from langgraph_memory_plus.privacy.rekey import key_ids, rekey

    secret = f"fenced secret {os.urandom(4).hex()}"
    with target.open(encryption=Encryption({"k1": K1}), fence=True) as memory:
        app = _echo_graph(memory)
        saver = memory.checkpointer
        config = {"configurable": {"thread_id": "f1", "user_id": "u"}, "run_id": uuid.uuid4()}
        app.invoke({"messages": [HumanMessage(secret, id="m0")]}, config)
        lease_a = saver.fence.acquire("f2", owner="worker-a", lease_s=30)
        app.invoke({"messages": [HumanMessage(secret, id="m1")]}, lease_a.config())
        lease_b = saver.fence.acquire("f2", owner="worker-b", lease_s=30, force=True)
        with pytest.raises(FencedWriteError) as caught:
            app.invoke({"messages": [HumanMessage(f"{secret} again", id="m2")]}, lease_a.config())
        assert secret not in str(caught.value) and secret not in repr(caught.value)
        app.invoke({"messages": [HumanMessage(f"{secret} b", id="m3")]}, lease_b.config())
    assert mentions(target.dump(), [secret.encode()]) == []
    rotated = Encryption({"k2": K2, "k1": K1}, current="k2")
    with target.open(encryption=rotated, fence=True) as memory:
        rekey(memory, batch_size=3)
    assert key_ids(r[1] for r in target.dump()) == {"k2"}
    with target.open(encryption=Encryption({"k2": K2}), fence=True) as memory:
        state = memory.checkpointer.get_tuple({"configurable": {"thread_id": "f2"}})
        said = [m.content for m in state.checkpoint["channel_values"]["messages"]]
        assert said == [secret, f"re: {secret}", f"{secret} b", f"re: {secret} b"]


def test_rekey_with_tenant_keys_moves_a_users_items_to_their_key(target: Target) -> None:
    """Per-tenant keys turned on over items sealed with the shared key (or in clear, in
    the migration mode): after ``rekey`` an item in a user's declared namespace is on that
    user's key, as a put would seal it, so ``erase_user(drop_key=True)`` shreds it."""
    from test_encryption import DictKeys

    from langgraph_memory_plus.privacy.rekey import key_ids, rekey
    from langgraph_memory_plus.store.namespaces import user_namespace

    ns = user_namespace(("memories", "{user_id}"), "alice")
    with target.open(encryption=Encryption({"k1": K1})) as memory:
        memory.store.put(ns, "sealed", {"text": "alice sealed"})
        memory.store.put(("shared",), "x", {"text": "not a user's"})
    tenants = DictKeys()
    enc = Encryption({"k2": K2, "k1": K1}, current="k2", tenant_keys=tenants)
    with target.open(encryption=enc) as memory:
        rekey(memory, batch_size=2)
    alice = tenants.by_user["alice"][0] if "alice" in tenants.by_user else "?"
    assert key_ids(r[1] for r in target.dump()) == {alice, "k2"}
    with target.open(encryption=enc) as memory:
        assert memory.store.get(ns, "sealed").value == {"text": "alice sealed"}
        assert memory.store.get(("shared",), "x").value == {"text": "not a user's"}


def test_rekey_racing_store_writers_keeps_the_last_value_on_every_backend(
    target: Target,
) -> None:
    """``test_encryption``'s race (PostgreSQL only there) on every backend: a writer keeps
    putting the same items (sealing with the old key) while rekeys run; every item then
    holds its last written value."""
    import threading

    from langgraph_memory_plus.privacy.rekey import rekey

    keys = [f"k{i}" for i in range(20)]
    with target.open(encryption=Encryption({"k1": K1})) as memory:
        for k in keys:
            memory.store.put(("race",), k, {"n": 0})
    last: dict[str, int] = {}
    errors: list[BaseException] = []
    done = threading.Event()

    def writer() -> None:
        try:
            with target.open(encryption=Encryption({"k1": K1, "k2": K2}, current="k1")) as m:
                for n in range(1, 121):
                    k = keys[n % len(keys)]
                    m.store.put(("race",), k, {"n": n})
                    last[k] = n
        except BaseException as exc:
            errors.append(exc)
        finally:
            done.set()

    rotated = Encryption({"k2": K2, "k1": K1}, current="k2")
    thread = threading.Thread(target=writer)
    thread.start()
    try:
        with target.open(encryption=rotated) as memory:
            while not done.is_set():
                rekey(memory, saver=None, batch_size=3)
    finally:
        thread.join(60)
    assert not errors, errors
    with target.open(encryption=rotated) as memory:
        for k in keys:
            item = memory.store.get(("race",), k)
            assert item is not None and item.value == {"n": last.get(k, 0)}, k


def test_migrating_with_metadata_keys_leaves_no_dropped_metadata_in_clear(
    target: Target,
) -> None:
    """Encryption turned on over existing rows with ``metadata_keys``: after the rekey
    in the migration mode, a dropped metadata key's value is nowhere in clear (as for
    rows written with encryption on)."""
    from langgraph.checkpoint.base import empty_checkpoint

    from langgraph_memory_plus.privacy.rekey import rekey

    secret = f"topic {os.urandom(6).hex()}"
    config = {"configurable": {"thread_id": "meta-old", "checkpoint_ns": ""}}
    with target.open() as memory:
        memory.checkpointer.put(
            config, empty_checkpoint(), {"source": "input", "step": -1, "topic": secret}, {}
        )
    enc = Encryption({"k1": K1}, accept_plaintext=True, metadata_keys=["kind"])
    with target.open(encryption=enc) as memory:
        rekey(memory)
    with target.open(encryption=Encryption({"k1": K1}, metadata_keys=["kind"])) as memory:
        found = list(memory.checkpointer.list(None, filter={"topic": secret}))
        assert len(found) == 1 and found[0].metadata["topic"] == secret
    assert mentions(target.dump(), [secret.encode()]) == []


def test_a_later_turn_without_the_user_from_a_fresh_saver_uses_the_owners_key(
    target: Target,
) -> None:
    """As above, but turn 2 comes from another saver (another process: nothing cached),
    through ``put_writes`` first and the async API: the index owner is read before sealing."""
    import asyncio

    from langchain_core.messages import HumanMessage
    from test_encryption import DictKeys

    from langgraph_memory_plus.privacy.rekey import key_ids

    tenants = DictKeys()
    enc = Encryption({"k1": K1}, tenant_keys=tenants)
    with target.open(encryption=enc) as memory:
        first = {"configurable": {"thread_id": "owned", "user_id": "alice"}}
        _echo_graph(memory).invoke({"messages": [HumanMessage("hello", id="m1")]}, first)
        latest = memory.checkpointer.get_tuple({"configurable": {"thread_id": "owned"}})
    with target.open(encryption=enc) as memory:
        at = {"configurable": {"thread_id": "owned", **latest.config["configurable"]}}
        memory.checkpointer.put_writes(at, [("messages", "my card is 4242")], "task-1")

    async def later() -> None:
        with target.open(encryption=enc) as memory:
            app = _echo_graph(memory)
            later = {"configurable": {"thread_id": "owned"}}
            await app.ainvoke({"messages": [HumanMessage("4242 again", id="m2")]}, later)

    asyncio.run(later())
    assert key_ids(r[1] for r in target.dump()) == {tenants.by_user["alice"][0]}


# -- copy_thread with encryption on ---------------------------------------------------------


class CopyState(TypedDict, total=False):
    topics: list[str]
    notes: Annotated[list[str], operator.add]
    answer: str


def _copy_graph(checkpointer: Any) -> Any:
    """A ``Send`` fan-out, then a subgraph (its own namespace) that interrupts."""

    def fan(state: CopyState) -> list[Send]:
        return [Send("branch", {"topics": [t]}) for t in state["topics"]]

    def branch(state: CopyState) -> dict[str, Any]:
        return {"notes": [f"secret note on {state['topics'][0]}"]}

    def ask(state: CopyState) -> dict[str, Any]:
        return {"answer": interrupt({"question": f"confirm {state['notes'][0]}"})}

    inner = StateGraph(CopyState)
    inner.add_node("ask", ask)
    inner.add_edge(START, "ask")
    inner.add_edge("ask", END)
    builder = StateGraph(CopyState)
    builder.add_node("branch", branch)
    builder.add_node("sub", inner.compile())
    builder.add_conditional_edges(START, fan, ["branch"])
    builder.add_edge("branch", "sub")
    builder.add_edge("sub", END)
    return builder.compile(checkpointer=checkpointer)


def _stored(saver: Any, thread_id: str) -> dict[tuple[str, str], Any]:
    """Every checkpoint of a thread (every namespace) as stored: parent, metadata,
    values and pending writes, by (namespace, id)."""
    out = {}
    for t in saver.list({"configurable": {"thread_id": thread_id}}):
        c = t.config["configurable"]
        parent = (t.parent_config or {}).get("configurable", {}).get("checkpoint_id")
        metadata = {k: v for k, v in t.metadata.items() if k != "thread_id"}
        writes = sorted((w[0], w[1], repr(w[2])) for w in t.pending_writes or ())
        values = repr(sorted(t.checkpoint["channel_values"].items()))
        out[(c["checkpoint_ns"], c["checkpoint_id"])] = (parent, metadata, values, writes)
    return out


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_copy_thread_with_encryption_matches_the_reference_and_stays_sealed(
    target: Target, mode: str
) -> None:
    """``copy_thread`` / ``acopy_thread`` with encryption (and tenant keys) on: the copy
    has the source's checkpoints (ids, parents, metadata, every namespace, pending writes
    with an interrupt and ``Send`` tasks), shows what a renamed copy shows on LangGraph's
    ``InMemorySaver`` before and after it is resumed, is sealed with the owner's key, and
    nothing of it is readable at rest."""
    import asyncio

    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.types import Command
    from test_checkpoint_differential import _copy_in_memory, observe
    from test_encryption import DictKeys

    from langgraph_memory_plus.privacy.rekey import key_ids

    tenants = DictKeys()
    enc = Encryption({"k1": K1}, tenant_keys=tenants)
    topics = {"topics": ["zanzibar", "quokka"]}
    src = {"configurable": {"thread_id": "src", "user_id": "alice"}}
    dst = {"configurable": {"thread_id": "dst"}}
    reference = _copy_graph(InMemorySaver())
    reference.invoke(topics, src)
    _copy_in_memory(reference.checkpointer, "src", "dst")
    with target.open(encryption=enc) as memory:
        saver = memory.checkpointer
        ours = _copy_graph(saver)
        ours.invoke(topics, src)
        if mode == "sync":
            saver.copy_thread("src", "dst")
        else:
            asyncio.run(saver.acopy_thread("src", "dst"))
        assert _stored(saver, "dst") == _stored(saver, "src")
        assert len({ns for ns, _ in _stored(saver, "dst")}) == 2  # the subgraph's too
        assert observe(ours, dst) == observe(reference, dst)
        assert saver.threads.get("dst")["metadata"]["user_id"] == "alice"
        for graph in (ours, reference):
            graph.invoke(Command(resume="yes"), dst)
        assert observe(ours, dst) == observe(reference, dst)
        assert observe(ours, src) == {**observe(reference, src)}
    secrets = [b"zanzibar", b"quokka", b"secret note", b"confirm"]
    assert mentions(target.dump(), secrets) == []
    assert key_ids(r[1] for r in target.dump()) == {tenants.by_user["alice"][0]}
    with target.open(encryption=enc) as memory:  # what was stored, read afresh
        assert observe(_copy_graph(memory.checkpointer), dst) == observe(reference, dst)


def _as_previous_release(m: pytest.MonkeyPatch) -> None:
    """Seal as the previous release did: its envelope version, and associated data
    without the place inside the thread (checkpoint values bound to their thread only)."""
    from langgraph_memory_plus import encryption

    legacy = encryption.Location.associated_data
    m.setattr(encryption, "MAGIC", encryption.MAGIC_V1)
    m.setattr(
        encryption.Location, "associated_data", lambda self, legacy_=False: legacy(self, True)
    )


def test_rows_of_the_previous_release_open_only_when_migrating_and_rekey_binds_them(
    target: Target, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Checkpoint values sealed by the previous release (bound to their thread only) are
    refused, as plaintext is, unless the migration mode is on; ``rekey`` in that mode
    reseals each at its full location (blobs, checkpoints, pending writes, list items, the
    index's interrupt copies), after which they open without it."""
    from langgraph_memory_plus.privacy.rekey import rekey

    migrating = Encryption({"k1": K1}, accept_plaintext=True)
    asks: Any = {"configurable": {"thread_id": "asks"}}
    with monkeypatch.context() as m:
        _as_previous_release(m)
        with target.open(encryption=migrating) as memory:
            _seed_swaps(memory)
            assert "__interrupt__" in _fanout_graph(memory).invoke({"topics": ["x", "y"]}, asks)
    enc = Encryption({"k1": K1})
    with target.open(encryption=enc) as memory:
        with pytest.raises(EncryptionError, match="earlier release"):
            _latest(memory)
        with pytest.raises(EncryptionError, match="earlier release"):
            memory.checkpointer.threads.get("asks")
    with target.open(encryption=migrating) as memory:
        assert _latest(memory).checkpoint["channel_values"]["a"] == A_TWO
        report = rekey(memory, batch_size=3)
        assert report.rewritten > 0 and report.unreachable == 0
    with target.open(encryption=enc) as memory:
        found = _latest(memory)
        values = found.checkpoint["channel_values"]
        assert (values["a"], values["b"], len(values["msgs"])) == (A_TWO, B_ONE, 21)
        assert len(found.pending_writes) == 3
        record = memory.checkpointer.threads.get("asks")
        assert record is not None and record["status"] == "interrupted"
        [[question]] = record["interrupts"].values()
        assert question.value == {"question": "confirm note on x"}
        assert rekey(memory).rewritten == 0  # nothing left to move


def test_rekey_leaves_list_pages_alone_and_long_lists_readable(target: Target) -> None:
    """A database written without encryption, migrated (``accept_plaintext`` and
    ``rekey``), with a list channel stored as items: PostgreSQL keeps the list's pages and
    spines among the items, and the migration sealed them too (the list then read as
    'pages are missing'); only values are sealed, and the thread reads back strictly."""
    from langgraph_memory_plus.privacy.rekey import key_ids, rekey

    with target.open() as memory:
        _seed_swaps(memory)
    with target.open(encryption=Encryption({"k1": K1}, accept_plaintext=True)) as memory:
        assert rekey(memory, batch_size=3).rewritten > 0
    assert key_ids(r[1] for r in target.dump()) == {"k1"}
    with target.open(encryption=Encryption({"k1": K1})) as memory:
        found = _latest(memory)
        assert found.checkpoint["channel_values"]["msgs"] == [f"message {n}" for n in range(21)]
        assert len(found.pending_writes) == 3


def test_delta_channels_replay_their_sealed_seeds_and_writes(target: Target) -> None:
    """``DeltaChannel`` values are rebuilt from an ancestor's stored value (its seed, read
    with the version it was stored under) and the pending writes since: with encryption,
    each opens at its own location. A fresh saver per turn, so every turn replays from
    storage; the states match ``InMemorySaver``'s."""
    from graphs import delta_graph
    from langchain_core.messages import HumanMessage
    from langgraph.checkpoint.memory import InMemorySaver

    reference = delta_graph().compile(checkpointer=InMemorySaver())
    enc = Encryption({"k1": K1})
    config: Any = {"configurable": {"thread_id": "delta"}}
    for n in range(7):
        question = {
            "messages": [HumanMessage(f"secret question {n}", id=f"h{n}")],
            "items": [f"secret item {n}"],
        }
        want = reference.invoke(question, config)
        with target.open(encryption=enc) as memory:
            app = delta_graph().compile(checkpointer=memory.checkpointer)
            assert app.invoke(question, config) == want
    with target.open(encryption=enc) as memory:
        app = delta_graph().compile(checkpointer=memory.checkpointer)
        got = [s.values for s in app.get_state_history(config)]
    assert got == [s.values for s in reference.get_state_history(config)]
    assert mentions(target.dump(), [b"secret question 3", b"secret item 4"]) == []
