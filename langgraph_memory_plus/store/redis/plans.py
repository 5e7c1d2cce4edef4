"""The Redis store's operations as plans over the Lua scripts in :mod:`.lua`.

Key layout
----------
Items are grouped into *shards*: the namespaces that share their first ``shard_depth``
labels (default 2; a shorter namespace is a shard of its own). ``("users", "u1")``,
``("users", "u1", "notes")`` and ``("users", "u1", "prefs")`` are one shard. A shard is
nine keys ``{prefix}:store:{<tag>}:<kind>``, the tag a hex SHA-256 prefix of the shard's
labels, so one shard is one hash slot and any label text (braces, NUL, megabytes) maps
to a safe tag (its *path*, the labels joined by NUL, is its registry member):

- ``items`` (hash): item id -> ``version,created,updated,ttl`` + newline + value JSON.
  An id is the namespace's labels joined by NUL, two NULs, then the key (labels hold no
  NUL and are never empty, so the first double NUL ends the namespace).
- ``order`` (sorted set): ids by version, for "newest first" pages without a sort.
- ``exp`` (sorted set): ids of items with a TTL, by expiry time. Expiry is data: every
  read compares it with the server's clock, so an expired item is never returned,
  counted or listed, even before the sweeper deletes it.
- ``ns`` (sorted set, all scores 0) and ``nsn`` (hash): the shard's namespaces in
  label order, and how many items each holds.
- ``vecs`` (hash): id -> the item's embedding vectors (packed doubles).
- ``meta`` (hash): the version clock, the shard's registration and due hint (below).
- ``tomb`` (hash, only while one is live): tombstones of namespace prefixes in the
  shard, by SHA-1 of the prefix, with when each ends; the write script drops a put they
  cover (see :mod:`..tombstones` and ``TOMBS`` in :mod:`.lua`).
- ``fv`` (hash): the field index, how many items hold each short string (by path, see
  :mod:`..tokens`), and an upper bound of the items' versions (``FIELDS`` in :mod:`.lua`).

Each hash slot holding shards has a *slot index* of two keys ``{prefix}:store:{x<n>}:ix``
and ``:iv``, the tag ``x<n>`` picked to fall into that slot (:class:`_SlotTags`); a single
server has one pair for the whole store (tag ``i`` + the registry's). ``ix`` (sorted set)
lists, for every shard of the slot, the shard itself and each short string its field index
counts; ``iv`` (hash) holds an upper bound of the versions of the items behind each entry
(``SLOTS`` in :mod:`.lua`). The shard scripts keep it in the same atomic step as the
field index, which they can because it lives in the shards' slot.

An item's ``version`` comes from its shard's clock: the server's time in microseconds, or
the shard's previous version plus one where that is larger. So versions never repeat,
even after a shard is emptied and its clock forgotten, and they order writes across
shards by time: search results come newest first, as on PostgreSQL.

The store's *registry* is six keys in a hash slot of their own: ``shards`` (sorted set,
scores 0: every shard's labels, so a lexicographic range finds the shards under a
namespace prefix), ``due`` (sorted set: when each shard next has something for the TTL
sweeper), ``epoch`` (hash: each shard's epoch, below), ``seq`` (the last epoch
given), ``tombs`` (tombstones of prefixes shorter than a shard path, which ``enroll``
checks: such a prefix covers shards that may not exist yet) and ``indexed`` (set while
every shard is in its slot index: from the first enrolment of an empty registry, or once
a search has indexed the shards an earlier release wrote; see ``_ensure_indexed``).

Why this layout
---------------
- **Cluster-safe and spread out.** One shard per user (``("users", id, ...)`` or
  ``("memories", id)``) spreads a store over a cluster's nodes, and every operation on
  one shard is one atomic script. One tag for the whole store would put it on one node;
  one tag per namespace would make a search of ``("users", id)`` visit every one of the
  user's namespaces in separate scripts. One tag per top-level label is the depth-1
  case: fine when the first label is a user id, one hot slot when it is ``"memories"``.
- **Reads touch what they ask for.** ``get`` and anything under a prefix at least
  ``shard_depth`` labels long go straight to one shard, without the registry. Shorter
  prefixes (``search(("users",))``, ``list_namespaces()``) read the registry range and
  visit those shards only; ``list_namespaces`` stops as soon as its page is full and
  skips whole subtrees that ``max_depth`` folds into a result already listed.
- **The price:** there is no full index without modules. A search across shards first
  reads the slot indexes (on a single server one script, whatever the number of shards;
  on a cluster one per slot holding shards under the prefix): only the shards holding
  every string the filter requires are read, newest version bound first, until no shard
  left can hold a newer match. The bounds are per string, so a shard written a moment
  ago whose only match is old is read last. Within a shard, the script reads items
  newest first and evaluates the filter itself (``FILTER`` in :mod:`.lua`), so it stops
  at the page's worth of matches and sends only those, plus the few items whose match
  only Python can decide; a filter without such a string that matches rarely still
  reads every shard. A semantic search reads every match, to score it exactly. A shard
  is read by one script, which blocks the server while it runs, so keep shards
  user-sized (that is what ``shard_depth`` is for).

Registration and the sweeper's hints
------------------------------------
The registry lives on another slot than the shards, so it is kept right by a protocol
rather than by atomicity, and it may list empty shards but never misses one:

- A write puts an item into a shard only if the shard's ``meta`` says it is registered;
  otherwise the script refuses, writing nothing, and the writer *enrolls* the shard
  (adds it to ``shards`` and gives it a fresh epoch) and runs the script again, passing
  the shard's generation seen at refusal. The same holds for the due hint: an item
  whose expiry is earlier than the shard's hint is written only after ``due`` was
  lowered. So the registry is updated before the data it describes, and a writer that
  dies in between leaves at most an empty shard listed.
- A sweeper (or ``delete_namespace``, or a delete of the shard's last item) that
  empties a shard *closes* it (drops its data and registration, bumps its generation,
  leaves ``meta`` to expire) and then removes it from the registry only if its epoch
  is unchanged since before the shard script ran. A writer that enrolled in between
  changed the epoch (the shard stays listed); a writer that enrolled before finds the
  generation changed and enrolls again. Raising a due hint follows the same rule, so
  ``due`` never promises a shard later than its earliest expiry. An emptied registry
  drops ``seq`` too: epochs come from the server's clock, so they never repeat.

Atomicity of a batch
--------------------
All the writes of a batch that fall into one hash slot run as one script, which checks
every condition before its first write. On a single server (or Valkey) every shard is
"in one slot" for this purpose, so a whole batch is one atomic script. On Redis Cluster
a batch writing shards on several slots runs one script per slot: conditions are checked
on every slot first (a stale ``expected_version`` fails the batch with nothing written);
if a condition then fails on a later slot because another writer got there in between,
the slots already written are undone (each item restored if still as the batch left it)
before ``ConflictError`` is raised. A connection lost between two slots' scripts leaves
the earlier slots written; Redis Cluster has no cross-slot transaction to prevent that.
"""

from __future__ import annotations

import binascii
import bisect
import hashlib
import json
import logging
import math
import struct
import sys
import threading
from array import array
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

from redis.crc import key_slot

from ...drivers.plan import Plan
from ...drivers.redis import Eval, Scan
from ...errors import InvalidConfigError, MemoryPlusError
from ..base import (
    GetRequest,
    ListRequest,
    Namespace,
    SearchRequest,
    WriteRequest,
    conflict_error,
)
from ..filters import Compare, CompareTime, Cond, Elements, Equals, Fields, NotEquals, holds
from ..tokens import filter_tokens
from ..values import VersionedItem, VersionedSearchItem
from ..vectors import Vector, cosine, norm
from .lua import REGISTRY_KINDS, SHARD_KINDS, SLOT_KINDS

# A script holds its arguments and its reply in memory at once, and Redis refuses a
# request over 1 GiB (client-query-buffer-limit): values and batches stay well below.
MAX_VALUE_BYTES = 64 * 1024 * 1024
MAX_BATCH_BYTES = 256 * 1024 * 1024
# An item id (namespace and key) is kept in up to four structures of its shard and sent
# with every read of the item; real ids are far shorter.
MAX_KEY_BYTES = 4096

DEFAULT_SHARD_DEPTH = 2
READ_CHUNK = 32  # shards per read script: bounds one script's reply and run time
SEARCH_FIRST = 8  # shards read by a search's first script; each next one reads twice as many
SEARCH_CHUNK = 128  # at most, so that the floor found so far prunes the rest
OWN_KINDS = SHARD_KINDS[: -len(SLOT_KINDS)]  # a shard's own keys; then its slot index's
SLOTS = 16384
SHARD_CACHE = 100_000  # shards whose keys a store remembers
SHARD_TOKEN_BYTES = 64  # the longest string a shard's field index counts
REGISTRY_PAGE = 1024  # registry entries read per round trip
LIST_PAGE = 64  # shards visited per round of list_namespaces (it stops early)
SWEEP_SHARDS = 100  # due shards looked at per sweep batch
ENROLL_ATTEMPTS = 8
HINT_MARGIN_US = 1_000_000  # due hints are enrolled this much early (clock steps)

EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
logger = logging.getLogger("langgraph_memory_plus.store")
Command = Eval | Scan
Arg = bytes | str | int


def _utf8(text: str) -> bytes:
    return text.encode("utf-8", "surrogatepass")


def encode_namespace(namespace: Sequence[str]) -> bytes:
    """Labels joined by NUL: byte order of the result is Python's order of the tuples."""
    return b"\0".join(_utf8(label) for label in namespace)


def decode_namespace(raw: bytes) -> Namespace:
    return tuple(label.decode("utf-8", "surrogatepass") for label in raw.split(b"\0"))


def item_id(namespace: Namespace, key: str) -> bytes:
    return encode_namespace(namespace) + b"\0\0" + _utf8(key)


def split_id(raw: bytes) -> tuple[Namespace, str]:
    ns, _, key = raw.partition(b"\0\0")
    return decode_namespace(ns), key.decode("utf-8", "surrogatepass")


def lex_range(prefix: bytes) -> tuple[bytes, bytes]:
    """``ZRANGEBYLEX`` bounds of the members equal to ``prefix`` or below it."""
    if not prefix:
        return b"-", b"+"
    return b"[" + prefix, b"(" + prefix + b"\x01"


def pack_vectors(vectors: Sequence[tuple[str, Vector]]) -> bytes:
    """An item's vectors as ``V`` + dims (uint32) + little-endian doubles; b"" for none."""
    if not vectors:
        return b""
    flat = [x for _, vector in vectors for x in vector]
    return b"V" + struct.pack(f"<I{len(flat)}d", len(vectors[0][1]), *flat)


def unpack_vectors(blob: bytes) -> list[Vector]:
    if not blob:
        return []
    (dims,) = struct.unpack_from("<I", blob, 1)
    data = array("d")
    data.frombytes(blob[5:])
    if sys.byteorder == "big":
        data.byteswap()
    return [data[i : i + dims].tolist() for i in range(0, len(data), dims)]


class _SlotTags:
    """A hash tag in each cluster hash slot (the first ``x<hex n>`` to land there), naming
    the slot's index keys. Found as slots are asked for, going on from where the last
    search stopped: a slot costs 16,384 tries at first, all of them about 160,000."""

    def __init__(self) -> None:
        self._tags: dict[int, str] = {}
        self._next = 0
        self._lock = threading.Lock()

    def __getitem__(self, slot: int) -> str:
        tag = self._tags.get(slot)
        if tag is not None:
            return tag
        with self._lock:
            while slot not in self._tags:
                tag = f"x{self._next:x}"
                self._tags.setdefault(binascii.crc_hqx(tag.encode(), 0) % SLOTS, tag)
                self._next += 1
            return self._tags[slot]


slot_tags = _SlotTags()


def _time(us: bytes) -> datetime:
    return EPOCH + timedelta(microseconds=int(us))


@dataclass(frozen=True)
class Shard:
    """A shard's labels (its registry member), its keys, and which script group it is in."""

    path: bytes
    keys: tuple[bytes, ...]
    group: int


@dataclass(frozen=True)
class Row:
    """A decoded item record."""

    id: bytes
    namespace: Namespace
    key: str
    value: dict[str, Any]
    version: int
    created: bytes
    updated: bytes
    has_ttl: bool

    @classmethod
    def read(cls, raw_id: bytes, record: bytes) -> Row:
        head, _, body = record.partition(b"\n")
        version, created, updated, ttl = head.split(b",")
        namespace, key = split_id(raw_id)
        value = json.loads(body)
        return cls(raw_id, namespace, key, value, int(version), created, updated, ttl != b"")

    def item(self) -> VersionedItem:
        return VersionedItem(
            value=self.value,
            key=self.key,
            namespace=self.namespace,
            created_at=_time(self.created),
            updated_at=_time(self.updated),
            version=self.version,
        )

    def search_item(self, score: float | None) -> VersionedSearchItem:
        return VersionedSearchItem(
            self.namespace,
            self.key,
            self.value,
            _time(self.created),
            _time(self.updated),
            score,
            version=self.version,
        )


class _Undecidable(Exception):
    """A filter operand the search script cannot compare exactly (see :func:`filter_args`)."""


def filter_args(cond: Cond | None) -> list[Arg]:
    """A search filter as the script's tokens (``FILTER`` in :mod:`.lua`); [""] for none.

    A part the script cannot evaluate exactly becomes ``U`` (undecided), so the items it
    would decide go to :func:`..filters.holds` instead: text that is not valid UTF-8
    (Lua compares bytes), numbers of 2**53 and more in ``$eq``/``$ne`` (Python compares
    integers exactly, cjson reads them as doubles), infinite or NaN bounds (Lua's
    ``tonumber`` reads ``inf`` and ``nan`` only where its C library does), and dates
    (:func:`..filters.as_instant` is the definition; the items left to Python are those
    the script cannot rule out by the rest of the filter).
    """
    return [""] if cond is None else _cond_args(cond)


def _cond_args(cond: Cond) -> list[Arg]:
    try:
        if isinstance(cond, Equals):
            return ["E", *_operand_args(cond.operand)]
        if isinstance(cond, NotEquals):
            return ["N", *_operand_args(cond.operand)]
        if isinstance(cond, Compare):
            if not math.isfinite(cond.number):
                raise _Undecidable
            return [cond.op, repr(cond.number)]
        if isinstance(cond, CompareTime):
            raise _Undecidable
        if isinstance(cond, Fields):
            pairs = [(_text(key), _cond_args(sub)) for key, sub in cond.fields]
            return ["F", len(pairs), *(a for key, sub in pairs for a in (key, *sub))]
        subs = cond.items if isinstance(cond, Elements) else cond.conds
        tag = "L" if isinstance(cond, Elements) else "A"
        return [tag, len(subs), *(a for sub in subs for a in _cond_args(sub))]
    except _Undecidable:
        return ["U"]


def _operand_args(value: Any) -> list[Arg]:
    if value is None:
        return ["z"]
    if isinstance(value, str):
        return ["s", _text(value)]
    if isinstance(value, (bool, int, float)):
        if abs(value) >= 2**53:
            raise _Undecidable
        return ["n", repr(float(value))]
    if isinstance(value, list):
        return ["l", len(value), *(a for x in value for a in _operand_args(x))]
    pairs = [(_text(key), _operand_args(x)) for key, x in value.items()]
    return ["d", len(pairs), *(a for key, x in pairs for a in (key, *x))]


def _text(text: str) -> bytes:
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        raise _Undecidable from None


Entries = Sequence[tuple[Shard, Sequence[Arg]]]


class RedisStorePlans:
    """Arguments for the scripts and decoding of their replies, for one key prefix."""

    max_value_bytes = MAX_VALUE_BYTES
    max_batch_bytes = MAX_BATCH_BYTES
    max_key_bytes = MAX_KEY_BYTES
    escape_strings = False  # Redis strings hold NUL; JSON text escapes it anyway

    def __init__(self, prefix: str, shard_depth: int, *, cluster: bool) -> None:
        if not isinstance(prefix, str) or not prefix or any(c in prefix for c in "{}\x00"):
            raise InvalidConfigError(
                f"key_prefix must be a non-empty string without braces or NUL, got {prefix!r}"
            )
        if isinstance(shard_depth, bool) or not isinstance(shard_depth, int) or shard_depth < 1:
            raise InvalidConfigError(f"shard_depth must be a positive integer, got {shard_depth!r}")
        self.prefix = prefix
        self.depth = shard_depth
        self.cluster = cluster
        tag = "r" + hashlib.sha256(_utf8(prefix)).hexdigest()[:8]  # never a shard's tag
        self.registry = [_utf8(f"{prefix}:store:{{{tag}}}:{kind}") for kind in REGISTRY_KINDS]
        self._shards: dict[bytes, Shard] = {}
        self._index_tag = "i" + tag[1:]  # a single server's one slot index
        self._indexed = False  # seen the registry say every shard is in its slot index

    def slot_index(self, group: int) -> tuple[bytes, ...]:
        """The slot index keys (``ix``, ``iv``, see SLOTS in .lua) of a script group: the
        hash slot's on a cluster; one pair for the whole store on a single server."""
        tag = slot_tags[group] if self.cluster else self._index_tag
        return tuple(_utf8(f"{self.prefix}:store:{{{tag}}}:{kind}") for kind in SLOT_KINDS)

    # -- shards and script calls ------------------------------------------------------

    def shard_at(self, path: bytes) -> Shard:
        """The shard of a path; remembered, since a search across namespaces names every
        shard under its prefix (hashing them was a third of its time)."""
        shard = self._shards.get(path)
        if shard is None:
            tag = hashlib.sha256(path).hexdigest()[:32]
            own = tuple(_utf8(f"{self.prefix}:store:{{{tag}}}:{kind}") for kind in OWN_KINDS)
            group = key_slot(own[0]) if self.cluster else 0
            shard = Shard(path, own + self.slot_index(group), group)
            if len(self._shards) >= SHARD_CACHE:
                self._shards.clear()
            self._shards[path] = shard
        return shard

    def shard(self, namespace: Namespace) -> Shard:
        return self.shard_at(encode_namespace(namespace[: self.depth]))

    @staticmethod
    def groups(shards: Sequence[Shard], chunk: int | None = None) -> list[list[int]]:
        """Indexes of ``shards`` by script: one group per hash slot (one in all on a
        single server), split into ``chunk``-sized parts if given."""
        by_group: dict[int, list[int]] = {}
        for i, shard in enumerate(shards):
            by_group.setdefault(shard.group, []).append(i)
        size = chunk or len(shards) or 1
        return [part[i : i + size] for part in by_group.values() for i in range(0, len(part), size)]

    @staticmethod
    def call(
        script: str, entries: Entries, indexes: Sequence[int], head: Sequence[Arg] = ()
    ) -> Eval:
        """One shard script on the shards ``entries[i]`` for ``i`` in ``indexes``."""
        keys = [key for i in indexes for key in entries[i][0].keys]
        args: list[Arg] = [*head, len(indexes), *(entries[i][0].path for i in indexes)]
        for i in indexes:
            args.extend(entries[i][1])
        return Eval(script, keys, args)

    def fan_out(
        self, script: str, entries: Entries, head: Sequence[Arg] = (), chunk: int = READ_CHUNK
    ) -> Plan[Command, list[tuple[int, Any]]]:
        """Run a read script over ``entries``; (entry index, that shard's reply) pairs."""
        out: list[tuple[int, Any]] = []
        for indexes in self.groups([shard for shard, _ in entries], chunk):
            replies = yield self.call(script, entries, indexes, head)
            out.extend(zip(indexes, replies, strict=True))
        return out

    def registered(self, prefix: Namespace) -> Plan[Command, list[tuple[bytes, bytes]]]:
        """(path, epoch) of every registered shard at or below ``prefix``."""
        lo, hi = lex_range(encode_namespace(prefix))
        found: list[tuple[bytes, bytes]] = []
        while True:
            page = yield from self._registry_page(lo, hi, REGISTRY_PAGE)
            found.extend(page)
            if len(page) < REGISTRY_PAGE:
                return found
            lo = b"(" + page[-1][0]

    def _registry_page(
        self, lo: bytes, hi: bytes, limit: int
    ) -> Plan[Command, list[tuple[bytes, bytes]]]:
        reply = yield Eval("registry", self.registry, ["range", lo, hi, limit])
        return list(zip(reply[::2], reply[1::2], strict=True))

    def scope(self, prefix: Namespace) -> Plan[Command, list[Shard]]:
        """The shards holding items under ``prefix``: one, when the prefix is at least a
        shard path long (no registry read); else the registered ones below it."""
        if len(prefix) >= self.depth:
            return [self.shard(prefix)]
        lo, hi = lex_range(encode_namespace(prefix))
        found: list[Shard] = []
        while True:
            paths = yield Eval("registry", self.registry, ["names", lo, hi, REGISTRY_PAGE])
            found.extend(self.shard_at(path) for path in paths)
            if len(paths) < REGISTRY_PAGE:
                return found
            lo = b"(" + paths[-1]

    # -- setup --------------------------------------------------------------------------

    def setup(self) -> Plan[Command, None]:
        """Nothing to create: keys come into being with the first write."""
        return
        yield

    # -- reads --------------------------------------------------------------------------

    def get(self, requests: list[GetRequest]) -> Plan[Command, list[VersionedItem | None]]:
        by_shard: dict[bytes, tuple[Shard, list[tuple[int, bytes, bool]]]] = {}
        for pos, request in enumerate(requests):
            shard = self.shard(request.namespace)
            wanted = by_shard.setdefault(shard.path, (shard, []))[1]
            wanted.append((pos, item_id(request.namespace, request.key), request.refresh))
        plan = list(by_shard.values())
        entries = [
            (shard, [len(ids), *(a for _, raw, r in ids for a in (raw, int(r)))])
            for shard, ids in plan
        ]
        results: list[VersionedItem | None] = [None] * len(requests)
        for index, records in (yield from self.fan_out("get", entries, chunk=READ_CHUNK)):
            for (pos, raw, _), record in zip(plan[index][1], records, strict=True):
                if record is not None:
                    results[pos] = Row.read(raw, record).item()
        return results

    def search(self, request: SearchRequest) -> Plan[Command, list[VersionedSearchItem]]:
        if request.limit == 0:
            return []
        flt = request.filter
        # A page can use only the newest offset+limit matches. Across shards, the slot
        # indexes (see SLOTS in .lua) name those holding every token the filter requires,
        # with a bound of their matches' versions: they are read newest bound first, each
        # script down to the floor (the oldest of the newest offset+limit matches found so
        # far), until no shard left can hold a newer match. The scripts send the items
        # their filter leaves undecided too, which Python decides. A semantic search
        # scores every match.
        scored = request.query is not None
        want = None if scored else request.offset + request.limit
        if len(request.prefix) >= self.depth:
            shards, bounds = [self.shard(request.prefix)], [math.inf]
        else:
            shards, bounds = yield from self._candidates(request.prefix, flt)
        step = 4 if scored else 3
        rows: list[tuple[Row, float | None]] = []
        newest: list[int] = []  # versions of the newest `want` matches so far, ascending
        head: list[Arg] = [int(scored), *filter_args(flt)]
        entries = [(shard, [encode_namespace(request.prefix)]) for shard in shards]
        done, size = 0, SEARCH_FIRST
        while done < len(entries):
            floor: Arg = ""
            if want is not None and len(newest) == want:
                if bounds[done] < newest[0]:
                    break  # every shard left holds only older items
                floor = newest[0]
            chunk = list(range(done, min(len(entries), done + size)))
            done, size = chunk[-1] + 1, min(SEARCH_CHUNK, size * 2)
            for indexes in self.groups([entries[i][0] for i in chunk]):
                picked = [chunk[i] for i in indexes]
                args = [*head, floor, "" if want is None else want]
                for reply in (yield self.call("search", entries, picked, args)):
                    for n in range(0, len(reply), step):
                        row = Row.read(reply[n], reply[n + 1])
                        if flt is not None and reply[n + 2] == b"0" and not holds(flt, row.value):
                            continue
                        score = self._score(request.query, reply[n + 3]) if scored else None
                        rows.append((row, score))
                        if want is not None:
                            bisect.insort(newest, row.version)
                            del newest[:-want]
        if scored:
            rows.sort(key=lambda r: (r[1] is None, -(r[1] or 0.0), -r[0].version, r[0].id))
        else:
            rows.sort(key=lambda r: (-r[0].version, r[0].id))
        page = rows[request.offset : request.offset + request.limit]
        if request.refresh:
            yield from self._refresh([row for row, _ in page if row.has_ttl])
        return [row.search_item(score) for row, score in page]

    def _candidates(
        self, prefix: Namespace, flt: Fields | None
    ) -> Plan[Command, tuple[list[Shard], list[float]]]:
        """The shards under a short prefix that may hold a match, by their version bound,
        highest first, and those bounds: one script per slot index (on a single server,
        one in all, without reading the registry)."""
        yield from self._ensure_indexed()
        # The shards count strings of up to 64 bytes (see FIELDS in .lua).
        needs = [
            _utf8(f"{path}\0{text}")
            for path, text in filter_tokens(flt, str)
            if len(_utf8(text)) <= SHARD_TOKEN_BYTES
        ]
        if self.cluster:
            groups = sorted({shard.group for shard in (yield from self.scope(prefix))})
        else:
            groups = [0]
        found: list[tuple[int, bytes]] = []
        args: list[Arg] = [encode_namespace(prefix), len(needs), *needs]
        for group in groups:
            reply = yield Eval("candidates", list(self.slot_index(group)), args)
            found.extend(
                (int(bound), path) for path, bound in zip(reply[::2], reply[1::2], strict=True)
            )
        found.sort(key=lambda f: (-f[0], f[1]))
        return [self.shard_at(path) for _, path in found], [float(bound) for bound, _ in found]

    def _ensure_indexed(self) -> Plan[Command, None]:
        """Put the shards written by a release without slot indexes into theirs, once per
        store (the registry then says so; a store begun by this release says so from its
        first write): until then a search could not find their items."""
        if self._indexed:
            return
        if not (yield Eval("registry", self.registry, ["indexed"])):
            shards = yield from self.scope(())
            yield from self.fan_out("reindex", [(shard, ()) for shard in shards])
            yield Eval("registry", self.registry, ["mark"])
            logger.info("put %d namespace shards into their slot indexes", len(shards))
        self._indexed = True

    @staticmethod
    def _score(query: Vector | None, blob: bytes) -> float | None:
        """Best cosine similarity among an item's vectors; None without vectors."""
        assert query is not None
        vectors = unpack_vectors(blob)
        if not vectors:
            return None
        if len(vectors[0]) != len(query):
            raise InvalidConfigError(
                f"stored vectors have {len(vectors[0])} dimensions, the query {len(query)}; "
                "re-index the store after changing index['dims']"
            )
        query_norm = norm(query)
        return max(cosine(query, query_norm, vector, norm(vector)) for vector in vectors)

    def _refresh(self, rows: Sequence[Row]) -> Plan[Command, None]:
        by_shard: dict[bytes, tuple[Shard, list[bytes]]] = {}
        for row in rows:
            shard = self.shard(row.namespace)
            by_shard.setdefault(shard.path, (shard, []))[1].append(row.id)
        entries: list[tuple[Shard, list[Arg]]] = [
            (shard, [len(ids), *ids]) for shard, ids in by_shard.values()
        ]
        for indexes in self.groups([shard for shard, _ in entries], READ_CHUNK):
            yield self.call("refresh", entries, indexes)

    def list_namespaces(self, request: ListRequest) -> Plan[Command, list[Namespace]]:
        if request.limit == 0:
            return []
        heads = [c.literal_head for c in request.conditions if c.literal_head]
        head = max(heads, key=len) if heads else ()
        prefix = encode_namespace(head)
        depth = request.max_depth
        found: list[Namespace] = []
        skip = request.offset
        last: Namespace | None = None

        def take(namespaces: Iterable[bytes]) -> bool:
            """Adds a shard's namespaces to the page; True once the page is full."""
            nonlocal skip, last
            for raw in namespaces:
                namespace = decode_namespace(raw)
                if not all(c.matches(namespace) for c in request.conditions):
                    continue
                folded = namespace if depth is None else namespace[:depth]
                if folded == last:
                    continue  # shards and namespaces come in order: duplicates are adjacent
                last = folded
                if skip:
                    skip -= 1
                    continue
                found.append(folded)
                if len(found) >= request.limit:
                    return True
            return False

        if len(head) >= self.depth:
            replies = yield from self.fan_out("namespaces", [(self.shard(head), [prefix])])
            take(replies[0][1])
            return found
        lo, hi = lex_range(prefix)
        while True:
            page = yield from self._registry_page(lo, hi, LIST_PAGE)
            entries = [(self.shard_at(path), [prefix]) for path, _ in page]
            visited = dict((yield from self.fan_out("namespaces", entries)))
            for i in range(len(entries)):
                if take(visited[i]):
                    return found
            if len(page) < LIST_PAGE:
                return found
            lo = b"(" + page[-1][0]
            if last is not None and depth is not None and len(last) == depth <= self.depth:
                # Every shard below `last` folds into it: jump past them.
                bound = encode_namespace(last) + b"\x01"
                if bound > page[-1][0]:
                    lo = b"[" + bound

    def count(self, prefix: Namespace) -> Plan[Command, int]:
        shards = yield from self.scope(prefix)
        entries = [(shard, [encode_namespace(prefix)]) for shard in shards]
        return sum(int(n) for _, n in (yield from self.fan_out("count", entries)))

    # -- writes -------------------------------------------------------------------------

    def write(self, requests: list[WriteRequest]) -> Plan[Command, int]:
        by_shard: dict[bytes, tuple[Shard, list[WriteRequest]]] = {}
        for request in requests:
            shard = self.shard(request.namespace)
            by_shard.setdefault(shard.path, (shard, []))[1].append(request)
        plan = list(by_shard.values())
        groups = self.groups([shard for shard, _ in plan])
        undo = len(groups) > 1
        if undo:  # several slots: fail on a stale condition before writing any of them
            for indexes in groups:
                reply = yield self._write_call(plan, indexes, "check", False, {})
                if reply[0] == b"conflict":
                    raise self._conflict(plan, indexes, reply)
        applied: list[tuple[list[int], list[Any]]] = []
        emptied: list[Shard] = []
        dropped = 0
        try:
            for indexes in groups:
                reply = yield from self._apply(plan, indexes, undo)
                applied.append((indexes, reply[2]))
                dropped += int(reply[3])
                emptied.extend(plan[indexes[int(i) - 1]][0] for i in reply[1])
        except Exception:
            if applied:
                yield from self._undo(plan, applied)
            raise
        if emptied:
            # The batch is applied, so a failure here is only logged: an empty shard
            # left registered costs its entry and meta hash until a delete_namespace.
            try:
                yield from self._close_emptied(emptied)
            except Exception:
                logger.exception("could not close emptied namespace shards")
        return dropped

    def _close_emptied(self, shards: Sequence[Shard]) -> Plan[Command, None]:
        """Close the shards a write emptied, as a sweep would (see "Registration"), so
        that deleting every item leaves no key behind but the closed shards' tombstones.
        A shard written to again in between is left open, its due hint put right."""
        reply = yield Eval("registry", self.registry, ["paths", *(s.path for s in shards)])
        epochs = reply[1::2]  # read before the shard scripts run
        entries = [(shard, ()) for shard in shards]
        settle: list[Arg] = []
        for i, swept in (yield from self.fan_out("sweep", entries, head=[0])):
            settle.extend(_settle(shards[i].path, epochs[i], swept))
        yield Eval("settle", self.registry, settle)

    def _apply(
        self, plan: list[tuple[Shard, list[WriteRequest]]], indexes: list[int], undo: bool
    ) -> Plan[Command, list[Any]]:
        """Write one slot's shards, enrolling them first where the script asks to.

        A shard the registry will not enroll (under a short tombstoned prefix) keeps only
        its deletes: its puts are dropped, and counted with the script's own (reply[3]).
        """
        tokens: dict[bytes, tuple[bytes, bytes]] = {}
        blocked = 0
        for _ in range(ENROLL_ATTEMPTS):
            reply = yield self._write_call(plan, indexes, "apply", undo, tokens)
            if reply[0] == b"conflict":
                raise self._conflict(plan, indexes, reply)
            if reply[0] != b"refuse":
                return [*reply[:3], int(reply[3]) + blocked]
            enrolled, refused = yield from self._enroll(plan, indexes, reply[1])
            tokens.update(enrolled)
            for i in indexes:
                shard, requests = plan[i]
                if shard.path in refused:
                    kept = [r for r in requests if r.value is None]
                    blocked += len(requests) - len(kept)
                    plan[i] = (shard, kept)
        raise MemoryPlusError(
            f"could not register a namespace shard in {ENROLL_ATTEMPTS} attempts "
            "(its namespaces being deleted concurrently?); the batch was not applied"
        )

    @staticmethod
    def _write_call(
        plan: Sequence[tuple[Shard, Sequence[WriteRequest]]],
        indexes: Sequence[int],
        mode: str,
        undo: bool,
        tokens: dict[bytes, tuple[bytes, bytes]],
    ) -> Eval:
        entries = []
        for shard, requests in plan:
            gen, floor = tokens.get(shard.path, (b"", b""))
            args: list[Arg] = [gen, floor, len(requests)]
            for r in requests:
                args.extend(
                    (
                        item_id(r.namespace, r.key),
                        "d" if r.value is None else "p",
                        "" if r.expected_version is None else r.expected_version,
                        "" if r.ttl is None or r.value is None else max(1, round(r.ttl * 60e6)),
                        b"" if r.value is None else r.value.text.encode("utf-8"),
                        "-" if r.vectors is None or r.value is None else pack_vectors(r.vectors),
                    )
                )
            entries.append((shard, args))
        return RedisStorePlans.call("write", entries, indexes, [mode, int(undo)])

    def _enroll(
        self,
        plan: Sequence[tuple[Shard, Sequence[WriteRequest]]],
        indexes: Sequence[int],
        refusals: Sequence[Sequence[Any]],
    ) -> Plan[Command, tuple[dict[bytes, tuple[bytes, bytes]], set[bytes]]]:
        """Register refused shards (and lower their due hints); returns the tokens the
        write script then accepts (the generation seen at refusal, the hint floor), and
        the paths the registry refused to enroll, being under a tombstone."""
        args: list[Arg] = []
        tokens: dict[bytes, tuple[bytes, bytes]] = {}
        for number, gen, earliest in refusals:
            shard = plan[indexes[int(number) - 1]][0]
            floor = b"%d" % (int(earliest) - HINT_MARGIN_US) if earliest else b""
            args.extend((shard.path, floor))
            tokens[shard.path] = (gen, floor)
        refused: list[bytes] = yield Eval("enroll", self.registry, args)
        return tokens, set(refused)

    @staticmethod
    def _conflict(
        plan: Sequence[tuple[Shard, Sequence[WriteRequest]]],
        indexes: Sequence[int],
        reply: Sequence[Any],
    ) -> Exception:
        _, number, position, found = reply
        request = plan[indexes[int(number) - 1]][1][int(position) - 1]
        return conflict_error(request, int(found))

    def _undo(
        self,
        plan: Sequence[tuple[Shard, Sequence[WriteRequest]]],
        applied: Sequence[tuple[list[int], list[Any]]],
    ) -> Plan[Command, None]:
        """Compensate the slots a failed cross-slot batch had already written.

        Best effort: the batch's own error is what the caller sees, so a failure here
        (the connection is still down) is logged, not raised.
        """
        for indexes, images in reversed(applied):
            if images:
                keys = [key for i in indexes for key in plan[i][0].keys]
                paths = [plan[i][0].path for i in indexes]
                args = [len(indexes), *paths, *(a for image in images for a in image)]
                try:
                    yield Eval("undo", keys, args)
                except Exception:
                    logger.exception("could not undo a failed batch's writes on one hash slot")

    def delete_namespace(self, prefix: Namespace) -> Plan[Command, int]:
        if len(prefix) >= self.depth:
            path = self.shard(prefix).path
            reply = yield Eval("registry", self.registry, ["paths", path])
            targets = [(path, reply[1])]
        else:
            targets = yield from self.registered(prefix)
        # The epochs were read before the shard scripts run: see "Registration".
        entries = [(self.shard_at(path), [encode_namespace(prefix)]) for path, _ in targets]
        total, settle = 0, list[Arg]()
        for i, (deleted, closed) in (yield from self.fan_out("purge", entries)):
            total += int(deleted)
            if closed:
                settle.extend((targets[i][0], targets[i][1], "close", ""))
        if settle:
            yield Eval("settle", self.registry, settle)
        return total

    def tombstone(self, prefix: Namespace, hold_seconds: float) -> Plan[Command, None]:
        yield self._tomb_call("set", prefix, max(1, round(hold_seconds * 1e6)))

    def lift(self, prefix: Namespace) -> Plan[Command, bool]:
        return bool((yield self._tomb_call("lift", prefix, "")))

    def _tomb_call(self, action: str, prefix: Namespace, hold: Arg) -> Eval:
        """Where a tombstone lives (see ``TOMBS`` in :mod:`.lua`): a prefix at least a shard
        path long covers one shard, so its tombstone sits in that shard's slot and the
        write script checks it atomically with the put. A shorter one covers shards that
        may not exist yet, so it sits in the registry, which every shard passes through
        before its first item (see "Registration"): ``erase_user`` then empties and
        closes those shards with :meth:`delete_namespace`, after which a late put must
        enroll, and the registry refuses it."""
        head: list[Arg] = [action, encode_namespace(prefix), hold]
        if len(prefix) >= self.depth:
            return self.call("tomb", [(self.shard(prefix), ())], [0], head)
        return Eval("tombs", self.registry, head)

    def sweep(self, batch_size: int) -> Plan[Command, tuple[int, bool]]:
        reply = yield Eval("registry", self.registry, ["due", SWEEP_SHARDS])
        due = list(zip(reply[::2], reply[1::2], strict=True))
        if not due:
            return 0, False
        entries = [(self.shard_at(path), ()) for path, _ in due]
        budget, more = batch_size, len(due) >= SWEEP_SHARDS
        settle: list[Arg] = []
        for indexes in self.groups([shard for shard, _ in entries]):
            if budget <= 0:
                more = True
                break
            replies = yield self.call("sweep", entries, indexes, [budget])
            for i, swept in zip(indexes, replies, strict=True):
                budget -= int(swept[0])
                more = more or bool(swept[1])
                settle.extend(_settle(*due[i], swept))
        if settle:
            yield Eval("settle", self.registry, settle)
        return batch_size - budget, more or budget <= 0


def _settle(path: bytes, epoch: bytes, swept: Sequence[Any]) -> list[Arg]:
    """The settle script's arguments for a shard the sweep script replied ``swept`` for."""
    _, left, hint, closed = swept
    if closed:
        action = "close"
    elif left:
        action = "keep"
    else:
        action = "hint" if hint else "drop"
    return [path, epoch, action, hint]
