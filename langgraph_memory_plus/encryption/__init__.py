"""Encryption at rest: AES-256-GCM envelopes bound to where they are stored.

One :class:`Encryption` given to a saver and a store (or to ``from_url(encryption=...)``)
encrypts every stored value that carries user text: checkpoints, pending writes and list
items (after compression, so sizes say nothing of the text), thread index titles and
interrupts, transcript lines, and store values (approval and draft records are store
values). What the databases must still compare stays in clear; the README lists it.

An envelope names the id of the key that sealed it, so several keys can be known at once
(rotation: new writes use ``current``, reads take any known key, ``langgraph-memory
rekey`` moves old rows to the current key). The associated data is the envelope's
*location*: the kind of record, its thread id and, for checkpoint values, exactly where in
the thread it is (namespace and checkpoint id, channel and version, task id, write index,
channel and task path, list item id), or its store namespace and key. A ciphertext copied
to another thread, item, checkpoint, channel version or task does not open there, so
someone with write access to the database can neither move a value between threads nor
roll one back inside a thread.

Envelopes of the previous release (``MAGIC_V1``) bound checkpoint values to their thread
only; they open at such a location only in the migration mode, and ``rekey`` reseals them.

Reads fail closed: with encryption on, a value that is not an envelope (written before
encryption was turned on, or planted by someone with write access to the database) or one
sealed with an unknown key raises :class:`EncryptionError` naming its location, unless
``accept_plaintext=True`` (the migration mode: plaintext is read as it is, and ``rekey``
then encrypts it).

The cipher comes from the ``cryptography`` package, or else ``pycryptodome`` (the
``encryption`` extra installs the former); neither is imported until an ``Encryption`` is
made.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from ..errors import InvalidConfigError, MemoryPlusError

MAGIC = b"\xa7LGE2"
"""First bytes of a binary envelope (never the start of msgpack, JSON or deflate output
this package stores: 0xa7 opens a 7-byte msgpack string, which no stored value is)."""
MAGIC_V1 = b"\xa7LGE1"
"""First bytes of an envelope of the previous release, whose associated data left out
:attr:`Location.at` (checkpoint values were bound to their thread only)."""
MAGIC_HEAD = b"\xa7LGE"
"""What both envelope versions start with (for scans of raw rows)."""
TEXT_PREFIX = "lgmpenc1:"
"""Start of an envelope stored as text (base64 of the binary form)."""
SEALED_TYPE = "lgmpenc1"
"""The type column of a checkpoint value stored as an envelope."""
ENV_KEYS = "LANGGRAPH_MEMORY_ENCRYPTION_KEYS"
"""``id=base64key,id2=base64key``: the keys; the first is the current one."""
ENV_PLAINTEXT = "LANGGRAPH_MEMORY_ENCRYPTION_ACCEPT_PLAINTEXT"
"""``1`` turns on the migration mode (plaintext accepted on read)."""
_INTERRUPT = "__interrupt__"
"""LangGraph's interrupt channel (see :func:`write_at`)."""
_NONCE = 12
_TAG = 16


class EncryptionError(MemoryPlusError):
    """A stored value could not be opened: plaintext where an envelope was required, a
    key id that no configured key has, or an envelope that does not authenticate (wrong
    key, tampered, or moved from another location). Names the location, never the data."""

    def __init__(self, reason: str, /, **where: object) -> None:
        place = ", ".join(f"{k}={v!r}" for k, v in where.items() if v is not None)
        super().__init__(f"{reason} ({place})" if place else reason)
        self.where = where


@dataclass(frozen=True)
class Location:
    """Where a value is stored: its associated data, and what an error names.

    ``kind`` is the record type (``checkpoint``, ``title``, ``transcript``, ``store``);
    ``at`` is the place inside the thread (see :func:`blob_at` and its siblings): part of
    the associated data, so a value swapped with another of the same thread does not open.
    ``user_id`` is only for per-tenant key lookup and not part of the associated data
    (a thread's owner can be learned after its first records were written).
    """

    kind: str
    thread_id: str | None = None
    namespace: tuple[str, ...] | None = None
    key: str | None = None
    user_id: str | None = None
    at: tuple[str, ...] = ()

    def associated_data(self, legacy: bool = False) -> bytes:
        """Length-prefixed parts, so no two locations share one (ids may hold any text);
        ``legacy``: as the previous release computed it (without ``at``)."""
        parts = [self.kind, self.thread_id, *(self.namespace or ()), None, self.key]
        if not legacy:
            parts += [None, *self.at]
        out = bytearray()
        for part in parts:
            raw = b"" if part is None else part.encode("utf-8", "surrogatepass")
            out += b"%d:" % (-1 if part is None else len(raw)) + raw
        return bytes(out)

    def where(self) -> dict[str, object]:
        out: dict[str, object] = {"record": self.kind}
        if self.thread_id is not None:
            out["thread_id"] = self.thread_id
        if self.namespace is not None:
            out["namespace"] = self.namespace
        if self.key is not None:
            out["key"] = self.key
        if self.at:
            out["at"] = self.at
        return out


def blob_at(
    thread_id: str, ns: str, channel: str, version: str, user_id: str | None = None
) -> Location:
    """A channel value (blob, or a value kept inline): one channel version of one
    namespace, shared by every checkpoint (forks too) that has that version."""
    return Location("checkpoint", thread_id, user_id=user_id, at=("blob", ns, channel, version))


def checkpoint_at(
    thread_id: str, ns: str, checkpoint_id: str, part: str, user_id: str | None = None
) -> Location:
    """A checkpoint record's ``part`` (``checkpoint``: its body, or ``metadata``)."""
    return Location("checkpoint", thread_id, user_id=user_id, at=(part, ns, checkpoint_id))


def write_at(
    thread_id: str,
    ns: str,
    checkpoint_id: str,
    task_id: str,
    idx: int,
    channel: str,
    task_path: str,
    user_id: str | None = None,
) -> Location:
    """A pending write: its checkpoint, task, index (as stored, so an interrupt's is
    ``WRITES_IDX_MAP``'s), channel and task path, each stored in clear beside it (edited,
    the value would be applied to another channel, or in another order: writes apply in
    task path order). Not an interrupt's path: the thread index keeps copies of interrupt
    writes, which open here too, without their paths (interrupts are not applied to
    channels; an edited path only reorders them)."""
    at: tuple[str, ...] = ("write", ns, checkpoint_id, task_id, str(idx), channel)
    if channel != _INTERRUPT:
        at += (task_path,)
    return Location("checkpoint", thread_id, user_id=user_id, at=at)


def item_at(thread_id: str, item_id: bytes, user_id: str | None = None) -> Location:
    """A list item (see ``checkpoint/lists.py``): its id, a keyed hash of its content."""
    return Location("checkpoint", thread_id, user_id=user_id, at=("item", item_id.hex()))


@runtime_checkable
class TenantKeys(Protocol):
    """Per-tenant keys, e.g. a KMS behind a cache: a user's key for new writes, any key by
    id for reads, and dropping a user's key (crypto-shredding, see ``erase_user``)."""

    def key_for(self, user_id: str) -> tuple[str, bytes] | None:
        """The (key id, 32-byte key) new writes of ``user_id`` use; ``None``: the shared
        current key."""
        ...

    def key_by_id(self, key_id: str) -> bytes | None:
        """A tenant key by its id (``None`` when unknown or dropped)."""
        ...

    def drop(self, user_id: str) -> bool:
        """Forget ``user_id``'s key for good; whether there was one."""
        ...


def _check_key(key_id: Any, key: Any) -> bytes:
    # A rejected key id is never shown: it is often the key itself (a swapped dict, or
    # ``id=key`` given as the id), and errors end up in logs.
    if not isinstance(key_id, str) or not key_id or len(key_id.encode()) > 64:
        raise InvalidConfigError(
            f"a key id must be a non-empty str of <= 64 bytes (got a {type(key_id).__name__}"
            f"{'' if not isinstance(key_id, (str, bytes)) else f' of length {len(key_id)}'}; "
            "keys are given as {'key-id': key})"
        )
    if "=" in key_id or "," in key_id:
        raise InvalidConfigError(
            "a key id cannot hold '=' or ',' (not shown: it may hold a key); "
            "keys are given as {'key-id': key}"
        )
    if not isinstance(key, (bytes, bytearray)) or len(key) != 32:
        raise InvalidConfigError(f"key {key_id!r} must be 32 bytes (AES-256)")
    return bytes(key)


class _Cipher:
    """AES-GCM from ``cryptography`` or, failing that, ``pycryptodome`` (imported lazily)."""

    def __init__(self) -> None:
        self._seal: Callable[[bytes, bytes, bytes, bytes], bytes]
        self._open: Callable[[bytes, bytes, bytes, bytes], bytes]
        try:
            from cryptography.hazmat.primitives.ciphers.aead import AESGCM

            self._seal = lambda k, n, d, a: AESGCM(k).encrypt(n, d, a)
            self._open = lambda k, n, d, a: AESGCM(k).decrypt(n, d, a)
        except ImportError:
            try:
                from Crypto.Cipher import AES
            except ImportError:
                raise InvalidConfigError(
                    "encryption needs the 'cryptography' or 'pycryptodome' package: "
                    "pip install 'langgraph-memory-plus[encryption]'"
                ) from None

            def seal(k: bytes, n: bytes, d: bytes, a: bytes) -> bytes:
                c = AES.new(k, AES.MODE_GCM, nonce=n)
                c.update(a)
                ct, tag = c.encrypt_and_digest(d)
                return bytes(ct + tag)

            def open_(k: bytes, n: bytes, d: bytes, a: bytes) -> bytes:
                c = AES.new(k, AES.MODE_GCM, nonce=n)
                c.update(a)
                return bytes(c.decrypt_and_verify(d[:-_TAG], d[-_TAG:]))

            self._seal, self._open = seal, open_

    def seal(self, key: bytes, nonce: bytes, data: bytes, ad: bytes) -> bytes:
        return self._seal(key, nonce, data, ad)

    def open(self, key: bytes, nonce: bytes, data: bytes, ad: bytes) -> bytes | None:
        try:
            return self._open(key, nonce, data, ad)
        except Exception:  # InvalidTag / ValueError("MAC check failed")
            return None


_cipher_lock = threading.Lock()
_cipher: _Cipher | None = None


def _get_cipher() -> _Cipher:
    global _cipher
    with _cipher_lock:
        if _cipher is None:
            _cipher = _Cipher()
        return _cipher


class Encryption:
    """The keys and rules of encryption at rest (give the same one to saver and store).

    Args:
        keys: key id -> 32-byte AES-256 key. Every key here opens what it sealed.
        current: the id of the key new writes use (default: the only key).
        tenant_keys: optional per-user keys (:class:`TenantKeys`): a write whose user is
            known (the thread index's user key, or a store namespace holding the user's
            label) uses the user's key; reads find tenant keys by id.
        accept_plaintext: the migration mode: plaintext read back is accepted instead of
            raising :class:`EncryptionError` (run ``langgraph-memory rekey`` to encrypt
            it, then turn this off).
        metadata_keys: the checkpoint metadata keys kept in clear (the JSON projection
            that ``list(filter=...)`` narrows by and the thread index copies). ``None``
            (the default): all of them. A list: only those, plus LangGraph's structural
            ``source``, ``step``, ``parents``, ``run_id`` and the saver's index keys; a
            filter on another key still works (checked on the decrypted metadata, after
            the database narrowed by the kept keys only).
    """

    def __init__(
        self,
        keys: Mapping[str, bytes],
        current: str | None = None,
        *,
        tenant_keys: TenantKeys | None = None,
        accept_plaintext: bool = False,
        metadata_keys: Sequence[str] | None = None,
    ) -> None:
        if not isinstance(keys, Mapping) or not keys:
            raise InvalidConfigError("Encryption needs at least one key: keys={'k1': key}")
        self.keys = {kid: _check_key(kid, key) for kid, key in keys.items()}
        if current is None:
            if len(self.keys) != 1:
                raise InvalidConfigError("Encryption(current=...) must name one of the keys")
            current = next(iter(self.keys))
        if current not in self.keys:
            raise InvalidConfigError(f"current key {current!r} is not among the keys")
        self.current = current
        self.tenant_keys = tenant_keys
        self.accept_plaintext = bool(accept_plaintext)
        if isinstance(metadata_keys, str):
            raise InvalidConfigError("metadata_keys is a list of keys, not one string")
        self.metadata_keys = None if metadata_keys is None else frozenset(metadata_keys)
        _get_cipher()  # fails now, not at the first write, when no AES package is there

    def __repr__(self) -> str:  # never the keys
        return (
            f"Encryption(keys={sorted(self.keys)}, current={self.current!r}, "
            f"tenant_keys={self.tenant_keys is not None}, "
            f"accept_plaintext={self.accept_plaintext})"
        )

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Encryption | None:
        """From ``LANGGRAPH_MEMORY_ENCRYPTION_KEYS`` (``id=base64,...``; the first is
        current) and ``LANGGRAPH_MEMORY_ENCRYPTION_ACCEPT_PLAINTEXT``; ``None`` if unset."""
        env = os.environ if environ is None else environ
        raw = env.get(ENV_KEYS, "").strip()
        if not raw:
            return None
        keys: dict[str, bytes] = {}
        entries = raw.split(",")
        for n, part in enumerate(entries, 1):
            kid, sep, b64 = part.strip().partition("=")
            kid = kid.strip()
            try:
                key = base64.b64decode(b64.strip() + "=" * (-len(b64.strip()) % 4), validate=True)
            except (binascii.Error, ValueError):
                key = b""
            if not sep or not kid or len(key) != 32 or len(kid) > 64 or kid in keys:
                # Entries are named by position, never by content: a malformed entry is
                # often a bare key (no ``id=``), and this message ends up in logs.
                raise InvalidConfigError(
                    f"{ENV_KEYS} must be id=base64(32-byte key),...; entry {n} of "
                    f"{len(entries)} is not (a missing 'id=', a key that is not base64 of "
                    "32 bytes, or an id given twice)"
                )
            keys[kid] = key
        plain = env.get(ENV_PLAINTEXT, "").strip().lower() in ("1", "true", "yes", "on")
        return cls(keys, next(iter(keys)), accept_plaintext=plain)

    # -- keys -------------------------------------------------------------------------

    def _write_key(self, where: Location) -> tuple[str, bytes]:
        if self.tenant_keys is not None and where.user_id is not None:
            found = self.tenant_keys.key_for(where.user_id)
            if found is not None:
                kid, key = found
                key = _check_key(kid, key)
                if kid in self.keys and self.keys[kid] != key:
                    # Reads take the shared key of an id first: sealed with this one, the
                    # value would never open again.
                    raise InvalidConfigError(
                        f"tenant key id {kid!r} is also a shared key's id: give tenant "
                        "keys ids of their own"
                    )
                return kid, key
        return self.current, self.keys[self.current]

    def _read_key(self, key_id: str) -> bytes | None:
        key = self.keys.get(key_id)
        if key is None and self.tenant_keys is not None:
            key = self.tenant_keys.key_by_id(key_id)
        return key

    def current_key_id(self, where: Location) -> str:
        """The key id a write at ``where`` would use now (what ``rekey`` moves rows to)."""
        return self._write_key(where)[0]

    def item_id_key(self, thread_key: bytes, user_id: str | None = None) -> bytes:
        """The key of a thread's list item ids (see ``checkpoint/lists.py``): secret, so an
        id, a hash of the item's serialized plaintext, tests no guess of it. Derived from
        the key the items are sealed with (a dropped tenant key takes it along); after a
        rotation new items get other ids (only deduplication with older ones is lost)."""
        key = self._write_key(Location("checkpoint", user_id=user_id))[1]
        return hmac.new(key, b"lgmp-item-id\0" + thread_key, "sha256").digest()

    # -- bytes ------------------------------------------------------------------------

    def plaintext(self, where: Location) -> None:
        """Plaintext was read at ``where``: fine in migration mode, else an error."""
        if not self.accept_plaintext:
            raise EncryptionError(
                "unencrypted data where encryption is required (set accept_plaintext=True "
                "to migrate, then run `langgraph-memory rekey`)",
                **where.where(),
            )

    def legacy(self, where: Location) -> None:
        """A previous release's envelope (bound to less than ``where``) was read: fine in
        migration mode (``rekey`` reseals it), else an error."""
        if not self.accept_plaintext:
            raise EncryptionError(
                "sealed by an earlier release, bound to its thread only (set "
                "accept_plaintext=True to migrate, then run `langgraph-memory rekey`)",
                **where.where(),
            )

    def seal(self, data: bytes, where: Location) -> bytes:
        kid, key = self._write_key(where)
        nonce = os.urandom(_NONCE)
        kid_raw = kid.encode()
        body = _get_cipher().seal(key, nonce, data, where.associated_data())
        return MAGIC + bytes([len(kid_raw)]) + kid_raw + nonce + body

    def open(self, data: bytes, where: Location) -> bytes:
        """The plaintext of an envelope at ``where``; plaintext only in migration mode."""
        kid = key_id_of(data)
        if kid is None:
            self.plaintext(where)
            return data
        key = self._read_key(kid)
        if key is None:
            raise EncryptionError(f"encrypted with unknown key {kid!r}", **where.where())
        old = data.startswith(MAGIC_V1)
        if old and where.at:
            self.legacy(where)
        start = len(MAGIC) + 1 + len(kid.encode())
        nonce, body = data[start : start + _NONCE], data[start + _NONCE :]
        plain = _get_cipher().open(key, nonce, body, where.associated_data(legacy=old))
        if plain is None:
            raise EncryptionError(
                f"encrypted data does not authenticate with key {kid!r} (a wrong key, "
                "tampering, or data moved from another thread, item or place in its thread)",
                **where.where(),
            )
        return plain

    # -- text -------------------------------------------------------------------------

    def seal_text(self, text: str, where: Location) -> str:
        raw = self.seal(text.encode("utf-8", "surrogatepass"), where)
        return TEXT_PREFIX + base64.b64encode(raw).decode("ascii")

    def open_text(self, text: str, where: Location) -> str:
        if not text.startswith(TEXT_PREFIX) or (self.accept_plaintext and key_id_of(text) is None):
            # plaintext: refused unless migrating. In the migration mode, text that only
            # starts like an envelope (a title or message a user typed so) is plaintext:
            # refused as a damaged envelope, it stopped the migration of every thread.
            return self.open(text.encode("utf-8", "surrogatepass"), where).decode(
                "utf-8", "surrogatepass"
            )
        try:
            raw = base64.b64decode(text[len(TEXT_PREFIX) :], validate=True)
        except (binascii.Error, ValueError):
            raise EncryptionError("a damaged envelope", **where.where()) from None
        if key_id_of(raw) is None:
            raise EncryptionError("a damaged envelope", **where.where())
        return self.open(raw, where).decode("utf-8", "surrogatepass")

    # -- typed values (checkpoint columns: type + bytes) -------------------------------

    def seal_typed(self, typ: str, data: bytes, where: Location) -> tuple[str, bytes]:
        raw_typ = typ.encode()
        return SEALED_TYPE, self.seal(bytes([len(raw_typ)]) + raw_typ + data, where)

    def open_typed(self, typ: str, data: bytes, where: Location) -> tuple[str, bytes]:
        if typ != SEALED_TYPE:
            self.plaintext(where)
            return typ, data
        plain = self.open(data, where)
        if key_id_of(data) is None or not plain:
            raise EncryptionError("a damaged envelope", **where.where())
        n = plain[0]
        return plain[1 : 1 + n].decode(), plain[1 + n :]


def is_legacy(data: bytes | str) -> bool:
    """Whether ``data`` is an envelope of the previous release (see ``MAGIC_V1``)."""
    if isinstance(data, str):
        if not data.startswith(TEXT_PREFIX):
            return False
        try:
            data = base64.b64decode(data[len(TEXT_PREFIX) : len(TEXT_PREFIX) + 8])
        except (binascii.Error, ValueError):
            return False
    return data.startswith(MAGIC_V1)


def key_id_of(data: bytes | str) -> str | None:
    """The key id an envelope (binary or text form) was sealed with; ``None`` for plaintext."""
    if isinstance(data, str):
        if not data.startswith(TEXT_PREFIX):
            return None
        try:
            data = base64.b64decode(data[len(TEXT_PREFIX) : len(TEXT_PREFIX) + 200] + "==")
        except (binascii.Error, ValueError):
            return None
    if not data.startswith((MAGIC, MAGIC_V1)) or len(data) < len(MAGIC) + 1:
        return None
    n = data[len(MAGIC)]
    kid = data[len(MAGIC) + 1 : len(MAGIC) + 1 + n]
    if len(kid) != n or len(data) < len(MAGIC) + 1 + n + _NONCE + _TAG:
        return None
    try:
        return kid.decode()
    except UnicodeDecodeError:
        return None


def no_keys(where: Location | None) -> EncryptionError:
    """The error for a sealed value read where no encryption is configured (the keys
    left out of one process's environment, or ``?encryption=off`` on an encrypted
    database): refused, not returned as bytes nobody can use."""
    return EncryptionError(
        "encrypted data, but no encryption keys are configured (pass encryption=... or "
        f"set {ENV_KEYS})",
        **(where.where() if where is not None else {}),
    )


def new_key() -> bytes:
    """A fresh random 32-byte key (store it in your secret manager)."""
    return os.urandom(32)


def fingerprint(key: bytes) -> str:
    """A short non-secret id of a key (for logs), not the key id."""
    return hashlib.sha256(b"lgmp-key-fingerprint" + key).hexdigest()[:12]


__all__ = [
    "ENV_KEYS",
    "ENV_PLAINTEXT",
    "Encryption",
    "EncryptionError",
    "Location",
    "TenantKeys",
    "blob_at",
    "checkpoint_at",
    "is_legacy",
    "item_at",
    "key_id_of",
    "new_key",
    "no_keys",
    "write_at",
]
