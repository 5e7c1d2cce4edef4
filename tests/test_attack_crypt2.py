"""Attacks on issue 37's encryption at rest, second round, by someone who did not write it.

A new user turns encryption on over an unencrypted database whose users typed whatever
they liked (a message that starts like an envelope, a store value whose one field is the
sealed field's name), and a process started without the keys reads an encrypted one.
"""

from __future__ import annotations

import base64
import os
from typing import Any

import pytest
from chat_support import chat_graph, run_config
from langchain_core.messages import HumanMessage
from test_erasure import Target, target

from langgraph_memory_plus.encryption import (
    MAGIC,
    TEXT_PREFIX,
    Encryption,
    EncryptionError,
)
from langgraph_memory_plus.privacy.rekey import rekey

pytestmark = pytest.mark.storage
__all__ = ["target"]

K1, K2 = os.urandom(32), os.urandom(32)
ALL = pytest.mark.parametrize("backend", ["sqlite", "postgres", "redis", "redis-cluster"])
LOOKALIKE = f"{TEXT_PREFIX}hello there, this is what I typed"
"""A user's first message: it starts like an envelope stored as text, and is none."""


def _chat(memory: Any, thread_id: str, text: str, user: str = "u1") -> None:
    app = chat_graph(lambda said: f"reply to {said}").compile(checkpointer=memory.checkpointer)
    app.invoke({"messages": [HumanMessage(text, id=f"h-{thread_id}")]}, run_config(thread_id, user))


def _titles(memory: Any) -> dict[str, Any]:
    return {t["thread_id"]: t["title"] for t in memory.checkpointer.threads.search()}


@ALL
def test_a_message_that_starts_like_an_envelope_does_not_stop_the_migration(
    target: Target,
) -> None:
    """Before encryption, one user's first message began with ``lgmpenc1:`` (the prefix
    of an envelope stored as text). Turning encryption on, the migration mode refused it
    as "a damaged envelope": ``threads.search()`` failed for every user, the thread's
    transcript did not read, and ``rekey`` stopped at that row, so the database could
    not be migrated at all. Fixed: in the migration mode, text that only starts like an
    envelope (no key id in it) is plaintext, read as it is and sealed by ``rekey``."""
    with target.open() as memory:
        _chat(memory, "good", "an ordinary first message")
        _chat(memory, "odd", LOOKALIKE, "u2")
    migrating = Encryption({"k1": K1}, accept_plaintext=True)
    with target.open(encryption=migrating) as memory:
        assert _titles(memory)["good"] == "an ordinary first message"
        assert memory.checkpointer.threads.transcript("odd")[0]["content"] == LOOKALIKE
        rekey(memory)
    with target.open(encryption=Encryption({"k1": K1})) as memory:
        titles = _titles(memory)
        assert titles["good"] == "an ordinary first message"
        assert titles["odd"].startswith(TEXT_PREFIX + "hello")  # (titles may be cut)
        assert memory.checkpointer.threads.transcript("odd")[0]["content"] == LOOKALIKE
        found = memory.checkpointer.get_tuple({"configurable": {"thread_id": "odd"}})
        assert found.checkpoint["channel_values"]["messages"][0].content == LOOKALIKE


@ALL
def test_a_store_value_shaped_like_a_sealed_one_survives_the_migration(target: Target) -> None:
    """A plaintext store value whose only field is ``lgmp_sealed`` (the field an
    encrypting store wraps its envelope in) was taken for sealed in the migration mode:
    its read failed as corrupt data, and the migration's ``rekey`` (SQL backends) sealed
    its string in place of the value, so it never read again. Fixed: a value is sealed
    only if that field holds an envelope."""
    value = {"lgmp_sealed": "hi"}
    with target.open() as memory:
        memory.store.put(("users", "u1"), "odd", value)
        memory.store.put(("users", "u1"), "plain", {"text": "plain"})
    migrating = Encryption({"k1": K1}, accept_plaintext=True)
    with target.open(encryption=migrating) as memory:
        assert memory.store.get(("users", "u1"), "odd").value == value
        assert {i.key: i.value for i in memory.store.search(("users",))}["odd"] == value
        report = rekey(memory)
        if target.url.startswith("redis"):
            # plaintext store items stay on Redis (counted; put them again, see README)
            assert report.unreachable >= 2
            for item in memory.store.search(("users",)):
                memory.store.put(item.namespace, item.key, item.value)
    with target.open(encryption=Encryption({"k1": K1})) as memory:
        assert memory.store.get(("users", "u1"), "odd").value == value
        assert memory.store.get(("users", "u1"), "plain").value == {"text": "plain"}


@ALL
def test_a_saver_without_keys_refuses_sealed_checkpoints_as_encrypted(target: Target) -> None:
    """A process started without the keys (the variable left out of one deployment, or
    ``?encryption=off`` on an encrypted database) read sealed checkpoints as
    ``CorruptDataError: corrupt stored data``: an operator goes looking for damage, or
    restores a backup, instead of passing the keys. It must say the data is encrypted and
    no keys are configured, and where (never the data)."""
    with target.open(encryption=Encryption({"k1": K1})) as memory:
        _chat(memory, "sealed", "a secret first message")
        _chat(memory, "sealed", "a second one, so the messages are a list of items")
    with target.open() as memory:
        with pytest.raises(EncryptionError, match="no encryption keys") as caught:
            memory.checkpointer.get_tuple({"configurable": {"thread_id": "sealed"}})
        assert "sealed" in str(caught.value) and "secret" not in str(caught.value)
        with pytest.raises(EncryptionError, match="no encryption keys"):
            list(memory.checkpointer.list({"configurable": {"thread_id": "sealed"}}))


@pytest.mark.parametrize("backend", ["sqlite"])
@pytest.mark.xfail(
    strict=True,
    raises=EncryptionError,
    reason="open: before encryption, a user's message that is a well-formed envelope header "
    "('lgmpenc1:' + base64 of the magic, a known key id and 40 bytes) cannot be told from "
    "a tampered envelope: a migration that also rotates (k1 known, k2 current) opens it to "
    "move it, and rekey stops there, for every thread after it (rekey would have to skip "
    "and report rows it cannot open instead of stopping; with only the current key id the "
    "row is skipped and just that thread's transcript line fails to read)",
)
def test_a_message_that_is_a_well_formed_envelope_header_does_not_stop_the_migration(
    target: Target,
) -> None:
    crafted = TEXT_PREFIX + base64.b64encode(MAGIC + b"\x02k1" + bytes(40)).decode()
    with target.open() as memory:
        _chat(memory, "good", "an ordinary first message")
        _chat(memory, "odd", crafted, "u2")
    migrating = Encryption({"k2": K2, "k1": K1}, current="k2", accept_plaintext=True)
    with target.open(encryption=migrating) as memory:
        rekey(memory)
        assert _titles(memory)["good"] == "an ordinary first message"


@pytest.mark.parametrize("backend", ["sqlite"])
@pytest.mark.xfail(
    strict=True,
    raises=AssertionError,
    reason="open: a store (and the thread index) without keys returns a sealed value as its "
    "envelope ({'lgmp_sealed': 'lgmpenc1:...'}, a title 'lgmpenc1:...') instead of "
    "refusing it: unlike a checkpoint value's type, those shapes are also what a user may "
    "store in an unencrypted database, so refusing them there would let one user's value "
    "break a listing; the database would have to record that it is encrypted",
)
def test_a_store_without_keys_refuses_a_sealed_value(target: Target) -> None:
    with target.open(encryption=Encryption({"k1": K1})) as memory:
        memory.store.put(("users", "u1"), "card", {"text": "my card ends 4242"})
    with target.open() as memory:
        try:
            value = memory.store.get(("users", "u1"), "card").value
        except EncryptionError:
            return
        raise AssertionError(f"returned as it is stored: {value!r}")


@ALL
def test_rekey_over_an_unencrypted_database_without_the_migration_mode_says_so(
    target: Target,
) -> None:
    """A new user turns encryption on over an unencrypted database and runs
    ``langgraph-memory rekey`` without the migration mode: it rewrote nothing, exited 0
    and printed "rekeyed 0 of N rows", which reads as done, while every read refused the
    data. Fixed: the report counts the values it left unencrypted, the command says how
    to encrypt them and exits 1; run in the migration mode, then again without it, it
    exits 0 with nothing left."""
    from test_encryption_attack import _cli, _rekey_env, _url

    with target.open() as memory:
        _chat(memory, "plain", "an ordinary first message")
        memory.store.put(("users", "u1"), "note", {"text": "plain"})
    env = _rekey_env(("k1", K1))
    left = _cli("rekey", "-u", _url(target), env=env)
    assert left.returncode == 1, (left.returncode, left.stdout, left.stderr[-2000:])
    assert "ACCEPT_PLAINTEXT=1" in left.stderr
    as_json = _cli("rekey", "-u", _url(target), "--json", env=env)
    assert as_json.returncode == 1 and '"unencrypted": ' in as_json.stdout
    migrating = {**env, "LANGGRAPH_MEMORY_ENCRYPTION_ACCEPT_PLAINTEXT": "1"}
    assert _cli("rekey", "-u", _url(target), env=migrating).returncode == 0
    if target.url.startswith("redis"):  # plaintext store items: put them again (README)
        with target.open(encryption=Encryption({"k1": K1}, accept_plaintext=True)) as memory:
            memory.store.put(("users", "u1"), "note", {"text": "plain"})
    done = _cli("rekey", "-u", _url(target), "--json", env=env)
    assert done.returncode == 0, done.stdout + done.stderr[-2000:]
    assert '"unencrypted": 0' in done.stdout
    with target.open(encryption=Encryption({"k1": K1})) as memory:
        assert _titles(memory)["plain"] == "an ordinary first message"
        assert memory.store.get(("users", "u1"), "note").value == {"text": "plain"}


@pytest.mark.parametrize("backend", ["postgres"])
@pytest.mark.parametrize("when", ["migrating", "after-rekey"])
def test_a_scalar_kept_inline_before_encryption_survives_the_next_checkpoint(
    target: Target, when: str
) -> None:
    """PostgreSQL without encryption keeps small scalar channel values inline in each
    checkpoint row (not as blobs), and rekey seals them there; an encrypting codec did not
    inline, so the first checkpoint it wrote after such a row (in the migration mode, or
    later on a migrated thread) named the unchanged channels' versions with no blob
    behind them: the value was lost, and every read of that checkpoint raised (its sealed
    body says it has a value). Fixed: the encrypting codec keeps inline values inline,
    each sealed at its channel version."""
    from langgraph.checkpoint.base import empty_checkpoint

    config: Any = {"configurable": {"thread_id": "inline", "checkpoint_ns": ""}}
    with target.open() as memory:
        first = empty_checkpoint()
        first["channel_values"] = {"count": 1, "name": "Ann"}
        first["channel_versions"] = {"count": "1", "name": "1"}
        c1 = memory.checkpointer.put(config, first, {"source": "loop", "step": 1},
                                     {"count": "1", "name": "1"})  # fmt: skip
    migrating = Encryption({"k1": K1}, accept_plaintext=True)
    enc = migrating if when == "migrating" else Encryption({"k1": K1})
    if when == "after-rekey":
        with target.open(encryption=migrating) as memory:
            rekey(memory)
    with target.open(encryption=enc) as memory:
        second = empty_checkpoint()
        second["channel_values"] = {"count": 2, "name": "Ann"}
        second["channel_versions"] = {"count": "2", "name": "1"}
        memory.checkpointer.put(c1, second, {"source": "loop", "step": 2}, {"count": "2"})
        found = memory.checkpointer.get_tuple(config)
        assert found.checkpoint["channel_values"] == {"count": 2, "name": "Ann"}


@pytest.mark.parametrize("backend", ["postgres"])
@pytest.mark.parametrize("relabel", [False, True])
def test_a_sealed_inline_value_copied_from_an_older_checkpoint_does_not_open(
    target: Target, relabel: bool
) -> None:
    """The other side of inlining sealed values: an older checkpoint row's inline entry
    (its version, type and envelope) copied into the latest row's clear versions column,
    as it is or relabeled with the latest version, is refused, not read as a rollback."""
    import json

    from langgraph.checkpoint.base import empty_checkpoint
    from test_attack_bind import _sql
    from test_encryption_attack import _Raw

    enc = Encryption({"k1": K1})
    config: Any = {"configurable": {"thread_id": "inl", "checkpoint_ns": ""}}
    with target.open(encryption=enc) as memory:
        saver = memory.checkpointer
        first = empty_checkpoint()
        first["channel_values"] = {"n": "value one"}
        first["channel_versions"] = {"n": "1"}
        c1 = saver.put(config, first, {"source": "loop", "step": 1}, {"n": "1"})
        second = empty_checkpoint()
        second["channel_values"] = {"n": "value two"}
        second["channel_versions"] = {"n": "2"}
        c2 = saver.put(c1, second, {"source": "loop", "step": 2}, {"n": "2"})
        assert saver.get_tuple(config).checkpoint["channel_values"] == {"n": "value two"}
        raw = _Raw(target, memory, "inl")
    rows = dict(_sql(raw, "SELECT checkpoint_id, channel_versions FROM lgmp_checkpoints "
                          "WHERE thread_key = ?", raw.tk))  # fmt: skip
    old = rows[c1["configurable"]["checkpoint_id"]]["n"]
    assert isinstance(old, list) and old[1] == "lgmpenc1", old  # sealed, inline
    entry = [rows[c2["configurable"]["checkpoint_id"]]["n"][0], *old[1:]] if relabel else old
    _sql(
        raw,
        "UPDATE lgmp_checkpoints SET channel_versions = json(?) "
        "WHERE thread_key = ? AND checkpoint_id = ?",
        json.dumps({"n": entry}),
        raw.tk,
        c2["configurable"]["checkpoint_id"],
    )
    with target.open(encryption=enc) as memory, pytest.raises(EncryptionError, match="moved"):
        found = memory.checkpointer.get_tuple(config)
        raise AssertionError(f"rolled back: {found.checkpoint['channel_values']!r}")


class _CollidingKeys:
    """A KMS whose key ids follow a scheme that also produced the shared key's id."""

    def __init__(self) -> None:
        self.key = os.urandom(32)

    def key_for(self, user_id: str) -> tuple[str, bytes] | None:
        return ("k1", self.key)

    def key_by_id(self, key_id: str) -> bytes | None:
        return self.key if key_id == "k1" else None

    def drop(self, user_id: str) -> bool:
        return True


@pytest.mark.parametrize("backend", ["sqlite"])
def test_a_tenant_key_id_that_is_a_shared_key_id_is_refused_before_writing(
    target: Target,
) -> None:
    """A KMS handing out a tenant key under an id the shared keys also use ("k1"): each
    user's value was sealed with the tenant key, and every read took the shared key of
    that id, so what was written never opened again (and dropping the tenant key shredded
    nothing that reads had used). Refused when such a key is to seal, before anything is
    written."""
    from langgraph_memory_plus.errors import InvalidConfigError

    enc = Encryption({"k1": K1}, tenant_keys=_CollidingKeys())
    with target.open(encryption=enc) as memory:
        with pytest.raises(InvalidConfigError, match="tenant key id"):
            memory.store.put(("memories", "alice"), "m", {"text": "alice likes tea"})
        assert memory.store.get(("memories", "alice"), "m") is None
