"""The thread index on Redis (single node and Cluster): a record per thread, plus sorted sets.

**The record** is a hash beside the thread's other keys, in the thread's hash slot, so
the checkpoint scripts update it in the same atomic step as the write (see ``RECORD_LUA``,
called by the scripts of ``checkpoint/redis/lua.py``) and it expires with them:

- ``id``, ``c`` (created, ms), ``u`` (updated, ms), ``t`` (title), ``n`` (checkpoints),
  ``b`` (bytes written), ``l`` (latest root checkpoint id), ``m`` (its metadata JSON),
  ``s`` (status), ``i`` (interrupts: netstrings of task id, type, data per interrupt),
  ``o`` (the owner: the user key's JSON member, kept in ``m``; see ``rec_owned``);
- ``m<member>``: each root checkpoint's metadata JSON, so a delete that removes the
  latest checkpoint can say what the new latest one's metadata is.

**The sorted sets** answer "which threads": one of every thread (``<prefix>:{<prefix>:tix}:all``)
and one per indexed metadata value (``<prefix>:{<prefix>:tix}:<key>:<hash of value>``),
scored by ``updated_at`` (ms), members the thread ids. All of a prefix's sets share one
hash slot (the tag ``{<prefix>:tix}``): on a cluster a write's step 1 below is then one
pipeline to one node, where sets spread over slots cost a pipeline to up to every node,
about 4 ms of a put's time when the graph's own thread competes for the GIL (one node
serves the whole index: a few entries per thread). They live in other hash slots than
the threads, so they cannot be in the thread's script. Consistency comes from the order
of the two steps and from reading the records back:

1. Before a put (or an interrupt or error write), the saver adds the thread to its sets
   with the write's timestamp (``ZADD GT``: idempotent, scores only grow); then the
   script writes the thread and its record with the same timestamp (``u`` only grows).
   A crash between the two leaves an entry whose record is missing or older: never a
   thread missing from its sets.
2. Every read verifies the entries it returns against the records (exists, not expired,
   still has that metadata value) and heals what it finds: stale entries are removed,
   scores that disagree with ``u`` are corrected, and the read is taken again. An entry
   newer than its record (or without one) and under ``IN_FLIGHT_MS`` old is a write
   between its two steps: neither listed nor removed (removed, its thread would be
   missing from the set once the write lands). A deleted thread's entries are removed
   right after the delete (and by the next read if that removal is lost).

**A run's later steps reuse its first step 1.** A thread's sets are the same for every
put of a run (same user, root checkpoints idle), and on a cluster step 1 is a round trip
of its own (four per chat turn). So a put of a graph step (metadata ``source`` ``loop``)
that continues the checkpoint this saver wrote last for the thread and namespace, under
``REUSE_MS`` after the step 1 that put made, for the same sets, skips it and writes with
that step 1's time: a record's ``u`` and its entries' scores stay equal. On Redis,
``updated_at`` is then the time of the run's first write (an input, an update, a resume),
moved at least once a second while the run goes on. The script takes such a put only if
the record's ``u`` is still that time and nothing re-derived it since (flag ``x``, set by
``rec_refresh``): any other write, deletion or re-derivation in between sends the put
through step 1 again.

A search by an indexed key reads ``offset + limit`` entries of one set: O(log n + k).
Other filters read the candidate set (the indexed key's, or all threads) in batches and
filter exactly.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any, get_args

from ..drivers.plan import Plan
from ..drivers.redis import Batch, Eval, Scan, glob_escape
from .core import RecordInput, ReindexBatch, Status, StoredRecord, ThreadQuery, index_value

Command = Eval | Scan | Batch
logger = logging.getLogger("langgraph_memory_plus.threads")
Backfill = Callable[[Any, Any, int], Plan[Command, ReindexBatch]]
"""The checkpoint plans' backfill batch (codec, cursor, size): it needs their keys and
decoding, which this module does not have."""

FIELDS = (b"id", b"c", b"u", b"m", b"s", b"i", b"t", b"n", b"b", b"l")
COUNT_FIELDS = (b"u", b"m", b"s")
"""What a count verifies an entry with: its record's time (it exists), metadata, status."""
MAX_HEAL_ROUNDS = 3
BATCH = 500
REUSE_MS = 1000
"""How long a put's step 1 serves the run's later puts (see the module docstring)."""
STORED_STATUSES: tuple[str, ...] = get_args(Status)
"""The statuses a record can have: each has its sets."""
IN_FLIGHT_MS = 30_000
"""How long an entry ahead of its record is taken for a write between its two steps
(afterwards: for one that crashed there, and removed as stale)."""
REUSE_ENTRIES = 4096
"""Threads remembered per saver for that (the oldest are forgotten first)."""
PUT_TS_ARG = 12
"""Where the put script's arguments hold the write's time; the reused step 1's time (or
empty) follows it (see ``checkpoint/redis/lua.py``)."""
WRITES_TS_ARG = 8
"""Where the pending writes script's arguments hold the write's time."""

# Lua shared by the checkpoint scripts (after their PRELUDE, which defines K_REC and the
# helpers used here). Interrupts and errors are found in the latest root checkpoint's
# pending writes: records of (idx, channel, type, data) netstrings after the task path.
RECORD_LUA = r"""
local function rec_status(member)
  local status, ints = 'idle', {}
  local tw = task_writes(member)
  for i = 1, #tw, 2 do
    local t = unpack_list(tw[i + 1])
    for j = 2, #t, 4 do
      if t[j + 1] == '__interrupt__' then
        ints[#ints + 1] = tw[i]
        ints[#ints + 1] = t[j + 2]
        ints[#ints + 1] = t[j + 3]
      elseif t[j + 1] == '__error__' then
        status = 'error'
      end
    end
  end
  if status == 'idle' and #ints > 0 then status = 'interrupted' end
  redis.call('HSET', K_REC, 's', status, 'i', pack_list(ints))
end

local function rec_touch(thread_id, ts)
  redis.call('HDEL', K_REC, 'x')
  redis.call('HSET', K_REC, 'id', thread_id)
  redis.call('HSETNX', K_REC, 'c', ts)
  local u = redis.call('HGET', K_REC, 'u')
  if (not u) or tonumber(u) < tonumber(ts) then redis.call('HSET', K_REC, 'u', ts) end
  redis.call('HSET', K_REC, 'n', redis.call('ZCARD', K_IDX))
end

-- The record's metadata: the checkpoint's, with the owner's member (o: the user key's
-- '"user_id":<JSON value>' from the latest root checkpoint that had one) appended when
-- it lacks the key: a checkpoint without it (a service resuming with only thread_id)
-- leaves the thread its owner's; one with another user's moves it to that user.
local function rec_owned(meta, has_key)
  if has_key then return meta end
  local o = redis.call('HGET', K_REC, 'o')
  if (not o) or string.sub(meta, -1) ~= '}' then return meta end
  local fine, t = pcall(cjson.decode, meta)
  local key = string.match(o, '^"([^"]*)":')
  if (not fine) or type(t) ~= 'table' or t[key] ~= nil then return meta end
  if string.match(meta, '^{%s*}$') then return '{' .. o .. '}' end
  return string.sub(meta, 1, -2) .. ', ' .. o .. '}'
end

-- A root checkpoint at or after the latest is the latest: its metadata and the status
-- its pending writes give (LangGraph may store a step's writes before its checkpoint).
-- has_key: its metadata is known to name the user (a put's owner argument).
local function rec_latest(member, cid, has_key)
  local latest = redis.call('HGET', K_REC, 'l')
  if latest and before(cid, latest) then return end
  redis.call('HSET', K_REC, 'l', cid)
  local meta = redis.call('HGET', K_REC, 'm' .. member)
  if meta then redis.call('HSET', K_REC, 'm', rec_owned(meta, has_key)) end
  rec_status(member)
end

local function rec_put(thread_id, ns, cid, meta, title, nbytes, ts, owner)
  local member = ns .. '\0' .. cid
  if ns == '' then
    redis.call('HSET', K_REC, 'm' .. member, meta)
    local latest = redis.call('HGET', K_REC, 'l')
    if owner ~= '' and not (latest and before(cid, latest)) then
      redis.call('HSET', K_REC, 'o', owner)
    end
    rec_latest(member, cid, owner ~= '')
  end
  if title ~= '' then redis.call('HSETNX', K_REC, 't', title) end
  redis.call('HINCRBY', K_REC, 'b', nbytes)
  rec_touch(thread_id, ts)
end

local function rec_writes(thread_id, ns, cid, ts)
  if ns ~= '' then return end
  rec_latest(ns .. '\0' .. cid, cid)
  rec_touch(thread_id, ts)
end

-- Transcript lines (KEYS[12]: id -> netstrings of role, text, time ms, owner; KEYS[13]:
-- ids in order): a known id is skipped. The owner argument is the user key's member
-- ('"user_id":"alice"', '' without one; rec_put keeps it as the record's owner): each
-- line keeps its writer's user (the thread's owner when the put has none), so a reused
-- thread id shows each user only their lines. Per owner, KEYS[12] counts its lines
-- ('\0owner:' .. owner), which erasure looks for. Returns the position after its
-- arguments.
local function tx_put(pos, ts)
  local owner, ttl, n = ARGV[pos], tonumber(ARGV[pos + 1]), tonumber(ARGV[pos + 2])
  local first = pos + 3
  if n == 0 then return first end
  if owner == '' then owner = redis.call('HGET', K_REC, 'o') or '' end
  local form = ''
  if owner ~= '' then form = string.sub(owner, string.find(owner, ':', 1, true) + 1) end
  local seq, added = redis.call('ZCARD', KEYS[13]), 0
  for i = 0, n - 1 do
    local id = ARGV[first + 3 * i]
    local line = pack_list({ARGV[first + 3 * i + 1], ARGV[first + 3 * i + 2], ts, form})
    if redis.call('HSETNX', KEYS[12], id, line) == 1 then
      seq = seq + 1
      added = added + 1
      redis.call('ZADD', KEYS[13], seq, id)
    end
  end
  if added > 0 and form ~= '' then
    redis.call('HINCRBY', KEYS[12], '\0owner:' .. form, added)
  end
  for k = 12, 13 do
    if ttl > 0 then redis.call('PEXPIRE', KEYS[k], ttl) else redis.call('PERSIST', KEYS[k]) end
  end
  return first + 3 * n
end

-- A put that reuses its run's step 1 (u: that step's time) is taken only if the record
-- is as that run's last write left it, so its entries are still in their sets.
local function rec_expected(u)
  if u == '' then return true end
  local now = redis.call('HMGET', K_REC, 'u', 'x')
  return now[1] == u and not now[2]
end

-- After checkpoints were removed or merged in: derive the record from what is left.
-- (Its metadata or status may change without a step 1: flag x stops reuse until the next.)
local function rec_refresh()
  if redis.call('EXISTS', K_IDX) == 0 then
    redis.call('DEL', K_REC)
    return
  end
  redis.call('HSET', K_REC, 'x', '1')
  local latest = pick('', '')
  if latest then
    redis.call('HDEL', K_REC, 'l')
    local _, cid = split_member(latest)
    rec_latest(latest, cid)
  else
    redis.call('HDEL', K_REC, 'l')
    redis.call('HSET', K_REC, 'm', '{}', 's', 'idle', 'i', '')
  end
  redis.call('HSET', K_REC, 'n', redis.call('ZCARD', K_IDX))
end
"""


# On one set key; ARGV: member, score pairs. Removes each member still at the score
# a read saw (a write since moved it up: it is putting the thread back). Reply: removed.
# A read parses scores as whole milliseconds (``_entries``): a score is compared so
# (truncated), or an entry with a fraction (not written by this package) would stay.
ZREM_IF = r"""
local n = 0
for i = 1, #ARGV, 2 do
  local score = tonumber(redis.call('ZSCORE', KEYS[1], ARGV[i]))
  if score then score = score >= 0 and math.floor(score) or math.ceil(score) end
  if score and score == tonumber(ARGV[i + 1]) then
    n = n + redis.call('ZREM', KEYS[1], ARGV[i])
  end
end
return n
"""


# On one node only (its keys are in many slots): KEYS[1] a set of the index, KEYS[2..]
# the records of its members ARGV[5..]; ARGV[1..4]: the status ('' any), the indexed key
# and the value (a string) the records must have, the time (ms) before which an entry
# ahead of its record is stale. Counts the members whose record says so, removes the
# others but those of writes in flight (see the module docstring) and sets scores to
# ``u``, in one atomic step. Reply: the count, how many it removed, then the members
# whose metadata it cannot read (the caller checks them).
COUNT_ONE_NODE = r"""
local set, status, key, want = KEYS[1], ARGV[1], ARGV[2], ARGV[3]
local stale_before = tonumber(ARGV[4])
local reply = {0, 0}
for i = 2, #KEYS do
  local member = ARGV[i + 3]
  local r = redis.call('HMGET', KEYS[i], 'u', 'm', 's')
  local ok = r[1] and (status == '' or (r[3] or 'idle') == status)
  local sure = true
  if ok and key ~= '' then
    local fine, meta = pcall(cjson.decode, r[2] or '{}')
    if fine and type(meta) == 'table' then
      ok = meta[key] == want
    else
      sure = false
    end
  end
  if not sure then
    reply[#reply + 1] = member
  elseif ok then
    reply[1] = reply[1] + 1
    if tonumber(redis.call('ZSCORE', set, member)) ~= tonumber(r[1]) then
      redis.call('ZADD', set, 'XX', r[1], member)
    end
  else
    local score = tonumber(redis.call('ZSCORE', set, member))
    local ahead = score and score >= stale_before and ((not r[1]) or score >= tonumber(r[1]))
    if score and not ahead then
      reply[2] = reply[2] + redis.call('ZREM', set, member)
    end
  end
end
return reply
"""
COUNT_BATCH = 2000

# Transcripts: what a line's owner is (its fourth netstring; lines written before lines
# had owners carry the transcript's one owner, field '\0owner').
_TX_OWNER = r"""
local function owner_of(value, legacy)
  local pos, k = 1, 0
  while pos <= #value do
    local colon = string.find(value, ':', pos, true)
    local n = tonumber(string.sub(value, pos, colon - 1))
    k = k + 1
    if k == 4 then return string.sub(value, colon + 1, colon + n) end
    pos = colon + n + 1
  end
  return legacy
end
local legacy = redis.call('HGET', KEYS[1], '\0owner') or ''
"""

# KEYS: a transcript's lines and order; ARGV: an owner, offset, limit. The owner's lines
# from ``offset`` in order, as (id, line) pairs: O(lines of the transcript) in the server.
TX_READ = (
    _TX_OWNER
    + r"""
local want, offset, limit = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local out, skipped, start = {}, 0, 0
while #out < 2 * limit do
  local ids = redis.call('ZRANGE', KEYS[2], start, start + 499)
  if #ids == 0 then break end
  local values = redis.call('HMGET', KEYS[1], unpack(ids))
  for i = 1, #ids do
    local v = values[i]
    if v and #out < 2 * limit and owner_of(v, legacy) == want then
      if skipped < offset then
        skipped = skipped + 1
      else
        out[#out + 1] = ids[i]
        out[#out + 1] = v
      end
    end
  end
  start = start + 500
end
return out
"""
)

# KEYS: a transcript's lines and order; ARGV: an owner, '1' to count only, '1' for the
# lines of no user too. Erasure: those lines go (the transcript too when none is left).
# Reply: how many.
TX_DROP_OWNER = (
    _TX_OWNER
    + r"""
local want, dry, none_too = ARGV[1], ARGV[2] == '1', ARGV[3] == '1'
local all, n = redis.call('HGETALL', KEYS[1]), 0
for i = 1, #all, 2 do
  local f = all[i]
  local who = string.byte(f, 1) ~= 0 and owner_of(all[i + 1], legacy)
  if who == want or (none_too and who == '') then
    n = n + 1
    if not dry then
      redis.call('HDEL', KEYS[1], f)
      redis.call('ZREM', KEYS[2], f)
    end
  end
end
if not dry then
  redis.call('HDEL', KEYS[1], '\0owner:' .. want)
  if legacy == want then redis.call('HDEL', KEYS[1], '\0owner') end
  if redis.call('ZCARD', KEYS[2]) == 0 then redis.call('DEL', KEYS[1]) end
end
return n
"""
)
# On sets of the index (one hash slot); ARGV: score, member, TTL in ms (0: the thread has
# none). Adds the member to each set (scores only grow) and lets a set's expiry only grow:
# a set is shared by every thread of a user (or status), and one thread's shorter TTL (a
# saver configured otherwise, another process) must not expire the others' entries. A
# thread without TTL makes the set persistent; a new set takes the thread's TTL.
TIX_ADD = r"""
local ttl = tonumber(ARGV[3])
for _, key in ipairs(KEYS) do
  local existed = redis.call('EXISTS', key)
  redis.call('ZADD', key, 'GT', ARGV[1], ARGV[2])
  if ttl <= 0 then
    redis.call('PERSIST', key)
  elseif existed == 0 then
    redis.call('PEXPIRE', key, ttl)
  else
    local left = redis.call('PTTL', key)
    if left >= 0 and left < ttl then redis.call('PEXPIRE', key, ttl) end
  end
end
return 1
"""

TIX_ADD_SHA = hashlib.sha1(TIX_ADD.encode(), usedforsecurity=False).hexdigest()
"""Batches call ``TIX_ADD`` by this digest; the savers register it as ``tix_add`` (a
runner loads it again when the server forgot it)."""

TRANSCRIPT_SCRIPTS = {"tx_read": TX_READ, "tx_drop_owner": TX_DROP_OWNER}
"""Entries per call of that script (a few milliseconds of the server's time)."""


def _utf8(text: str) -> bytes:
    return text.encode("utf-8", "surrogatepass")


def _flag(value: bool) -> bytes:
    return b"1" if value else b"0"


def _netstrings(raw: bytes) -> list[bytes]:
    out, pos = [], 0
    while pos < len(raw):
        colon = raw.index(b":", pos)
        n = int(raw[pos:colon])
        out.append(raw[colon + 1 : colon + 1 + n])
        pos = colon + 1 + n
    return out


def _entries(raw: list[Any]) -> list[tuple[str, int]]:
    """(member, score) from a ``ZRANGE ... WITHSCORES`` reply, flat or paired by the client."""
    if raw and not isinstance(raw[0], (list, tuple)):
        raw = [(raw[i], raw[i + 1]) for i in range(0, len(raw), 2)]
    return [(m.decode("utf-8", "surrogatepass"), int(float(score))) for m, score in raw]


def _in_flight(score: int, updated: int | None, stale_before: int) -> bool:
    """Whether an index entry that its record (``u``: ``updated``, ``None`` if there is
    none) does not account for is a write between its two steps: not older than the
    record (a write in the record's millisecond has its time) and newer than
    ``stale_before`` (see the module docstring)."""
    return score >= stale_before and (updated is None or score >= updated)


def now_ms() -> int:
    return int(time.time() * 1000)


def record_of(values: Sequence[bytes | None]) -> StoredRecord | None:
    """A record from its :data:`FIELDS` as read (``None``: no record)."""
    tid, created, updated, meta, status, ints, title, n, size, latest = values
    if tid is None or updated is None:
        return None
    parts = _netstrings(ints or b"")
    interrupts = {
        parts[i].decode("utf-8", "surrogatepass"): (parts[i + 1].decode(), parts[i + 2])
        for i in range(0, len(parts), 3)
    }
    return StoredRecord(
        thread_id=tid.decode("utf-8", "surrogatepass"),
        created_at=int(created or updated) / 1000,
        updated_at=int(updated) / 1000,
        metadata=json.loads(meta or b"{}"),
        status=(status or b"idle").decode(),
        interrupts=interrupts,
        title=title.decode("utf-8", "surrogatepass") if title else None,
        checkpoints=int(n or 0),
        bytes=int(size or 0),
        latest_id=latest.decode() if latest else None,
    )


class RedisThreadIndex:
    """Set keys, the write steps and the reads of the thread index for one key prefix."""

    def __init__(
        self,
        prefix: str,
        index_keys: Sequence[str],
        record_key: Callable[[str], bytes],
        ttl_ms: int,
        transcript_ttl_ms: int = 0,
        backfill: Backfill | None = None,
    ) -> None:
        self.transcript_ttl_ms = transcript_ttl_ms
        self._backfill = backfill
        self.prefix = prefix
        self.index_keys = tuple(index_keys)
        # a count by user computes a key per thread: the recent ones are kept
        self._record_key = functools.lru_cache(maxsize=1 << 14)(record_key)
        self._ttl_ms = ttl_ms
        self.one_node = False
        """Set by the saver on a single node: counts then run in one script per batch."""
        # a put derives its sets' keys (a hash each) three times: the recent ones are kept
        self._set_key = functools.lru_cache(maxsize=1 << 12)(self._set_key_uncached)
        self._status_key = functools.lru_cache(maxsize=1 << 12)(self._status_key_uncached)
        self.all_key = self._name("all")
        self._former_head = _utf8(f"{prefix}:{{tix:")
        self._moved = False
        """Whether the sets of the former layout were looked for (see :meth:`move_sets`)."""
        # (thread id, namespace) -> the last checkpoint this saver wrote there, the sets
        # of the last step 1 and its time (ms, and monotonic seconds)
        self._runs: OrderedDict[tuple[str, str], tuple[str, frozenset[bytes], int, float]] = (
            OrderedDict()
        )

    def transcript_keys(self, thread_id: str) -> list[bytes]:
        """The transcript's keys: in the thread's slot, outside its expiring keys."""
        base = self._record_key(thread_id)[: -len(b"rec")]
        return [base + b"tx", base + b"txo"]

    def transcript_args(self, record: RecordInput) -> list[bytes | int]:
        args: list[bytes | int] = [
            self.owner_member(record.owner),
            self.transcript_ttl_ms,
            len(record.lines),
        ]
        for line in record.lines:
            args.extend((_utf8(line.id), _utf8(line.role), _utf8(line.text)))
        return args

    def owner_member(self, owner: str | None) -> bytes:
        """The user key's JSON member (``"user_id":"alice"``) for an owner's indexed form:
        what the record keeps as its owner (see ``rec_owned``), b"" for none."""
        if owner is None or not self.index_keys:
            return b""
        return _utf8(json.dumps(self.index_keys[0]) + ":" + owner)

    def drop_transcripts(
        self, thread_ids: Sequence[str], dry: bool, owner: str | None = None
    ) -> Plan[Command, int]:
        """Erasure: the transcript lines of these threads (counted only, when ``dry``);
        with ``owner``, only that user's lines and those of no user (another user's lines
        in a reused thread id stay theirs), one script per transcript."""
        keys = [self.transcript_keys(t) for t in thread_ids]
        if not keys:
            return 0
        if owner is not None:
            total = 0
            for lines, order in keys:
                n = yield Eval("tx_drop_owner", [lines, order], [_utf8(owner), _flag(dry), b"1"])
                total += int(n)
            return total
        counts = yield Batch([("ZCARD", order) for _, order in keys])
        if not dry:
            yield Batch([("DEL", lines, order) for lines, order in keys])
        return sum(int(n) for n in counts)

    def drop_owned_transcripts(
        self, owner: str, limit: int, dry: bool, listed: Sequence[str] = ()
    ) -> Plan[Command, int]:
        """Erasure: the lines recorded for ``owner`` in threads no longer in the index
        (when ``dry``, those of ``listed`` threads left out: they are counted apart).

        There is no owner index on Redis: SCAN (admin paths only) finds every
        transcript; those that count lines of ``owner`` (or, written before lines had
        owners, are ``owner``'s) lose exactly those lines, one script per transcript.
        """
        found: list[bytes] = yield Scan(_utf8(f"{glob_escape(self.prefix)}:{{*}}:tx"))
        skip = {self.transcript_keys(t)[0] for t in listed}
        found = [key for key in found if key not in skip]
        total, want = 0, _utf8(owner)
        for start in range(0, len(found), max(1, limit)):
            chunk = found[start : start + max(1, limit)]
            owners = yield Batch(
                [("HMGET", key, b"\x00owner:" + want, b"\x00owner") for key in chunk]
            )
            for key, (count, legacy) in zip(chunk, owners, strict=True):
                if count is not None or legacy == want:
                    n = yield Eval("tx_drop_owner", [key, key + b"o"], [want, _flag(dry), b"0"])
                    total += int(n)
        return total

    def drop_owner_sets(self, owner: str) -> Plan[Command, None]:
        """Erasure, once the user's threads are deleted: what the user's own sets still
        hold that is no thread of theirs goes. That is a write in flight (its run is
        refused by the erasure's hold and deletes its thread), an entry a crashed write
        left, or a thread that moved to another user and was deleted since (its
        deletion cleans only its last user's sets): each is the erased user's thread id,
        hidden from reads for ``IN_FLIGHT_MS`` or until a read meets it. An entry whose
        record is the user's, with that status, stays: a thread a run of the user wrote
        after the last page, the hold having lapsed (or been lifted) meanwhile, must stay
        findable, by ``sessions`` and by the next erasure."""
        for name, status in self._owner_sets(owner):
            [raw] = yield Batch([("ZRANGE", name, 0, -1, "WITHSCORES")])
            entries = _entries(raw)
            records = yield from self._records([t for t, _ in entries])
            gone: list[bytes | int] = []
            for (tid, score), r in zip(entries, records, strict=True):
                if (
                    r is None
                    or not self.owned_by(r, owner)
                    or (status is not None and r.status != status)
                ):
                    gone += [_utf8(tid), score]
            # at the score read: a write of the user's since (the hold lapsed) moved it up
            for start in range(0, len(gone), 2 * BATCH):
                yield Eval("zrem_if", [name], gone[start : start + 2 * BATCH])

    def _owner_sets(self, owner: str) -> list[tuple[bytes, str | None]]:
        """The sets of ``owner``'s own threads (with no user key: none), each with the
        status it holds (``None``: any)."""
        if not self.index_keys:
            return []
        indexed = (self.index_keys[0], owner)
        return [
            (self.set_key(*indexed), None),
            *((self.status_key(s, indexed), s) for s in STORED_STATUSES),
        ]

    def owned_by(self, record: StoredRecord, owner: str) -> bool:
        """Whether ``record`` files its thread under ``owner`` (by the user key)."""
        keys = self.index_keys
        return bool(keys) and index_value(record.metadata.get(keys[0])) == owner

    def copy_transcript(self, source: str, target: str) -> Plan[Command, None]:
        """``copy_thread``: the source's transcript lines the target lacks (by message
        id), in their order, and its owner unless the target has one. Idempotent
        commands: a copy interrupted half-way is completed by running it again."""
        lines, order = self.transcript_keys(source)
        fields, ranked = yield Batch([("HGETALL", lines), ("ZRANGE", order, 0, -1, "WITHSCORES")])
        if not fields:
            return
        to_lines, to_order = self.transcript_keys(target)
        pairs = (
            fields.items()
            if isinstance(fields, dict)
            else zip(fields[::2], fields[1::2], strict=True)
        )
        commands: list[tuple[Any, ...]] = [("HSETNX", to_lines, f, v) for f, v in pairs]
        commands += [
            ("ZADD", to_order, "NX", score, _utf8(member)) for member, score in _entries(ranked)
        ]
        if self.transcript_ttl_ms:
            commands += [("PEXPIRE", key, self.transcript_ttl_ms) for key in (to_lines, to_order)]
        yield Batch(commands)

    def transcript(
        self, thread_id: str, owner: str | None, limit: int, offset: int
    ) -> Plan[Command, list[tuple[str, str, str, float]]]:
        lines, order = self.transcript_keys(thread_id)
        if limit == 0:
            return []
        if owner is None:
            [ids] = yield Batch([("ZRANGE", order, offset, offset + limit - 1)])
            if not ids:
                return []
            [values] = yield Batch([("HMGET", lines, *ids)])
            pairs = zip(ids, values, strict=True)
        else:
            flat = yield Eval("tx_read", [lines, order], [_utf8(owner), offset, limit])
            pairs = zip(flat[::2], flat[1::2], strict=True)
        out = []
        for msg_id, value in pairs:
            if value is None:
                continue
            role, text, ts = _netstrings(value)[:3]
            out.append(
                (
                    msg_id.decode("utf-8", "surrogatepass"),
                    role.decode(),
                    text.decode("utf-8", "surrogatepass"),
                    int(ts) / 1000,
                )
            )
        return out

    def _name(self, rest: str) -> bytes:
        """A set's key: ``rest`` after the index's hash tag."""
        return _utf8(f"{self.prefix}:{{{self.prefix}:tix}}:{rest}")

    def set_key(self, key: str, form: str) -> bytes:
        return self._set_key(key, form)

    def _set_key_uncached(self, key: str, form: str) -> bytes:
        digest = hashlib.sha256(_utf8(f"{key}\x00{form}")).hexdigest()[:32]
        return self._name(f"{key}:{digest}")

    def status_key(self, status: str, indexed: tuple[str, str] | None = None) -> bytes:
        """The set of threads in ``status``: all of them, or those of one indexed value."""
        return self._status_key(status, indexed)

    def _status_key_uncached(self, status: str, indexed: tuple[str, str] | None) -> bytes:
        if indexed is None:
            return self._name(f"s:{status}")
        key, form = indexed
        digest = hashlib.sha256(_utf8(f"{key}\x00{form}\x00{status}")).hexdigest()[:32]
        return self._name(f"{key}:s:{digest}")

    def _status_keys(self, status: str, indexed: dict[str, str]) -> list[bytes]:
        return [self.status_key(status)] + [
            self.status_key(status, item) for item in indexed.items()
        ]

    # -- writes -------------------------------------------------------------------------

    def _adds(self, keys: Sequence[bytes], thread_id: str, ts: int) -> Batch:
        """The thread's entries in ``keys`` (all in the index's hash slot), in one script
        (``TIX_ADD``): a set's expiry only grows, and a thread without TTL makes it
        persistent. Every entry's thread expires by its last step 1's time plus the TTL
        (plus the reuse time: a run's later puts move the thread's expiry)."""
        ttl = self._ttl_ms + REUSE_MS if self._ttl_ms else 0
        return Batch([("EVALSHA", TIX_ADD_SHA, len(keys), *keys, ts, _utf8(thread_id), ttl)])

    def _intent_keys(self, record: RecordInput | None) -> list[bytes]:
        keys = [self.all_key]
        if record is not None:
            keys += [self.set_key(k, v) for k, v in record.indexed.items()]
            if record.root:
                keys += self._status_keys("idle", record.indexed)
        return keys

    def put_args(
        self, thread_id: str, ns: str, parent_id: str | None, record: RecordInput
    ) -> list[Any]:
        """The put script's index arguments: the write's time, the reused step 1's time
        (empty: none reused), then the transcript's (:meth:`transcript_args`)."""
        seen = self._runs.get((thread_id, ns))
        if seen is not None and record.metadata.get("source") == "loop":
            last, keys, then_ts, at = seen
            if (
                parent_id == last
                and time.monotonic() - at < REUSE_MS / 1000
                and keys >= set(self._intent_keys(record))
            ):
                return [then_ts, b"%d" % then_ts, *self.transcript_args(record)]
        return [now_ms(), b"", *self.transcript_args(record)]

    def put(
        self, thread_id: str, ns: str, checkpoint_id: str, record: RecordInput, write: Eval
    ) -> Plan[Command, Any]:
        """A put's two steps, step 1 skipped when it reuses the run's (see the module
        docstring). Reply: the script's (0 refused, 1 stored, 2 stored, not idle)."""
        args = list(write.args)
        ts, reused = int(args[PUT_TS_ARG]), args[PUT_TS_ARG + 1]
        if reused:
            reply = yield write
            if reply != 3:
                if reply == 1:
                    self._remember(thread_id, ns, checkpoint_id, None, ts)
                else:
                    self._runs.pop((thread_id, ns), None)
                return reply
            # the record moved since that step 1: this put makes one of its own
            args[PUT_TS_ARG : PUT_TS_ARG + 2] = [ts := now_ms(), b""]
            write = Eval(write.script, write.keys, args)
        reply = yield self.intent(thread_id, record, ts, write)
        if reply == 1:
            keys = frozenset(self._intent_keys(record))
            self._remember(thread_id, ns, checkpoint_id, keys, ts)
        else:  # refused, or not idle: reads may remove the idle entries this step 1 made
            self._runs.pop((thread_id, ns), None)
        return reply

    def _remember(
        self, thread_id: str, ns: str, checkpoint_id: str, keys: frozenset[bytes] | None, ts: int
    ) -> None:
        """The put's checkpoint, and with ``keys`` the step 1 it made (else the one it reused)."""
        key = (thread_id, ns)
        if keys is None:
            seen = self._runs.get(key)
            if seen is None:
                return
            _, keys, ts, at = seen
        else:
            at = time.monotonic()
        self._runs[key] = (checkpoint_id, keys, ts, at)
        self._runs.move_to_end(key)
        if len(self._runs) > REUSE_ENTRIES:
            self._runs.popitem(last=False)

    def intent(
        self, thread_id: str, record: RecordInput | None, ts: int, then: Eval | None = None
    ) -> Batch:
        """Step 1 of a write: the thread's entries in its sets, then (``then``) the write.

        A root checkpoint makes its thread ``idle`` (unless writes stored before it say
        otherwise: those entered their status's sets already), so it enters the idle
        sets. Entries a thread left behind in its former status's sets are removed by
        the reads that meet them (they check each entry's record).
        """
        return Batch(self._adds(self._intent_keys(record), thread_id, ts).commands, then)

    def writes_intent(self, thread_id: str, status: str, ts: int, then: Eval) -> Plan[Command, Any]:
        """Step 1 of an interrupt's or an error's write, then the write (its reply).

        The thread enters ``status``'s sets: all threads', and its indexed values' as
        its record's metadata says (read first: the writes do not carry metadata). When
        the writes come before their thread's first checkpoint (LangGraph runs them side
        by side) the record has no metadata yet: the thread then enters its values' sets
        after the script, as its record says by then (every stored write does that, see
        below), and a put that finds its thread not idle does so too (see ``put``).
        The write's time is after the record's (a write in the same millisecond would
        leave it unchanged, and a run's next put would take its step 1 as still valid).
        """
        [(meta, updated)] = yield Batch([("HMGET", self._record_key(thread_id), b"m", b"u")])
        if updated is not None and int(updated) >= ts:
            # the last write's millisecond, or a clock behind its writer's: the record's
            # time must move (a run's put that reuses its step 1 would be taken, and an
            # entry not newer than its record is removed by a read as one left behind)
            ts = int(updated) + 1
            args = list(then.args)
            args[WRITES_TS_ARG] = ts
            then = Eval(then.script, then.keys, args)
        metadata = json.loads(meta) if meta else {}
        indexed = {
            k: form
            for k in self.index_keys
            if k in metadata and (form := index_value(metadata[k])) is not None
        }
        keys = [self.all_key, *self._status_keys(status, indexed)]
        reply = yield Batch(self._adds(keys, thread_id, ts).commands, then)
        if reply == 1:
            # as the record says now: its metadata may have come meanwhile, and a read
            # between the two steps removes the entries if a concurrent write (a put of
            # the same run) left the record newer than them
            yield from self.adopt(thread_id)
        elif reply == 0:  # refused (the thread was deleted): the entries added go again
            yield from self._refused_keys(thread_id, keys)
        return reply

    def refused(self, thread_id: str, record: RecordInput | None) -> Plan[Command, None]:
        """After a write the script refused (its thread was deleted, e.g. by erasure):
        the entries step 1 added go again, unless the thread lives (a fresh run)."""
        yield from self._refused_keys(thread_id, self._intent_keys(record))

    def _refused_keys(self, thread_id: str, keys: Sequence[bytes]) -> Plan[Command, None]:
        """The entries a refused write's step 1 added to ``keys`` go, unless the thread lives."""
        [stored] = yield from self._records([thread_id])
        if stored is None:
            yield Batch([("ZREM", key, _utf8(thread_id)) for key in keys])

    def _keys_of(self, record: StoredRecord, every_status: bool = False) -> list[bytes]:
        """The sets the record's thread is in; with ``every_status``, also the other
        statuses' sets, where it may have left entries behind (see ``intent``)."""
        indexed = {
            k: form
            for k in self.index_keys
            if k in record.metadata and (form := index_value(record.metadata[k])) is not None
        }
        statuses = STORED_STATUSES if every_status else (record.status,)
        return [
            self.all_key,
            *(self.set_key(k, form) for k, form in indexed.items()),
            *(key for status in statuses for key in self._status_keys(status, indexed)),
        ]

    def forget(self, records: Sequence[StoredRecord | None]) -> Plan[Command, None]:
        """After deletions: the threads' entries go (a lost removal heals on read)."""
        commands: list[tuple[Any, ...]] = [
            ("ZREM", key, _utf8(r.thread_id))
            for r in records
            if r
            for key in self._keys_of(r, every_status=True)
        ]
        if commands:
            yield Batch(commands)

    def entries(self, thread_id: str, owner: str) -> Plan[Command, list[tuple[bytes, Any]]]:
        """The thread's entries that a change emptying it should remove, as (set, score)
        pairs, read before the change for :meth:`forget_entries` after it: ``owner``'s
        sets (score ``None``: whatever it is; no other user's write adds to them) and
        those its record names, at the record's time. Those sets are shared: another
        user's first put on the same id, landing meanwhile, moves its entries up (its
        step 1) and keeps them. An entry with no record to date it (an interrupt in a
        subgraph's namespace makes entries before any record) is left to the reads,
        which take it for a write in flight for ``IN_FLIGHT_MS``, then remove it."""
        [record] = yield from self._records([thread_id])
        own = [key for key, _ in self._owner_sets(owner)]
        out: list[tuple[bytes, Any]] = [(key, None) for key in own]
        if record is not None:
            at = int(record.updated_at * 1000)
            out += [(key, at) for key in self._keys_of(record, every_status=True) if key not in own]
        return out

    def forget_entries(
        self, thread_id: str, entries: Sequence[tuple[bytes, Any]]
    ) -> Plan[Command, None]:
        """Remove the :meth:`entries` read before (each dated one only at its score)."""
        member = _utf8(thread_id)
        plain = [("ZREM", key, member) for key, score in entries if score is None]
        if plain:
            yield Batch(plain)
        for key, score in entries:
            if score is not None:
                yield Eval("zrem_if", [key], [member, score])

    def adopt(self, thread_id: str) -> Plan[Command, None]:
        """After a copy or refresh: the thread's entries as its record says.

        A deletion between the record's read and the add (erasure, as a run's interrupt
        is stored) may have removed the entries before they were added: the record is
        looked for again, and if it is gone the entries added go (each only while still
        at the score added: a fresh run's step 1 since moved it up)."""
        [record] = yield from self._records([thread_id])
        if record is None:
            return
        keys, score = self._keys_of(record), int(record.updated_at * 1000)
        yield self._adds(keys, thread_id, score)
        [still] = yield Batch([("EXISTS", self._record_key(thread_id))])
        if not still:
            for key in keys:
                yield Eval("zrem_if", [key], [_utf8(thread_id), score])

    # -- the former layout ----------------------------------------------------------------

    def _former(self, rest: bytes) -> bytes:
        """A set's key in the former layout (a hash slot per set): ``<prefix>:{tix:<rest>}``."""
        return self._former_head + rest + b"}"

    def move_sets(self) -> Plan[Command, int]:
        """Sets of the former layout moved into this one: looked for once per index (one
        ``EXISTS``), before its first read. Returns how many sets were moved.

        Entries are copied ``BATCH`` at a time with ``ZADD GT`` (scores only grow: a write
        since keeps its newer score) and a set is deleted only once copied, the set of all
        threads last, which is the one looked for: a crash part-way leaves it, and the next
        reader resumes. Writers of the former version keep writing the former sets (a
        rolling upgrade): the next process of this version moves those.
        """
        if self._moved:
            return 0
        former_all = self._former(b"all")
        [found] = yield Batch([("EXISTS", former_all)])
        moved = 0
        if found:
            keys = yield Scan(_utf8(glob_escape(self.prefix) + ":{tix:*}"))
            for key in sorted(keys, key=lambda k: k == former_all):
                yield from self._move_set(key)
                moved += 1
            logger.info("thread index %r: moved %d sets of the former layout", self.prefix, moved)
        self._moved = True
        return moved

    def _move_set(self, former: bytes) -> Plan[Command, None]:
        rest = former[len(self._former_head) : -1]
        key = self._name(rest.decode("utf-8", "surrogatepass"))
        # the longer life of the two wins (no expiry is the longest); read before copying,
        # as the copy creates the set when writes have not yet
        ttls = yield Batch([("PTTL", former), ("PTTL", key)])
        old_ttl, new_ttl = int(ttls[0]), int(ttls[1])
        start = 0
        while True:
            [raw] = yield Batch([("ZRANGE", former, start, start + BATCH - 1, "WITHSCORES")])
            entries = _entries(raw)
            if entries:
                pairs = [part for tid, score in entries for part in (score, _utf8(tid))]
                yield Batch([("ZADD", key, "GT", *pairs)])
            if len(entries) < BATCH:
                break
            start += BATCH
        if old_ttl == -1 and new_ttl >= 0:
            yield Batch([("PERSIST", key)])
        elif old_ttl > 0 and (new_ttl == -2 or 0 <= new_ttl < old_ttl):
            yield Batch([("PEXPIRE", key, old_ttl)])
        yield Batch([("DEL", former)])

    # -- reads --------------------------------------------------------------------------

    def _records(self, thread_ids: Sequence[str]) -> Plan[Command, list[StoredRecord | None]]:
        out: list[StoredRecord | None] = []
        for start in range(0, len(thread_ids), BATCH):
            chunk = thread_ids[start : start + BATCH]
            replies = yield Batch([("HMGET", self._record_key(t), *FIELDS) for t in chunk])
            out.extend(record_of(r) for r in replies)
        return out

    def _belongs(self, record: StoredRecord | None, query: ThreadQuery) -> bool:
        if record is None:
            return False
        if query.status is not None and record.status != query.status:
            return False
        if query.indexed is None:
            return True
        key, form = query.indexed
        return key in record.metadata and index_value(record.metadata[key]) == form

    def _set_of(self, query: ThreadQuery) -> bytes:
        if query.status is not None:
            return self.status_key(query.status, query.indexed)
        return self.set_key(*query.indexed) if query.indexed else self.all_key

    def _heal(
        self,
        key: bytes,
        entries: list[tuple[str, int]],
        records: list[StoredRecord | None],
        query: ThreadQuery,
    ) -> tuple[list[Command], int]:
        """Commands that mend a set's entries (and how many they may remove): an entry
        whose record is gone or disagrees goes, unless a write moved its score since it
        was read (that write is putting the thread back in) or it is a write's in flight
        (:func:`_in_flight`); a score is set to ``u``."""
        gone: list[bytes | int] = []
        scores: list[tuple[Any, ...]] = []
        stale_before = now_ms() - IN_FLIGHT_MS
        for (tid, score), record in zip(entries, records, strict=True):
            updated = None if record is None else int(record.updated_at * 1000)
            if not self._belongs(record, query):
                if not _in_flight(score, updated, stale_before):
                    gone += [_utf8(tid), score]
            elif updated is not None and updated != score:
                scores.append(("ZADD", key, "XX", updated, _utf8(tid)))
        fixes: list[Command] = [Eval("zrem_if", [key], gone)] if gone else []
        if scores:
            fixes.append(Batch(scores))
        return fixes, len(gone) // 2

    def _window(self, query: ThreadQuery) -> Plan[Command, list[StoredRecord]]:
        """``limit`` entries from ``offset`` of one set, verified (the indexed fast path).

        A status set holds entries of threads that have left that status since (removed
        by the reads that meet them, not by the writes): it is verified from its start,
        so a page's position is exact, and read again as long as a round removes
        entries. Each left-behind entry is removed once, so reads stay O(log n + offset
        + limit) amortized.

        Entries of writes in flight (:func:`_in_flight`) stay in the set unlisted: the
        page reads as many more as it met (at least doubling its read: linear in a run
        of them), and positions count only listed entries. Such
        entries are recent (under ``IN_FLIGHT_MS``); a read from ``offset`` is taken from
        the start instead when recent entries come before ``offset`` (``ZCOUNT``).
        """
        key = self._set_of(query)
        desc = query.sort_order == "desc"
        order = ("REV",) if desc else ()
        start = 0 if query.status is not None else query.offset
        idle_rounds, extra = 0, 0
        while True:
            stop = query.offset + query.limit - 1 + extra
            commands: list[tuple[Any, ...]] = [("ZRANGE", key, start, stop, *order, "WITHSCORES")]
            if start > 0:  # where recent entries (maybe unlisted) are: before start?
                commands += [("ZCOUNT", key, now_ms() - IN_FLIGHT_MS, "+inf"), ("ZCARD", key)]
            raw, *sizes = yield Batch(commands)
            if sizes:
                recent, card = int(sizes[0]), int(sizes[1])
                if recent and (desc or card - recent < start):
                    start = 0
                    continue
            entries = _entries(raw)
            records = yield from self._records([t for t, _ in entries])
            fixes, removed = self._heal(key, entries, records, query)
            shown = [r for r in records if r is not None and self._belongs(r, query)]
            if not fixes:
                unlisted = len(entries) - len(shown)
                if unlisted > extra and len(entries) == stop - start + 1:
                    # writes in flight: read as many more, at least twice as many as the
                    # last round (a run of unlisted entries costs O(its length), not its
                    # square: each round reads the window again from ``start``)
                    extra = max(unlisted, 2 * extra)
                    continue
                return shown[query.offset - start :][: query.limit]
            for fix in fixes:  # noqa: UP028 (a list iterator takes no replies)
                yield fix
            idle_rounds = 0 if removed else idle_rounds + 1
            if idle_rounds >= MAX_HEAL_ROUNDS:  # scores moving under writes: settle here
                return query.page(shown) if start == 0 else shown[: query.limit]

    def _all(self, query: ThreadQuery) -> Plan[Command, list[StoredRecord]]:
        """Every candidate of the query's set (or its ids), verified and healed."""
        if query.ids is not None:
            found = yield from self._records(list(query.ids))
            return [r for r in found if r is not None and self._belongs(r, query)]
        key = self._set_of(query)
        out: list[StoredRecord] = []
        start = 0
        while True:
            [raw] = yield Batch([("ZRANGE", key, start, start + BATCH - 1, "WITHSCORES")])
            entries = _entries(raw)
            records = yield from self._records([t for t, _ in entries])
            fixes, removed = self._heal(key, entries, records, query)
            for fix in fixes:  # noqa: UP028 (a list iterator takes no replies)
                yield fix
            out.extend(r for r in records if r is not None and self._belongs(r, query))
            if len(entries) < BATCH:
                return out
            start += BATCH - removed

    def search(self, query: ThreadQuery) -> Plan[Command, list[StoredRecord]]:
        yield from self.move_sets()
        if query.limit == 0:
            return []
        rest = {k for k in query.metadata if not query.indexed or k != query.indexed[0]}
        simple = not rest and query.ids is None
        if simple and query.sort_by == "updated_at":
            return (yield from self._window(query))
        return query.page((yield from self._all(query)))

    def count(self, query: ThreadQuery) -> Plan[Command, int]:
        yield from self.move_sets()
        rest = {k for k in query.metadata if not query.indexed or k != query.indexed[0]}
        if rest or query.ids is not None:
            return sum(1 for r in (yield from self._all(query)) if query.matches(r))
        return (yield from self._count_set(query))

    def _count_set(self, query: ThreadQuery) -> Plan[Command, int]:
        """Entries of the query's set whose record still says so: each checked on three
        fields of its record, not read whole (a count ships no titles or interrupts).
        Entries that fail the check are mended as a search mends them. On one node the
        check runs in a script, ``COUNT_BATCH`` entries a call, and ships nothing back."""
        want = self._script_value(query)
        if self.one_node and want is not None:
            return (yield from self._count_one_node(query, want))
        key = self._set_of(query)
        found, start = 0, 0
        while True:
            [raw] = yield Batch([("ZRANGE", key, start, start + BATCH - 1, "WITHSCORES")])
            entries = _entries(raw)
            replies = yield Batch(
                [("HMGET", self._record_key(t), *COUNT_FIELDS) for t, _ in entries]
            )
            gone: list[bytes | int] = []
            scores: list[tuple[Any, ...]] = []
            stale_before = now_ms() - IN_FLIGHT_MS
            for (tid, score), (updated, meta, status) in zip(entries, replies, strict=True):
                if updated is None or not self._holds(meta, status, query):
                    if not _in_flight(score, updated and int(updated), stale_before):
                        gone += [_utf8(tid), score]
                    continue
                found += 1
                if int(updated) != score:
                    scores.append(("ZADD", key, "XX", int(updated), _utf8(tid)))
            if gone:
                yield Eval("zrem_if", [key], gone)
            if scores:
                yield Batch(scores)
            if len(entries) < BATCH:
                return found
            start += BATCH - len(gone) // 2

    @staticmethod
    def _script_value(query: ThreadQuery) -> bytes | None:
        """The indexed value as the count script compares it (b"": no key), or ``None``
        when the script cannot compare it as Python does (only strings decode alike)."""
        if query.indexed is None:
            return b""
        value = json.loads(query.indexed[1])
        if not isinstance(value, str):
            return None
        try:
            return value.encode()
        except UnicodeEncodeError:  # lone surrogates
            return None

    def _count_one_node(self, query: ThreadQuery, want: bytes) -> Plan[Command, int]:
        key = self._set_of(query)
        name = _utf8(query.indexed[0]) if query.indexed else b""
        found, start = 0, 0
        while True:
            [members] = yield Batch([("ZRANGE", key, start, start + COUNT_BATCH - 1)])
            tids = [m.decode("utf-8", "surrogatepass") for m in members]
            reply = yield Eval(
                "tix_count",
                [key, *(self._record_key(t) for t in tids)],
                [_utf8(query.status or ""), name, want, now_ms() - IN_FLIGHT_MS, *members],
            )
            found += int(reply[0])
            if len(reply) > 2:  # metadata the script could not read: as the pipelined check
                unsure = [m.decode("utf-8", "surrogatepass") for m in reply[2:]]
                fields = yield Batch(
                    [("HMGET", self._record_key(t), *COUNT_FIELDS) for t in unsure]
                )
                found += sum(1 for f in fields if f[0] and self._holds(f[1], f[2], query))
            if len(members) < COUNT_BATCH:
                return found
            start += COUNT_BATCH - int(reply[1])

    @staticmethod
    def _holds(meta: bytes | None, status: bytes | None, query: ThreadQuery) -> bool:
        """:meth:`_belongs` on the raw fields of a record."""
        if query.status is not None and (status or b"idle").decode() != query.status:
            return False
        if query.indexed is None:
            return True
        key, form = query.indexed
        metadata = json.loads(meta or b"{}")
        return key in metadata and index_value(metadata[key]) == form

    def reindex(self, codec: Any, cursor: Any, batch_size: int) -> Plan[Command, ReindexBatch]:
        """One backfill batch (see ``RedisCheckpointPlans.reindex``)."""
        assert self._backfill is not None, "the checkpoint plans give the backfill"
        return (yield from self._backfill(codec, cursor, batch_size))

    def get(self, thread_id: str) -> Plan[Command, StoredRecord | None]:
        [record] = yield from self._records([thread_id])
        return record
