"""Re-encryption to the current key (``langgraph-memory rekey``): key rotation's second half.

After a new key becomes ``current``, new writes use it and reads take any known key, so
nothing breaks; this moves the rows already stored to the current key, so the old key can
be retired. With ``accept_plaintext=True`` (the migration mode) it also encrypts rows
written before encryption was turned on.

It walks every table that holds sealed values, in batches of ``batch_size`` rows in
primary-key order, one transaction per batch: each row not on the current key is opened
(at its own location: the thread id with the checkpoint, channel version, task and write
index or list item, the message id, or the store namespace and key are the associated
data) and sealed again, and written back only if it is still the value read
(a compare-and-set, so a concurrent write is never overwritten with an older value; such
a row is left for the next run). A killed run is resumed by running it again: rows done
are on the current key and are skipped, not rewritten. In the migration mode it also
reseals envelopes of the previous release, which bound checkpoint values to their thread
only, at their full location; checkpoint bodies resealed then (those and plaintext ones)
gain what an encrypting codec seals in them, their channel versions and which channels
have no value, taken from the clear columns as the migration finds them.

Not reachable: transcript lines of a thread whose id is no longer stored anywhere (the
thread was deleted and its index row with it): their associated data names the thread
id, which is gone; they are counted as ``unreachable`` and stay on their key.

SQLite and PostgreSQL walk tables; Redis walks threads (``SCAN``) and store shards (the
registry), ``batch_size`` of them per plan, each field moved by a compare-and-set script.
On Redis, plaintext store items (migration mode) are left and counted ``unreachable``:
the shard's field index counts their short strings, which only a put recomputes.
"""

from __future__ import annotations

import base64
import json
import re
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from dataclasses import field as dc_field
from functools import partial
from typing import Any

from langgraph.checkpoint.base import WRITES_IDX_MAP

from ..checkpoint.codec import (
    EMPTY,
    EMPTY_CHANNELS,
    JSON_METADATA,
    inline_values,
    plain_versions,
    version_text,
)
from ..checkpoint.compression import compress, decompress
from ..checkpoint.lists import LIST_TYPE, NODE_TYPE
from ..checkpoint.task_writes import pack, split_head, unpack
from ..drivers.plan import Plan
from ..encryption import (
    MAGIC_HEAD,
    SEALED_TYPE,
    TEXT_PREFIX,
    Encryption,
    Location,
    blob_at,
    checkpoint_at,
    is_legacy,
    item_at,
    key_id_of,
    write_at,
)
from ..errors import InvalidConfigError
from ..store.base import SEALED_FIELD, sealed_text
from ..store.namespaces import namespace_of, user_of_namespace
from ..store.values import unescape_text
from ..threads.core import INTERRUPT

DEFAULT_BATCH = 500

Typed = tuple[str, bytes]


@dataclass(frozen=True)
class RekeyProgress:
    """Where a rekey is, after every batch: rows looked at and rewritten so far, of
    ``total`` (counted when the run started)."""

    part: str
    examined: int
    rewritten: int
    total: int


@dataclass
class RekeyReport:
    examined: int = 0
    rewritten: int = 0
    unreachable: int = 0
    unencrypted: int = 0
    """Values left unencrypted, or sealed by the previous release, because the migration
    mode is off: reads refuse them until a rekey in that mode seals them."""
    seconds: float = 0.0
    parts: dict[str, int] = dc_field(default_factory=dict)
    """Rows rewritten per table."""


@dataclass(frozen=True)
class _Part:
    """One table: its primary key, the thread id (a SQL expression), the sealed columns."""

    name: str
    table: str
    pk: tuple[str, ...]
    thread_id: str | None
    columns: tuple[str, ...]
    kind: str  # typed | packed | index | transcript | store
    joins: str = ""


def _tid(raw: Any) -> str | None:
    if raw is None:
        return None
    if isinstance(raw, (bytes, bytearray, memoryview)):
        return bytes(raw).decode("utf-8", "surrogatepass")
    return str(raw)


class _Resealer:
    """Decides, per value, whether it must move, and reseals it (no I/O)."""

    def __init__(self, enc: Encryption, report: RekeyReport, codec: Any = None) -> None:
        self.enc = enc
        self.report = report
        """Counts the values left unencrypted (see ``RekeyReport.unencrypted``)."""
        self.codec = codec
        """The saver's codec: it seals metadata stored as its JSON projection only."""
        self.keep: frozenset[str] | None = getattr(codec, "metadata_keys", None)
        """The metadata keys kept in clear (``Encryption(metadata_keys=...)`` with the
        structural and index keys), or ``None``: all of them."""

    def projection(self, meta: Any) -> dict[str, Any] | None:
        """``meta`` (a clear metadata projection) with only the kept keys, or ``None``
        when nothing is to be dropped."""
        if self.keep is None or not isinstance(meta, dict):
            return None
        kept = {k: v for k, v in meta.items() if k in self.keep}
        return None if kept == meta else kept

    def _stale(self, sealed: bool, data: bytes | str, where: Location) -> bool:
        if not sealed or (where.at and is_legacy(data)):
            # plaintext, or bound to less than its location: opened in migration mode only
            self.report.unencrypted += not self.enc.accept_plaintext
            return self.enc.accept_plaintext
        # Shared keys move to the key a write there would use now (the current one, or
        # the user's tenant key: per-tenant keys turned on over shared-key rows); a tenant
        # key (not among ``keys``) is left: tenant keys rotate in their KMS.
        kid = key_id_of(data)
        return kid in self.enc.keys and kid != self.enc.current_key_id(where)

    def store_location(self, namespace: tuple[str, ...], key: str) -> Location:
        """Where a store item is, with its user when per-tenant keys are on (the store's
        own rule, so a rekeyed item ends on the key a put would seal it with)."""
        user = user_of_namespace(namespace) if self.enc.tenant_keys is not None else None
        return Location("store", namespace=namespace, key=key, user_id=user)

    def typed(
        self,
        typ: str,
        data: bytes | None,
        where: Location,
        upgrade: Callable[[Typed], Typed] | None = None,
    ) -> Typed | None:
        """The value resealed at ``where`` (``upgrade`` applied to its plaintext first),
        or ``None`` if it stays."""
        # (PostgreSQL keeps list pages and spines among the items: ids, not values; sealing
        # one made its list unreadable)
        if data is None or typ in (EMPTY, LIST_TYPE, JSON_METADATA, NODE_TYPE):
            return None
        data = bytes(data)
        if not self._stale(typ == SEALED_TYPE, data, where):
            return None
        plain_typ, plain = self.enc.open_typed(typ, data, where)
        if upgrade is not None:
            plain_typ, plain = upgrade((plain_typ, plain))
        return self.enc.seal_typed(plain_typ, plain, where)

    @property
    def upgrading(self) -> bool:
        """Whether checkpoint bodies resealed now gain their versions (see
        :meth:`body_upgrade`): in the migration mode, with the saver's codec."""
        return self.codec is not None and self.enc.accept_plaintext

    def body_upgrade(
        self, stored: dict[str, Any], valued: Callable[[], set[tuple[str, str]]]
    ) -> Callable[[Typed], Typed] | None:
        """How a checkpoint body resealed in the migration mode gains what an encrypting
        codec seals in it: its channel versions (``stored``: its clear versions column),
        so they are not only in clear, and which channels have no value (``valued``: the
        (channel, version) pairs with a stored value). Bodies written without encryption
        or sealed by the previous release have neither; the clear columns are trusted as
        the migration finds them."""
        codec = self.codec
        if codec is None or not self.upgrading:
            return None

        def upgrade(typed: Typed) -> Typed:
            body = codec.serde.loads_typed(decompress(*typed))
            if not isinstance(body, dict) or EMPTY_CHANNELS in body:
                return typed
            versions = body.setdefault("channel_versions", plain_versions(stored))
            have = valued() | {(ch, version_text(versions[ch])) for ch in inline_values(stored)}
            body[EMPTY_CHANNELS] = sorted(
                ch for ch, v in versions.items() if (ch, version_text(v)) not in have
            )
            return compress(*codec._dump(body, "checkpoint"))

        return upgrade

    def text(self, text: str | None, where: Location) -> str | None:
        if text is None:
            return None
        if not self._stale(key_id_of(text) is not None, text, where):
            return None
        return self.enc.seal_text(self.enc.open_text(text, where), where)


class _Sql:
    """The statements of one SQL backend (``?`` placeholders; PostgreSQL gets ``%s``)."""

    def __init__(self, backend: str, query: Callable[..., Any], schema: str = "") -> None:
        self.backend = backend
        self._query = query
        self.s = schema

    def q(self, sql: str, params: Sequence[Any] = (), *, fetch: bool = False) -> Any:
        if self.backend == "postgres":
            return self._query(sql.replace("?", "%s"), list(params), fetch=fetch)
        return self._query(sql, list(params), fetch=fetch, write=True)

    def t(self, name: str) -> str:
        return f"{self.s}.{name}" if self.s else name

    def parts(self, saver: bool, store: bool, projections: bool = False) -> list[_Part]:
        th = self.t("lgmp_threads")
        ix = self.t("lgmp_thread_index")
        tid = "th.thread_id"
        join = f"LEFT JOIN {th} th ON th.thread_key = x.thread_key"
        out: list[_Part] = []
        if saver:
            out += [
                _Part(
                    "checkpoints",
                    self.t("lgmp_checkpoints"),
                    ("thread_key", "checkpoint_ns", "checkpoint_id"),
                    tid,
                    (
                        "checkpoint_type",
                        "checkpoint",
                        "metadata_type",
                        "metadata",
                        # the stored versions (SQLite: native ones first, when not text)
                        *(("versions_json",) if self.backend == "sqlite" else ()),
                        "channel_versions",
                    ),
                    "body",
                    join,
                ),
                _Part(
                    "blobs",
                    self.t("lgmp_blobs"),
                    ("thread_key", "checkpoint_ns", "channel", "version"),
                    tid,
                    ("type", "blob"),
                    "typed",
                    join,
                ),
                _Part(
                    "items",
                    self.t("lgmp_items"),
                    ("thread_key", "checkpoint_ns", "item_id"),
                    tid,
                    ("type", "data"),
                    "typed",
                    join,
                ),
            ]
            if self.backend == "postgres":
                # Small scalar values kept inline in the checkpoint row (each sealed at
                # its channel version, or plaintext written before encryption was on).
                out.append(
                    _Part(
                        "inline_values",
                        self.t("lgmp_checkpoints"),
                        ("thread_key", "checkpoint_ns", "checkpoint_id"),
                        tid,
                        ("channel_versions",),
                        "inline",
                        join,
                    )
                )
                out.append(
                    _Part(
                        "writes",
                        self.t("lgmp_task_writes"),
                        ("thread_key", "checkpoint_ns", "checkpoint_id", "task_id"),
                        tid,
                        ("task_path", "writes"),
                        "packed",
                        join,
                    )
                )
            else:
                out.append(
                    _Part(
                        "writes",
                        self.t("lgmp_writes"),
                        ("thread_key", "checkpoint_ns", "checkpoint_id", "task_id", "idx"),
                        tid,
                        ("task_path", "channel", "type", "blob"),
                        "write",
                        join,
                    )
                )
            if projections:
                # Rows written before encryption (or before ``metadata_keys``) keep every
                # metadata key in their clear projections: restrict them as a put would,
                # and seal metadata stored only as its projection.
                out += [
                    _Part(
                        "metadata",
                        self.t("lgmp_checkpoints"),
                        ("thread_key", "checkpoint_ns", "checkpoint_id"),
                        tid,
                        ("metadata_type", "metadata", "metadata_json"),
                        "projection",
                        join,
                    ),
                    _Part(
                        "index_metadata",
                        ix,
                        ("thread_key",),
                        "x.thread_id",
                        ("metadata",),
                        "index_projection",
                    ),
                ]
            out += [
                _Part(
                    "thread_index",
                    ix,
                    ("thread_key",),
                    "x.thread_id",
                    # the latest id (where the interrupts were sealed) is only compared
                    ("title", "interrupts", "latest_id"),
                    "index",
                ),
                _Part(
                    "transcripts",
                    self.t("lgmp_transcripts"),
                    ("thread_key", "message_id"),
                    "coalesce(th.thread_id, ix.thread_id)",
                    ("content",),
                    "transcript",
                    f"{join} LEFT JOIN {ix} ix ON ix.thread_key = x.thread_key",
                ),
            ]
        if store:
            out.append(
                _Part(
                    "store",
                    self.t("lgmp_store"),
                    ("prefix", "key"),
                    None,
                    ("value", "escaped"),
                    "store",
                )
            )
        return out


def _row_value(sql: _Sql, raw: Any) -> Any:
    """A store value as read: SQLite text, PostgreSQL jsonb (a dict already)."""
    return json.loads(raw) if isinstance(raw, str) else raw


def _batch(
    sql: _Sql, part: _Part, res: _Resealer, cursor: tuple[Any, ...] | None, size: int
) -> Plan[Any, tuple[int, int, int, tuple[Any, ...] | None]]:
    """One batch of ``part`` in one transaction: (examined, rewritten, unreachable, next)."""
    pk = ", ".join(f"x.{c}" for c in part.pk)
    cols = ", ".join(f"x.{c}" for c in part.columns)
    tid = part.thread_id or "NULL"
    where, params = "", []
    if cursor is not None:
        where = f"WHERE ({pk}) > ({', '.join('?' * len(part.pk))})"
        params = list(cursor)
    rows = yield sql.q(
        f"SELECT {pk}, {tid}, {cols} FROM {part.table} x {part.joins} {where} "
        f"ORDER BY {pk} LIMIT ?",
        [*params, size],
        fetch=True,
    )
    rewritten = unreachable = 0
    n = len(part.pk)
    match = " AND ".join(f"{c} = ?" for c in part.pk)
    valued: dict[tuple[bytes, str], set[tuple[str, str]]] = {}
    if part.kind == "body" and rows and res.upgrading:
        # The stored values of the batch's threads: a body resealed in the migration mode
        # gains the list of its channels without one (see ``body_upgrade``).
        tks = sorted({bytes(r[0]) for r in rows})
        found = yield sql.q(
            f"SELECT thread_key, checkpoint_ns, channel, version FROM {sql.t('lgmp_blobs')} "
            f"WHERE type <> ? AND thread_key IN ({', '.join('?' * len(tks))})",
            [EMPTY, *tks],
            fetch=True,
        )
        for tk, ns, channel, version in found:
            valued.setdefault((bytes(tk), ns), set()).add((channel, version))
    for row in rows:
        key, thread_id, values = tuple(row[:n]), _tid(row[n]), list(row[n + 1 :])
        new = _reseal(sql, part, res, key, thread_id, values, valued)
        if new is _UNREACHABLE:
            unreachable += 1
            continue
        if new is None:
            continue
        sets = ", ".join(f"{c} = ?" for c in part.columns)
        same = " AND ".join(
            f"{c} IS NOT DISTINCT FROM ?" if sql.backend == "postgres" else f"{c} IS ?"
            for c in part.columns
        )
        old = [_param(sql, part, v) for v in values]
        pg = sql.backend == "postgres"  # its driver returns rows, SQLite's a row count
        done = yield sql.q(
            f"UPDATE {part.table} SET {sets} WHERE {match} AND {same}"
            + (" RETURNING 1" if pg else ""),
            [*(_param(sql, part, v) for v in new), *key, *old],
            fetch=pg,
        )
        rewritten += 1 if done else 0
        if done and part.kind == "store" and sql.backend == "sqlite":
            # The equality index of filtered searches held the plaintext's short strings.
            yield sql.q("DELETE FROM lgmp_store_fields WHERE prefix = ? AND key = ?", list(key))
    nxt = tuple(rows[-1][:n]) if len(rows) == size else None
    return len(rows), rewritten, unreachable, nxt


_UNREACHABLE: Any = object()


def _param(sql: _Sql, part: _Part, value: Any) -> Any:
    if isinstance(value, memoryview):
        return bytes(value)
    if sql.backend == "postgres" and isinstance(value, (dict, list)):
        from psycopg.types.json import Jsonb

        return Jsonb(value)
    if (
        sql.backend == "sqlite"
        and part.kind in ("store", "index", "projection", "index_projection")
        and isinstance(value, dict)
    ):
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    return value


def _reseal(
    sql: _Sql,
    part: _Part,
    res: _Resealer,
    key: tuple[Any, ...],
    thread_id: str | None,
    values: list[Any],
    valued: dict[tuple[bytes, str], set[tuple[str, str]]] | None = None,
) -> Any:
    """The row's new column values, ``None`` if it is current, or ``_UNREACHABLE``
    (``valued``: a checkpoint's thread's stored values, see ``body_upgrade``)."""
    if part.kind == "store":
        value = _row_value(sql, values[0])
        sealed = sealed_text(value)
        where = res.store_location(namespace_of(key[0]), unescape_text(key[1]))
        if sealed is not None:
            new = res.text(sealed, where)
            return None if new is None else [_store_value(sql, {SEALED_FIELD: new}), values[1]]
        if not res.enc.accept_plaintext:
            res.report.unencrypted += 1
            return None  # plaintext outside migration mode: reads refuse it; leave it
        text = values[0] if isinstance(values[0], str) else json.dumps(value, ensure_ascii=False)
        plain = ("1" if values[1] else "0") + text
        new = res.enc.seal_text(plain, where)
        return [_store_value(sql, {SEALED_FIELD: new}), False if sql.backend == "postgres" else 0]
    if thread_id is None:
        return _UNREACHABLE
    if part.kind == "index_projection":
        kept = res.projection(_row_value(sql, values[0]))
        return None if kept is None else [kept]
    if part.kind == "projection":
        typ, data, meta = values[0], values[1], _row_value(sql, values[2])
        kept = res.projection(meta)
        if kept is None:
            if typ != JSON_METADATA or not res.enc.accept_plaintext:
                return None
            kept = meta  # nothing to drop, but the metadata is plaintext: seal it
        if typ == JSON_METADATA:
            # Stored as the projection only (PostgreSQL): seal the whole metadata first,
            # as an encrypting codec stores it, so dropping keys loses nothing.
            where = checkpoint_at(thread_id, key[1], key[2], "metadata")
            typ, data = res.codec._pack(res.codec._dump(meta, "metadata"), where)
        return [typ, data, kept]
    if part.kind == "body":
        # a checkpoint record: its body and metadata, then its clear versions (compared)
        ctype, cblob, mtype, mblob, *columns = values
        stored: dict[str, Any] = next((_row_value(sql, v) for v in columns if v is not None), {})
        found = (valued or {}).get((bytes(key[0]), key[1]), set())
        upgrade = res.body_upgrade(stored, lambda: found)
        body_at, meta_at = _sql_locations(part.name, thread_id, key)
        body = res.typed(ctype, None if cblob is None else bytes(cblob), body_at, upgrade)
        meta = res.typed(mtype, None if mblob is None else bytes(mblob), meta_at)
        if body is None and meta is None:
            return None
        return [*(body or (ctype, cblob)), *(meta or (mtype, mblob)), *columns]
    if part.kind == "typed":
        out, changed = [], False
        places = _sql_locations(part.name, thread_id, key)
        for i in range(0, len(values), 2):
            typ, data = values[i], values[i + 1]
            moved = res.typed(typ, None if data is None else bytes(data), places[i // 2])
            changed |= moved is not None
            out += list(moved) if moved is not None else [typ, data]
        return out if changed else None
    if part.kind == "write":
        # a pending write (SQLite): its clear channel is part of its location
        path, channel, typ, data = values
        where = write_at(thread_id, key[1], key[2], key[3], int(key[4]), channel, path)
        moved = res.typed(typ, None if data is None else bytes(data), where)
        return None if moved is None else [path, channel, *moved]
    if part.kind == "packed":
        path, raw = values[0], bytes(values[1])
        writes, changed = [], False
        for idx, channel, typ, data, own in unpack(raw, path):
            where = write_at(thread_id, key[1], key[2], key[3], idx, channel, own)
            moved = res.typed(typ, data, where)
            changed |= moved is not None
            writes.append((idx, channel, *(moved or (typ, data)), own))
        return [path, pack(writes, path)] if changed else None
    if part.kind == "index":
        title, interrupts, latest = values
        new_title = res.text(title, Location("title", thread_id))
        ints = _row_value(sql, interrupts) or {}
        new_ints, changed = {}, False
        for task, (typ, b64) in ints.items():
            where = write_at(thread_id, "", latest or "", task, _INTERRUPT_IDX, INTERRUPT, "")
            moved = res.typed(typ, base64.b64decode(b64), where)
            changed |= moved is not None
            new_ints[task] = (
                [moved[0], base64.b64encode(moved[1]).decode()] if moved else [typ, b64]
            )
        if new_title is None and not changed:
            return None
        ints_out = _store_value(sql, new_ints)
        return [title if new_title is None else new_title, ints_out, latest]
    if part.kind == "inline":
        versions = _row_value(sql, values[0]) or {}
        new_versions, changed = {}, False
        for channel, entry in versions.items():
            if not isinstance(entry, list):
                new_versions[channel] = entry
                continue
            where = blob_at(thread_id, key[1], channel, version_text(entry[0]))
            # (a None is sealed too: a read with encryption on refuses plaintext)
            typ, data = inline_values({channel: entry})[channel]
            if not res._stale(typ == SEALED_TYPE, data, where):
                new_versions[channel] = entry
                continue
            inner_typ, inner = res.enc.open_typed(typ, data, where)
            new_typ, new_data = res.enc.seal_typed(inner_typ, inner, where)
            new_versions[channel] = [entry[0], new_typ, base64.b64encode(new_data).decode()]
            changed = True
        return [_store_value(sql, new_versions)] if changed else None
    if part.kind == "transcript":
        new = res.text(values[0], Location("transcript", thread_id, key=key[1]))
        return None if new is None else [new]
    raise AssertionError(part.kind)


_INTERRUPT_IDX = WRITES_IDX_MAP[INTERRUPT]


def _sql_locations(part: str, thread_id: str, key: tuple[Any, ...]) -> list[Location]:
    """Where each (type, data) column pair of a row of ``part`` was sealed, from its key."""
    ns = key[1]
    if part == "checkpoints":
        return [checkpoint_at(thread_id, ns, key[2], p) for p in ("checkpoint", "metadata")]
    if part == "blobs":
        return [blob_at(thread_id, ns, key[2], key[3])]
    if part == "items":
        return [item_at(thread_id, bytes(key[2]))]
    raise AssertionError(part)


def _store_value(sql: _Sql, value: dict[str, Any]) -> Any:
    if sql.backend == "postgres":
        return value
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _count(sql: _Sql, part: _Part) -> Plan[Any, int]:
    rows = yield sql.q(f"SELECT count(*) FROM {part.table}", fetch=True)
    return int(rows[0][0])


def _netstrings(raw: bytes) -> list[bytes]:
    out, pos = [], 0
    while pos < len(raw):
        colon = raw.index(b":", pos)
        n = int(raw[pos:colon])
        out.append(raw[colon + 1 : colon + 1 + n])
        pos = colon + 1 + n
    return out


def _pack_netstrings(parts: Sequence[bytes]) -> bytes:
    return b"".join(b"%d:%s" % (len(p), p) for p in parts)


def _redis_thread(plans: Any, res: _Resealer, tag: str) -> Plan[Any, tuple[int, int, int]]:
    """One Redis thread's sealed fields moved (each by a compare-and-set script):
    (fields examined, rewritten, unreachable)."""
    import ormsgpack

    from ..checkpoint.redis.plans import KINDS, LIST_PREFIX
    from ..drivers.redis import Batch, Eval

    k = dict(zip(KINDS, plans._keys_of_tag(tag), strict=True))
    tx = k["rec"][: -len(b"rec")] + b"tx"
    tid_raw, ck, blobs, writes, items, rec, lines = yield Batch(
        [
            ("HGET", k["thread"], b"id"),
            ("HGETALL", k["ck"]),
            ("HGETALL", k["blobs"]),
            ("HGETALL", k["writes"]),
            ("HGETALL", k["items"]),
            ("HMGET", k["rec"], b"t", b"i", b"l"),
            ("HGETALL", tx),
        ]
    )
    # The record's clear metadata JSON (``m``, the latest root checkpoint's, and
    # ``m<member>`` per checkpoint, read by FILTER): restricted to the kept keys as a put
    # with ``metadata_keys`` would store it.
    projections: dict[bytes, bytes] = {}
    if res.keep is not None:
        [record] = yield Batch([("HGETALL", k["rec"])])
        projections = {f: v for f, v in record.items() if f.startswith(b"m") and v}
    examined = len(ck) + len(blobs) + len(writes) + len(items) + len(lines) + 1
    if tid_raw is None:
        return examined, 0, examined
    tid = _tid(tid_raw)
    assert tid is not None
    updates: list[tuple[bytes, bytes, bytes, bytes]] = []
    meta_all: dict[bytes, bytes] = {}
    if res.upgrading:  # each checkpoint's blob fields, for ``body_upgrade``
        [meta_all] = yield Batch([("HGETALL", k["meta"])])
    for field, old in ck.items():
        ctype, cblob, mtype, mblob, versions = ormsgpack.unpackb(old)
        ns, cid = _fields(field, 2)
        upgrade = None
        if res.upgrading:
            # the checkpoint's blob fields (after its parent, run id and delta seeds)
            parts = _netstrings(meta_all.get(field, b""))
            refs = parts[3 + 2 * int(parts[2]) :] if len(parts) > 2 else []
            named = [tuple(_fields(ref, 2)[1].split("\0", 1)) for ref in refs]
            stored = versions or {ch: ver for ch, ver in named}
            found = {pair for pair, ref in zip(named, refs, strict=True) if ref in blobs}
            upgrade = res.body_upgrade(stored, partial(set, found))
        at = checkpoint_at(tid, ns, cid, "checkpoint")
        body = res.typed(ctype, cblob, at, upgrade)
        meta = res.typed(mtype, mblob, checkpoint_at(tid, ns, cid, "metadata"))
        if body or meta:
            record_new = [*(body or (ctype, cblob)), *(meta or (mtype, mblob)), versions]
            updates.append((k["ck"], field, old, ormsgpack.packb(record_new)))
    for key, found in ((k["blobs"], blobs), (k["items"], items)):
        for field, old in found.items():
            if not old or old.startswith(LIST_PREFIX):
                continue
            typ, data = ormsgpack.unpackb(old)
            if key == k["blobs"]:
                ns, channel, version = _fields(field, 3)
                where = blob_at(tid, ns, channel, version)
            else:
                where = item_at(tid, bytes(field).split(b"\0", 1)[1])
            moved = res.typed(typ, data, where)
            if moved:
                updates.append((key, field, old, ormsgpack.packb(list(moved))))
    for field, old in writes.items():
        head, record = split_head(old)
        path = head.decode("utf-8", "surrogatepass")
        ns, cid, task_id = _fields(field, 3)
        out, changed = [], False
        for idx, channel, typ, data, own in unpack(record, path):
            moved = res.typed(typ, data, write_at(tid, ns, cid, task_id, idx, channel, own))
            changed |= moved is not None
            out.append((idx, channel, *(moved or (typ, data)), own))
        if changed:
            updates.append((k["writes"], field, old, _pack_netstrings([head]) + pack(out, path)))
    title, ints, latest = rec
    if title:
        moved_title = res.text(title.decode("utf-8", "surrogatepass"), Location("title", tid))
        if moved_title is not None:
            updates.append((k["rec"], b"t", title, moved_title.encode()))
    if ints:
        parts, changed = _netstrings(ints), False
        cid = latest.decode() if latest else ""
        for i in range(0, len(parts), 3):
            task_id = parts[i].decode("utf-8", "surrogatepass")
            where = write_at(tid, "", cid, task_id, _INTERRUPT_IDX, INTERRUPT, "")
            moved = res.typed(parts[i + 1].decode(), parts[i + 2], where)
            if moved:
                parts[i + 1], parts[i + 2] = moved[0].encode(), moved[1]
                changed = True
        if changed:
            updates.append((k["rec"], b"i", ints, _pack_netstrings(parts)))
    for field, old in projections.items():
        try:
            meta = json.loads(old)
        except ValueError:
            continue
        kept = res.projection(meta)
        if kept is not None:
            updates.append((k["rec"], field, old, json.dumps(kept).encode()))
    for field, old in lines.items():
        if field.startswith(b"\0"):  # a per-owner line count, not a line
            continue
        parts = _netstrings(old)
        mid = field.decode("utf-8", "surrogatepass")
        text = parts[1].decode("utf-8", "surrogatepass")
        moved_text = res.text(text, Location("transcript", tid, key=mid))
        if moved_text is not None:
            parts[1] = moved_text.encode()
            updates.append((tx, field, old, _pack_netstrings(parts)))
    rewritten = 0
    for key, field, before, after in updates:
        rewritten += int((yield Eval("hcas", [key], [field, before, after])) or 0)
    return examined, rewritten, 0


def _fields(field: bytes, n: int) -> list[str]:
    """The ``n`` NUL-separated parts of a Redis field (the namespace has no NUL; the last
    part keeps any)."""
    return [p.decode("utf-8", "surrogatepass") for p in bytes(field).split(b"\0", n - 1)]


def _rekey_redis(
    saver: Any,
    report: RekeyReport,
    batch_size: int,
    progress: Callable[[RekeyProgress], None] | None,
) -> None:
    """The Redis saver's threads, ``batch_size`` threads per plan (a script per field)."""
    plans = saver._plans
    res = _Resealer(saver.encryption, report, getattr(saver, "_codec", None))
    tags: list[str] = saver._run(plans._all_thread_keys())
    _redis_batches(
        saver._run, tags, lambda tag: _redis_thread(plans, res, tag), "threads",
        report, batch_size, progress,
    )  # fmt: skip


def _redis_batches(
    run: Callable[[Plan[Any, Any]], Any],
    items: Sequence[Any],
    one: Callable[[Any], Plan[Any, tuple[int, int, int]]],
    part: str,
    report: RekeyReport,
    batch_size: int,
    progress: Callable[[RekeyProgress], None] | None,
) -> None:
    """``one`` over ``items`` (threads or store shards), ``batch_size`` per plan, each
    counted into ``report`` as (examined, rewritten, unreachable) under ``part``."""
    total = len(items)
    for start in range(0, total, batch_size):

        def chunk(batch: Sequence[Any] = items[start : start + batch_size]) -> Plan[Any, Any]:
            totals = [0, 0, 0]
            for item in batch:
                found = yield from one(item)
                totals = [a + b for a, b in zip(totals, found, strict=True)]
            return totals

        seen, done, lost = run(chunk())
        report.examined += seen
        report.rewritten += done
        report.unreachable += lost
        report.parts[part] = report.parts.get(part, 0) + done
        if progress is not None:
            progress(RekeyProgress(part, min(start + batch_size, total), report.rewritten, total))


def _redis_shard(plans: Any, res: _Resealer, path: bytes) -> Plan[Any, tuple[int, int, int]]:
    """One Redis store shard's sealed values moved: (examined, rewritten, unreachable).
    Plaintext items (migration mode) are left and counted unreachable: the shard's field
    index counts their short strings, which only a put through the store recomputes."""
    from ..drivers.redis import Batch, Eval
    from ..store.redis.lua import SHARD_KINDS
    from ..store.redis.plans import split_id

    items_key = plans.shard_at(path).keys[SHARD_KINDS.index("items")]
    (found,) = yield Batch([("HGETALL", items_key)])
    rewritten = lost = 0
    for field, old in found.items():
        header, _, text = old.partition(b"\n")
        sealed = sealed_text(json.loads(text))
        namespace, key = split_id(field)
        if sealed is None:
            lost += int(res.enc.accept_plaintext)
            res.report.unencrypted += not res.enc.accept_plaintext
            continue
        moved = res.text(sealed, res.store_location(tuple(namespace), key))
        if moved is None:
            continue
        after = header + b"\n" + json.dumps({SEALED_FIELD: moved}, separators=(",", ":")).encode()
        rewritten += int((yield Eval("hcas", [items_key], [field, old, after])) or 0)
    return len(found), rewritten, lost


def _rekey_redis_store(
    store: Any,
    report: RekeyReport,
    batch_size: int,
    progress: Callable[[RekeyProgress], None] | None,
) -> None:
    plans = store._plans
    res = _Resealer(store.encryption, report)

    def shards() -> Plan[Any, list[bytes]]:
        from ..drivers.redis import Batch

        (paths,) = yield Batch([("ZRANGE", plans.registry[0], 0, -1)])
        return list(paths)

    paths: list[bytes] = store._run(shards())
    _redis_batches(
        store._run, paths, lambda path: _redis_shard(plans, res, path), "store",
        report, batch_size, progress,
    )  # fmt: skip


def _backend(obj: Any) -> tuple[str, _Sql]:
    module = type(obj).__module__
    if ".sqlite" in module:
        from ..drivers.sqlite import Query as SqliteQuery

        return "sqlite", _Sql(
            "sqlite",
            lambda sql, params, fetch=False, write=False: SqliteQuery(
                sql, params, fetch=fetch, write=write
            ),
        )
    if ".postgres" in module:
        from ..drivers.postgres import Query as PgQuery

        schema = obj._plans._s
        return "postgres", _Sql(
            "postgres", lambda sql, params, fetch=False: PgQuery(sql, params, fetch=fetch), schema
        )
    raise InvalidConfigError(f"rekey does not support {type(obj).__name__}")


def rekey(
    memory: Any = None,
    *,
    saver: Any = None,
    store: Any = None,
    batch_size: int = DEFAULT_BATCH,
    progress: Callable[[RekeyProgress], None] | None = None,
) -> RekeyReport:
    """Move every sealed row of ``memory`` (a ``from_url`` result, entered) or of
    ``saver`` / ``store`` to the current key; see the module docstring. Blocking."""
    if memory is not None:
        saver, store = memory.checkpointer, memory.store
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise InvalidConfigError(f"batch_size must be a positive integer, got {batch_size!r}")
    targets: list[tuple[Any, bool, bool]] = []
    for obj, is_saver in ((saver, True), (store, False)):
        if obj is None or isinstance(obj, str):
            continue
        if getattr(obj, "encryption", None) is None:
            raise InvalidConfigError(
                f"rekey needs encryption on ({type(obj).__name__} has none): pass the keys "
                "(encryption=..., or LANGGRAPH_MEMORY_ENCRYPTION_KEYS)"
            )
        targets.append((obj, is_saver, not is_saver))
    if not targets:
        raise InvalidConfigError("rekey needs a saver or a store")
    report = RekeyReport()
    started = time.monotonic()
    work: list[tuple[Any, _Sql, _Part, _Resealer]] = []
    redis_saver = next(
        (obj for obj, is_saver, _ in targets if is_saver and ".redis" in type(obj).__module__),
        None,
    )
    if redis_saver is not None:
        _rekey_redis(redis_saver, report, batch_size, progress)
        targets = [t for t in targets if t[0] is not redis_saver]
    redis_store = next(
        (obj for obj, _, is_store in targets if is_store and ".redis" in type(obj).__module__),
        None,
    )
    if redis_store is not None:
        _rekey_redis_store(redis_store, report, batch_size, progress)
        targets = [t for t in targets if t[0] is not redis_store]
    for obj, with_saver, with_store in targets:
        _, sql = _backend(obj)
        codec = getattr(obj, "_codec", None) if with_saver else None
        res = _Resealer(obj.encryption, report, codec)
        # In the migration mode, metadata stored only as its projection (PostgreSQL) is
        # plaintext that reads refuse once the mode is off: those rows are sealed too.
        projections = res.keep is not None or res.enc.accept_plaintext
        parts = sql.parts(with_saver, with_store, projections=projections)
        work += [(obj, sql, p, res) for p in parts]
    total = sum(obj._run(_count(sql, part)) for obj, sql, part, _ in work)
    for obj, sql, part, res in work:
        cursor: tuple[Any, ...] | None = None
        while True:
            seen, done, lost, cursor = obj._run(_batch(sql, part, res, cursor, batch_size))
            report.examined += seen
            report.rewritten += done
            report.unreachable += lost
            report.parts[part.name] = report.parts.get(part.name, 0) + done
            if progress is not None:
                progress(RekeyProgress(part.name, report.examined, report.rewritten, total))
            if cursor is None:
                break
    report.seconds = time.monotonic() - started
    return report


def key_ids(rows: Iterator[bytes]) -> set[str]:
    """The key ids of the envelopes in raw dumped rows (for tests and audits)."""
    found: set[str] = set()
    prefix = TEXT_PREFIX.encode()
    for row in rows:
        start = 0
        while (i := row.find(MAGIC_HEAD, start)) >= 0:
            kid = key_id_of(row[i:])
            if kid is not None:
                found.add(kid)
            start = i + 1
        # Envelopes stored as text (store values, titles, transcripts): base64 after the
        # prefix; enough of it for the header (magic, id length, id <= 64 bytes).
        start = 0
        while (i := row.find(prefix, start)) >= 0:
            head = _B64_HEAD.match(row, i + len(prefix))
            b64 = head.group(0)[:96] if head else b""
            kid = key_id_of(TEXT_PREFIX + b64[: len(b64) - len(b64) % 4].decode())
            if kid is not None:
                found.add(kid)
            start = i + 1
    return found


_B64_HEAD = re.compile(rb"[A-Za-z0-9+/]+")


__all__ = ["RekeyProgress", "RekeyReport", "rekey"]
