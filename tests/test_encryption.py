"""Encryption at rest (issue 37): nothing readable at rest, fails closed, keys rotate.

The seeding is ``test_erasure_complete.seed``: every public API of the package that
writes user text (a graph run with a subgraph and messages, the memory tools, preference
learning, a task draft, an interrupt and an approval decided, transcripts, a store with a
vector index). The scan is ``test_erasure``'s: every table (every column) or every key
(every element, compressed values inflated).
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from test_erasure import Target, mentions, target
from test_erasure_complete import DRAFT_SCHEMA, Person, seed

from langgraph_memory_plus.approvals import Approvals, TaskDrafts
from langgraph_memory_plus.encryption import ENV_KEYS, Encryption, EncryptionError, key_id_of
from langgraph_memory_plus.store.namespaces import user_namespace

pytestmark = pytest.mark.storage
__all__ = ["target"]

K1, K2, OTHER = b"1" * 32, b"2" * 32, b"x" * 32


def texts(person: Person) -> list[bytes]:
    """What the person *said* (ids and thread ids are keys: stored in clear by design)."""
    return [t.encode() for t in person.texts]


def read_back(memory: Any, person: Person) -> None:
    """Everything seeded reads back whole through the public APIs."""
    saver, store = memory.checkpointer, memory.store
    sessions = saver.threads.sessions(person.id)
    assert len(sessions) == 3 and all(s["title"] for s in sessions)
    assert any(person.name in (s["title"] or "") for s in sessions)
    chat = next(t for t in person.threads if t.startswith("chat"))
    lines = saver.threads.transcript(chat)
    assert any(person.name in line["content"] for line in lines)
    state = saver.get_tuple({"configurable": {"thread_id": chat}})
    assert person.name in str(state.checkpoint["channel_values"]["messages"][0].content)
    found = store.search(user_namespace(("memories", "{user_id}"), person.id))
    assert any("likes trains" in str(item.value) for item in found)
    # a filter and a page apply after decryption
    assert len(store.search(user_namespace(("memories", "{user_id}"), person.id), limit=1)) == 1
    assert TaskDrafts(store, DRAFT_SCHEMA).list(person.id)
    assert len(Approvals(saver, store).list(user_id=person.id, status="edited")) == 1


def test_nothing_readable_at_rest_on_every_backend(target: Target, tmp_path: Path) -> None:
    """The defect of issue 37: titles, transcripts and store values were stored in clear.
    Seeded without encryption, the scan finds a person's texts (the scanner works);
    seeded with it, zero hits, and everything reads back."""
    plain, secret = Person("plain@example.com"), Person("张三")
    with target.open(encryption=Encryption({"k1": K1})) as memory:
        seed(memory, secret, tmp_path)
        read_back(memory, secret)
    assert mentions(target.dump(), texts(secret)) == []
    with target.open() as memory:  # the control, after: a shared namespace would mix them
        seed(memory, plain, tmp_path)
    rows = target.dump()
    assert mentions(rows, texts(plain)), "the control is found in clear"
    assert mentions(rows, texts(secret)) == []


def test_a_plaintext_row_fails_closed_unless_migrating(target: Target, tmp_path: Path) -> None:
    """Rows written before encryption (or planted) are refused, naming where; with
    ``accept_plaintext`` they read as they are."""
    person = Person("alice@example.com")
    with target.open() as memory:
        seed(memory, person, tmp_path)
    chat = person.threads[0]
    config = {"configurable": {"thread_id": chat}}
    ns = user_namespace(("memories", "{user_id}"), person.id)
    with target.open(encryption=Encryption({"k1": K1})) as memory:
        with pytest.raises(EncryptionError, match="unencrypted") as caught:
            memory.checkpointer.get_tuple(config)
        assert caught.value.where["thread_id"] == chat
        with pytest.raises(EncryptionError, match="unencrypted"):
            memory.checkpointer.threads.get(chat)
        with pytest.raises(EncryptionError, match="unencrypted"):
            memory.checkpointer.threads.transcript(chat)
        with pytest.raises(EncryptionError, match="unencrypted") as caught:
            memory.store.search(ns)
        assert caught.value.where["namespace"] == ns
    migrating = Encryption({"k1": K1}, accept_plaintext=True)
    with target.open(encryption=migrating) as memory:
        assert memory.checkpointer.get_tuple(config) is not None
        assert memory.checkpointer.threads.get(chat)["title"]
        assert memory.store.search(ns)


def test_a_wrong_or_unknown_key_is_refused_and_rotation_reads_old_keys(
    target: Target, tmp_path: Path
) -> None:
    person = Person("bob@example.com")
    with target.open(encryption=Encryption({"k1": K1})) as memory:
        seed(memory, person, tmp_path)
    chat = person.threads[0]
    config = {"configurable": {"thread_id": chat}}
    ns = user_namespace(("memories", "{user_id}"), person.id)
    with target.open(encryption=Encryption({"k1": OTHER})) as memory:
        with pytest.raises(EncryptionError, match="does not authenticate"):
            memory.checkpointer.get_tuple(config)
        with pytest.raises(EncryptionError, match="does not authenticate"):
            memory.store.search(ns)
    with (
        target.open(encryption=Encryption({"k2": K2})) as memory,
        pytest.raises(EncryptionError, match="unknown key 'k1'"),
    ):
        memory.checkpointer.threads.get(chat)
    rotated = Encryption({"k1": K1, "k2": K2}, current="k2")
    with target.open(encryption=rotated) as memory:
        read_back(memory, person)
        memory.store.put(ns, "new", {"text": "after rotation"})
        item = memory.store.get(ns, "new")
        assert item is not None and item.value == {"text": "after rotation"}


def test_a_ciphertext_moved_to_another_item_does_not_open(tmp_path: Path) -> None:
    """The location is the associated data: a value copied to another key (or a checkpoint
    blob to another thread) fails to authenticate."""
    import sqlite3

    from langgraph_memory_plus import from_url

    path = tmp_path / "m.db"
    enc = Encryption({"k1": K1})
    with from_url(f"sqlite:///{path}", encryption=enc) as memory:
        memory.store.put(("a",), "one", {"text": "one"})
        memory.store.put(("a",), "two", {"text": "two"})
    conn = sqlite3.connect(path)
    with conn:
        conn.execute(
            "UPDATE lgmp_store SET value = (SELECT value FROM lgmp_store WHERE key = 'one') "
            "WHERE key = 'two'"
        )
    conn.close()
    with from_url(f"sqlite:///{path}", encryption=enc) as memory:
        assert memory.store.get(("a",), "one").value == {"text": "one"}  # type: ignore[union-attr]
        with pytest.raises(EncryptionError, match="moved") as caught:
            memory.store.get(("a",), "two")
        assert caught.value.where["key"] == "two"


def test_envelopes_name_their_key_and_text_round_trips() -> None:
    from langgraph_memory_plus.encryption import Location

    enc = Encryption({"k1": K1, "k2": K2}, current="k2")
    where = Location("title", "t")
    sealed = enc.seal_text("héllo \ud800 x", where)
    assert key_id_of(sealed) == "k2" and "héllo" not in sealed
    assert enc.open_text(sealed, where) == "héllo \ud800 x"
    with pytest.raises(EncryptionError, match="moved"):
        enc.open_text(sealed, Location("title", "other"))
    assert "1111" not in repr(enc) and "k1" in repr(enc)


def test_from_url_reads_the_keys_from_the_environment(tmp_path: Path) -> None:
    from langgraph_memory_plus import from_url

    env = {ENV_KEYS: f"k2={base64.b64encode(K2).decode()},k1={base64.b64encode(K1).decode()}"}
    found = Encryption.from_env(env)
    assert found is not None and found.current == "k2" and set(found.keys) == {"k1", "k2"}
    path = tmp_path / "m.db"
    code = (
        "import sys; from langgraph_memory_plus import from_url\n"
        "with from_url(sys.argv[1]) as m:\n"
        "    print(type(m.store.encryption).__name__, m.store.encryption.current)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, f"sqlite:///{path}"],
        env={**os.environ, **env, "PYTHONPATH": os.getcwd()},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.stdout.split() == ["Encryption", "k2"], done.stderr[-2000:]
    with from_url(f"sqlite:///{path}?encryption=off") as memory:
        assert memory.store.encryption is None


# -- rekey ------------------------------------------------------------------------------------

KILLED_REKEY = """
import os, signal, sys
from langgraph_memory_plus import from_url
from langgraph_memory_plus.privacy.rekey import rekey

def progress(p):
    if p.rewritten >= int(sys.argv[2]):
        os.kill(os.getpid(), signal.SIGKILL)

with from_url(sys.argv[1]) as memory:
    rekey(memory, batch_size=3, progress=progress)
"""


def _env(*keys: tuple[str, bytes]) -> dict[str, str]:
    value = ",".join(f"{k}={base64.b64encode(v).decode()}" for k, v in keys)
    return {**os.environ, ENV_KEYS: value, "PYTHONPATH": os.getcwd()}


def test_rekey_moves_every_row_to_the_current_key_and_resumes_after_a_kill(
    target: Target, tmp_path: Path
) -> None:
    """Rotation: k1 -> k2. A rekey killed midway (SIGKILL after some rows) leaves a mix
    that still reads; run again, it rewrites only the rest; then k1 can be dropped.
    On Redis the store's items are not rekeyed yet (their shards keep k1)."""
    from langgraph_memory_plus.privacy.rekey import key_ids, rekey

    people = [Person("alice@example.com"), Person("张三")]
    with target.open(encryption=Encryption({"k1": K1})) as memory:
        for person in people:
            seed(memory, person, tmp_path)
    assert key_ids(r[1] for r in target.dump()) == {"k1"}
    url = target.url
    if "key_prefix" in target.options:
        url += f"?key_prefix={target.options['key_prefix']}"
    killed = subprocess.run(
        [sys.executable, "-c", KILLED_REKEY, url, "5"],
        env=_env(("k2", K2), ("k1", K1)),
        capture_output=True,
        timeout=120,
    )
    assert killed.returncode == -9, killed.stderr.decode()[-2000:]
    assert key_ids(r[1] for r in target.dump()) == {"k1", "k2"}, "killed midway"
    rotated = Encryption({"k2": K2, "k1": K1}, current="k2")
    with target.open(encryption=rotated) as memory:
        read_back(memory, people[0])  # a mix of keys reads
        report = rekey(memory, batch_size=7)
    assert report.rewritten > 0 and report.unreachable == 0
    assert key_ids(r[1] for r in target.dump()) == {"k2"}
    with target.open(encryption=Encryption({"k2": K2})) as memory:  # k1 retired
        for person in people:
            read_back(memory, person)
        again = rekey(memory)
    assert again.rewritten == 0 and again.examined == report.examined


@pytest.mark.parametrize("backend", ["sqlite", "postgres"], indirect=True)
def test_rekey_in_migration_mode_encrypts_plaintext_and_the_cli_reports(
    target: Target, tmp_path: Path
) -> None:
    person = Person("bob@example.com")
    note = f"sn-{os.urandom(4).hex()}"  # short: PostgreSQL kept it inline in the row
    scalars = {"configurable": {"thread_id": "scalars"}}
    with target.open() as memory:
        seed(memory, person, tmp_path)
        _scalar_graph(memory).invoke({"count": 1, "note": note}, scalars)
    env = {**_env(("k1", K1)), "LANGGRAPH_MEMORY_ENCRYPTION_ACCEPT_PLAINTEXT": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "langgraph_memory_plus.cli", "rekey", "-u", target.url, "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout)["rewritten"] > 0
    with target.open(encryption=Encryption({"k1": K1})) as memory:  # no plaintext accepted
        read_back(memory, person)
        values = memory.checkpointer.get_tuple(scalars).checkpoint["channel_values"]
        assert values["count"] == 2 and values["note"] == note
    assert mentions(target.dump(), [*texts(person), note.encode()]) == []


def _scalar_graph(memory: Any) -> Any:
    from langgraph.graph import END, START, StateGraph
    from typing_extensions import TypedDict

    class Scalars(TypedDict, total=False):
        count: int
        note: str
        empty: str | None

    def step(state: Scalars) -> dict[str, Any]:
        return {"count": state["count"] + 1, "empty": None}

    builder = StateGraph(Scalars)
    builder.add_node("step", step)
    builder.add_edge(START, "step")
    builder.add_edge("step", END)
    return builder.compile(checkpointer=memory.checkpointer)


# -- per-tenant keys --------------------------------------------------------------------------


class DictKeys:
    """A stand-in for a KMS: a random key (and key id) per user, dropped on demand."""

    def __init__(self) -> None:
        self.by_user: dict[str, tuple[str, bytes]] = {}
        self.by_id: dict[str, bytes] = {}
        self.asked: list[str] = []
        self.lock = threading.Lock()

    def key_for(self, user_id: str) -> tuple[str, bytes] | None:
        # LangGraph puts a step's checkpoint and writes from several threads at once:
        # two first asks for one user must not mint two keys
        with self.lock:
            self.asked.append(user_id)
            if user_id not in self.by_user:
                kid = "t-" + os.urandom(6).hex()
                self.by_user[user_id] = (kid, os.urandom(32))
                self.by_id[kid] = self.by_user[user_id][1]
            return self.by_user[user_id]

    def key_by_id(self, key_id: str) -> bytes | None:
        return self.by_id.get(key_id)

    def drop(self, user_id: str) -> bool:
        found = self.by_user.pop(user_id, None)
        if found is not None:
            del self.by_id[found[0]]
        return found is not None


def test_per_tenant_keys_and_crypto_shredding(target: Target, tmp_path: Path) -> None:
    """Each user's rows are sealed with their own key (threads by the index's user key,
    store items by the declared user namespaces); ``erase_user(drop_key=True)`` drops it,
    and a copy taken before the erasure (a backup) no longer opens for that user."""
    import shutil

    from langgraph_memory_plus.privacy.erasure import erase_user
    from langgraph_memory_plus.privacy.rekey import key_ids

    tenants = DictKeys()
    enc = Encryption({"k1": K1}, tenant_keys=tenants)
    alice, bob = Person("alice@example.com"), Person("bob@example.com")
    with target.open(encryption=enc) as memory:
        seed(memory, alice, tmp_path)
        seed(memory, bob, tmp_path)
    a_kid, b_kid = tenants.by_user[alice.id][0], tenants.by_user[bob.id][0]
    found = key_ids(r[1] for r in target.dump())
    assert {a_kid, b_kid} <= found  # and k1: the shared approvals namespace
    assert mentions(target.dump(), texts(alice) + texts(bob)) == []
    backup = None
    if target.url.startswith("sqlite"):
        backup = tmp_path / "backup.db"
        shutil.copy(target.url.removeprefix("sqlite:///"), backup)
    with target.open(encryption=enc) as memory:
        report = erase_user(alice.id, memory=memory, drop_key=True)
        assert report.counts["keys_dropped"] == 1
        read_back(memory, bob)
    assert tenants.key_by_id(a_kid) is None
    if backup is not None:
        from langgraph_memory_plus import from_url

        with from_url(f"sqlite:///{backup}", encryption=enc, transcripts=True) as old:
            chat = alice.threads[0]
            with pytest.raises(EncryptionError, match="unknown key"):
                old.checkpointer.get_tuple({"configurable": {"thread_id": chat}})
            with pytest.raises(EncryptionError, match="unknown key"):
                old.store.search(user_namespace(("memories", "{user_id}"), alice.id))
            read_back(old, bob)


def test_metadata_keys_restrict_what_stays_in_clear(target: Target) -> None:
    """Checkpoint metadata is a queryable projection in clear; ``metadata_keys`` keeps only
    the named keys (and the structural and index ones) there, and a filter on a dropped
    key still finds its checkpoints (checked on the decrypted metadata)."""
    from langgraph.checkpoint.base import empty_checkpoint

    secret = f"topic {os.urandom(8).hex()}"
    enc = Encryption({"k1": K1}, metadata_keys=["kind"])
    with target.open(encryption=enc) as memory:
        saver = memory.checkpointer
        thread = f"meta-{os.urandom(4).hex()}"
        config = {"configurable": {"thread_id": thread, "checkpoint_ns": "", "user_id": "u1"}}
        for topic in (secret, "other"):
            saver.put(
                config,
                empty_checkpoint(),
                {"source": "input", "step": -1, "topic": topic, "kind": "k", "user_id": "u1"},
                {},
            )
        found = list(saver.list({"configurable": {"thread_id": thread}}, filter={"topic": secret}))
        assert len(found) == 1 and found[0].metadata["topic"] == secret
        both = {"kind": "k", "user_id": "u1"}
        assert len(list(saver.list({"configurable": {"thread_id": thread}}, filter=both))) == 2
        assert len(list(saver.list(None, filter={"topic": "other", "kind": "k"}))) == 1
        assert saver.threads.sessions("u1")
    rows = target.dump()
    assert mentions(rows, [secret.encode()]) == []
    assert mentions(rows, [b"kind"]), "a kept key stays queryable in clear"


@pytest.mark.parametrize("backend", ["sqlite", "redis"], indirect=True)
def test_async_paths_seal_and_open(target: Target) -> None:
    """The async twins go through the same plans: a run, the index, transcripts, store."""
    import asyncio

    from langchain_core.messages import AIMessage, HumanMessage
    from langgraph.graph import END, START, StateGraph
    from test_erasure_complete import State

    secret = f"async secret {os.urandom(6).hex()}"

    async def answer(state: State) -> dict[str, Any]:
        return {"messages": [AIMessage(f"re: {secret}", id="ai-1")]}

    builder = StateGraph(State)
    builder.add_node("answer", answer)
    builder.add_edge(START, "answer")
    builder.add_edge("answer", END)

    async def go() -> None:
        async with target.open(encryption=Encryption({"k1": K1})) as memory:
            app = builder.compile(checkpointer=memory.checkpointer, store=memory.store)
            config = {"configurable": {"thread_id": "async-1", "user_id": "u-async"}}
            await app.ainvoke({"messages": [HumanMessage(secret, id="h-1")]}, config)
            await memory.store.aput(("users", "u-async"), "k", {"text": secret})
            state = await memory.checkpointer.aget_tuple(config)
            assert state.checkpoint["channel_values"]["messages"][0].content == secret
            record = await memory.checkpointer.threads.aget("async-1")
            assert record is not None and record["title"] == secret
            lines = await memory.checkpointer.threads.atranscript("async-1")
            assert [line["content"] for line in lines] == [secret, f"re: {secret}"]
            found = await memory.store.asearch(("users",), filter={"text": secret})
            assert [item.value for item in found] == [{"text": secret}]

    asyncio.run(go())
    assert mentions(target.dump(), [secret.encode()]) == []


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_rekey_racing_writers_never_brings_back_an_older_value(target: Target) -> None:
    """Rekey's compare-and-set: while it runs, a writer keeps changing the same items;
    afterwards every item holds its last written value (none replaced by the re-sealed
    older one), and whatever the writer sealed with the old key is readable."""
    import threading

    from langgraph_memory_plus.privacy.rekey import rekey

    keys = [f"k{i}" for i in range(60)]
    with target.open(encryption=Encryption({"k1": K1})) as memory:
        for k in keys:
            memory.store.put(("race",), k, {"n": 0})
    rotated = Encryption({"k2": K2, "k1": K1}, current="k2")
    last: dict[str, int] = {}
    stop = threading.Event()
    errors: list[BaseException] = []

    def writer() -> None:
        try:
            with target.open(encryption=Encryption({"k1": K1, "k2": K2}, current="k1")) as m:
                n = 0
                while not stop.is_set() or n < 120:
                    n += 1
                    k = keys[n % len(keys)]
                    m.store.put(("race",), k, {"n": n})
                    last[k] = n
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        with target.open(encryption=rotated) as memory:
            for _ in range(3):
                rekey(memory, saver=None, batch_size=5)
    finally:
        stop.set()
        thread.join(60)
    assert not errors
    with target.open(encryption=rotated) as memory:
        for k in keys:
            item = memory.store.get(("race",), k)
            assert item is not None and item.value == {"n": last.get(k, 0)}, k


def test_no_cipher_package_is_imported_without_encryption(tmp_path: Path) -> None:
    code = (
        "import sys\n"
        "from langgraph_memory_plus import from_url\n"
        "with from_url(sys.argv[1]) as m:\n"
        "    m.store.put(('a',), 'k', {'v': 1})\n"
        "print(sorted(n for n in ('cryptography', 'Crypto') if n in sys.modules))\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("LANGGRAPH_MEMORY_")}
    done = subprocess.run(
        [sys.executable, "-c", code, f"sqlite:///{tmp_path}/m.db"],
        env={**env, "PYTHONPATH": os.getcwd()},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.stdout.strip() == "[]", done.stderr[-2000:]
