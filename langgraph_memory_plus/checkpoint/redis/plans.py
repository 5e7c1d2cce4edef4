"""The Redis checkpointer's operations as plans over the Lua scripts in :mod:`.lua`.

Key layout: a thread's data is eleven keys ``{prefix}:{<tag>}:<kind>``. The hash tag is
a hex SHA-256 prefix of the thread id, so any thread id (with ``{``, ``}``, NUL or
megabytes of text) maps to one safe tag and all of a thread's keys share a cluster hash
slot; every update of a thread is then one atomic script, on Redis Cluster too.

- ``thread`` (hash): the thread id; after deletion, the tombstone ``live_after``.
- ``idx`` (sorted set, all scores 0): ``ns NUL checkpoint_id`` members; lexicographic
  ranges give the newest checkpoint or a ``list(limit=k)`` page in O(log n + k).
- ``ck`` (hash): checkpoint body and metadata, opaque serialized bytes.
- ``meta`` (hash): per checkpoint, what scripts read (parent, run id, delta seeds,
  blob fields).
- ``blobs`` (hash): ``ns NUL channel NUL version`` -> value; shared by checkpoints.
- ``writes`` (hash) and ``widx`` (sorted set): pending writes, one field per task,
  ``ns NUL checkpoint_id NUL task_id``, and the same string as index member. The value
  is netstrings: the task path, then the task's writes in the format of
  ``checkpoint/task_writes.py``; a second ``put_writes`` of the task merges into it.
- ``replay`` (sorted set): with retention, old checkpoints that ``DeltaChannel`` replay
  still reads; never returned by ``get_tuple`` or ``list``.
- ``items`` and ``nodes`` (hashes): list channels stored as items, pages and spines, so
  a long ``messages`` list costs O(T), not O(T^2) (see ``checkpoint/lists.py``).
- ``rec`` (hash): the thread's record in the thread index (see ``threads/redis.py``).
  Its ``m<member>`` fields, each checkpoint's metadata JSON, are what the FILTER
  script reads, so ``list(filter=...)`` is judged in Redis.

A fixed number of keys per thread keeps TTL cheap: every write sets the same expiry on
all ten, so a thread expires whole, never half.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from functools import partial
from typing import Any

import ormsgpack
from langgraph.checkpoint.base import CheckpointMetadata, CheckpointTuple, DeltaChannelHistory

from ...drivers.plan import Plan
from ...drivers.redis import Batch, Eval, Scan, glob_escape
from ...errors import FencedWriteError, InvalidConfigError, ValueTooLargeError, decoding
from ...threads.core import ERROR, RecordInput, ReindexBatch, checkpoint_time, writes_of_interest
from ...threads.redis import FIELDS, RedisThreadIndex, now_ms, record_of
from .. import task_writes
from ..codec import (
    EMPTY,
    ChainLink,
    CheckpointCodec,
    EncodedCheckpoint,
    EncodedWrite,
    StoredCheckpoint,
    json_safe,
    metadata_matches,
)
from ..config import ListQuery, SaverSettings, Target, deletion_id
from ..fence import Claim, FenceState
from ..lists import LIST_TYPE, ItemRow, ListRequest

# Redis refuses a bulk string over 512 MiB by default (proto-max-bulk-len).
MAX_VALUE_BYTES = 500 * 1024 * 1024
TOMBSTONE_MS = 24 * 3600 * 1000
FENCE_KEY_MARGIN_MS = 15 * 60 * 1000
"""How long a fence key outlives its lease's end (or its owner's last fenced write, if
later); then it expires by itself and a write of its owner is refused as after a deletion.
A new key's number starts at the server clock in microseconds, so numbers still only grow
as long as that clock never steps back by more than this."""
MAX_CHAIN_DEPTH = 1_000_000
KINDS = (
    "thread", "idx", "ck", "meta", "blobs", "writes", "widx", "replay", "items", "nodes", "rec"
)  # fmt: skip

FILTER_BUDGET = 1000
"""Checkpoints per namespace one FILTER call examines at most: a filtered ``list`` of a
long thread pages through it in calls of bounded length, never blocking Redis long."""
# Numbers Lua's doubles hold exactly; a larger int is compared in Python only.
EXACT_INT = 2**53

# A list version's blob value: this prefix, then its ListRef (see ..lists).
LIST_PREFIX = b"\x00lgmp:list\x00"

Command = Eval | Scan | Batch


def _netstrings(items: Sequence[bytes]) -> bytes:
    return b"".join(b"%d:%s" % (len(item), item) for item in items)


def _utf8(text: str) -> bytes:
    return text.encode("utf-8", "surrogatepass")


def _no_nul(text: str, what: str) -> bytes:
    if "\x00" in text:
        raise InvalidConfigError(f"{what} must not contain NUL characters: {text[:80]!r}")
    return _utf8(text)


@functools.lru_cache(maxsize=1 << 12)
def _channel_head(channel: str) -> bytes:
    """A channel's name and the NUL after it in a blob's field (checked once per name)."""
    return _no_nul(channel, "channel name") + b"\x00"


def _write_rows(reply: list[bytes]) -> list[task_writes.WriteRow]:
    """Rows of ``StoredCheckpoint.writes`` from (task id, record) pairs."""
    out: list[task_writes.WriteRow] = []
    for i in range(0, len(reply), 2):
        path, writes = task_writes.split_head(reply[i + 1])
        task_id = reply[i].decode("utf-8", "surrogatepass")
        out.extend(task_writes.rows(task_id, path.decode("utf-8", "surrogatepass"), writes))
    return out


def _blob(value: bytes) -> tuple[str, bytes]:
    if value.startswith(LIST_PREFIX):
        return LIST_TYPE, value[len(LIST_PREFIX) :]
    typ, data = ormsgpack.unpackb(value)
    return typ, data


def _item_rows(reply: list[bytes | None]) -> Iterator[ItemRow]:
    """The RESOLVE script's (id, value) pairs as rows: None known, b"" missing."""
    for i in range(0, len(reply), 2):
        iid, value = reply[i], reply[i + 1]
        assert iid is not None
        if value is None:
            yield iid, "", None
        elif value == b"":
            yield iid, None, None
        else:
            typ, data = ormsgpack.unpackb(value)
            yield iid, typ, data


def _versions(encoded: EncodedCheckpoint) -> dict[str, Any] | None:
    """The versions to keep in the checkpoint record: none when all are text, since the
    references to its blobs (one per channel, ``ns NUL channel NUL version``) hold them."""
    versions = encoded.versions_json
    if versions.keys() == encoded.channel_versions.keys() and all(
        type(v) is str for v in versions.values()
    ):
        return None
    return versions


def _conditions(flt: Mapping[str, Any] | None) -> list[bytes]:
    """The filter's conditions FILTER can judge: (key, kind, value) per str, bool or
    number. Others (None, which also matches a missing key; containers; other types;
    ints past 2**53) are left to the exact check in Python on what is fetched."""
    out: list[bytes] = []
    for key, value in (flt or {}).items():
        kind = type(value)
        if type(key) is not str:
            continue
        if kind is str:
            out.extend((_utf8(json_safe(key)), b"s", _utf8(json_safe(value))))
        elif kind is bool or (kind is int and abs(value) < EXACT_INT):
            out.extend((_utf8(json_safe(key)), b"n", b"%d" % value))
        elif kind is float and math.isfinite(value):
            out.extend((_utf8(json_safe(key)), b"n", repr(value).encode()))
    return out


def thread_tag(thread_id: str) -> str:
    return hashlib.sha256(_utf8(thread_id)).hexdigest()[:32]


def _ms(epoch: float | None) -> int:
    """A checkpoint's time in ms, or now when its id does not tell."""
    return now_ms() if epoch is None else int(epoch * 1000)


logger = logging.getLogger("langgraph_memory_plus.checkpoint.redis")


class RedisCheckpointPlans:
    """Arguments for the scripts and decoding of their replies."""

    max_value_bytes = MAX_VALUE_BYTES
    inline_scalars = False
    metadata_as_json = False

    def __init__(self, prefix: str, settings: SaverSettings) -> None:
        if not prefix or any(c in prefix for c in "{}\x00"):
            raise InvalidConfigError(
                f"key_prefix must be non-empty without braces or NUL, got {prefix!r}"
            )
        self.prefix = prefix
        self.settings = settings
        # a turn derives a thread's keys at every call: the recent threads' are kept
        self._thread_keys = functools.lru_cache(maxsize=1 << 12)(self._thread_keys_uncached)
        ttl = settings.ttl_seconds
        self._ttl_ms = b"0" if ttl is None else b"%d" % max(1, round(ttl * 1000))
        self._refresh_ms = self._ttl_ms if settings.refresh_on_read else b"0"
        # With refresh on read a thread may outlive its last write: sets then never expire.
        set_ttl = 0 if settings.refresh_on_read else int(self._ttl_ms)
        tx_ttl = settings.transcript_ttl_seconds
        self.threads = RedisThreadIndex(
            prefix,
            settings.index_keys,
            lambda t: self.keys(t)[-1],
            set_ttl,
            0 if tx_ttl is None else max(1, round(tx_ttl * 1000)),
            self.reindex,
        )

    # -- keys -------------------------------------------------------------------------

    def _keys_of_tag(self, tag: str) -> list[bytes]:
        return [_utf8(f"{self.prefix}:{{{tag}}}:{kind}") for kind in KINDS]

    def _thread_keys_uncached(self, thread_id: str) -> tuple[bytes, ...]:
        """The thread's keys, then its fence's (a hash and a dozen strings each time)."""
        tag = thread_tag(thread_id)
        return (*self._keys_of_tag(tag), _utf8(f"{self.prefix}:{{{tag}}}:fence"))

    def keys(self, thread_id: str) -> list[bytes]:
        return list(self._thread_keys(thread_id)[:-1])

    def fence_key(self, thread_id: str) -> bytes:
        """The thread's fence (see ``fence.py``): in its slot, but not one of its ``keys``
        (which every script takes), so writes without a fence never touch it."""
        return self._thread_keys(thread_id)[-1]

    @staticmethod
    def _fenced_eval(write: Eval, fence_key: bytes, claim: Claim | None) -> Eval:
        """The write's script checking ``claim`` first, in the same script run."""
        if claim is None:
            return write
        return Eval(
            f"{write.script}_fenced",
            [*write.keys, fence_key],
            [*write.args, _utf8(claim.owner), str(claim.token), FENCE_KEY_MARGIN_MS],
        )

    def _refused_by_fence(self, thread_id: str, claim: Claim) -> Plan[Command, None]:
        """Raise for a write the fence refused, naming the owner now (read after)."""
        state = yield from self.fence_state(thread_id)
        raise FencedWriteError(thread_id, claim.owner, None if state is None else state.owner)

    @staticmethod
    def _fence_reply(reply: list[Any]) -> FenceState | None:
        owner, token, expires = reply[-3:]
        if token is None:
            return None
        return FenceState(
            None if owner is None else bytes(owner).decode(),
            int(token),
            None if expires is None else int(expires) / 1000,
        )

    def fence_take(
        self, thread_id: str, owner: str, lease_s: float, force: bool, run: bool = False
    ) -> Plan[Command, tuple[FenceState | None, FenceState]]:
        reply = yield Eval(
            "fence_take",
            [self.fence_key(thread_id)],
            [
                _utf8(owner),
                max(1, round(lease_s * 1000)),
                b"1" if force else b"0",
                FENCE_KEY_MARGIN_MS,
            ],
        )
        state = self._fence_reply(reply)
        assert state is not None
        return (None if int(reply[0]) else state), state

    def fence_renew(
        self, thread_id: str, owner: str, token: int, lease_s: float
    ) -> Plan[Command, FenceState | None]:
        reply = yield Eval(
            "fence_renew",
            [self.fence_key(thread_id)],
            [_utf8(owner), str(token), max(1, round(lease_s * 1000)), FENCE_KEY_MARGIN_MS],
        )
        return self._fence_reply(reply)

    def fence_release(self, thread_id: str, owner: str, token: int) -> Plan[Command, bool]:
        reply = yield Eval("fence_release", [self.fence_key(thread_id)], [_utf8(owner), str(token)])
        return bool(reply)

    def fence_state(self, thread_id: str) -> Plan[Command, FenceState | None]:
        [reply] = yield Batch([("HMGET", self.fence_key(thread_id), b"o", b"n", b"x")])
        return self._fence_reply(reply)

    def _all_thread_keys(self) -> Plan[Command, list[str]]:
        """Tags of every thread (admin paths only: SCAN walks the whole keyspace)."""
        found: list[bytes] = yield Scan(_utf8(f"{glob_escape(self.prefix)}:{{*}}:thread"))
        head = len(self.prefix) + 2
        return sorted({key.decode()[head : head + 32] for key in found})

    # -- decoding ---------------------------------------------------------------------

    @staticmethod
    def _stored(thread_id: str, ns: str, reply: list[Any]) -> StoredCheckpoint:
        member, record, parent, fields, values, writes = reply
        skip = len(_utf8(ns)) + 1
        checkpoint_id = bytes(member[skip:]).decode("utf-8", "replace")
        where = {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": checkpoint_id}
        with decoding("the checkpoint record", **where):
            ctype, cblob, mtype, mblob, versions = ormsgpack.unpackb(record)
        blobs = []
        refs = [bytes(field[skip:]).split(b"\x00", 1) for field in fields]
        for (channel, _), value in zip(refs, values, strict=True):
            if value is not None:
                with decoding(f"channel {channel!r}", **where):
                    blobs.append((channel.decode(), *_blob(value)))
        if versions is None:  # all text: the blob references spell them out
            versions = {ch.decode(): ver.decode("utf-8", "surrogatepass") for ch, ver in refs}
        return StoredCheckpoint(
            thread_id=thread_id,
            checkpoint_ns=ns,
            checkpoint_id=member[skip:].decode(),
            parent_id=parent.decode() or None,
            checkpoint=(ctype, cblob),
            metadata=(mtype, mblob),
            blobs=blobs,
            writes=_write_rows(writes),
            channel_versions=versions,
        )

    # -- plans ------------------------------------------------------------------------

    # -- erased users -------------------------------------------------------------------

    def _erased_key(self, owner: str) -> bytes:
        digest = hashlib.sha256(_utf8(owner)).hexdigest()[:32]
        return _utf8(f"{self.prefix}:erased:{digest}")

    def unless_erased(
        self, owner: str | None, write: Plan[Command, Any], target: Target, checkpoint_id: str
    ) -> Plan[Command, Any]:
        """``write``, unless ``owner`` (a user key's indexed form) is held by an erasure
        (then ``False``: nothing of it is left, and :meth:`drop_orphan_writes` of the
        checkpoint the write was for, ``checkpoint_id`` in ``target``'s namespace).

        On Redis a thread's keys and the hold live in different hash slots, so the check
        cannot run in the write's script. It runs before the write and, when the write
        starts a thread (``target``'s thread had no checkpoints), again after it: a new
        thread written as an erasure began, landing after the erasure looked for the
        user's threads, finds the hold then (erasure places it before it looks), and is
        deleted as the erasure would have deleted it. A thread that existed before is the
        erasure's to find, and its tombstone refuses the late write, but for a put with
        no parent in the root namespace, which a tombstone lets in (a fresh run's): the
        second of two runs started together on a new thread. That put looks again too.
        A look that finds the hold deletes the thread only if the index files it under
        the held user (or nowhere): another user's fresh run may have stored it since.
        """
        if owner is None:
            return (yield from write)
        key = self._erased_key(owner)
        keys = self.keys(target.thread_id)
        held, started = yield Batch([("EXISTS", key), ("EXISTS", keys[KINDS.index("ck")])])
        if held:
            logger.warning("dropped a write of a run whose user was erased")
            yield from self.drop_orphan_writes(target, checkpoint_id, owner)
            return False
        result = yield from write
        fresh = target.checkpoint_ns == "" and target.checkpoint_id is None
        if not started or fresh:
            [held] = yield Batch([("EXISTS", key)])
            # filed under another user: a fresh run of theirs stored it since this write
            # (the erasure deleted this one's) and is not the erasure's to delete
            if held and (yield from self._filed_under(target.thread_id, owner)):
                logger.warning("deleted a thread written as its user was being erased")
                yield from self.delete_thread(target.thread_id)
                # its entry in the user's pending set, made after the erasure read it
                yield from self.forget_pending(owner, [target.thread_id])
                return False
        return result

    def _filed_under(self, thread_id: str, owner: str) -> Plan[Command, bool]:
        """Whether the thread index files ``thread_id`` under ``owner`` (or not at all)."""
        record = yield from self.threads.get(thread_id)
        return record is None or self.threads.owned_by(record, owner)

    def drop_orphan_writes(
        self, target: Target, checkpoint_id: str, owner: str
    ) -> Plan[Command, None]:
        """:meth:`CheckpointPlans.drop_orphan_writes`, in one script (``drop_orphans``)."""
        entries = yield from self.threads.entries(target.thread_id, owner)
        args = [_utf8(target.checkpoint_ns), _utf8(checkpoint_id)]
        emptied = yield Eval("drop_orphans", self.keys(target.thread_id), args)
        if emptied:  # its index entries go, as they were before: a new write keeps its own
            yield from self.threads.forget_entries(target.thread_id, entries)
            yield from self.forget_pending(owner, [target.thread_id])

    def hold_erased(self, owner: str, seconds: float) -> Plan[Command, None]:
        """Refuse ``owner``'s writes for ``seconds`` (longer holds win: ``PEXPIRE GT``)."""
        key, ms = self._erased_key(owner), max(1, round(seconds * 1000))
        yield Batch([("SET", key, b"1", "NX", "PX", ms), ("PEXPIRE", key, ms, "GT")])

    def lift_erased(self, owner: str) -> Plan[Command, bool]:
        """End ``owner``'s hold; whether there was one."""
        [n] = yield Batch([("DEL", self._erased_key(owner))])
        return bool(n)

    def setup(self) -> Plan[Command, None]:
        """Nothing to create: keys come into being with the first write."""
        return
        yield

    def get_tuple(
        self, codec: CheckpointCodec, target: Target
    ) -> Plan[Command, CheckpointTuple | None]:
        ns = _no_nul(target.checkpoint_ns, "checkpoint_ns")
        reply = yield Eval(
            "get",
            self.keys(target.thread_id),
            [ns, _utf8(target.checkpoint_id or ""), self._refresh_ms],
        )
        if not reply:
            return None
        stored = self._stored(target.thread_id, target.checkpoint_ns, reply)
        return (yield from self._decode(codec, stored))

    def _decode(
        self,
        codec: CheckpointCodec,
        stored: StoredCheckpoint,
        metadata: CheckpointMetadata | None = None,
    ) -> Plan[Command, CheckpointTuple]:
        fetch = partial(self._resolve, self.keys(stored.thread_id))
        return (yield from codec.decode_stored(stored, metadata, fetch, _item_rows))

    @staticmethod
    def _resolve(keys: list[bytes], request: ListRequest) -> Eval:
        """The RESOLVE script call for one stored list."""
        return Eval(
            "resolve",
            keys,
            [
                _utf8(request.key[1]),
                request.ref.spine or b"",
                b"".join(request.ref.tail),
                *request.known,
            ],
        )

    def _decode_page(
        self,
        codec: CheckpointCodec,
        thread_id: str,
        replies: list[list[Any]],
        query: ListQuery,
    ) -> Plan[Command, list[CheckpointTuple]]:
        out = []
        for reply in replies:
            member = reply[0].decode("utf-8", "surrogatepass")
            ns = member.split("\x00", 1)[0]
            stored = self._stored(thread_id, ns, reply)
            metadata = codec.decode_metadata(stored)
            if metadata_matches(metadata, query.filter):
                out.append((yield from self._decode(codec, stored, metadata)))
        return out

    def list_page(
        self, codec: CheckpointCodec, query: ListQuery, page_size: int
    ) -> Plan[Command, tuple[list[CheckpointTuple], ListQuery | None]]:
        if query.limit is not None and query.limit <= 0:
            return [], None
        if query.thread_id is not None:
            return (yield from self._thread_page(codec, query, page_size))
        # Every thread (an admin path: SCAN walks the keyspace), thread by thread.
        found: list[CheckpointTuple] = []
        for tag in (yield from self._all_thread_keys()):
            raw = yield Eval("thread_id", self._keys_of_tag(tag), [])
            if raw is None:
                continue
            left = None if query.limit is None else query.limit - len(found)
            sub: ListQuery | None = replace(
                query, thread_id=raw.decode("utf-8", "surrogatepass"), limit=left
            )
            while sub is not None:
                page, sub = yield from self._thread_page(codec, sub, page_size)
                found.extend(page)
            if query.limit is not None and len(found) >= query.limit:
                break
        return found, None

    def _thread_page(
        self, codec: CheckpointCodec, query: ListQuery, page_size: int
    ) -> Plan[Command, tuple[list[CheckpointTuple], ListQuery | None]]:
        """One page of a thread's checkpoints, newest first, across its namespaces.

        The MEMBERS script returns at most ``size`` candidates per namespace, so a page
        costs the same whatever the thread's length.
        """
        assert query.thread_id is not None
        conditions = _conditions(codec.narrowing(query.filter))
        if conditions and query.checkpoint_id is None:
            return (yield from self._filtered_page(codec, query, page_size, conditions))
        if query.checkpoint_ns is not None:
            return (yield from self._namespace_page(codec, query, page_size))
        keys = self.keys(query.thread_id)
        size = page_size if query.limit is None else min(page_size, query.limit)
        bounds = [b for b in (query.before, query.after[0] if query.after else None) if b]
        members: list[bytes] = yield Eval(
            "members",
            keys,
            [size, _utf8(min(bounds) if bounds else ""), _utf8(query.checkpoint_id or "")],
        )
        candidates: list[tuple[str, str, bytes]] = []
        for raw in members:
            ns, cid = raw.decode("utf-8", "surrogatepass").split("\x00", 1)
            candidates.append((cid, ns, raw))
        ordered = sorted(candidates, reverse=True)[:size]
        if query.checkpoint_id is not None and query.before is not None:
            ordered = [m for m in ordered if m[0] < query.before]
        replies = (
            (yield Eval("fetch", keys, [self._refresh_ms, *(raw for _, _, raw in ordered)]))
            if ordered
            else []
        )
        page = yield from self._decode_page(codec, query.thread_id, replies, query)
        limit = None if query.limit is None else query.limit - len(page)
        if len(ordered) < size or limit == 0 or query.checkpoint_id is not None:
            return page, None
        return page, replace(query, limit=limit, after=(ordered[-1][0], b"", ""))

    def _filtered_page(
        self, codec: CheckpointCodec, query: ListQuery, page_size: int, conditions: list[bytes]
    ) -> Plan[Command, tuple[list[CheckpointTuple], ListQuery | None]]:
        """One page of a filtered ``list``: the FILTER script picks the candidates in Redis.

        Each call examines at most ``FILTER_BUDGET`` checkpoints per namespace; a page may
        then hold fewer matches than asked for (even none), and the next one goes on
        below the floor the script reached.
        """
        assert query.thread_id is not None
        keys = self.keys(query.thread_id)
        size = page_size if query.limit is None else min(page_size, query.limit)
        bounds = [b for b in (query.before, query.after[0] if query.after else None) if b]
        ns = query.checkpoint_ns
        reply: list[bytes] = yield Eval(
            "filter",
            keys,
            [
                b"" if ns is None else _no_nul(ns, "checkpoint_ns"),
                b"1" if ns is None else b"0",
                _utf8(min(bounds) if bounds else ""),
                size,
                FILTER_BUDGET,
                *conditions,
            ],
        )
        floor = reply[0].decode("utf-8", "surrogatepass")
        candidates = []
        for raw in reply[1:]:
            member_ns, cid = raw.decode("utf-8", "surrogatepass").split("\x00", 1)
            candidates.append((cid, member_ns, raw))
        candidates.sort(reverse=True)
        taken = candidates[:size]
        if len(taken) < len(candidates):
            floor = taken[-1][0]  # the rest are still below it
        replies = (
            (yield Eval("fetch", keys, [self._refresh_ms, *(raw for _, _, raw in taken)]))
            if taken
            else []
        )
        page = yield from self._decode_page(codec, query.thread_id, replies, query)
        limit = None if query.limit is None else query.limit - len(page)
        if not floor or limit == 0:
            return page, None
        return page, replace(query, limit=limit, after=(floor, b"", ""))

    def _namespace_page(
        self, codec: CheckpointCodec, query: ListQuery, page_size: int
    ) -> Plan[Command, tuple[list[CheckpointTuple], ListQuery | None]]:
        assert query.thread_id is not None and query.checkpoint_ns is not None
        keys = self.keys(query.thread_id)
        ns = _no_nul(query.checkpoint_ns, "checkpoint_ns")
        if query.checkpoint_id is not None:
            if query.before is not None and query.checkpoint_id >= query.before:
                return [], None
            reply = yield Eval("get", keys, [ns, _utf8(query.checkpoint_id), self._refresh_ms])
            page = yield from self._decode_page(
                codec, query.thread_id, [reply] if reply else [], query
            )
            return page, None
        bounds = [b for b in (query.before, query.after[0] if query.after else None) if b]
        size = page_size if query.limit is None else min(page_size, query.limit)
        replies = yield Eval(
            "page", keys, [ns, _utf8(min(bounds) if bounds else ""), size, self._refresh_ms]
        )
        page = yield from self._decode_page(codec, query.thread_id, replies, query)
        limit = None if query.limit is None else query.limit - len(page)
        if len(replies) < size or limit == 0:
            return page, None
        last = replies[-1][0].decode("utf-8", "surrogatepass").split("\x00", 1)[1]
        return page, ListQuery(
            query.thread_id,
            query.checkpoint_ns,
            None,
            query.filter,
            query.before,
            limit,
            after=(last, b"", query.checkpoint_ns),
        )

    def put(
        self,
        target: Target,
        encoded: EncodedCheckpoint,
        record: RecordInput,
        fence: Claim | None = None,
    ) -> Plan[Command, bool]:
        ns = _no_nul(target.checkpoint_ns, "checkpoint_ns")
        nsz = ns + b"\x00"
        refs = [
            nsz + _channel_head(ch) + ver.encode("utf-8", "surrogatepass")
            for ch, ver in encoded.channel_versions.items()
        ]
        args: list[bytes | str | int] = [
            self._ttl_ms,
            _utf8(target.thread_id),
            ns,
            _no_nul(encoded.checkpoint_id, "checkpoint_id"),
            # the parent, then NUL and the root checkpoint of a subgraph's run
            _utf8(encoded.parent_id or "")
            + (b"\x00" + _no_nul(target.root_id, "checkpoint_map") if target.root_id else b""),
            _utf8(encoded.run_id or ""),
            ormsgpack.packb([*encoded.checkpoint, *encoded.metadata, _versions(encoded)]),
            self.settings.keep_last or 0,
            b"1" if encoded.refers else b"0",
            json.dumps(record.metadata),  # FILTER reads it in every namespace
            _utf8(record.title or ""),
            record.bytes,
            *self.threads.put_args(
                target.thread_id, target.checkpoint_ns, encoded.parent_id, record
            ),
        ]
        for names in (encoded.delta_channels, encoded.valued_channels):
            args.append(len(names))
            args.extend(_utf8(n) for n in names)
        args.append(len(refs))
        args.extend(refs)
        args.append(len(encoded.items))
        for iid, item in encoded.items.items():
            args.extend((nsz + iid, ormsgpack.packb(list(item))))
        args.append(len(encoded.nodes))
        for nid, children in encoded.nodes.items():
            args.extend((nsz + nid, b"".join(children)))
        for blob in encoded.blobs:
            field = nsz + _channel_head(blob.channel) + _utf8(blob.version)
            if blob.type == EMPTY:
                args.extend((field, b"", b"1"))
            elif blob.type == LIST_TYPE:
                args.extend((field, LIST_PREFIX + (blob.data or b""), b"0"))
            else:
                args.extend((field, ormsgpack.packb([blob.type, blob.data]), b"0"))
        keys = self.keys(target.thread_id)
        if record.lines:
            keys += self.threads.transcript_keys(target.thread_id)
        # the index entries first (see threads/redis.py), in the same round trip
        write = self._fenced_eval(Eval("put", keys, args), self.fence_key(target.thread_id), fence)
        reply = yield from self.threads.put(
            target.thread_id, target.checkpoint_ns, encoded.checkpoint_id, record, write
        )
        if reply == -1 and fence is not None:
            yield from self._refused_by_fence(target.thread_id, fence)
        if reply == 4:  # its parent is gone (expired): nothing of it was written
            return False
        if reply == 0:  # refused: the thread was deleted while this run went on
            yield from self.threads.refused(target.thread_id, record)
        elif reply == 2:  # not idle after all: the sets of its status, as its record says
            yield from self.threads.adopt(target.thread_id)
        return True

    def pending_key(self, owner: str) -> bytes:
        """The set of ``owner``'s threads of pending writes only (thread ids), in the
        index's hash slot. An entry goes in before the writes that need it (the script
        asks for it), so a crash leaves an entry too many, never one too few; the
        thread hash's ``w`` (the owner in waiting) is what :meth:`pending_threads` checks
        an entry against: a deleted, expired or since indexed thread's entry is stale."""
        digest = hashlib.sha256(_utf8(owner)).hexdigest()[:32]
        return self.threads._name(f"pending:{digest}")

    def pending_threads(
        self, owner: str, cursor: Any, limit: int, forget: bool
    ) -> Plan[Command, tuple[list[str], Any]]:
        """:meth:`CheckpointPlans.pending_threads`: the entries of :meth:`pending_key`
        (``SSCAN``, its cursor), each checked against its thread."""
        key = self.pending_key(owner)
        [(after, members)] = yield Batch(
            [("SSCAN", key, 0 if cursor is None else cursor, "COUNT", limit)]
        )
        ids = sorted({bytes(m).decode("utf-8", "surrogatepass") for m in members})
        found: list[str] = []
        if ids:
            thread, rec = KINDS.index("thread"), KINDS.index("rec")
            replies = yield Batch(
                [
                    cmd
                    for tid in ids
                    for cmd in (
                        ("HGET", self.keys(tid)[thread], b"w"),
                        ("HEXISTS", self.keys(tid)[rec], b"m"),
                    )
                ]
            )
            want = _utf8(owner)
            stale, marked = [], []
            for i, tid in enumerate(ids):
                waiting, filed = replies[2 * i], replies[2 * i + 1]
                mine = waiting is not None and bytes(waiting) == want
                if mine and not int(filed):
                    found.append(tid)
                else:
                    stale.append(tid)
                    if mine:  # filed since (another user's: the index's): the mark goes
                        marked.append(tid)
            if forget and marked:
                yield Batch([("HDEL", self.keys(tid)[thread], b"w") for tid in marked])
            if forget and stale:
                yield from self.forget_pending(owner, stale)
        nxt = int(after)
        return found, (None if nxt == 0 else nxt)

    def forget_pending(self, owner: str, thread_ids: Sequence[str]) -> Plan[Command, None]:
        """The entries of ``thread_ids`` in ``owner``'s pending set go."""
        if thread_ids:
            yield Batch([("SREM", self.pending_key(owner), *(_utf8(t) for t in thread_ids))])

    def put_writes(
        self,
        target: Target,
        writes: list[EncodedWrite],
        fence: Claim | None = None,
        owner: str | None = None,
    ) -> Plan[Command, None]:
        if not writes:
            return
        assert target.checkpoint_id is not None
        task_id = writes[0].task_id
        # One call's duplicates merge here; the script merges what an earlier call stored.
        merged = task_writes.merge([], task_writes.of_encoded(writes))
        path = writes[0].task_path
        record = _netstrings([_utf8(path)]) + task_writes.pack(merged, path)
        what = f"the pending writes of task {task_id!r} together"
        if len(record) > self.max_value_bytes:
            raise ValueTooLargeError(what, len(record), self.max_value_bytes)
        args: list[bytes | str | int] = [
            self._ttl_ms,
            _utf8(target.thread_id),
            _no_nul(target.checkpoint_ns, "checkpoint_ns"),
            _no_nul(target.checkpoint_id, "checkpoint_id"),
            _no_nul(task_id, "task_id"),
            record,
            self.max_value_bytes,
            b"1" if (flagged := bool(writes_of_interest(writes))) else b"0",
            ts := now_ms(),
            _no_nul(target.root_id or "", "checkpoint_map"),
        ]
        if owner is not None:  # see pending_key: the script asks for the entry (-2)
            args += [_utf8(owner), b"0"]

        def script() -> Eval:
            return self._fenced_eval(
                Eval("put_writes", self.keys(target.thread_id), args),
                self.fence_key(target.thread_id),
                fence,
            )

        reply = yield from self._put_writes_step(target, writes, flagged, ts, script())
        if reply == -2:
            # A thread the index does not file: entered in the user's set of threads of
            # pending writes only, then written with its owner in waiting.
            assert owner is not None
            enter = ("SADD", self.pending_key(owner), _utf8(target.thread_id))
            args[11] = b"1"
            write = script()
            if flagged:
                yield Batch([enter])
                reply = yield from self._put_writes_step(target, writes, flagged, ts, write)
            else:  # one round trip on a single node
                reply = yield Batch([enter], write)
            if reply == 0:  # refused (a deleted thread): the entry made for it goes
                yield from self.forget_pending(owner, [target.thread_id])
        if reply == -1 and fence is not None:
            yield from self._refused_by_fence(target.thread_id, fence)
        if isinstance(reply, list):  # merged with an earlier call's writes: too large
            raise ValueTooLargeError(what, int(reply[0]), self.max_value_bytes)
        if flagged and reply == 0 and target.checkpoint_ns != "":  # a root's: writes_intent
            yield from self.threads.refused(target.thread_id, None)

    def _put_writes_step(
        self, target: Target, writes: list[EncodedWrite], flagged: bool, ts: int, write: Eval
    ) -> Plan[Command, Any]:
        """The writes' script, after its index step 1 when they hold an interrupt or an
        error (see ``threads.redis``); its reply."""
        if flagged and target.checkpoint_ns == "":
            failed = any(w.channel == ERROR for w in writes)
            status = "error" if failed else "interrupted"
            reply = yield from self.threads.writes_intent(target.thread_id, status, ts, write)
        elif flagged:  # a subgraph's: the record's status does not change
            reply = yield self.threads.intent(target.thread_id, None, ts, write)
        else:
            reply = yield write
        return reply

    def delta_history(
        self, codec: CheckpointCodec, target: Target, channels: Sequence[str]
    ) -> Plan[Command, dict[str, DeltaChannelHistory]]:
        reply = yield Eval(
            "delta",
            self.keys(target.thread_id),
            [
                _no_nul(target.checkpoint_ns, "checkpoint_ns"),
                _utf8(target.checkpoint_id or ""),
                MAX_CHAIN_DEPTH,
                *(_utf8(ch) for ch in channels),
            ],
        )
        chain = []
        skip = len(_utf8(target.checkpoint_ns)) + 1
        for cid, writes, seeds in reply:
            # (channel, value, blob field ``ns NUL channel NUL version``) per seed
            found = {seeds[i].decode(): _blob(seeds[i + 1]) for i in range(0, len(seeds), 3)}
            versions = {
                seeds[i].decode(): bytes(seeds[i + 2][skip:])
                .split(b"\x00", 1)[1]
                .decode("utf-8", "surrogatepass")
                for i in range(0, len(seeds), 3)
            }
            chain.append(
                ChainLink(
                    checkpoint_id=cid.decode(),
                    seeds=found,
                    writes=_write_rows(writes),
                    versions=versions,
                )
            )
        keys = self.keys(target.thread_id)
        seeds = [(ch, typ, data) for link in chain for ch, (typ, data) in link.seeds.items()]
        lists = yield from codec.resolve_lists(
            target.thread_id, target.checkpoint_ns, seeds, partial(self._resolve, keys), _item_rows
        )
        return codec.delta_history(channels, chain, lists, target.thread_id, target.checkpoint_ns)

    def reindex(
        self, codec: CheckpointCodec, cursor: Any, batch_size: int
    ) -> Plan[Command, ReindexBatch]:
        """One backfill batch: records for threads that have none (written before the
        index existed, or whose record was lost), up to ``batch_size`` threads looked at.

        The first batch lists every thread (SCAN, on every primary of a cluster); the
        cursor carries that list and the position in it. Each record is written by one
        script on the thread's keys, which does nothing if a record appeared meanwhile
        (a write): a run that crashed is simply run again. The thread's set entries are
        added after its record, as after a copy.
        """
        if cursor is None:
            cursor = ((yield from self._all_thread_keys()), 0)
        tags, start = cursor
        chunk = tags[start : start + batch_size]
        has = yield Batch([("EXISTS", self._keys_of_tag(tag)[-1]) for tag in chunk])
        indexed = 0
        for tag in (t for t, found in zip(chunk, has, strict=True) if not found):
            keys = self._keys_of_tag(tag)
            raw, first = yield Batch(
                [
                    ("HGET", keys[0], b"id"),
                    ("ZRANGEBYLEX", keys[1], b"[\x00", b"(\x01", "LIMIT", 0, 1),
                ]
            )
            if raw is None:
                continue
            thread_id = raw.decode("utf-8", "surrogatepass")
            latest = yield from self.get_tuple(codec, Target(thread_id, "", None))
            latest_id = latest.config["configurable"]["checkpoint_id"] if latest else None
            first_id = bytes(first[0][1:]).decode("utf-8", "replace") if first else None
            lo, hi = (_ms(checkpoint_time(cid)) for cid in (first_id, latest_id))
            meta = json_safe(dict(latest.metadata)) if latest else {}
            if (yield Eval("reindex", keys, [json.dumps(meta), lo, hi])) == 1:
                indexed += 1
                yield from self.threads.adopt(thread_id)
        end = start + len(chunk)
        return ReindexBatch(len(chunk), indexed, (tags, end) if end < len(tags) else None)

    def delete_thread(self, thread_id: str) -> Plan[Command, None]:
        # The fence goes too (the script deletes every key it is given): deletion is final.
        keys = [*self.keys(thread_id), self.fence_key(thread_id)]
        deleted = yield Eval("delete", keys, [TOMBSTONE_MS, deletion_id(), *FIELDS])
        yield from self.threads.forget([record_of(deleted)])

    def delete_for_runs(self, run_ids: Sequence[str]) -> Plan[Command, None]:
        if not run_ids:
            return
        args = [_utf8(r) for r in run_ids]
        for tag in (yield from self._all_thread_keys()):
            yield Eval("delete_runs", self._keys_of_tag(tag), args)

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> Plan[Command, None]:
        dump = yield Eval("dump", self.keys(source_thread_id), [])
        if not dump:
            return
        ts = now_ms()
        yield self.threads.intent(target_thread_id, None, ts)
        yield Eval(
            "restore",
            self.keys(target_thread_id),
            [self._ttl_ms, _utf8(target_thread_id), *(_netstrings(part) for part in dump), ts],
        )
        yield from self.threads.adopt(target_thread_id)
        yield from self.threads.copy_transcript(source_thread_id, target_thread_id)

    def prune(self, thread_ids: Sequence[str], keep_latest: bool) -> Plan[Command, None]:
        for thread_id in dict.fromkeys(thread_ids):
            if keep_latest:
                yield Eval("prune_latest", self.keys(thread_id), [])
            else:
                yield from self.delete_thread(thread_id)

    def sweep_expired(self, batch_size: int) -> Plan[Command, tuple[int, bool]]:
        """Nothing to sweep: Redis expires a thread's keys itself."""
        return 0, False
        yield
