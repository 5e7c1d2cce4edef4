"""The Redis checkpointer's operations as plans over the Lua scripts in :mod:`.lua`.

Key layout: a thread's data is eight keys ``{prefix}:{<tag>}:<kind>``. The hash tag is
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
- ``writes`` (hash) and ``widx`` (sorted set): pending writes, and their index per
  checkpoint.
- ``replay`` (sorted set): with retention, old checkpoints that ``DeltaChannel`` replay
  still reads; never returned by ``get_tuple`` or ``list``.

A fixed number of keys per thread keeps TTL cheap: every write sets the same expiry on
all eight, so a thread expires whole, never half.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

import ormsgpack
from langgraph.checkpoint.base import CheckpointTuple, DeltaChannelHistory

from ..._plan import Plan
from ..._redis import Eval, Scan, glob_escape
from ...errors import InvalidConfigError
from ..codec import (
    EMPTY,
    ChainLink,
    CheckpointCodec,
    EncodedCheckpoint,
    EncodedWrite,
    StoredCheckpoint,
    metadata_matches,
)
from ..config import ListQuery, SaverSettings, Target

# Redis refuses a bulk string over 512 MiB by default (proto-max-bulk-len).
MAX_VALUE_BYTES = 500 * 1024 * 1024
TOMBSTONE_MS = 24 * 3600 * 1000
MAX_CHAIN_DEPTH = 1_000_000
KINDS = ("thread", "idx", "ck", "meta", "blobs", "writes", "widx", "replay")

Command = Eval | Scan


def _netstrings(items: Sequence[bytes]) -> bytes:
    return b"".join(b"%d:%s" % (len(item), item) for item in items)


def _utf8(text: str) -> bytes:
    return text.encode("utf-8", "surrogatepass")


def _no_nul(text: str, what: str) -> bytes:
    if "\x00" in text:
        raise InvalidConfigError(f"{what} must not contain NUL characters: {text[:80]!r}")
    return _utf8(text)


def thread_tag(thread_id: str) -> str:
    return hashlib.sha256(_utf8(thread_id)).hexdigest()[:32]


class RedisCheckpointPlans:
    """Arguments for the scripts and decoding of their replies."""

    max_value_bytes = MAX_VALUE_BYTES

    def __init__(self, prefix: str, settings: SaverSettings) -> None:
        if not prefix or any(c in prefix for c in "{}\x00"):
            raise InvalidConfigError(
                f"key_prefix must be non-empty without braces or NUL, got {prefix!r}"
            )
        self.prefix = prefix
        self.settings = settings
        ttl = settings.ttl_seconds
        self._ttl_ms = b"0" if ttl is None else b"%d" % max(1, round(ttl * 1000))
        self._refresh_ms = self._ttl_ms if settings.refresh_on_read else b"0"

    # -- keys -------------------------------------------------------------------------

    def _keys_of_tag(self, tag: str) -> list[bytes]:
        return [_utf8(f"{self.prefix}:{{{tag}}}:{kind}") for kind in KINDS]

    def keys(self, thread_id: str) -> list[bytes]:
        return self._keys_of_tag(thread_tag(thread_id))

    def _all_thread_keys(self) -> Plan[Command, list[str]]:
        """Tags of every thread (admin paths only: SCAN walks the whole keyspace)."""
        found: list[bytes] = yield Scan(_utf8(f"{glob_escape(self.prefix)}:{{*}}:thread"))
        head = len(self.prefix) + 2
        return sorted({key.decode()[head : head + 32] for key in found})

    # -- decoding ---------------------------------------------------------------------

    @staticmethod
    def _stored(thread_id: str, ns: str, reply: list[Any]) -> StoredCheckpoint:
        member, record, parent, fields, values, writes = reply
        ctype, cblob, mtype, mblob = ormsgpack.unpackb(record)
        blobs = []
        skip = len(_utf8(ns)) + 1
        for field, value in zip(fields, values, strict=True):
            if value is not None:
                typ, data = ormsgpack.unpackb(value)
                blobs.append((field[skip:].split(b"\x00", 1)[0].decode(), typ, data))
        return StoredCheckpoint(
            thread_id=thread_id,
            checkpoint_ns=ns,
            checkpoint_id=member[skip:].decode(),
            parent_id=parent.decode() or None,
            checkpoint=(ctype, cblob),
            metadata=(mtype, mblob),
            blobs=blobs,
            writes=[tuple(ormsgpack.unpackb(w)) for w in writes if w is not None],
        )

    # -- plans ------------------------------------------------------------------------

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
        return codec.decode_tuple(self._stored(target.thread_id, target.checkpoint_ns, reply))

    def _decode_page(
        self,
        codec: CheckpointCodec,
        thread_id: str,
        replies: list[list[Any]],
        query: ListQuery,
    ) -> list[CheckpointTuple]:
        out = []
        for reply in replies:
            member = reply[0].decode("utf-8", "surrogatepass")
            ns = member.split("\x00", 1)[0]
            stored = self._stored(thread_id, ns, reply)
            metadata = codec.decode_metadata(stored.metadata)
            if metadata_matches(metadata, query.filter):
                out.append(codec.decode_tuple(stored, metadata))
        return out

    def list_page(
        self, codec: CheckpointCodec, query: ListQuery, page_size: int
    ) -> Plan[Command, tuple[list[CheckpointTuple], ListQuery | None]]:
        if query.limit is not None and query.limit <= 0:
            return [], None
        if query.thread_id is not None and query.checkpoint_ns is not None:
            return (yield from self._namespace_page(codec, query, page_size))
        # Across namespaces or threads: gather the ids, order them, fetch in pages.
        if query.thread_id is not None:
            thread_ids = [query.thread_id]
        else:
            thread_ids = []
            for tag in (yield from self._all_thread_keys()):
                raw = yield Eval("thread_id", self._keys_of_tag(tag), [])
                if raw is not None:
                    thread_ids.append(raw.decode("utf-8", "surrogatepass"))
        found: list[CheckpointTuple] = []
        for thread_id in thread_ids:
            keys = self.keys(thread_id)
            members: list[bytes] = yield Eval("members", keys, [])
            wanted = []
            for raw in members:
                ns, cid = raw.decode("utf-8", "surrogatepass").split("\x00", 1)
                if query.checkpoint_ns is not None and ns != query.checkpoint_ns:
                    continue
                if query.checkpoint_id is not None and cid != query.checkpoint_id:
                    continue
                if query.before is not None and cid >= query.before:
                    continue
                wanted.append((cid, ns, raw))
            wanted.sort(reverse=True)
            for start in range(0, len(wanted), page_size):
                chunk = [raw for _, _, raw in wanted[start : start + page_size]]
                replies = yield Eval("fetch", keys, [self._refresh_ms, *chunk])
                found.extend(self._decode_page(codec, thread_id, replies, query))
                if query.limit is not None and len(found) >= query.limit:
                    return found[: query.limit], None
        return found, None

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
            page = self._decode_page(codec, query.thread_id, [reply] if reply else [], query)
            return page, None
        bounds = [b for b in (query.before, query.after[0] if query.after else None) if b]
        size = page_size if query.limit is None else min(page_size, query.limit)
        replies = yield Eval(
            "page", keys, [ns, _utf8(min(bounds) if bounds else ""), size, self._refresh_ms]
        )
        page = self._decode_page(codec, query.thread_id, replies, query)
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

    def put(self, target: Target, encoded: EncodedCheckpoint) -> Plan[Command, None]:
        ns = _no_nul(target.checkpoint_ns, "checkpoint_ns")
        nsz = ns + b"\x00"
        refs = [
            nsz + _no_nul(ch, "channel name") + b"\x00" + _utf8(ver)
            for ch, ver in encoded.channel_versions.items()
        ]
        args: list[bytes | str | int] = [
            self._ttl_ms,
            _utf8(target.thread_id),
            ns,
            _no_nul(encoded.checkpoint_id, "checkpoint_id"),
            _utf8(encoded.parent_id or ""),
            _utf8(encoded.run_id or ""),
            ormsgpack.packb([*encoded.checkpoint, *encoded.metadata]),
            self.settings.keep_last or 0,
        ]
        for names in (encoded.delta_channels, encoded.valued_channels):
            args.append(len(names))
            args.extend(_utf8(n) for n in names)
        args.append(len(refs))
        args.extend(refs)
        for blob in encoded.blobs:
            field = nsz + _no_nul(blob.channel, "channel name") + b"\x00" + _utf8(blob.version)
            if blob.type == EMPTY:
                args.extend((field, b"", b"1"))
            else:
                args.extend((field, ormsgpack.packb([blob.type, blob.data]), b"0"))
        yield Eval("put", self.keys(target.thread_id), args)

    def put_writes(self, target: Target, writes: list[EncodedWrite]) -> Plan[Command, None]:
        if not writes:
            return
        assert target.checkpoint_id is not None
        args: list[bytes | str | int] = [
            self._ttl_ms,
            _utf8(target.thread_id),
            _no_nul(target.checkpoint_ns, "checkpoint_ns"),
            _no_nul(target.checkpoint_id, "checkpoint_id"),
            _no_nul(writes[0].task_id, "task_id"),
        ]
        for w in writes:
            args.append(w.idx)
            args.append(ormsgpack.packb([w.task_id, w.channel, w.type, w.data, w.task_path, w.idx]))
        yield Eval("put_writes", self.keys(target.thread_id), args)

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
        for cid, writes, seeds in reply:
            found = {}
            for i in range(0, len(seeds), 2):
                typ, data = ormsgpack.unpackb(seeds[i + 1])
                found[seeds[i].decode()] = (typ, data)
            chain.append(
                ChainLink(
                    checkpoint_id=cid.decode(),
                    seeds=found,
                    writes=[tuple(ormsgpack.unpackb(w)) for w in writes if w is not None],
                )
            )
        return codec.delta_history(channels, chain)

    def delete_thread(self, thread_id: str) -> Plan[Command, None]:
        yield Eval("delete", self.keys(thread_id), [TOMBSTONE_MS])

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
        yield Eval(
            "restore",
            self.keys(target_thread_id),
            [self._ttl_ms, _utf8(target_thread_id), *(_netstrings(part) for part in dump)],
        )

    def prune(self, thread_ids: Sequence[str], keep_latest: bool) -> Plan[Command, None]:
        for thread_id in dict.fromkeys(thread_ids):
            if keep_latest:
                yield Eval("prune_latest", self.keys(thread_id), [])
            else:
                yield Eval("delete", self.keys(thread_id), [TOMBSTONE_MS])

    def sweep_expired(self, batch_size: int) -> Plan[Command, tuple[int, bool]]:
        """Nothing to sweep: Redis expires a thread's keys itself."""
        return 0, False
        yield
