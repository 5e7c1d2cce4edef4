"""What each of our default features costs on a short turn, written by hand at its cheapest::

    python -m benchmarks.ladder [--pg URL] [--redis URL] [--turns 1,10,50] [--turns-sample 300]
        [--rounds 3] [--warmup 30] [--json PATH] [--calls SLUGS]

Issue 39 asks for a short turn of at most 1.15x a featureless saver (``benchmarks.minimal``)
with every feature on. This module asks whether that is reachable at all: starting from each
featureless saver (SQLite, PostgreSQL, Redis) it adds our default features one rung at a
time, cumulatively, each in the cheapest correct form one can write by hand for that
backend, with nothing of our architecture (plans, drivers, codecs, list memory) in the way:

1. ``blobs``: the channel values as per-channel blobs, only the channels a put changed
   written (as LangGraph's official savers do), the checkpoint without its values;
2. ``+compression``: every stored value through ``checkpoint/compression.py`` (raw deflate
   with the preset dictionary, kept when >= 10% smaller, nothing under 48 bytes);
3. ``+thread index``: one row (hash) per thread kept current by every put in the put's own
   transaction (or script): updated_at, latest checkpoint id, status idle/interrupted,
   metadata, the title of the first human message, the checkpoint count;
4. ``+TTL, tombstones``: an expiry on the thread refreshed by every write and checked by it
   (an expired thread's data goes first), and "deletion is final" (a write to a deleted
   thread is refused unless it continues a live checkpoint): one read of the thread's row
   inside every write's transaction (PostgreSQL: a PL/pgSQL function the write's single
   statement selects from; Redis: a Lua script per write);
5. ``+delta lists``: a list of objects (the ``messages``) stored as items, one per
   element, keyed by the hash of its bytes, written in the put's transaction (statement,
   script) only when new; the channel's blob is the item ids in order, from which a read
   (the same statement or script) rebuilds the list, new objects every read. A put
   serializes only the elements the saver has not stored or handed out unchanged (see
   :class:`_Ladder`): a turn writes its new messages, not the conversation. After an
   expiry purged the thread, a put that kept items stores them all again;
6. ``+filters, index keys``: what else our savers store and index by default, per
   backend as ours does it. The checkpoint's metadata as JSON that ``list(filter=...)``
   is narrowed on in the store (SQLite: a text column beside the packed bytes,
   ``json_extract``; PostgreSQL: ``jsonb``, the packed bytes left empty when the JSON
   is exact; Redis: a field of the checkpoint's hash, judged by a script); the run id
   in a column with a partial index (SQL; ours keeps none on Redis); the thread index's
   row with its metadata as JSON, the user key's value (``user_id``, our default
   ``index_keys``) as a column (PostgreSQL: generated) and covering indexes by user, by
   user and status, by status and by ``updated_at`` (Redis: sorted sets of all threads
   and of each user's, updated in the put's script), the owner kept when a checkpoint's
   metadata lacks the key; a re-put of a stored checkpoint not counted again; and on
   SQLite and Redis, as ours, the status read from the checkpoint's interrupt writes in
   the put's first read (PostgreSQL's put keeps rung 3's record, as ours keeps its own).

Not rungs (what ours does beyond rung 6): the index row's interrupt values, ``error``
status and byte count, the ``DeltaChannel`` seeds in a put's read, the fence, erasure
holds, transcripts (off by default), and our plans/drivers/codec/list pages themselves.

Each rung is a real saver: the conversation is read back after the timed turns
(``wl._check_conversation``), as in ``benchmarks.minimal``, whose measurement
(``short_threads``: fresh T-turn threads, every turn timed, client CPU per turn) and
rotated rounds this module reuses, with InMemorySaver, the featureless savers and ours in
the same run. A rung's increment over the one below it is what that feature costs, at its
cheapest, on this machine.

``--calls min_sqlite,lad_sqlite6,ours_sqlite`` measures instead where those savers' turns
spend CPU: inside ``put``, ``put_writes`` and ``get_tuple`` (thread CPU summed over the
calls) and outside them (:func:`call_split`).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import math
import operator
import os
import sqlite3
import statistics
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import chain
from pathlib import Path
from typing import Any, NamedTuple, cast

import psycopg
import redis
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    get_checkpoint_id,
    get_serializable_checkpoint_metadata,
)
from psycopg_pool import ConnectionPool

from langgraph_memory_plus.checkpoint import compression
from langgraph_memory_plus.checkpoint.config import checkpoint_config
from langgraph_memory_plus.threads.core import INTERRUPT, title_of

from . import minimal as mn
from . import targets as tg
from . import workloads as wl

LADDER = "ladder"
RUNGS = (
    "blobs",
    "+compression",
    "+thread index",
    "+TTL, tombstones",
    "+delta lists",
    "+filters, index keys",
)
DELTA = 5  # the rung that stores lists as their new items
FILTERS = 6  # the rung with metadata for filters, the run_id and thread index keys
USER_KEY = "user_id"  # the metadata key our thread index indexes by default
TTL_SECONDS = 30 * 24 * 3600.0  # any expiry: the cost is the same


def _rung_targets(backend: str, short: str) -> list[tg.Target]:
    return [
        tg.Target(f"ladder {short} {level}: {name}", f"lad_{short.lower()}{level}", LADDER, backend)
        for level, name in enumerate(RUNGS, start=1)
    ]


BACKENDS = [
    ("SQLite", mn.MIN_SQLITE, _rung_targets("sqlite", "SQLite"), tg.OURS_SQLITE),
    ("PG", mn.MIN_PG, _rung_targets("postgres", "PG"), tg.OURS_PG),
    ("Redis", mn.MIN_REDIS, _rung_targets("redis", "Redis"), tg.OURS_REDIS),
]
SAVERS = [tg.MEMORY_SAVER] + [
    t for _, featureless, rungs, ours in BACKENDS for t in [featureless, *rungs, ours]
]

Record = tuple[str, bytes]
Item = tuple[bytes, str, bytes]  # (item id, type, value) of a list element (rung 5)
MemoKey = tuple[str, str, str]  # (thread_id, checkpoint_ns, channel)

LIST = "ladder:list"
"""Blob type of a list stored as items (rung 5): the blob is its item ids, in order."""
ID_SIZE = 16
MEMO_LISTS = 1024  # lists remembered per saver, least recently stored or read dropped
_SCALARS = (type(None), bool, int, float, str, bytes)


class Refused(RuntimeError):
    """A write to a deleted thread that does not continue a live checkpoint."""


# ---------------------------------------------------------------------------------------------
# what the rungs share


def _is_list(value: Any) -> bool:
    """Whether rung 5 stores a channel value as items: a non-empty list of objects (a chat's
    messages); lists of scalars are stored whole, as on the rungs below."""
    return type(value) is list and bool(value) and type(value[0]) not in _SCALARS


_dict_values: Callable[[Any], Iterable[Any]] = dict.values


def _fields(objects: Sequence[Any]) -> list[tuple[Any, ...] | None]:
    """Each object's field objects (held, so that their identities stay unique), None for
    an object without a ``__dict__``: such an element is serialized at every put."""
    try:
        return list(map(tuple, map(_dict_values, map(vars, objects))))
    except TypeError:
        return [tuple(vars(o).values()) if hasattr(o, "__dict__") else None for o in objects]


def _fields_kept(values: Sequence[Any], then: Sequence[tuple[Any, ...] | None]) -> int:
    """How many leading ``values`` still hold the very field objects ``then`` recorded (no
    field reassigned since); one pass in C when none was."""
    try:
        now = list(map(vars, values))
    except TypeError:  # an element without a __dict__
        now = []
    if now and None not in then:
        kept = cast(Sequence[tuple[Any, ...]], then)
        if list(map(len, now)) == list(map(len, kept)) and all(
            map(
                operator.is_,
                chain.from_iterable(map(_dict_values, now)),
                chain.from_iterable(kept),
            )
        ):
            return len(values)
    for i, (value, old) in enumerate(zip(values, then, strict=True)):
        fields = tuple(vars(value).values()) if hasattr(value, "__dict__") else None
        if old is None or fields is None or len(fields) != len(old):
            return i
        if not all(map(operator.is_, fields, old)):
            return i
    return len(values)


class Filters(NamedTuple):
    """What rung 6 stores of a checkpoint's metadata besides its packed bytes: the JSON
    text a store can filter on, whether that JSON comes back equal (PostgreSQL then keeps
    only it), the run id (its own indexed column) and the user key's value (the thread
    index's key column; None when the metadata has none)."""

    text: str
    exact: bool
    run_id: str | None
    user: Any


def _json_exact(value: Any) -> bool:
    """Whether ``value`` comes back from JSON (``jsonb``) equal and of the same types."""
    kind = type(value)
    if value is None or kind is bool or kind is int:
        return True
    if kind is str:
        return "\x00" not in value
    if kind is float:
        r = repr(value)
        return math.isfinite(value) and "e" not in r and not r.startswith("-0.0")
    if kind is dict:
        return all(type(k) is str and "\x00" not in k and _json_exact(v) for k, v in value.items())
    if kind is list:
        return all(map(_json_exact, value))
    return False


def _plain(value: Any) -> Any:
    """A JSON-able stand-in of ``value`` for filtering (exact matching is done on the
    decoded metadata): text without NUL (``jsonb`` refuses it), finite numbers, else repr."""
    if isinstance(value, str):
        return value.replace("\x00", "\ufffd")
    if value is None or isinstance(value, (bool, int)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if isinstance(value, Mapping):
        return {_plain(str(k)): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return _plain(repr(value))


def _filters(metadata: Mapping[str, Any]) -> Filters:
    exact = _json_exact(metadata)
    text = json.dumps(metadata if exact else _plain(metadata), separators=(",", ":"))
    run_id = metadata.get("run_id")
    return Filters(text, exact, run_id if type(run_id) is str else None, metadata.get(USER_KEY))


def _narrowing(filter: Mapping[str, Any] | None) -> list[tuple[str, Any]]:
    """The (key, value) pairs of a ``list`` filter a store can narrow by: text and
    numbers (the stored JSON's value compares equal in SQL); the rest is left to the
    exact check on the decoded metadata."""
    out: list[tuple[str, Any]] = []
    for key, value in (filter or {}).items():
        if type(key) is not str or not _json_exact(key) or '"' in key or "\\" in key:
            continue  # (SQLite's JSON path quotes the key)
        if type(value) is str and _json_exact(value):
            out.append((key, value))
        elif type(value) in (bool, int) and -(2**53) < value < 2**53:
            out.append((key, int(value)))
    return out


@dataclass
class _View:
    """A list this saver stored or handed out (rung 5): its objects, their item ids and
    field objects. A put recognizes an element of it by identity."""

    objects: list[Any]
    ids: list[bytes]
    fields: list[tuple[Any, ...] | None]


class _Ladder(mn._Minimal):
    """The rungs' encoding: the checkpoint without its channel values, its metadata apart
    (the thread index reuses the encoded bytes), one blob per changed channel; values
    compressed from rung 2.

    Rung 5 stores a list of objects (the messages) as items, one per element, each id the
    BLAKE2b hash of its serialized bytes (so a fork or an edit never overwrites an item
    another checkpoint uses; items are shared within a thread, never deleted but with it),
    and the channel's blob is only the item ids in order. A put serializes only elements it
    has not seen: per (thread, namespace, channel) the saver remembers the last list it
    stored or handed out (:class:`_View`), and an element keeps its item if it is the same
    object at the same position of that list's leading run, its fields are the same objects
    as then, and no task returned it since (``put_writes``: a node may have edited what it
    returns at any depth). Reads build new objects from the items, every time. These are
    the rules of our list memory (``checkpoint/lists.py``) without its pages, spine, views
    per checkpoint, byte budget or templates: the blob holds all ids (16 bytes a message),
    not a spine and at most 16."""

    json_metadata = False
    """Rung 6: metadata whose JSON is exact is stored as JSON only (PostgreSQL's form)."""

    def __init__(self, level: int) -> None:
        super().__init__()
        self.level = level
        self._memo: dict[MemoKey, _View] = {}
        self._written: dict[MemoKey, dict[int, Any]] = {}
        self._memo_lock = threading.Lock()

    def _value(self, record: Record) -> Record:
        return compression.compress(*record) if self.level >= 2 else record

    def _load(self, kind: str, value: bytes) -> Any:
        return self.serde.loads_typed(compression.decompress(kind, value))

    # -- rung 5's memory of lists -------------------------------------------------------

    def _remember(self, key: MemoKey, view: _View) -> None:
        with self._memo_lock:
            self._memo.pop(key, None)
            self._memo[key] = view
            if len(self._memo) > MEMO_LISTS:
                del self._memo[next(iter(self._memo))]

    def _forget(self, thread_id: str) -> None:
        """Forget a thread's lists: its items are gone (deleted, expired)."""
        with self._memo_lock:
            for key in [k for k in self._memo if k[0] == thread_id]:
                del self._memo[key]
            for key in [k for k in self._written if k[0] == thread_id]:
                del self._written[key]

    def _note_written(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]]) -> None:
        """Remember the objects tasks returned for a remembered list, until its next put."""
        if self.level < DELTA:
            return
        thread_id, ns, _ = mn._where(config)
        for channel, value in writes:
            key = (thread_id, ns, channel)
            if key in self._memo:
                objects = value if isinstance(value, list) else [value]
                with self._memo_lock:
                    self._written.setdefault(key, {}).update((id(o), o) for o in objects)

    def _chunk(
        self, key: MemoKey, values: list[Any], memo: bool
    ) -> tuple[bytes, list[Item], _View]:
        """(blob, new items, view) of a list: the elements the remembered view holds
        unchanged keep their ids, the rest are serialized and hashed."""
        with self._memo_lock:
            view = self._memo.get(key) if memo else None
            written = self._written.pop(key, None)
        same = 0
        if view is not None:
            flags = list(map(operator.is_, values, view.objects))
            same = flags.index(False) if False in flags else len(flags)
            same = _fields_kept(values[:same], view.fields[:same])
            if written and same:
                positions = dict(zip(map(id, values[:same]), range(same), strict=True))
                same = min([same, *(positions.get(i, same) for i in written)])
        ids = view.ids[:same] if view is not None else []
        items: list[Item] = []
        for value in values[same:]:
            kind, data = self.serde.dumps_typed(value)
            h = hashlib.blake2b(kind.encode() + b"\0", digest_size=ID_SIZE)
            h.update(data)
            iid = h.digest()
            ids.append(iid)
            items.append((iid, *self._value((kind, data))))
        fields = (view.fields[:same] if view is not None else []) + _fields(values[same:])
        return b"".join(ids), items, _View(list(values), ids, fields)

    def _rebuild(self, key: MemoKey, blob: bytes, items: Mapping[bytes, Record]) -> list[Any]:
        """A list from its blob and items: new objects, remembered as the list handed out."""
        ids = [blob[i : i + ID_SIZE] for i in range(0, len(blob), ID_SIZE)]
        objects = [self._load(*items[iid]) for iid in ids]
        # a copy: the caller may change the list it is given
        self._remember(key, _View(list(objects), ids, _fields(objects)))
        return objects

    # -- encoding -----------------------------------------------------------------------

    def _encode_put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
        memo: bool = True,
    ) -> tuple[
        Record,
        bytes,
        list[tuple[str, str, str, bytes]],
        str | None,
        list[Item],
        list[tuple[MemoKey, _View]],
        Filters | None,
    ]:
        """(checkpoint record, packed metadata, blobs as (channel, version, type, value),
        title or None, new list items, views to remember once stored, rung 6's
        :class:`Filters` or None) of a put; the title only when the messages changed.
        ``memo=False``: every element serialized (after an expiry purged the thread's
        items). With :attr:`json_metadata` (PostgreSQL), metadata whose JSON comes back
        exact is not packed (``b""``): the JSON column holds it."""
        values = checkpoint["channel_values"]
        stripped = {**checkpoint, "channel_values": {}}
        record = self._value(self.serde.dumps_typed(stripped))
        serial = get_serializable_checkpoint_metadata(config, metadata)
        filters = _filters(serial) if self.level >= FILTERS else None
        if filters is not None and filters.exact and self.json_metadata:
            meta = b""
        else:
            meta = mn._pack(self._value(self.serde.dumps_typed(serial)))
        thread_id, ns, _ = mn._where(config)
        blobs = []
        items: list[Item] = []
        views: list[tuple[MemoKey, _View]] = []
        for channel, version in new_versions.items():
            if channel not in values:
                kind, value = "empty", b""
            elif self.level >= DELTA and _is_list(values[channel]):
                key = (thread_id, ns, channel)
                kind, (value, new, view) = LIST, self._chunk(key, values[channel], memo)
                items += new
                views.append((key, view))
            else:
                kind, value = self._value(self.serde.dumps_typed(values[channel]))
            blobs.append((channel, str(version), kind, value))
        title = None
        if self.level >= 3 and "messages" in new_versions:
            title = title_of(values.get("messages"))
        return record, meta, blobs, title, items, views, filters

    def _stored(self, views: Sequence[tuple[MemoKey, _View]]) -> None:
        """A put's lists are stored: the next put builds on them."""
        for key, view in views:
            self._remember(key, view)

    def _write_rows(self, writes: Sequence[tuple[str, Any]]) -> list[tuple[int, str, Record]]:
        return [(idx, ch, self._value(rec)) for idx, ch, rec in super()._write_rows(writes)]

    def _assemble(
        self,
        thread_id: str,
        ns: str,
        checkpoint_id: str,
        record: Record,
        meta: bytes | dict[str, Any],
        parent: str | None,
        blobs: Sequence[tuple[str, str, bytes]],
        writes: Sequence[tuple[str, str, str, Record]],
        items: Mapping[bytes, Record] | None = None,
    ) -> CheckpointTuple:
        """The tuple of a stored checkpoint; ``blobs`` as (channel, type, value), ``writes``
        as (task_path, task_id, channel, record) in ``writes_sort_key`` order, ``items``
        the list items the blobs name (rung 5); ``meta`` packed, or (rung 6 on PostgreSQL)
        the JSON column's value, decoded."""
        checkpoint = self._load(*record)
        checkpoint["channel_values"] = {
            channel: (
                self._rebuild((thread_id, ns, channel), value, items or {})
                if kind == LIST
                else self._load(kind, value)
            )
            for channel, kind, value in blobs
            if kind != "empty"
        }
        return CheckpointTuple(
            config=checkpoint_config(thread_id, ns, checkpoint_id),
            checkpoint=checkpoint,
            metadata=cast(CheckpointMetadata, meta)
            if isinstance(meta, dict)
            else self._load(*mn._unpack(meta)),
            parent_config=checkpoint_config(thread_id, ns, parent) if parent else None,
            pending_writes=[(task, ch, self._load(*rec)) for _, task, ch, rec in writes],
        )


# ---------------------------------------------------------------------------------------------
# SQLite

_SQLITE_SCHEMA = """
CREATE TABLE IF NOT EXISTS checkpoints (
    thread_id TEXT, checkpoint_ns TEXT, checkpoint_id TEXT, parent_id TEXT, type TEXT,
    value BLOB, meta BLOB, PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id));
CREATE TABLE IF NOT EXISTS blobs (
    thread_id TEXT, checkpoint_ns TEXT, channel TEXT, version TEXT, type TEXT, value BLOB,
    PRIMARY KEY (thread_id, checkpoint_ns, channel, version));
CREATE TABLE IF NOT EXISTS writes (
    thread_id TEXT, checkpoint_ns TEXT, checkpoint_id TEXT, task_id TEXT,
    idx INTEGER, task_path TEXT, channel TEXT, type TEXT, value BLOB,
    PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id, task_id, idx));
CREATE TABLE IF NOT EXISTS items (
    thread_id TEXT, checkpoint_ns TEXT, id BLOB, type TEXT, value BLOB,
    PRIMARY KEY (thread_id, checkpoint_ns, id)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS threads (
    thread_id TEXT PRIMARY KEY, created_at REAL, updated_at REAL, checkpoint_id TEXT,
    status TEXT, metadata BLOB, title TEXT, checkpoints INTEGER, expires_at REAL,
    interrupted_at TEXT, deleted INTEGER NOT NULL DEFAULT 0);
"""

# The thread row of a root put; the title of the first put that had one stays. LangGraph
# may run a checkpoint's put_writes before its put (other executor threads), so an
# interrupt is recorded as the checkpoint it belongs to (interrupted_at) and both calls
# work the status out from it: interrupted while the latest checkpoint is that one.
_SQLITE_INDEX = """
INSERT INTO threads (thread_id, created_at, updated_at, checkpoint_id, status, metadata,
    title, checkpoints, expires_at)
VALUES (?, ?, ?, ?, 'idle', ?, ?, 1, ?)
ON CONFLICT (thread_id) DO UPDATE SET created_at = coalesce(threads.created_at,
    excluded.created_at), updated_at = excluded.updated_at,
    checkpoint_id = excluded.checkpoint_id, status = CASE WHEN
    threads.interrupted_at = excluded.checkpoint_id THEN 'interrupted' ELSE 'idle' END,
    metadata = excluded.metadata, title = coalesce(threads.title, excluded.title),
    checkpoints = threads.checkpoints + 1, expires_at = excluded.expires_at
"""

# Rung 6: the metadata as JSON beside its packed bytes (list(filter=...) narrows on it in
# SQL), the run id in a column with a partial index (a run's checkpoints), and the thread
# index as ours has it by default: metadata as JSON, the user key's value in a column, and
# covering indexes by updated_at, by status, by user and by user and status.
_SQLITE_FILTERS = """
ALTER TABLE checkpoints ADD COLUMN run_id TEXT;
ALTER TABLE checkpoints ADD COLUMN meta_json TEXT;
CREATE INDEX IF NOT EXISTS checkpoints_run_id ON checkpoints (run_id) WHERE run_id IS NOT NULL;
ALTER TABLE threads ADD COLUMN user_id;
CREATE INDEX IF NOT EXISTS threads_updated ON threads (updated_at, thread_id, expires_at);
CREATE INDEX IF NOT EXISTS threads_status
    ON threads (status, updated_at, thread_id, expires_at);
CREATE INDEX IF NOT EXISTS threads_user ON threads (user_id, updated_at, thread_id, expires_at);
CREATE INDEX IF NOT EXISTS threads_user_status
    ON threads (user_id, status, updated_at, thread_id, expires_at);
"""

# Rung 6's admission: rung 4's row, whether the checkpoint is stored already (a re-put does
# not count again) and whether it has interrupt writes (its status, if they came first).
_SQLITE_ADMIT = f"""
SELECT t.expires_at, t.deleted,
    EXISTS (SELECT 1 FROM checkpoints WHERE thread_id = :t AND checkpoint_ns = :ns
        AND checkpoint_id = :id),
    EXISTS (SELECT 1 FROM writes WHERE thread_id = :t AND checkpoint_ns = :ns
        AND checkpoint_id = :id AND channel = '{INTERRUPT}')
FROM (SELECT 1) LEFT JOIN threads t ON t.thread_id = :t
"""

# Rung 6's thread row: status from the admission, counted unless a re-put, the user key's
# column, and the owner kept when a checkpoint's metadata lacks the key (as ours does).
_SQLITE_INDEX_FILTERS = f"""
INSERT INTO threads (thread_id, created_at, updated_at, checkpoint_id, status, metadata,
    title, checkpoints, expires_at, user_id)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (thread_id) DO UPDATE SET created_at = coalesce(threads.created_at,
    excluded.created_at), updated_at = excluded.updated_at,
    checkpoint_id = excluded.checkpoint_id, status = excluded.status,
    metadata = CASE WHEN excluded.user_id IS NULL AND threads.user_id IS NOT NULL
        THEN json_set(excluded.metadata, '$.{USER_KEY}', threads.metadata -> '$.{USER_KEY}')
        ELSE excluded.metadata END,
    user_id = coalesce(excluded.user_id, threads.user_id),
    title = coalesce(threads.title, excluded.title),
    checkpoints = threads.checkpoints + excluded.checkpoints, expires_at = excluded.expires_at
"""
_SQLITE_COLUMNS = "thread_id, checkpoint_ns, checkpoint_id, parent_id, type, value, meta"


def _sql_value(value: Any) -> Any:
    """The user key's value as SQLite's ``json_extract`` gives it (the column's value)."""
    if value is None or type(value) in (str, int, float):
        return value
    if type(value) is bool:
        return int(value)
    return json.dumps(_plain(value), separators=(",", ":"))


# put_writes with an interrupt (rungs 3-4): see above
_SQLITE_INTERRUPT = """
INSERT INTO threads (thread_id, checkpoints, interrupted_at) VALUES (?, 0, ?)
ON CONFLICT (thread_id) DO UPDATE SET interrupted_at = excluded.interrupted_at,
    status = CASE WHEN threads.checkpoint_id = excluded.interrupted_at THEN 'interrupted'
    ELSE threads.status END
"""


class LadderSqliteSaver(_Ladder):
    """``MinimalSqliteSaver``'s connection and transactions, with the rungs' tables."""

    def __init__(self, path: str, level: int) -> None:
        super().__init__(level)
        self.lock = threading.Lock()
        self.conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute("PRAGMA synchronous=NORMAL")
        self.conn.executescript(_SQLITE_SCHEMA)
        if level >= FILTERS and not any(
            row[1] == "meta_json" for row in self.conn.execute("PRAGMA table_info(checkpoints)")
        ):
            self.conn.executescript(_SQLITE_FILTERS)

    def close(self) -> None:
        with self.lock:
            self.conn.close()

    @contextlib.contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        with self.lock:
            self.conn.execute("BEGIN IMMEDIATE")
            try:
                yield self.conn
            except BaseException:
                self.conn.execute("ROLLBACK")
                raise
            self.conn.execute("COMMIT")

    def _purge(self, conn: sqlite3.Connection, thread_id: str) -> None:
        tables = ("checkpoints", "blobs", "writes", "items")
        for table in tables if self.level >= DELTA else tables[:3]:
            conn.execute(f"DELETE FROM {table} WHERE thread_id = ?", (thread_id,))
        self._forget(thread_id)

    def _admit(
        self,
        conn: sqlite3.Connection,
        thread_id: str,
        ns: str,
        parent: str | None,
        row: Sequence[Any] | None = None,
    ) -> bool:
        """Rung 4, inside the write's transaction: purge an expired thread (True then);
        refuse a write to a deleted one unless ``parent`` is a live checkpoint of it.
        ``row``: the thread's (expires_at, deleted) as rung 6's admission read them."""
        if row is None:
            row = conn.execute(
                "SELECT expires_at, deleted FROM threads WHERE thread_id = ?", (thread_id,)
            ).fetchone()
        if row is None:
            return False
        expires_at, deleted = row
        if deleted and (
            parent is None
            or conn.execute(
                "SELECT 1 FROM checkpoints WHERE thread_id = ? AND checkpoint_ns = ? "
                "AND checkpoint_id = ?",
                (thread_id, ns, parent),
            ).fetchone()
            is None
        ):
            raise Refused(f"thread {thread_id!r} was deleted")
        if expires_at is not None and expires_at < time.time():
            self._purge(conn, thread_id)
            conn.execute(
                "UPDATE threads SET title = NULL, checkpoints = 0 WHERE thread_id = ?",
                (thread_id,),
            )
            return True
        return False

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        thread_id, ns, parent = mn._where(config)
        encoded = self._encode_put(config, checkpoint, metadata, new_versions)
        now = time.time()
        cid = checkpoint["id"]
        known = interrupted = False
        with self._write() as conn:
            first = None
            if self.level >= FILTERS:
                first = conn.execute(
                    _SQLITE_ADMIT, {"t": thread_id, "ns": ns, "id": cid}
                ).fetchone()
                known, interrupted = bool(first[2]), bool(first[3])
            purged = self.level >= 4 and self._admit(
                conn, thread_id, ns, parent, None if first is None else first[:2]
            )
            if purged:
                known = interrupted = False
                if encoded[5]:
                    # the thread expired: the items its lists kept are gone, store them all
                    encoded = self._encode_put(config, checkpoint, metadata, new_versions, False)
            (kind, value), meta, blobs, title, items, views, filters = encoded
            if blobs:
                conn.executemany(
                    "INSERT OR REPLACE INTO blobs VALUES (?, ?, ?, ?, ?, ?)",
                    [(thread_id, ns, *blob) for blob in blobs],
                )
            if items:
                conn.executemany(
                    "INSERT OR IGNORE INTO items VALUES (?, ?, ?, ?, ?)",
                    [(thread_id, ns, *item) for item in items],
                )
            if filters is not None:
                conn.execute(
                    "INSERT OR REPLACE INTO checkpoints VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (thread_id, ns, cid, parent, kind, value, meta, filters.run_id, filters.text),
                )
                if not ns:
                    status = "interrupted" if interrupted else "idle"
                    row = (thread_id, now, now, cid, status, filters.text, title, int(not known))
                    conn.execute(
                        _SQLITE_INDEX_FILTERS,
                        (*row, now + TTL_SECONDS, _sql_value(filters.user)),
                    )
            else:
                conn.execute(
                    "INSERT OR REPLACE INTO checkpoints VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (thread_id, ns, cid, parent, kind, value, meta),
                )
            if self.level >= 3 and filters is None and not ns:
                expires = now + TTL_SECONDS if self.level >= 4 else None
                conn.execute(
                    _SQLITE_INDEX, (thread_id, now, now, checkpoint["id"], meta, title, expires)
                )
        self._stored(views)
        return self._next_config(config, checkpoint)

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        thread_id, ns, checkpoint_id = mn._where(config)
        rows = self._write_records(config, writes, task_id, task_path)
        self._note_written(config, writes)
        with self._write() as conn:
            if self.level >= 4:
                self._admit(conn, thread_id, ns, checkpoint_id)
                conn.execute(
                    "UPDATE threads SET expires_at = ? WHERE thread_id = ?",
                    (time.time() + TTL_SECONDS, thread_id),
                )
            conn.executemany(
                "INSERT OR REPLACE INTO writes VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", rows
            )
            if self.level >= 3 and any(channel == INTERRUPT for channel, _ in writes):
                conn.execute(_SQLITE_INTERRUPT, (thread_id, checkpoint_id))

    def delete_thread(self, thread_id: str) -> None:
        """The thread's data goes; from rung 4 its row stays as a tombstone."""
        with self._write() as conn:
            self._purge(conn, thread_id)
            if self.level >= 4:
                conn.execute(
                    "INSERT INTO threads (thread_id, deleted) VALUES (?, 1) "
                    "ON CONFLICT (thread_id) DO UPDATE SET deleted = 1",
                    (thread_id,),
                )
            else:
                conn.execute("DELETE FROM threads WHERE thread_id = ?", (thread_id,))

    def _tuple_of(self, row: Sequence[Any]) -> CheckpointTuple:
        """The tuple of a checkpoint row; called under the lock."""
        thread_id, ns, checkpoint_id, parent, kind, value, meta = row
        versions = self._load(kind, value)["channel_versions"]
        blobs: list[Any] = []
        if versions:
            pairs = ", ".join(["(?, ?)"] * len(versions))
            params: list[Any] = [thread_id, ns]
            for channel, version in versions.items():
                params += [channel, str(version)]
            blobs = self.conn.execute(
                "SELECT channel, type, value FROM blobs WHERE thread_id = ? AND "
                f"checkpoint_ns = ? AND (channel, version) IN (VALUES {pairs})",
                params,
            ).fetchall()
        writes = self.conn.execute(
            "SELECT task_path, task_id, channel, type, value FROM writes "
            "WHERE thread_id = ? AND checkpoint_ns = ? AND checkpoint_id = ? "
            "ORDER BY task_path, task_id, idx",
            (thread_id, ns, checkpoint_id),
        ).fetchall()
        items: dict[bytes, Record] = {}
        wanted = sorted({v[i : i + ID_SIZE] for _, k, v in blobs if k == LIST
                         for i in range(0, len(v), ID_SIZE)})  # fmt: skip
        for start in range(0, len(wanted), 900):  # under SQLite's bound on parameters
            batch = wanted[start : start + 900]
            marks = ", ".join(["?"] * len(batch))
            for iid, k, v in self.conn.execute(
                "SELECT id, type, value FROM items WHERE thread_id = ? AND checkpoint_ns = ? "
                f"AND id IN ({marks})",
                [thread_id, ns, *batch],
            ):
                items[iid] = (k, v)
        return self._assemble(
            thread_id,
            ns,
            checkpoint_id,
            (kind, value),
            meta,
            parent,
            blobs,
            [(p, t, c, (k, v)) for p, t, c, k, v in writes],
            items,
        )

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        thread_id, ns, checkpoint_id = mn._where(config)
        select = f"SELECT {_SQLITE_COLUMNS} FROM checkpoints "
        select += "WHERE thread_id = ? AND checkpoint_ns = ? "
        with self.lock:
            if checkpoint_id is None:
                row = self.conn.execute(
                    select + "ORDER BY checkpoint_id DESC LIMIT 1", (thread_id, ns)
                ).fetchone()
            else:
                row = self.conn.execute(
                    select + "AND checkpoint_id = ?", (thread_id, ns, checkpoint_id)
                ).fetchone()
            return None if row is None else self._tuple_of(row)

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        sql = f"SELECT {_SQLITE_COLUMNS} FROM checkpoints"
        clauses, params = self._clauses(config, before, "?")
        if self.level >= FILTERS:  # narrowed in SQL, then checked exactly (self._first)
            for key, value in _narrowing(filter):
                if key == "run_id" and type(value) is str:
                    clauses.append("run_id = ?")  # the run_id index
                else:
                    clauses.append("json_extract(meta_json, ?) = ?")
                    params.append(f'$."{key}"')
                params.append(value)
        if clauses:
            sql += " WHERE " + " AND ".join(clauses)
        with self.lock:
            rows = self.conn.execute(sql + " ORDER BY checkpoint_id DESC", params).fetchall()

        def tuples() -> Iterator[CheckpointTuple]:
            for row in rows:
                with self.lock:
                    tup = self._tuple_of(row)
                yield tup

        yield from self._first(tuples(), filter, limit)


# ---------------------------------------------------------------------------------------------
# PostgreSQL

_PG_SCHEMA = """
CREATE TABLE IF NOT EXISTS checkpoints (
    thread_id text, checkpoint_ns text, checkpoint_id text, parent_id text, type text,
    value bytea, meta bytea, versions jsonb,
    PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id));
CREATE TABLE IF NOT EXISTS blobs (
    thread_id text, checkpoint_ns text, channel text, version text, type text, value bytea,
    PRIMARY KEY (thread_id, checkpoint_ns, channel, version));
CREATE TABLE IF NOT EXISTS writes (
    thread_id text, checkpoint_ns text, checkpoint_id text, task_id text, idx integer,
    task_path text, channel text, type text, value bytea,
    PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id, task_id, idx));
CREATE TABLE IF NOT EXISTS items (
    thread_id text, checkpoint_ns text, id bytea, type text, value bytea,
    PRIMARY KEY (thread_id, checkpoint_ns, id));
CREATE TABLE IF NOT EXISTS threads (
    thread_id text PRIMARY KEY, created_at double precision, updated_at double precision,
    checkpoint_id text, status text, metadata bytea, title text, checkpoints integer,
    expires_at double precision, interrupted_at text, deleted boolean NOT NULL DEFAULT false);
-- rung 4: evaluated before a write's statements (they select from it): locks the thread's
-- row, refuses a write to a deleted thread that does not continue a live checkpoint, and
-- purges an expired thread's data (true then). The write's own statement updates the row:
-- a row changed in here could not be upserted by it. With ``reuses`` (rung 5: this saver
-- remembers list items of the thread) an expired thread fails the statement instead, purge
-- and all: the client forgets what it remembers and sends every item again.
CREATE OR REPLACE FUNCTION ladder_admit(t text, ns text, parent text, now double precision,
    reuses boolean)
RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE r record;
BEGIN
    SELECT expires_at, deleted INTO r FROM threads WHERE thread_id = t FOR UPDATE;
    IF NOT FOUND THEN RETURN false; END IF;
    IF r.deleted AND NOT EXISTS (SELECT 1 FROM checkpoints WHERE thread_id = t
            AND checkpoint_ns = ns AND checkpoint_id = parent) THEN
        RAISE EXCEPTION 'thread % was deleted', t USING ERRCODE = 'P0001';
    END IF;
    IF r.expires_at < now THEN
        IF reuses THEN RAISE EXCEPTION 'ladder: thread % expired', t; END IF;
        DELETE FROM checkpoints WHERE thread_id = t;
        DELETE FROM items WHERE thread_id = t;
        DELETE FROM blobs WHERE thread_id = t;
        DELETE FROM writes WHERE thread_id = t;
        RETURN true;
    END IF;
    RETURN false;
END $$;
"""


def _pg_put(level: int, root: bool) -> str:
    """A put of rung ``level`` as one statement (atomic without BEGIN/COMMIT; measured
    cheaper in client CPU than BEGIN, executemany, INSERT, COMMIT in one pipeline): the
    blobs as arrays, the checkpoint, the root namespace's thread row (rung 3), all selecting
    from rung 4's admission so that it runs first."""
    admit = level >= 4
    sql = "WITH a AS (SELECT ladder_admit(%s, %s, %s, %s, %s) AS purged)," if admit else "WITH"
    sql += """ b AS (INSERT INTO blobs SELECT %s, %s, u.*
    FROM unnest(%s::text[], %s::text[], %s::text[], %s::bytea[]) AS u""" + (", a" if admit else "")
    sql += " ON CONFLICT DO NOTHING)"
    if level >= DELTA:
        sql += """, i AS (INSERT INTO items SELECT %s, %s, u.*
    FROM unnest(%s::bytea[], %s::text[], %s::bytea[]) AS u, a ON CONFLICT DO NOTHING)"""
    if level >= 3 and root:
        sql += """, t AS (INSERT INTO threads (thread_id, created_at, updated_at, checkpoint_id,
        status, metadata, title, checkpoints, expires_at)
    SELECT %s, %s, %s, %s, 'idle', %s, %s, 1, %s""" + (" FROM a" if admit else "")
        sql += """
    ON CONFLICT (thread_id) DO UPDATE SET updated_at = excluded.updated_at,
        created_at = coalesce(threads.created_at, excluded.created_at),
        checkpoint_id = excluded.checkpoint_id, status = CASE WHEN
        threads.interrupted_at = excluded.checkpoint_id THEN 'interrupted' ELSE 'idle' END,
        metadata = excluded.metadata, title = coalesce(threads.title, excluded.title),
        checkpoints = threads.checkpoints + 1, expires_at = excluded.expires_at)"""
        if admit:  # after a purge the thread starts again
            sql = sql.replace(
                "coalesce(threads.title, excluded.title)",
                "CASE WHEN (SELECT purged FROM a) THEN excluded.title "
                "ELSE coalesce(threads.title, excluded.title) END",
            ).replace(
                "threads.checkpoints + 1",
                "CASE WHEN (SELECT purged FROM a) THEN 1 ELSE threads.checkpoints + 1 END",
            )
    sql += """
INSERT INTO checkpoints SELECT %s, %s, %s, %s, %s, %s, %s, %s::jsonb""" + (
        " FROM a" if admit else ""
    )
    return (
        sql
        + """
ON CONFLICT (thread_id, checkpoint_ns, checkpoint_id) DO UPDATE SET type = excluded.type,
    value = excluded.value, meta = excluded.meta, versions = excluded.versions"""
    )


def _pg_put_filters(root: bool) -> str:
    """Rung 6's put: rung 5's statement with the checkpoint's run id and metadata JSON
    (``jsonb``; the packed metadata empty when the JSON is exact), and in the root
    namespace the thread row upserted last, from the checkpoint insert's ``RETURNING``: a
    re-put of a stored checkpoint (an update, ``xmax <> 0``) does not count again. The row's
    metadata is ``jsonb`` with the user key's generated column (see ``_PG_FILTERS``); a
    checkpoint whose metadata lacks the key leaves the thread its owner's (as ours)."""
    sql = (
        _pg_put(DELTA, False)
        .replace("%s, %s::jsonb FROM a", "%s, %s::jsonb, %s, %s::jsonb FROM a")
        .replace(
            "versions = excluded.versions",
            "versions = excluded.versions, run_id = excluded.run_id,"
            " meta_json = excluded.meta_json",
        )
    )
    if not root:
        return sql
    head, _, insert = sql.partition("\nINSERT INTO checkpoints")
    return (
        head
        + ", c AS (INSERT INTO checkpoints"
        + insert
        + f"""
    RETURNING (xmax = 0) AS fresh)
INSERT INTO threads (thread_id, created_at, updated_at, checkpoint_id, status, metadata,
    title, checkpoints, expires_at)
SELECT %s, %s, %s, %s, 'idle', %s::jsonb, %s, c.fresh::int, %s FROM c
ON CONFLICT (thread_id) DO UPDATE SET updated_at = excluded.updated_at,
    created_at = coalesce(threads.created_at, excluded.created_at),
    checkpoint_id = excluded.checkpoint_id, status = CASE WHEN
    threads.interrupted_at = excluded.checkpoint_id THEN 'interrupted' ELSE 'idle' END,
    metadata = CASE WHEN threads.metadata ? '{USER_KEY}'
            AND NOT excluded.metadata ? '{USER_KEY}'
        THEN jsonb_build_object('{USER_KEY}', threads.metadata -> '{USER_KEY}')
            || excluded.metadata
        ELSE excluded.metadata END,
    title = CASE WHEN (SELECT purged FROM a) THEN excluded.title
        ELSE coalesce(threads.title, excluded.title) END,
    checkpoints = CASE WHEN (SELECT purged FROM a) THEN 1
        ELSE threads.checkpoints + excluded.checkpoints END,
    expires_at = excluded.expires_at"""
    )


_PG_PUT = {
    (level, root): _pg_put(level, root) if level < FILTERS else _pg_put_filters(root)
    for level in range(1, len(RUNGS) + 1)
    for root in (True, False)
}

# Rung 6's columns and indexes (see _SQLITE_FILTERS): the thread row's metadata as jsonb
# with the user key's value as a generated column, the covering indexes ours has.
_PG_FILTERS = f"""
ALTER TABLE checkpoints ADD COLUMN IF NOT EXISTS run_id text,
    ADD COLUMN IF NOT EXISTS meta_json jsonb;
CREATE INDEX IF NOT EXISTS checkpoints_run_id ON checkpoints (run_id) WHERE run_id IS NOT NULL;
DO $$ BEGIN
    IF (SELECT atttypid FROM pg_attribute WHERE attrelid = 'threads'::regclass
            AND attname = 'metadata') = 'bytea'::regtype THEN
        ALTER TABLE threads ALTER COLUMN metadata TYPE jsonb USING NULL;
    END IF;
END $$;
ALTER TABLE threads ADD COLUMN IF NOT EXISTS user_id jsonb
    GENERATED ALWAYS AS (metadata -> '{USER_KEY}') STORED;
CREATE INDEX IF NOT EXISTS threads_updated ON threads (updated_at, thread_id)
    INCLUDE (expires_at);
CREATE INDEX IF NOT EXISTS threads_status ON threads (status, updated_at, thread_id)
    INCLUDE (expires_at);
CREATE INDEX IF NOT EXISTS threads_user ON threads (user_id, updated_at, thread_id)
    INCLUDE (expires_at);
CREATE INDEX IF NOT EXISTS threads_user_status
    ON threads (user_id, status, updated_at, thread_id) INCLUDE (expires_at);
"""


def _pg_put_writes(admit: bool) -> str:
    """put_writes as one statement (rung 4, or an interrupt on rung 3): the writes as arrays
    and the thread's row upserted (as ``_SQLITE_INTERRUPT``); on rung 4 after the admission,
    with the thread's expiry refreshed (and its title and count cleared after a purge)."""
    status = """interrupted_at = coalesce(excluded.interrupted_at, threads.interrupted_at),
    status = CASE WHEN threads.checkpoint_id = excluded.interrupted_at THEN 'interrupted'
        ELSE threads.status END"""
    if admit:
        sql = f"""WITH a AS (SELECT ladder_admit(%s, %s, %s, %s, %s) AS purged),
s AS (INSERT INTO threads (thread_id, checkpoints, expires_at, interrupted_at)
    SELECT %s, 0, %s, CASE WHEN %s THEN %s END FROM a
    ON CONFLICT (thread_id) DO UPDATE SET expires_at = excluded.expires_at, {status},
    title = CASE WHEN (SELECT purged FROM a) THEN NULL ELSE threads.title END,
    checkpoints = CASE WHEN (SELECT purged FROM a) THEN 0 ELSE threads.checkpoints END)"""
    else:
        sql = f"""WITH s AS (INSERT INTO threads (thread_id, checkpoints, interrupted_at)
    VALUES (%s, 0, %s) ON CONFLICT (thread_id) DO UPDATE SET {status})"""
    return (
        sql
        + """
INSERT INTO writes SELECT %s, %s, %s, %s, u.idx, %s, u.channel, u.type, u.value
FROM unnest(%s::integer[], %s::text[], %s::text[], %s::bytea[])
    AS u(idx, channel, type, value)"""
        + (", a" if admit else "")
        + """
ON CONFLICT (thread_id, checkpoint_ns, checkpoint_id, task_id, idx)
DO UPDATE SET task_path = excluded.task_path, channel = excluded.channel,
    type = excluded.type, value = excluded.value"""
    )


_PG_WRITES_ADMIT = _pg_put_writes(True)
_PG_WRITES_INTERRUPT = _pg_put_writes(False)

# the checkpoint, its blobs (those its channel_versions name) and its writes: one statement
_PG_SELECT = """
SELECT c.thread_id, c.checkpoint_ns, c.checkpoint_id, c.parent_id, c.type, c.value, c.meta,
       b.channels, b.types, b.vals, w.paths, w.tasks, w.channels, w.types, w.vals
FROM checkpoints c
LEFT JOIN LATERAL (
    SELECT array_agg(bl.channel) AS channels, array_agg(bl.type) AS types,
           array_agg(bl.value) AS vals
    FROM jsonb_each_text(c.versions) v
    JOIN blobs bl ON bl.thread_id = c.thread_id AND bl.checkpoint_ns = c.checkpoint_ns
        AND bl.channel = v.key AND bl.version = v.value
) b ON true
LEFT JOIN LATERAL (
    SELECT array_agg(task_path ORDER BY task_path, task_id, idx) AS paths,
           array_agg(task_id ORDER BY task_path, task_id, idx) AS tasks,
           array_agg(channel ORDER BY task_path, task_id, idx) AS channels,
           array_agg(type ORDER BY task_path, task_id, idx) AS types,
           array_agg(value ORDER BY task_path, task_id, idx) AS vals
    FROM writes
    WHERE thread_id = c.thread_id AND checkpoint_ns = c.checkpoint_ns
      AND checkpoint_id = c.checkpoint_id
) w ON true
"""

# rung 5: the items of the checkpoint's lists too (each once), from the ids in their blobs
_PG_SELECT_LISTS = (
    _PG_SELECT.replace("w.types, w.vals\n", "w.types, w.vals, li.ids, li.types, li.vals\n")
    + """LEFT JOIN LATERAL (
    SELECT array_agg(it.id) AS ids, array_agg(it.type) AS types, array_agg(it.value) AS vals
    FROM items it
    WHERE it.thread_id = c.thread_id AND it.checkpoint_ns = c.checkpoint_ns AND it.id IN (
        SELECT substring(bl.value FROM g * 16 + 1 FOR 16)
        FROM jsonb_each_text(c.versions) v
        JOIN blobs bl ON bl.thread_id = c.thread_id AND bl.checkpoint_ns = c.checkpoint_ns
            AND bl.channel = v.key AND bl.version = v.value AND bl.type = 'ladder:list'
        CROSS JOIN generate_series(0, length(bl.value) / 16 - 1) g)
) li ON true
"""
)


class _Expired(RuntimeError):
    """A rung-5 write found its thread expired: nothing was written (see ``ladder_admit``)."""


class LadderPostgresSaver(_Ladder):
    """``MinimalPostgresSaver``'s pool; a put is one statement (one round trip, no
    BEGIN/COMMIT), ``put_writes`` the featureless saver's ``executemany`` or, with an
    admission or an interrupt to record, one statement."""

    json_metadata = True

    def __init__(self, url: str, level: int, max_size: int = 4) -> None:
        super().__init__(level)
        self.pool = ConnectionPool(
            url,
            min_size=2,
            max_size=max_size,
            kwargs={"autocommit": True, "prepare_threshold": 0},
            open=True,
        )
        with self.pool.connection() as conn:
            conn.execute(_PG_SCHEMA, prepare=False)
            if level >= FILTERS:
                conn.execute(_PG_FILTERS, prepare=False)
        self.select = _PG_SELECT_LISTS if level >= DELTA else _PG_SELECT
        if level >= FILTERS:  # the JSON column, when it holds the metadata alone
            self.select = self.select.replace(
                "\nFROM checkpoints c\n",
                ", CASE WHEN length(c.meta) = 0 THEN c.meta_json END\nFROM checkpoints c\n",
            )

    def close(self) -> None:
        self.pool.close()

    @contextlib.contextmanager
    def _connection(self) -> Iterator[psycopg.Connection[Any]]:
        """A pooled connection (autocommit: a write is one statement); ``ladder_admit``'s
        refusal raised as :class:`Refused`."""
        try:
            with self.pool.connection() as conn:
                yield conn
        except psycopg.errors.RaiseException as error:
            if str(error).startswith("ladder: thread"):
                raise _Expired(str(error)) from error
            raise Refused(str(error)) from error

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        try:
            return self._put(config, checkpoint, metadata, new_versions, True)
        except _Expired:  # its items went with the thread: forget them, send them all
            self._forget(mn._where(config)[0])
            return self._put(config, checkpoint, metadata, new_versions, False)

    def _put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
        memo: bool,
    ) -> RunnableConfig:
        """A put; ``memo``: whether list elements stored before may keep their items (then
        an expired thread raises :class:`_Expired`, nothing written)."""
        thread_id, ns, parent = mn._where(config)
        (kind, value), meta, blobs, title, items, views, filters = self._encode_put(
            config, checkpoint, metadata, new_versions, memo
        )
        versions = json.dumps({ch: str(v) for ch, v in checkpoint["channel_versions"].items()})
        now = time.time()
        root = not ns
        params: list[Any] = []
        if self.level >= 4:
            params += [thread_id, ns, parent, now, memo and self.level >= DELTA]
        params += [thread_id, ns, *(list(column) for column in zip(*blobs, strict=True))]
        if not blobs:
            params += [[], [], [], []]
        if self.level >= DELTA:
            params += [thread_id, ns, *(list(column) for column in zip(*items, strict=True))]
            if not items:
                params += [[], [], []]
        expires = now + TTL_SECONDS if self.level >= 4 else None
        if filters is not None:
            params += [thread_id, ns, checkpoint["id"], parent, kind, value, meta, versions]
            params += [filters.run_id, filters.text]
            if root:
                params += [thread_id, now, now, checkpoint["id"], filters.text, title, expires]
        else:
            if self.level >= 3 and root:
                params += [thread_id, now, now, checkpoint["id"], meta, title, expires]
            params += [thread_id, ns, checkpoint["id"], parent, kind, value, meta, versions]
        with self._connection() as conn:
            conn.execute(_PG_PUT[self.level, root], params)
        self._stored(views)
        return self._next_config(config, checkpoint)

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        thread_id, ns, checkpoint_id = mn._where(config)
        rows = self._write_records(config, writes, task_id, task_path)
        interrupted = self.level >= 3 and any(channel == INTERRUPT for channel, _ in writes)
        self._note_written(config, writes)
        if self.level < 4 and not interrupted:  # as the featureless saver's
            with self.pool.connection() as conn, conn.cursor() as cur:
                cur.executemany(mn._PG_PUT_WRITES, rows)
            return
        try:
            self._put_writes(thread_id, ns, checkpoint_id, task_id, task_path, rows, interrupted)
        except _Expired:  # what this saver remembers of the thread went with it
            self._forget(thread_id)
            self._put_writes(
                thread_id, ns, checkpoint_id, task_id, task_path, rows, interrupted, False
            )

    def _put_writes(
        self,
        thread_id: str,
        ns: str,
        checkpoint_id: str | None,
        task_id: str,
        task_path: str,
        rows: Sequence[Sequence[Any]],
        interrupted: bool,
        memo: bool = True,
    ) -> None:
        """put_writes as one statement (rung 4 up, or an interrupt on rung 3); ``memo`` as
        :meth:`_put`'s."""
        if self.level >= 4:
            now = time.time()
            params: list[Any] = [thread_id, ns, checkpoint_id, now, memo and self.level >= DELTA]
            params += [thread_id, now + TTL_SECONDS, interrupted, checkpoint_id]
        else:
            params = [thread_id, checkpoint_id]
        params += [thread_id, ns, checkpoint_id, task_id, task_path]
        idxs, channels, kinds, values = ([r[i] for r in rows] for i in (4, 6, 7, 8))
        params += [idxs, channels, kinds, values]
        sql = _PG_WRITES_ADMIT if self.level >= 4 else _PG_WRITES_INTERRUPT
        with self._connection() as conn:
            conn.execute(sql, params)

    def delete_thread(self, thread_id: str) -> None:
        with self.pool.connection() as conn, conn.transaction():
            for table in ("checkpoints", "blobs", "writes", "items"):
                conn.execute(f"DELETE FROM {table} WHERE thread_id = %s", (thread_id,))
            if self.level >= 4:
                conn.execute(
                    "INSERT INTO threads (thread_id, deleted) VALUES (%s, true) "
                    "ON CONFLICT (thread_id) DO UPDATE SET deleted = true",
                    (thread_id,),
                )
            else:
                conn.execute("DELETE FROM threads WHERE thread_id = %s", (thread_id,))
        self._forget(thread_id)

    def _from_row(self, row: Sequence[Any]) -> CheckpointTuple:
        json_meta = None
        if self.level >= FILTERS:  # the metadata's JSON, when it has no packed bytes
            json_meta, row = row[-1], row[:-1]
        (thread_id, ns, checkpoint_id, parent, kind, value, meta) = row[:7]
        b_channels, b_types, b_vals, paths, tasks, channels, types, vals = row[7:15]
        items: dict[bytes, Record] = {}
        if len(row) > 15:  # rung 5
            i_ids, i_types, i_vals = row[15:]
            for iid, k, v in zip(i_ids or [], i_types or [], i_vals or [], strict=True):
                items[bytes(iid)] = (k, bytes(v))
        blobs = [
            (c, k, bytes(v))
            for c, k, v in zip(b_channels or [], b_types or [], b_vals or [], strict=True)
        ]
        writes = [
            (p, t, c, (k, bytes(v)))
            for p, t, c, k, v in zip(
                paths or [], tasks or [], channels or [], types or [], vals or [], strict=True
            )
        ]
        return self._assemble(
            thread_id,
            ns,
            checkpoint_id,
            (kind, bytes(value)),
            json_meta if json_meta is not None else bytes(meta),
            parent,
            blobs,
            writes,
            items,
        )

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        thread_id, ns, checkpoint_id = mn._where(config)
        where = "WHERE c.thread_id = %s AND c.checkpoint_ns = %s "
        with self.pool.connection() as conn:
            if checkpoint_id is None:
                row = conn.execute(
                    self.select + where + "ORDER BY c.checkpoint_id DESC LIMIT 1", (thread_id, ns)
                ).fetchone()
            else:
                row = conn.execute(
                    self.select + where + "AND c.checkpoint_id = %s",
                    (thread_id, ns, checkpoint_id),
                ).fetchone()
        return None if row is None else self._from_row(row)

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        clauses, params = self._clauses(config, before, "%s", "c.")
        if self.level >= FILTERS:  # narrowed in SQL, then checked exactly (self._first)
            for key, value in _narrowing(filter):
                if type(value) is not str:
                    continue  # jsonb's 1 is not true: numbers only in Python
                if key == "run_id":
                    clauses.append("c.run_id = %s")  # the run_id index
                    params.append(value)
                else:
                    clauses.append("c.meta_json @> %s::jsonb")
                    params.append(json.dumps({key: value}))
        sql = self.select + (" WHERE " + " AND ".join(clauses) if clauses else "")
        with self.pool.connection() as conn:
            rows = conn.execute(sql + " ORDER BY c.checkpoint_id DESC", params).fetchall()
        yield from self._first(map(self._from_row, rows), filter, limit)


# ---------------------------------------------------------------------------------------------
# Redis
#
# Per (thread, ns) under ``base``: ``base:ids`` (sorted set of checkpoint ids), ``base:cp:<id>``
# (hash: v = checkpoint, m = metadata, p = parent id or "", b = JSON list of its blob fields),
# ``base:blobs`` (hash: "<channel>\x1f<version>" -> blob), ``base:w:<id>`` (hash of writes,
# as the minimal saver's), ``base:items`` (hash: item id -> list item, rung 5; a list's blob
# is "ladder:list|" and its item ids). The thread's index row is the hash
# ``<prefix>:thread:<thread_id>``.

# ARGV: base, checkpoint id or "" for the latest
_READ = """
local base = ARGV[1]
local id = ARGV[2]
if id == '' then
    local ids = redis.call('ZREVRANGEBYLEX', base .. ':ids', '+', '-', 'LIMIT', 0, 1)
    if #ids == 0 then return false end
    id = ids[1]
end
local cp = redis.call('HMGET', base .. ':cp:' .. id, 'v', 'm', 'p', 'b')
if not cp[1] then return false end
local fields = cjson.decode(cp[4])
local vals = {}
if #fields > 0 then vals = redis.call('HMGET', base .. ':blobs', unpack(fields)) end
local items = {}
for _, v in ipairs(vals) do
    if v and string.sub(v, 1, 12) == 'ladder:list|' then
        local ids = {}
        for i = 13, #v, 16 do ids[#ids + 1] = string.sub(v, i, i + 15) end
        for _, item in ipairs(redis.call('HMGET', base .. ':items', unpack(ids))) do
            items[#items + 1] = item
        end
    end
end
return {id, cp[1], cp[2], cp[3], cp[4], vals, redis.call('HGETALL', base .. ':w:' .. id), items}
"""

# What the write scripts share: ARGV[1] base, ARGV[2] the thread's hash, ARGV[3] now,
# ARGV[4] the checkpoint the write continues ("" for none), ARGV[5] "1" to admit (rung 4:
# refuse a write to a deleted thread unless it continues a live checkpoint, purge an
# expired thread's data first; ``purged`` says it did), ARGV[6] the new expiry ("" without
# TTL).
_ADMIT = """
local base, thread, now = ARGV[1], ARGV[2], tonumber(ARGV[3])
local purged = false
if ARGV[5] == '1' then
    local t = redis.call('HMGET', thread, 'expires', 'deleted')
    if t[2] == '1' and (ARGV[4] == ''
            or redis.call('EXISTS', base .. ':cp:' .. ARGV[4]) == 0) then
        return redis.error_reply('REFUSED thread was deleted')
    end
    if t[1] and tonumber(t[1]) < now then
        for _, id in ipairs(redis.call('ZRANGE', base .. ':ids', 0, -1)) do
            redis.call('DEL', base .. ':cp:' .. id, base .. ':w:' .. id)
        end
        redis.call('DEL', base .. ':ids', base .. ':blobs', base .. ':items')
        redis.call('HDEL', thread, 'title', 'count')
        purged = true
    end
end
if ARGV[6] ~= '' then redis.call('HSET', thread, 'expires', ARGV[6]) end
"""

# rungs 3-5. ARGV[7..]: id, v, m, b, root ("1" or ""), title, n blob pairs, pairs..., then
# "1" if the put's lists keep items stored before, k item pairs, pairs... (rung 5). Such a
# put on a thread that expired is not written (3 returned: its items went with the thread,
# the client sends them all again); 2 if the thread expired and the put is written. The
# status as _SQLITE_INDEX works it out (put_writes may come before its put).
_PUT = (
    _ADMIT
    + """
local n = tonumber(ARGV[13])
local at = 14 + 2 * n
if purged and ARGV[at] == '1' then return 3 end
local id = ARGV[7]
local k = tonumber(ARGV[at + 1])
local e = at + 2 + 2 * k
local six = #ARGV >= e
local cp = base .. ':cp:' .. id
if six then
    redis.call('HSET', cp, 'v', ARGV[8], 'm', ARGV[9], 'p', ARGV[4], 'b', ARGV[10], 'j', ARGV[e])
else
    redis.call('HSET', cp, 'v', ARGV[8], 'm', ARGV[9], 'p', ARGV[4], 'b', ARGV[10])
end
local added = redis.call('ZADD', base .. ':ids', 0, id)
if n > 0 then redis.call('HSET', base .. ':blobs', unpack(ARGV, 14, 13 + 2 * n)) end
if k > 0 then redis.call('HSET', base .. ':items', unpack(ARGV, at + 2, at + 1 + 2 * k)) end
if ARGV[11] == '1' then
    local status, meta = 'idle', ARGV[9]
    if not six then
        if redis.call('HGET', thread, 'interrupted') == id then status = 'interrupted' end
    else
        -- rung 6: the status from the checkpoint's pending writes, read here; a re-put of
        -- a stored checkpoint does not count again; the metadata as JSON, the user key's
        -- value kept from the thread when the checkpoint's lacks it, the thread in the
        -- index's sets (all threads; the user's) scored by the time of the write
        for _, f in ipairs(redis.call('HKEYS', base .. ':w:' .. id)) do
            if string.find(f, '"__interrupt__"', 1, true) then status = 'interrupted' end
        end
        meta = ARGV[e]
        local user, tix, tid = ARGV[e + 1], ARGV[e + 2], ARGV[e + 3]
        local old = redis.call('HGET', thread, 'user')
        if user == '' and old then
            user = old
            if meta == '{}' then meta = '{"user_id":' .. old .. '}'
            else meta = string.sub(meta, 1, -2) .. ',"user_id":' .. old .. '}' end
        end
        if old and old ~= user then redis.call('ZREM', tix .. ':user:' .. old, tid) end
        redis.call('ZADD', tix .. ':all', ARGV[3], tid)
        if user ~= '' then
            redis.call('HSET', thread, 'user', user)
            redis.call('ZADD', tix .. ':user:' .. user, ARGV[3], tid)
        end
    end
    redis.call('HSET', thread, 'updated', ARGV[3], 'checkpoint', id, 'status', status,
        'metadata', meta)
    redis.call('HSETNX', thread, 'created', ARGV[3])
    if ARGV[12] ~= '' then redis.call('HSETNX', thread, 'title', ARGV[12]) end
    if purged or not six then added = 1 end
    redis.call('HINCRBY', thread, 'count', added)
end
if purged then return 2 end
return 1
"""
)

# rung 6: ``list(filter=...)`` judged in Redis. ARGV: base, the newest id to look at ("+"
# or "(<id>" for all before it), then key, value pairs (text values only: the rest is left
# to the exact check on the decoded metadata). The ids of the matching checkpoints, newest
# first.
_FILTER = """
local base = ARGV[1]
local out = {}
for _, id in ipairs(redis.call('ZREVRANGEBYLEX', base .. ':ids', ARGV[2], '-')) do
    local j = redis.call('HGET', base .. ':cp:' .. id, 'j')
    local ok = j ~= false
    if ok then
        local m = cjson.decode(j)
        for i = 3, #ARGV, 2 do
            if m[ARGV[i]] ~= ARGV[i + 1] then
                ok = false
                break
            end
        end
    end
    if ok then out[#out + 1] = id end
end
return out
"""

# rung 4, or an interrupt on rung 3. ARGV[7]: "1" if the writes hold an interrupt;
# ARGV[8..]: field, value, ... 2 returned if the thread expired (its items went with it).
_PUT_WRITES = (
    _ADMIT
    + """
if #ARGV > 7 then redis.call('HSET', base .. ':w:' .. ARGV[4], unpack(ARGV, 8)) end
if ARGV[7] == '1' then
    redis.call('HSET', thread, 'interrupted', ARGV[4])
    if redis.call('HGET', thread, 'checkpoint') == ARGV[4] then
        redis.call('HSET', thread, 'status', 'interrupted')
    end
end
if purged then return 2 end
return 1
"""
)


class LadderRedisSaver(_Ladder):
    """``MinimalRedisSaver``'s client: a put is one pipelined round trip (rungs 1-2) or one
    script call (from rung 3: the thread's hash with it, atomically); ``put_writes`` one
    ``HSET``, or one script call on rung 4 (and for an interrupt on rung 3); a read of a
    checkpoint with its blobs and writes is one script call. Single-node Redis only."""

    def __init__(self, url: str, prefix: str, level: int) -> None:
        super().__init__(level)
        self.client = redis.Redis.from_url(url)
        self.prefix = prefix
        self.read = self.client.register_script(_READ)
        self.put_script = self.client.register_script(_PUT)
        self.writes_script = self.client.register_script(_PUT_WRITES)
        self.filter_script = self.client.register_script(_FILTER)

    def close(self) -> None:
        self.client.close()

    def _base(self, thread_id: str, ns: str) -> str:
        return f"{self.prefix}:{thread_id}:{ns}"

    def _thread(self, thread_id: str) -> str:
        return f"{self.prefix}:thread:{thread_id}"

    def _tix(self) -> str:
        """Rung 6: the prefix of the thread index's sorted sets (``:all``, ``:user:<JSON>``)."""
        return f"{self.prefix}:tix"

    def _shared(self, thread_id: str, ns: str, continues: str | None) -> list[Any]:
        """The write scripts' ARGV[1..6]."""
        now = time.time()
        admit = self.level >= 4
        expires = now + TTL_SECONDS if admit else ""
        base, thread = self._base(thread_id, ns), self._thread(thread_id)
        return [base, thread, now, continues or "", "1" if admit else "", expires]

    def _script(self, script: Any, args: list[Any]) -> int:
        try:
            return int(script(args=args))
        except redis.ResponseError as error:
            if str(error).startswith("REFUSED"):
                raise Refused(str(error)) from error
            raise

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        thread_id, ns, parent = mn._where(config)
        memo = True
        while True:  # twice if the thread expired and the put kept items stored before
            encoded = self._encode_put(config, checkpoint, metadata, new_versions, memo)
            record, meta, blobs, title, items, views, filters = encoded
            base, cid = self._base(thread_id, ns), checkpoint["id"]
            fields = json.dumps(
                [f"{ch}\x1f{v}" for ch, v in checkpoint["channel_versions"].items()]
            )
            pairs: list[Any] = []
            for channel, version, kind, value in blobs:
                pairs += [f"{channel}\x1f{version}", mn._pack((kind, value))]
            if self.level < 3:
                break
            args = self._shared(thread_id, ns, parent)
            args += [cid, mn._pack(record), meta, fields, "" if ns else "1", title or ""]
            args += [len(blobs), *pairs, "1" if memo and views else "", len(items)]
            for iid, kind, value in items:
                args += [iid, mn._pack((kind, value))]
            if filters is not None:
                user = "" if filters.user is None else json.dumps(_plain(filters.user))
                args += [filters.text, user, self._tix(), thread_id]
            done = self._script(self.put_script, args)
            if done > 1:  # the thread had expired: what this saver remembers of it is gone
                self._forget(thread_id)
            if done == 3:
                memo = False
                continue
            self._stored(views)
            return self._next_config(config, checkpoint)
        pipe = self.client.pipeline(transaction=False)
        cp = {"v": mn._pack(record), "m": meta, "p": parent or "", "b": fields}
        pipe.hset(f"{base}:cp:{cid}", mapping=cp)  # type: ignore[arg-type]
        pipe.zadd(f"{base}:ids", {cid: 0})
        if pairs:
            pipe.hset(f"{base}:blobs", items=pairs)
        pipe.execute()
        return self._next_config(config, checkpoint)

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        thread_id, ns, checkpoint_id = mn._where(config)
        pairs: list[Any] = []
        for idx, channel, record in self._write_rows(writes):
            pairs += [json.dumps([task_path, task_id, idx, channel]), mn._pack(record)]
        interrupted = self.level >= 3 and any(channel == INTERRUPT for channel, _ in writes)
        self._note_written(config, writes)
        if self.level >= 4 or interrupted:
            args = self._shared(thread_id, ns, checkpoint_id)
            if self._script(self.writes_script, [*args, "1" if interrupted else "", *pairs]) == 2:
                self._forget(thread_id)
        elif pairs:
            key = f"{self._base(thread_id, ns)}:w:{checkpoint_id}"
            self.client.hset(key, items=pairs)

    def delete_thread(self, thread_id: str) -> None:
        """The root namespace's data goes (the one the chat graph writes); from rung 4 the
        thread's hash stays as a tombstone."""
        base = self._base(thread_id, "")
        members: list[bytes] = self.client.zrange(f"{base}:ids", 0, -1)  # type: ignore[assignment]
        ids = [mn._text(i) for i in members]
        pipe = self.client.pipeline(transaction=True)
        for cid in ids:
            pipe.delete(f"{base}:cp:{cid}", f"{base}:w:{cid}")
        pipe.delete(f"{base}:ids", f"{base}:blobs", f"{base}:items")
        if self.level >= FILTERS:  # out of the thread index's sets
            pipe.zrem(f"{self._tix()}:all", thread_id)
            user = self.client.hget(self._thread(thread_id), "user")
            if user is not None:
                pipe.zrem(f"{self._tix()}:user:{mn._text(user)}", thread_id)
        if self.level >= 4:
            pipe.hset(self._thread(thread_id), "deleted", "1")
        else:
            pipe.delete(self._thread(thread_id))
        pipe.execute()
        self._forget(thread_id)

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        thread_id, ns, checkpoint_id = mn._where(config)
        reply = self.read(args=[self._base(thread_id, ns), checkpoint_id or ""])
        if not reply:
            return None
        cid, value, meta, parent, fields, vals, flat, found = reply
        blobs = []
        items: dict[bytes, Record] = {}
        at = 0  # the items of the lists, in the order of their blobs and ids
        for field, packed in zip(json.loads(fields), vals, strict=True):
            if packed is not None:
                kind, data = mn._unpack(packed)
                blobs.append((field.partition("\x1f")[0], kind, data))
                for i in range(0, len(data), ID_SIZE) if kind == LIST else ():
                    if found[at] is not None:
                        items[data[i : i + ID_SIZE]] = mn._unpack(found[at])
                    at += 1
        writes = sorted(
            (json.loads(field), packed) for field, packed in zip(flat[::2], flat[1::2], strict=True)
        )
        return self._assemble(
            thread_id,
            ns,
            mn._text(cid),
            mn._unpack(value),
            meta,
            mn._text(parent) or None,
            blobs,
            [(p, t, c, mn._unpack(packed)) for (p, t, _, c), packed in writes],
            items,
        )

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        """One thread's checkpoints, newest first (``config`` required, as the minimal
        saver's)."""
        if config is None:
            raise ValueError("the ladder Redis saver lists one thread's checkpoints only")
        thread_id, ns, checkpoint_id = mn._where(config)
        if checkpoint_id is not None:
            found = [checkpoint_id]
        else:
            before_id = get_checkpoint_id(before) if before is not None else None
            top = f"({before_id}" if before_id else "+"
            texts = [kv for kv in _narrowing(filter) if type(kv[1]) is str]
            if self.level >= FILTERS and texts:  # judged in Redis, then exactly (self._first)
                args = [self._base(thread_id, ns), top, *chain.from_iterable(texts)]
                ids = self.filter_script(args=args)
            else:
                ids = self.client.zrevrangebylex(f"{self._base(thread_id, ns)}:ids", top, "-")
            found = [mn._text(i) for i in ids]
        tuples = (self.get_tuple(checkpoint_config(thread_id, ns, one)) for one in found)
        yield from self._first((t for t in tuples if t is not None), filter, limit)


# ---------------------------------------------------------------------------------------------
# opening and measuring


def level_of(target: tg.Target) -> int:
    """The rung of a ladder target (1-6)."""
    return int(target.slug[-1])


@contextlib.contextmanager
def open_saver(target: tg.Target, env: tg.Env) -> Iterator[tuple[Any, str]]:
    """(saver, marker) on fresh storage, removed afterwards; anything not on the ladder
    through ``minimal.open_saver``."""
    if target.family != LADDER:
        with mn.open_saver(target, env) as opened:
            yield opened
        return
    storage = tg.make_storage(target, env)
    try:
        assert storage.url is not None
        level = level_of(target)
        saver: LadderSqliteSaver | LadderPostgresSaver | LadderRedisSaver
        if target.backend == "sqlite":
            saver = LadderSqliteSaver(storage.url, level)
        elif target.backend == "postgres":
            saver = LadderPostgresSaver(storage.url, level)
        else:
            saver = LadderRedisSaver(storage.url, storage.marker, level)
        try:
            yield saver, storage.marker
        finally:
            saver.close()
    finally:
        storage.close()


def _table(savers: dict[str, dict[str, dict[str, float]]]) -> str:
    """Markdown: per backend and T, the featureless saver, each rung and ours, with ratios
    to the featureless saver and each step's CPU increment over the one above it."""
    lines = [
        "| backend | saver | @T | turn p50 ms | cpu ms/turn | p50 / featureless "
        "| cpu / featureless | cpu step ms |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for backend, featureless, rungs, ours in BACKENDS:
        for length, by_saver in savers.items():
            base = by_saver[featureless.name]
            previous = base["cpu ms/turn"]
            for target in [featureless, *rungs, ours]:
                m = by_saver[target.name]
                step = m["cpu ms/turn"] - previous if target is not featureless else 0.0
                if target is not ours:
                    previous = m["cpu ms/turn"]
                lines.append(
                    f"| {backend} | {target.name} | {length} | {m['turn p50 ms']:.3f} | "
                    f"{m['cpu ms/turn']:.3f} | {m['turn p50 ms'] / base['turn p50 ms']:.3f}x | "
                    f"{m['cpu ms/turn'] / base['cpu ms/turn']:.3f}x | {step:+.3f} |"
                )
    memory = [
        f"| InMemorySaver | @T={length} | {by[tg.MEMORY_SAVER.name]['turn p50 ms']:.3f} ms | "
        f"{by[tg.MEMORY_SAVER.name]['cpu ms/turn']:.3f} ms cpu |"
        for length, by in savers.items()
    ]
    return "\n".join([*lines, "", *memory])


def _named_table(savers: dict[str, dict[str, dict[str, float]]], names: list[str]) -> str:
    """Markdown for ``--savers``: each saver named, with ratios to the first one."""
    lines = [
        f"| saver | @T | turn p50 ms | cpu ms/turn | p50 / {names[0]} | cpu / {names[0]} |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for length, by_saver in savers.items():
        base = by_saver[names[0]]
        for name in names:
            m = by_saver[name]
            lines.append(
                f"| {name} | {length} | {m['turn p50 ms']:.3f} | {m['cpu ms/turn']:.3f} | "
                f"{m['turn p50 ms'] / base['turn p50 ms']:.3f}x | "
                f"{m['cpu ms/turn'] / base['cpu ms/turn']:.3f}x |"
            )
    return "\n".join(lines)


CALLS = ("put", "put_writes", "get_tuple")


def call_split(
    target: tg.Target, env: tg.Env, warmup: int, turns: int, length: int = 1
) -> dict[str, float]:
    """Where a turn's CPU goes, per saver call, ms per turn: the process CPU of the timed
    turns (``turn``), the thread CPU spent inside each of the saver's ``put``,
    ``put_writes`` and ``get_tuple`` (a sync saver runs every call on the calling thread;
    a call made inside another counts once, in the outer one), and the rest (``outside``:
    LangGraph's runtime, its executor threads, the collector). Threads as in
    ``minimal.short_threads``; the conversation is checked afterwards."""
    spent = dict.fromkeys(CALLS, 0.0)
    calls = dict.fromkeys(CALLS, 0)
    lock = threading.Lock()
    inside = threading.local()
    counting = False

    def timed(name: str, method: Any) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            if getattr(inside, "busy", False):
                return method(*args, **kwargs)
            inside.busy = True
            started = time.thread_time()
            try:
                return method(*args, **kwargs)
            finally:
                inside.busy = False
                if counting:
                    with lock:
                        spent[name] += time.thread_time() - started
                        calls[name] += 1

        return call

    with open_saver(target, env) as (saver, marker):
        for name in CALLS:
            setattr(saver, name, timed(name, getattr(saver, name)))
        graph = wl.chat_graph().compile(checkpointer=saver)
        for i in range(warmup):
            mn._turn(graph, f"{marker}-warm{i}")
        counting, done, thread = True, 0, 0
        cpu = time.process_time()
        while done < turns:
            for turn in range(1, length + 1):
                mn._turn(graph, f"{marker}-t{thread}", turn)
                done += 1
            thread += 1
        cpu = time.process_time() - cpu
        counting = False
        mn._turn(graph, f"{marker}-t0", length + 1)
        config: RunnableConfig = {"configurable": {"thread_id": f"{marker}-t0"}}
        wl._check_conversation(dict(graph.get_state(config).values), length + 1, target.name)
    out = {"turn": cpu / done * 1000.0}
    out |= {name: spent[name] / done * 1000.0 for name in CALLS}
    out["outside"] = out["turn"] - sum(out[name] for name in CALLS)
    out |= {f"{name} calls": calls[name] / done for name in CALLS}
    return out


def _calls_table(split: dict[str, dict[str, dict[str, float]]]) -> str:
    """Markdown: per T and saver, ms of CPU per turn in each call and outside them."""
    lines = [
        "| saver | @T | turn | put | put_writes | get_tuple | outside | calls/turn |",
        "|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for length, by_saver in split.items():
        for name, m in by_saver.items():
            counts = "/".join(f"{m[f'{c} calls']:g}" for c in CALLS)
            cells = " | ".join(f"{m[c]:.3f}" for c in ("turn", *CALLS, "outside"))
            lines.append(f"| {name} | {length} | {cells} | {counts} |")
    return "\n".join(lines)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.ladder",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--pg", default="postgresql://postgres@127.0.0.1:5432/test")
    p.add_argument("--redis", default="redis://127.0.0.1:6379/0")
    p.add_argument("--turns", default="1,10,50", help="thread lengths T, e.g. 1,10")
    p.add_argument("--turns-sample", type=int, default=300, help="timed turns per unit")
    p.add_argument("--warmup", type=int, default=30, help="untimed turns per unit first")
    p.add_argument("--rounds", type=int, default=3, help="medians over this many rounds")
    p.add_argument("--json", type=Path, help="write the numbers here")
    p.add_argument(
        "--calls",
        metavar="SLUGS",
        help="instead: CPU per turn inside each saver call (put, put_writes, get_tuple) "
        "for these savers, e.g. min_sqlite,lad_sqlite5,lad_sqlite6,ours_sqlite",
    )
    p.add_argument(
        "--savers",
        metavar="SLUGS",
        help="time only these savers' turns; the official ones may be named too "
        "(e.g. off_sqlite,min_sqlite,lad_sqlite6,ours_sqlite: the ratios to the official "
        "saver from one run)",
    )
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    tg.check_pg_url(args.pg)
    tg.check_redis_url(args.redis)
    lengths = [int(t) for t in str(args.turns).split(",") if t.strip()]
    env = tg.Env(pg=args.pg, redis=args.redis)
    load_before = os.getloadavg()
    savers = SAVERS
    if args.calls or args.savers:
        by_slug = {t.slug: t for t in [*SAVERS, tg.OFF_SQLITE, tg.OFF_PG]}
        named = (args.calls or args.savers).split(",")
        if unknown := [s for s in named if s.strip() and s.strip() not in by_slug]:
            raise SystemExit(f"unknown savers {unknown}; known: {sorted(by_slug)}")
        savers = [by_slug[slug.strip()] for slug in named if slug.strip()]
    samples: dict[str, dict[str, dict[str, list[float]]]] = {
        str(t): {s.name: {} for s in savers} for t in lengths
    }
    for round_no in range(args.rounds):
        shift = round_no % len(savers)
        for target in savers[shift:] + savers[:shift]:
            for t in lengths:
                if args.calls:
                    measured = call_split(target, env, args.warmup, args.turns_sample, t)
                else:
                    measured = mn.short_threads(
                        target, env, args.warmup, args.turns_sample, t, opener=open_saver
                    )
                for metric, value in measured.items():
                    samples[str(t)][target.name].setdefault(metric, []).append(value)
                print(f"round {round_no + 1} {target.name} @T={t}: {measured}", file=sys.stderr)
    medians = {
        length: {
            name: {metric: statistics.median(values) for metric, values in metrics.items()}
            for name, metrics in by_saver.items()
        }
        for length, by_saver in samples.items()
    }
    out: dict[str, Any] = {
        "meta": {
            "run_id": env.run_id,
            "rounds": args.rounds,
            "turns": lengths,
            "turns_sample": args.turns_sample,
            "warmup": args.warmup,
            "load average before": list(load_before),
            "load average after": list(os.getloadavg()),
            "cpus": os.cpu_count(),
        },
        "savers": {
            length: {name: {**m, "samples": samples[length][name]} for name, m in by.items()}
            for length, by in medians.items()
        },
    }
    print(
        f"turns @T={','.join(map(str, lengths))} (fresh T-turn threads): {args.turns_sample} "
        f"timed per saver and T after {args.warmup} warm-up turns, median of {args.rounds} "
        f"rounds; load average {' '.join(f'{x:.2f}' for x in load_before)} -> "
        f"{' '.join(f'{x:.2f}' for x in out['meta']['load average after'])}"
    )
    if args.calls:
        print(_calls_table(medians))
    elif args.savers:
        print(_named_table(medians, [t.name for t in savers]))
    else:
        print(_table(medians))
    if args.json:
        args.json.write_text(json.dumps(out, indent=2) + "\n")
    return out


if __name__ == "__main__":
    main()
