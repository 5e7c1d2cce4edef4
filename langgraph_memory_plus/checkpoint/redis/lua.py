"""The Redis checkpointer's Lua scripts.

Every script works on the ten keys of one thread (see :mod:`.plans` for the layout),
which share a hash tag, so each script is one atomic step on a single node and in Redis
Cluster alike. Values the scripts must read (parents, run ids, ``DeltaChannel`` seeds,
blob fields) live in a small per-checkpoint "meta" record written as netstrings
(``<len>:<bytes>``, binary safe and trivial to parse in Lua); checkpoint bodies and
values stay opaque bytes that only Python decodes.
"""

from __future__ import annotations

from ...threads.redis import COUNT_ONE_NODE, RECORD_LUA, TIX_ADD, TRANSCRIPT_SCRIPTS, ZREM_IF

PRELUDE = r"""
local K_THREAD, K_IDX, K_CK, K_META, K_BLOBS, K_WRITES, K_WIDX, K_REPLAY, K_ITEMS, K_NODES =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9], KEYS[10]
local K_REC = KEYS[11] -- the thread's index record (see threads/redis.py)
-- The keys that live and expire as the thread; a put may pass its transcript's two keys
-- after them (see threads/redis.py), which keep their own expiry.
local N_KEYS = 11
-- A list version's blob: this prefix, then a 16-byte spine id (zeros: none), then the
-- 16-byte ids of the items after the last full page (see checkpoint/lists.py).
local LIST_PREFIX, NO_SPINE = '\0lgmp:list\0', string.rep('\0', 16)

-- Byte order, not the server's collation (Redis sets LC_COLLATE from its environment).
local function before(a, b)
  for i = 1, math.min(#a, #b) do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then return x < y end
  end
  return #a < #b
end

local function unpack_list(s)
  local out, pos = {}, 1
  if not s then return out end
  while pos <= #s do
    local colon = string.find(s, ':', pos, true)
    local n = tonumber(string.sub(s, pos, colon - 1))
    out[#out + 1] = string.sub(s, colon + 1, colon + n)
    pos = colon + n + 1
  end
  return out
end

local function pack_list(t)
  local parts = {}
  for i = 1, #t do parts[i] = #t[i] .. ':' .. t[i] end
  return table.concat(parts)
end

-- meta: parent, run id, seed count, (channel, seed checkpoint id)*, blob field*
local function read_meta(member)
  local raw = redis.call('HGET', K_META, member)
  if not raw then return nil end
  local t = unpack_list(raw)
  local n = tonumber(t[3])
  local meta = {parent = t[1], run_id = t[2], seeds = {}, seed_order = {}, blobs = {}}
  for i = 0, n - 1 do
    local ch = t[4 + 2 * i]
    meta.seeds[ch] = t[5 + 2 * i]
    meta.seed_order[#meta.seed_order + 1] = ch
  end
  for i = 4 + 2 * n, #t do meta.blobs[#meta.blobs + 1] = t[i] end
  return meta
end

local function write_meta(member, meta)
  local t = {meta.parent, meta.run_id, tostring(#meta.seed_order)}
  for _, ch in ipairs(meta.seed_order) do
    t[#t + 1] = ch
    t[#t + 1] = meta.seeds[ch]
  end
  for _, f in ipairs(meta.blobs) do t[#t + 1] = f end
  redis.call('HSET', K_META, member, pack_list(t))
end

local function members_of(ns, key)
  return redis.call('ZREVRANGEBYLEX', key or K_IDX, '(' .. ns .. '\1', '[' .. ns .. '\0')
end

-- The member for a checkpoint id, or the namespace's newest one for ''.
local function pick(ns, cid)
  if cid ~= '' then return ns .. '\0' .. cid end
  return redis.call('ZREVRANGEBYLEX', K_IDX, '(' .. ns .. '\1', '[' .. ns .. '\0', 'LIMIT', 0, 1)[1]
end

local function write_fields(member)
  return redis.call('ZRANGEBYLEX', K_WIDX, '[' .. member .. '\0', '(' .. member .. '\1')
end

-- A checkpoint's pending writes: (task id, record) pairs, one per task.
local function task_writes(member)
  local fields = write_fields(member)
  if #fields == 0 then return {} end
  local values = redis.call('HMGET', K_WRITES, unpack(fields))
  local out = {}
  for i, f in ipairs(fields) do
    if values[i] then
      out[#out + 1] = string.sub(f, #member + 2)
      out[#out + 1] = values[i]
    end
  end
  return out
end

-- A task's record is its path, then (idx, channel, type, data) per write. A later call
-- merges as BaseCheckpointSaver says: a regular write (idx >= 0) stored first stays, a
-- special one (negative idx: error, interrupt...) is replaced. Python writes idx in
-- plain decimal, so equal strings are equal indexes. A write keeps the path of the call
-- that stored it: one other than the record's follows its idx ("<idx> <path>").
local function merge_writes(stored, new)
  local t, add, at = unpack_list(stored), unpack_list(new), {}
  local own = ''
  if add[1] ~= t[1] then own = ' ' .. add[1] end
  for i = 2, #t, 4 do at[string.match(t[i], '^%S+')] = i end
  for i = 2, #add, 4 do
    local j = at[add[i]]
    if not j then
      j = #t + 1
      at[add[i]] = j
    elseif tonumber(add[i]) >= 0 then
      j = nil
    end
    if j then
      t[j] = add[i] .. own
      for k = 1, 3 do t[j + k] = add[i + k] end
    end
  end
  return pack_list(t)
end

local function fetch(member)
  local ck = redis.call('HGET', K_CK, member)
  if not ck then return false end
  local meta = read_meta(member)
  local blobs = {}
  if #meta.blobs > 0 then blobs = redis.call('HMGET', K_BLOBS, unpack(meta.blobs)) end
  return {member, ck, meta.parent, meta.blobs, blobs, task_writes(member)}
end

-- One absolute deadline for every key of the thread: PEXPIRE would read the clock per
-- key, and keys could straddle a millisecond and expire apart.
-- A deleted thread's tombstone (`live_after`, `until` in the thread hash) outlives a new
-- thread on the same id that expires before it: the hash lives to the later of the two.
local function expire_all_at(deadline_ms)
  for i = 1, N_KEYS do redis.call('PEXPIREAT', KEYS[i], deadline_ms) end
  local until_ms = tonumber(redis.call('HGET', K_THREAD, 'until') or '0')
  if until_ms and until_ms > deadline_ms then redis.call('PEXPIREAT', K_THREAD, until_ms) end
end

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- The thread id goes in the thread hash, unless a tombstone still in force shares it: the
-- hash may outlive the thread then, and a tombstone holds no id in clear (readers fall
-- back to the index record's, which lives and expires with the thread). A tombstone past
-- its own expiry is forgotten.
local function set_id(thread_id)
  local until_ms = tonumber(redis.call('HGET', K_THREAD, 'until') or '0')
  if until_ms and until_ms > now_ms() then
    redis.call('HDEL', K_THREAD, 'id')
    return
  end
  if redis.call('HEXISTS', K_THREAD, 'live_after') == 1 then redis.call('DEL', K_THREAD) end
  redis.call('HSET', K_THREAD, 'id', thread_id)
end

local function touch(ttl_ms)
  local ttl = tonumber(ttl_ms)
  if ttl > 0 then
    expire_all_at(now_ms() + ttl)
  else
    for i = 1, N_KEYS do redis.call('PERSIST', KEYS[i]) end
  end
end

local function refresh(ttl_ms)
  local ttl = tonumber(ttl_ms)
  if ttl > 0 then expire_all_at(now_ms() + ttl) end
end

-- A thread left with no checkpoints and no writes (or none to begin with: a deleted
-- thread's tombstone alone) is gone but for its tombstone, which keeps its own expiry.
local function cleared()
  if redis.call('EXISTS', K_IDX) == 1 or redis.call('EXISTS', K_WIDX) == 1 then return false end
  local until_ms = redis.call('HGET', K_THREAD, 'until')
  for i = 2, N_KEYS do redis.call('DEL', KEYS[i]) end
  redis.call('HDEL', K_THREAD, 'id', 'w')
  if until_ms then redis.call('PEXPIREAT', K_THREAD, tonumber(until_ms)) end
  return true
end

-- After a change that is not a write (prune, delete_for_runs), keys it created get the
-- expiry the thread already has; an emptied thread is cleared (PERSIST here made every
-- tombstone, one per deleted id known or not, and an emptied thread's id outlive their
-- day forever).
local function keep_expiry()
  if cleared() then return end
  local left = redis.call('PTTL', K_IDX)
  if left == -2 then left = redis.call('PTTL', K_WIDX) end
  if left > 0 then
    expire_all_at(now_ms() + left)
  else
    for i = 1, N_KEYS do redis.call('PERSIST', KEYS[i]) end
  end
end

-- Once a thread was deleted (`live_after` set), a checkpoint is kept only if its parent
-- still exists (a fresh run has none), and writes only if their checkpoint exists or is
-- newer than the deletion: a run that outlives its thread cannot bring it back. In a
-- subgraph's namespace the root checkpoint its run hangs from (`root`, '' if unknown)
-- must also exist or be newer (see Target.root_needed). A refused checkpoint id joins
-- the tombstone (field 'r' .. id): what hangs from it is refused too. The deletion's
-- bound itself never moves: a new run's checkpoints older than a refusal (retention may
-- have dropped them) are not the deleted run's.
local function refused(cid)
  return redis.call('HEXISTS', K_THREAD, 'r' .. cid) == 1
end

local function root_ok(live_after, root)
  return root == '' or ((not refused(root)) and (before(live_after, root)
    or redis.call('HEXISTS', K_CK, '\0' .. root) == 1))
end

local function may_put(ns, parent, root)
  local live_after = redis.call('HGET', K_THREAD, 'live_after')
  if not live_after then return true end
  return (parent == '' or redis.call('HEXISTS', K_CK, ns .. '\0' .. parent) == 1)
    and root_ok(live_after, root)
end

local function may_write(ns, cid, root)
  local live_after = redis.call('HGET', K_THREAD, 'live_after')
  if not live_after then return true end
  return (not refused(cid))
    and (before(live_after, cid) or redis.call('HEXISTS', K_CK, ns .. '\0' .. cid) == 1)
    and root_ok(live_after, root)
end

-- The root checkpoint a subgraph's checkpoint was stored under (its metadata's parents).
local function root_of(member)
  local raw = redis.call('HGET', K_REC, 'm' .. member)
  if not raw then return nil end
  local fine, meta = pcall(cjson.decode, raw)
  if not fine or type(meta) ~= 'table' or type(meta.parents) ~= 'table' then return nil end
  local root = meta.parents['']
  if type(root) ~= 'string' then return nil end
  return root
end

-- The channel of a blob field (ns NUL channel NUL version).
local function channel_of(ns, field)
  local rest = string.sub(field, #ns + 2)
  return string.sub(rest, 1, string.find(rest, '\0', 1, true) - 1)
end

local function split_member(member)
  local sep = string.find(member, '\0', 1, true)
  return string.sub(member, 1, sep - 1), string.sub(member, sep + 1)
end

local function each_id(ids, fn)
  for i = 1, #ids, 16 do fn(string.sub(ids, i, i + 15)) end
end

-- Delete the list items, pages and spines of a namespace that no list version reaches.
local function collect_items(ns)
  local pre = ns .. '\0'
  local live_nodes, live_items = {}, {}
  local function mark_item(id) live_items[id] = true end
  local all = redis.call('HGETALL', K_BLOBS)
  for i = 1, #all, 2 do
    local v = all[i + 1]
    if string.sub(all[i], 1, #pre) == pre and string.sub(v, 1, #LIST_PREFIX) == LIST_PREFIX then
      local ref = string.sub(v, #LIST_PREFIX + 1)
      local spine = string.sub(ref, 1, 16)
      if spine ~= NO_SPINE and not live_nodes[spine] then
        live_nodes[spine] = true
        each_id(redis.call('HGET', K_NODES, pre .. spine) or '', function(page)
          if not live_nodes[page] then
            live_nodes[page] = true
            each_id(redis.call('HGET', K_NODES, pre .. page) or '', mark_item)
          end
        end)
      end
      each_id(string.sub(ref, 17), mark_item)
    end
  end
  for _, pair in ipairs({{K_NODES, live_nodes}, {K_ITEMS, live_items}}) do
    for _, f in ipairs(redis.call('HKEYS', pair[1])) do
      if string.sub(f, 1, #pre) == pre and not pair[2][string.sub(f, #pre + 1)] then
        redis.call('HDEL', pair[1], f)
      end
    end
  end
end

-- Delete checkpoints with their writes, then the blobs no remaining checkpoint of
-- their namespaces refers to.
local function drop(doomed, namespaces, writes_gone)
  local freed = {}
  for _, m in ipairs(doomed) do
    local meta = read_meta(m)
    if meta then
      for _, f in ipairs(meta.blobs) do freed[f] = true end
    end
    if not writes_gone then
      for _, f in ipairs(write_fields(m)) do
        redis.call('HDEL', K_WRITES, f)
        redis.call('ZREM', K_WIDX, f)
      end
    end
    redis.call('HINCRBY', K_REC, 'b', -redis.call('HSTRLEN', K_CK, m))
    redis.call('HDEL', K_REC, 'm' .. m)
    redis.call('HDEL', K_CK, m)
    redis.call('HDEL', K_META, m)
    redis.call('ZREM', K_IDX, m)
    redis.call('ZREM', K_REPLAY, m)
  end
  if next(freed) == nil then return end
  for ns in pairs(namespaces) do
    for _, key in ipairs({K_IDX, K_REPLAY}) do
      for _, m in ipairs(members_of(ns, key)) do
        local meta = read_meta(m)
        if meta then
          for _, f in ipairs(meta.blobs) do freed[f] = nil end
        end
      end
    end
  end
  local lists = {}
  for f in pairs(freed) do
    local v = redis.call('HGET', K_BLOBS, f)
    if v and string.sub(v, 1, #LIST_PREFIX) == LIST_PREFIX then
      lists[string.sub(f, 1, string.find(f, '\0', 1, true) - 1)] = true
    end
    redis.call('HDEL', K_BLOBS, f)
  end
  for ns in pairs(lists) do collect_items(ns) end
end

-- A write of a run that outlived its deleted thread was refused: its checkpoint id joins
-- the tombstone, and what it now refuses goes, as if it came now: the refused
-- checkpoint's writes that came first, and the subgraphs stored under a root checkpoint
-- that was refused after them. A thread left with nothing is the tombstone again: no id
-- in clear, and the tombstone's own expiry.
local function bury(member, cid)
  redis.call('HSET', K_THREAD, 'r' .. cid, '1')
  local doomed, namespaces = {}, {}
  for _, m in ipairs(redis.call('ZRANGE', K_IDX, 0, -1)) do
    local ns = split_member(m)
    if ns ~= '' then
      local root = root_of(m)
      if root and refused(root) then
        doomed[#doomed + 1] = m
        namespaces[ns] = true
      end
    end
  end
  drop(doomed, namespaces)
  for _, f in ipairs(write_fields(member)) do
    redis.call('HDEL', K_WRITES, f)
    redis.call('ZREM', K_WIDX, f)
  end
  cleared()
end

-- Keep the newest `keep` checkpoints of a namespace. Older ones that a kept checkpoint's
-- DeltaChannel replay reads (back to its seeds) move to the replay index: replay reads
-- them, get and list never return them. Everything older goes, as in the PostgreSQL saver,
-- with every write below the floor: also writes that landed after an earlier trim deleted
-- their checkpoint (LangGraph stores a task's writes on a background thread), which
-- nothing reads. Writes that come before their checkpoint are for a newer one: kept. A
-- put's trim does nothing while the namespace holds at most `keep` checkpoints; `sweep`
-- (prune) takes the writes below the floor even then (a late write after a run's last put).
local function trim(ns, keep, sweep)
  local members = members_of(ns)
  if #members == 0 or (#members <= keep and not sweep) then return end
  local last = math.min(keep, #members)
  local _, oldest_kept = split_member(members[last])
  local floor = oldest_kept
  for i = 1, last do
    local meta = read_meta(members[i])
    if meta then
      for _, seed in pairs(meta.seeds) do
        if before(seed, floor) then floor = seed end
      end
    end
  end
  local doomed = {}
  for i = keep + 1, #members do
    local _, cid = split_member(members[i])
    redis.call('ZREM', K_IDX, members[i])
    if before(cid, floor) then
      doomed[#doomed + 1] = members[i]
    else
      redis.call('ZADD', K_REPLAY, 0, members[i])
    end
  end
  local below = '(' .. ns .. '\0' .. floor
  local stale = redis.call('ZRANGEBYLEX', K_REPLAY, '[' .. ns .. '\0', below)
  for _, m in ipairs(stale) do doomed[#doomed + 1] = m end
  -- (ns NUL id NUL task sorts below ns NUL floor exactly when id < floor); the doomed
  -- checkpoints' writes are among them, so drop need not look them up again
  local gone = redis.call('ZRANGEBYLEX', K_WIDX, '[' .. ns .. '\0', below)
  for i = 1, #gone, 1000 do
    redis.call('HDEL', K_WRITES, unpack(gone, i, math.min(i + 999, #gone)))
  end
  if #gone > 0 then redis.call('ZREMRANGEBYLEX', K_WIDX, '[' .. ns .. '\0', below) end
  if #doomed == 0 then return end
  drop(doomed, {[ns] = true}, true)
  for _, key in ipairs({K_IDX, K_REPLAY}) do
    for _, m in ipairs(members_of(ns, key)) do
      local meta = read_meta(m)
      if meta and meta.parent ~= '' and before(meta.parent, floor) then
        meta.parent = ''
        write_meta(m, meta)
      end
    end
  end
end
"""

# ARGV: ttl_ms, thread_id, ns, checkpoint_id, parent (then, in a subgraph's namespace,
#       NUL and its run's root checkpoint id), run_id, record, keep_last,
#       '1' if it names rows of its parent's it does not store (else '0'),
#       the index record's metadata JSON, title and bytes, the write's time (ms), the
#       time of the step 1 it reuses (or ''), the transcript's owner, ttl_ms and n,
#       (message id, role, text)*n,
#       n, delta channel*n, n, channel with a value here*n, n, blob field*n (one per
#       channel version of the checkpoint), n, (list item field, value)*n,
#       n, (list node field, children)*n,
#       then (blob field, value, empty flag) for each new version.
# Reply: 1 stored, 2 stored and its thread is not idle, 0 refused (deleted thread), 3 not
# written: the step 1 it reuses no longer holds (see threads/redis.py), 4 not written:
# it names its parent's rows and its parent is gone.
PUT = r"""
local ttl, thread_id, ns, cid, parent, run_id, record, keep =
  ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6], ARGV[7], tonumber(ARGV[8])
local member = ns .. '\0' .. cid
local sep = string.find(parent, '\0', 1, true)
local root = ''
if sep then parent, root = string.sub(parent, 1, sep - 1), string.sub(parent, sep + 1) end
if not may_put(ns, parent, root) then
  -- Refused; later writes to it are refused too, and any that came first are dropped.
  bury(member, cid)
  return 0
end
if not rec_expected(ARGV[14]) then return 3 end  -- see threads/redis.py
-- A checkpoint that names its parent's rows (ARGV[9]) is stored only on its parent: an
-- expired thread's keys went with its rows (see CheckpointPlans.put).
if ARGV[9] == '1' and redis.call('HEXISTS', K_CK, ns .. '\0' .. parent) == 0 then return 4 end
local pos = tx_put(15, ARGV[13])
local function take_list()
  local n = tonumber(ARGV[pos])
  local out = {}
  for i = 1, n do out[i] = ARGV[pos + i] end
  pos = pos + n + 1
  return out
end
local delta, valued = take_list(), {}
for _, ch in ipairs(take_list()) do valued[ch] = true end
local refs = take_list()
for _, key in ipairs({K_ITEMS, K_NODES}) do
  local n = tonumber(ARGV[pos])
  for i = 1, n do redis.call('HSETNX', key, ARGV[pos + 2 * i - 1], ARGV[pos + 2 * i]) end
  pos = pos + 2 * n + 1
end
local meta = {parent = parent, run_id = run_id, seeds = {}, seed_order = {}, blobs = refs}
-- DeltaChannel seeds: the channels marked here, and those the parent tracked that this
-- checkpoint still has (a step that resets the counters, or update_state, marks none).
local pmeta = nil
if parent ~= '' then pmeta = read_meta(ns .. '\0' .. parent) end
local tracked = {}
for _, ch in ipairs(delta) do tracked[#tracked + 1] = ch end
if pmeta then
  local present = {}
  for _, f in ipairs(refs) do present[channel_of(ns, f)] = true end
  for _, ch in ipairs(pmeta.seed_order) do
    if present[ch] then tracked[#tracked + 1] = ch end
  end
end
for _, ch in ipairs(tracked) do
  if not meta.seeds[ch] then
    local seed = ''
    if valued[ch] then seed = cid elseif pmeta and pmeta.seeds[ch] then seed = pmeta.seeds[ch] end
    meta.seeds[ch] = seed
    meta.seed_order[#meta.seed_order + 1] = ch
  end
end
while pos <= #ARGV do
  if ARGV[pos + 2] == '1' then
    redis.call('HDEL', K_BLOBS, ARGV[pos])
  else
    redis.call('HSET', K_BLOBS, ARGV[pos], ARGV[pos + 1])
  end
  pos = pos + 3
end
write_meta(member, meta)
redis.call('HSET', K_CK, member, record)
redis.call('ZADD', K_IDX, 0, member)
set_id(thread_id)
if keep > 0 then trim(ns, keep) end
rec_put(thread_id, ns, cid, ARGV[10], ARGV[11], tonumber(ARGV[12]), ARGV[13], ARGV[15])
-- The record keeps each root checkpoint's metadata JSON; FILTER reads it for the
-- checkpoints of every namespace.
if ns ~= '' and ARGV[10] ~= '' then redis.call('HSET', K_REC, 'm' .. member, ARGV[10]) end
touch(ttl)
-- 2: a root checkpoint whose writes came first left its thread interrupted or failed
-- (the writes' step 1 could not know the thread's metadata yet: see threads/redis.py).
if ns == '' and redis.call('HGET', K_REC, 's') ~= 'idle' then return 2 end
return 1
"""

# ARGV: ttl_ms, thread_id, ns, checkpoint_id, task_id, the task's record (see
# merge_writes; its writes already deduplicated), the largest record allowed, '1' when
# the writes hold an interrupt or an error (the index record changes), the time (ms),
# the root checkpoint id of a subgraph's run ('' if none), then optionally the run's user
# as the index stores it and '1' once the thread is in that user's pending set.
# Reply: 1 stored, 0 refused (deleted thread), -2 (nothing written) to be added to the
# user's pending set first, or {size} when the record merged with what an earlier call
# stored would be larger than allowed (nothing is written then).
PUT_WRITES = r"""
local ttl, thread_id, ns, cid, task_id = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local record, max_bytes = ARGV[6], tonumber(ARGV[7])
if not may_write(ns, cid, ARGV[10]) then return 0 end
-- The run's user (ARGV[11], '' for none) on a thread the index does not file (no put
-- stored its metadata): the thread's owner in waiting, in the thread hash ('w'), once
-- the thread is in the user's set of such threads (ARGV[12] '1'; else -2, nothing
-- written: the caller adds it there, then writes again).
local waiting = ARGV[11] ~= nil and ARGV[11] ~= '' and redis.call('HEXISTS', K_REC, 'm') == 0
if waiting and ARGV[12] ~= '1' then return -2 end
local field = ns .. '\0' .. cid .. '\0' .. task_id
local stored = redis.call('HGET', K_WRITES, field)
if stored then record = merge_writes(stored, record) end
if #record > max_bytes then return {#record} end
redis.call('HSET', K_WRITES, field, record)
redis.call('ZADD', K_WIDX, 0, field)
set_id(thread_id)
if waiting then redis.call('HSET', K_THREAD, 'w', ARGV[11]) end
if ARGV[8] == '1' then rec_writes(thread_id, ns, cid, ARGV[9]) end
touch(ttl)
return 1
"""

# ARGV: ns, checkpoint_id ('' for the latest), refresh ttl_ms ('0': none)
GET = r"""
local ns, cid = ARGV[1], ARGV[2]
local member = pick(ns, cid)
if not member then return false end
local out = fetch(member)
if out then refresh(ARGV[3]) end
return out
"""

# ARGV: ns, checkpoint id bound (exclusive; '' for none), limit, refresh ttl_ms
PAGE = r"""
local ns = ARGV[1]
local hi = '(' .. ns .. '\1'
if ARGV[2] ~= '' then hi = '(' .. ns .. '\0' .. ARGV[2] end
local members = redis.call(
  'ZREVRANGEBYLEX', K_IDX, hi, '[' .. ns .. '\0', 'LIMIT', 0, tonumber(ARGV[3]))
local out = {}
for _, m in ipairs(members) do
  local f = fetch(m)
  if f then out[#out + 1] = f end
end
if #out > 0 then refresh(ARGV[4]) end
return out
"""

# ARGV: limit (0: all), checkpoint id bound (exclusive; '' for none), exact checkpoint id
# ('' for any). Per namespace, the newest `limit` members below the bound: the caller
# merges them, so a cross-namespace page never reads a whole namespace.
MEMBERS = r"""
local limit, bound, exact = tonumber(ARGV[1]), ARGV[2], ARGV[3]
local out, cursor = {}, '-'
while true do
  local first = redis.call('ZRANGEBYLEX', K_IDX, cursor, '+', 'LIMIT', 0, 1)[1]
  if not first then break end
  local ns = split_member(first)
  if exact ~= '' then
    if redis.call('HEXISTS', K_CK, ns .. '\0' .. exact) == 1 then
      out[#out + 1] = ns .. '\0' .. exact
    end
  else
    local hi = '(' .. ns .. '\1'
    if bound ~= '' then hi = '(' .. ns .. '\0' .. bound end
    local page
    if limit > 0 then
      page = redis.call('ZREVRANGEBYLEX', K_IDX, hi, '[' .. ns .. '\0', 'LIMIT', 0, limit)
    else
      page = redis.call('ZREVRANGEBYLEX', K_IDX, hi, '[' .. ns .. '\0')
    end
    for _, m in ipairs(page) do out[#out + 1] = m end
  end
  cursor = '[' .. ns .. '\1'
end
return out
"""

# ARGV: ns, '1' for every namespace ('0': only ns), checkpoint id bound (exclusive; ''
# for none), matches wanted per namespace, members examined per namespace at most, then
# (metadata key, kind, value) per condition: kind 's' a string, 'n' a number (booleans
# as 1/0, as Python compares them). Walks each namespace newest first below the bound
# and keeps the members whose metadata projection may satisfy every condition (Python
# checks the exact metadata of what it fetches). Reply: the floor, down to which every
# namespace was examined ('' when all were examined to their end), then the candidates
# at or above it. Bounded work per call: the caller pages on from the floor.
FILTER = r"""
local ns_arg, all, bound = ARGV[1], ARGV[2] == '1', ARGV[3]
local want, budget = tonumber(ARGV[4]), tonumber(ARGV[5])
local conds = {}
for i = 6, #ARGV, 3 do
  local value = ARGV[i + 2]
  if ARGV[i + 1] ~= 's' then value = tonumber(value) end
  conds[#conds + 1] = {ARGV[i], ARGV[i + 1], value}
end
local function as_number(v)
  if type(v) == 'number' then return v end
  if type(v) == 'boolean' then return v and 1 or 0 end
  return nil
end
local function may_match(member)
  local raw = redis.call('HGET', K_REC, 'm' .. member)
  if not raw then return true end
  local ok, meta = pcall(cjson.decode, raw)
  if not ok or type(meta) ~= 'table' then return true end
  for _, c in ipairs(conds) do
    local v = meta[c[1]]
    if c[2] == 's' then
      if v ~= c[3] then return false end
    elseif type(v) ~= 'string' and as_number(v) ~= c[3] then
      -- a string may be the projection of a number-like object (Decimal): Python decides
      return false
    end
  end
  return true
end
local out, floor = {}, nil
local function scan(ns)
  local hi = '(' .. ns .. '\1'
  if bound ~= '' then hi = '(' .. ns .. '\0' .. bound end
  local members = redis.call('ZREVRANGEBYLEX', K_IDX, hi, '[' .. ns .. '\0', 'LIMIT', 0, budget)
  local found, last = 0, nil
  for _, m in ipairs(members) do
    last = m
    if may_match(m) then
      out[#out + 1] = m
      found = found + 1
      if found >= want then break end
    end
  end
  if found < want and #members < budget then return end
  local _, cid = split_member(last)
  if floor == nil or before(floor, cid) then floor = cid end
end
if all then
  local cursor = '-'
  while true do
    local first = redis.call('ZRANGEBYLEX', K_IDX, cursor, '+', 'LIMIT', 0, 1)[1]
    if not first then break end
    local ns = split_member(first)
    scan(ns)
    cursor = '[' .. ns .. '\1'
  end
else
  scan(ns_arg)
end
local reply = {floor or ''}
for _, m in ipairs(out) do
  local _, cid = split_member(m)
  if floor == nil or not before(cid, floor) then reply[#reply + 1] = m end
end
return reply
"""

# ARGV: refresh ttl_ms, then members
FETCH = r"""
local out = {}
for i = 2, #ARGV do
  local f = fetch(ARGV[i])
  if f then out[#out + 1] = f end
end
if #out > 0 then refresh(ARGV[1]) end
return out
"""

# ARGV: ns, checkpoint_id ('' for the latest), max depth, then channels.
# Returns, per ancestor from the target's parent up: id, its writes ((task id, record)
# pairs), the stored values of still-unseeded channels found there; a channel stops at
# its first stored value.
DELTA = r"""
local ns, cid, max_depth = ARGV[1], ARGV[2], tonumber(ARGV[3])
local member = pick(ns, cid)
local meta = member and read_meta(member)
if not meta then return {} end
local remaining, left = {}, 0
for i = 4, #ARGV do
  if not remaining[ARGV[i]] then
    remaining[ARGV[i]] = true
    left = left + 1
  end
end
local out, cur, depth = {}, meta.parent, 0
while cur ~= '' and left > 0 and depth < max_depth do
  local m = ns .. '\0' .. cur
  local pm = read_meta(m)
  if not pm then break end
  local seeds = {}
  for _, f in ipairs(pm.blobs) do
    local ch = channel_of(ns, f)
    if remaining[ch] then
      local v = redis.call('HGET', K_BLOBS, f)
      if v then
        seeds[#seeds + 1] = ch
        seeds[#seeds + 1] = v
        seeds[#seeds + 1] = f
      end
    end
  end
  for i = 1, #seeds, 3 do
    if remaining[seeds[i]] then
      remaining[seeds[i]] = nil
      left = left - 1
    end
  end
  out[#out + 1] = {cur, task_writes(m), seeds}
  cur = pm.parent
  depth = depth + 1
end
return out
"""

# ARGV: tombstone ttl_ms, the deletion's checkpoint id, then the index record's fields to
# return. Leaves only the thread hash, holding the newest of the deleted checkpoint ids
# and the deletion's, so late writes to the deleted history are refused (see
# checkpoint.config.deletion_id). Reply: the deleted record's fields, read in this step:
# the index sets its thread leaves (a write landing between a separate read and this
# delete would leave its entries behind).
DELETE = r"""
local deleted = redis.call('HMGET', K_REC, unpack(ARGV, 3))
local newest = redis.call('HGET', K_THREAD, 'live_after') or ''
for _, key in ipairs({K_IDX, K_REPLAY}) do
  for _, m in ipairs(redis.call('ZRANGE', key, 0, -1)) do
    local _, c = split_member(m)
    if before(newest, c) then newest = c end
  end
end
for _, f in ipairs(redis.call('ZRANGE', K_WIDX, 0, -1)) do
  local _, rest = split_member(f)
  local c = string.sub(rest, 1, string.find(rest, '\0', 1, true) - 1)
  if before(newest, c) then newest = c end
end
redis.call('DEL', unpack(KEYS))
-- A tombstone even when nothing was there: keys that expired by themselves leave no
-- trace, and a run that began before the deletion must still be refused.
if before(newest, ARGV[2]) then newest = ARGV[2] end
local until_ms = now_ms() + tonumber(ARGV[1])
redis.call('HSET', K_THREAD, 'live_after', newest, 'until', until_ms)
redis.call('PEXPIREAT', K_THREAD, until_ms)
return deleted
"""

PRUNE_LATEST = r"""
local seen = {}
for _, m in ipairs(redis.call('ZRANGE', K_IDX, 0, -1)) do
  local ns = split_member(m)
  if not seen[ns] then
    seen[ns] = true
    trim(ns, 1, true)
  end
end
rec_refresh()
keep_expiry()
return 1
"""

# ARGV: ns, checkpoint id. The pending writes
# of that checkpoint unless it is stored: those of a put the erasure hold dropped (see
# CheckpointPlans.drop_orphan_writes). A thread left empty is cleared. Reply: 1 if this
# emptied the thread, else 0.
DROP_ORPHANS = r"""
local member = ARGV[1] .. '\0' .. ARGV[2]
if redis.call('HEXISTS', K_CK, member) == 1 then return 0 end
local fields = write_fields(member)
if #fields == 0 then return 0 end
for _, f in ipairs(fields) do
  redis.call('HDEL', K_WRITES, f)
  redis.call('ZREM', K_WIDX, f)
end
rec_refresh()
keep_expiry()
if redis.call('EXISTS', K_IDX) == 1 or redis.call('EXISTS', K_WIDX) == 1 then return 0 end
return 1
"""

# ARGV: run ids
DELETE_RUNS = r"""
local runs = {}
for i = 1, #ARGV do runs[ARGV[i]] = true end
local all = redis.call('HGETALL', K_META)
local doomed, namespaces = {}, {}
for i = 1, #all, 2 do
  local t = unpack_list(all[i + 1])
  if runs[t[2]] then
    doomed[#doomed + 1] = all[i]
    namespaces[split_member(all[i])] = true
  end
end
drop(doomed, namespaces)
rec_refresh()
keep_expiry()
return #doomed
"""

# ARGV: ns, spine id ('' for none), tail ids, then ids whose values the caller has.
# Returns (id, value) pairs in list order; value false for a known id, '' if missing.
# A missing spine or page is a pair (its id, '') too: the checkpoint was read in an
# earlier call, and a deletion since then must fail the read (which is then run again),
# not shorten its list to the known tail.
RESOLVE = r"""
local pre = ARGV[1] .. '\0'
local known = {}
for i = 4, #ARGV do known[ARGV[i]] = true end
local out = {}
local function add(id)
  out[#out + 1] = id
  if known[id] then
    out[#out + 1] = false
  else
    out[#out + 1] = redis.call('HGET', K_ITEMS, pre .. id) or ''
  end
end
local function children(node, fn)
  local ids = redis.call('HGET', K_NODES, pre .. node)
  if ids then
    each_id(ids, fn)
  else
    out[#out + 1] = node
    out[#out + 1] = ''
  end
end
if ARGV[2] ~= '' then
  children(ARGV[2], function(page) children(page, add) end)
end
each_id(ARGV[3], add)
return out
"""

THREAD_ID = r"""
local tid = redis.call('HGET', K_THREAD, 'id')
if tid or redis.call('EXISTS', K_IDX) == 0 then return tid end
return redis.call('HGET', K_REC, 'id')
"""

DUMP = r"""
if redis.call('EXISTS', K_IDX) == 0 then return false end
return {
  redis.call('HGETALL', K_CK), redis.call('HGETALL', K_META),
  redis.call('HGETALL', K_BLOBS), redis.call('HGETALL', K_WRITES),
  redis.call('ZRANGE', K_REPLAY, 0, -1),
  redis.call('HGETALL', K_ITEMS), redis.call('HGETALL', K_NODES),
  redis.call('HGETALL', K_REC)
}
"""

# ARGV: ttl_ms, thread_id, then netstring lists of (field, value) pairs for the
# checkpoint, meta, blob and write hashes, of the replay-only members, of the list
# item and node hashes and of the index record; then the time (ms). Existing entries of
# the target win. A copy onto a deleted id is a new thread that keeps the deletion's
# tombstone (`live_after`): the runs that predate the deletion stay refused.
RESTORE = r"""
local function fill(key, packed)
  local t = unpack_list(packed)
  for i = 1, #t, 2 do redis.call('HSETNX', key, t[i], t[i + 1]) end
  return t
end
local ck = fill(K_CK, ARGV[3])
local replay = {}
for _, m in ipairs(unpack_list(ARGV[7])) do replay[m] = true end
for i = 1, #ck, 2 do redis.call('ZADD', replay[ck[i]] and K_REPLAY or K_IDX, 0, ck[i]) end
fill(K_META, ARGV[4])
fill(K_BLOBS, ARGV[5])
fill(K_ITEMS, ARGV[8])
fill(K_NODES, ARGV[9])
local w = fill(K_WRITES, ARGV[6])
for i = 1, #w, 2 do redis.call('ZADD', K_WIDX, 0, w[i]) end
set_id(ARGV[2])
local rec = unpack_list(ARGV[10])
for i = 1, #rec, 2 do
  local f = rec[i]
  if f == 't' or f == 'o' or string.sub(f, 1, 2) == 'm\0' then
    redis.call('HSETNX', K_REC, f, rec[i + 1])
  end
end
rec_refresh()
rec_touch(ARGV[2], ARGV[11])
touch(ARGV[1])
return 1
"""

# A record for a thread that has none (written before the index, or its record lost).
# ARGV: its latest root checkpoint's metadata JSON, its first and latest checkpoint times
# (ms). Status, interrupts and counts come from what the thread holds, as after a prune;
# the record keeps the thread's expiry. Reply: 1 written, 0 the thread has a record
# already (or no checkpoints left).
REINDEX = r"""
local tid = redis.call('HGET', K_THREAD, 'id')
if (not tid) or redis.call('EXISTS', K_REC) == 1 or redis.call('EXISTS', K_IDX) == 0 then
  return 0
end
local latest = pick('', '')
if latest then redis.call('HSET', K_REC, 'm' .. latest, ARGV[1]) end
local size = 0
for _, key in ipairs({K_CK, K_BLOBS, K_ITEMS}) do
  for _, f in ipairs(redis.call('HKEYS', key)) do size = size + redis.call('HSTRLEN', key, f) end
end
redis.call('HSET', K_REC, 'id', tid, 'c', ARGV[2], 'u', ARGV[3], 'b', size)
rec_refresh()
keep_expiry()
return 1
"""

# One writer per thread (see checkpoint/fence.py). The fence is a hash of its own in the
# thread's slot: o the owner (absent once released), n the fencing number, x the lease's
# expiry (ms). A fenced put or put_writes passes it as its last key and the owner and
# number it claims and the ms the key outlives a write as its last three arguments; the
# check pops them, so the write's own script sees its usual keys and arguments. Reply -1:
# refused, nothing written. A write let through keeps the key at least that long: the key
# expires a bounded time after its lease ends or its owner's last write, whichever is later.
FENCE_CHECK = r"""
local K_FENCE = table.remove(KEYS)
local f_keep = tonumber(table.remove(ARGV))
local f_token = table.remove(ARGV)
local f_owner = table.remove(ARGV)
do
  local cur = redis.call('HMGET', K_FENCE, 'o', 'n')
  if cur[1] ~= f_owner or cur[2] ~= f_token then return -1 end
  if redis.call('PTTL', K_FENCE) < f_keep then redis.call('PEXPIRE', K_FENCE, f_keep) end
end
"""

_FENCE_NOW = r"""
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
"""

# KEYS: the fence. ARGV: owner, lease ms, force ('1'), ms the key outlives the lease.
# Reply: {1 taken | 0 held by another, owner, number, expiry ms} (after, or as found).
FENCE_TAKE = (
    _FENCE_NOW
    + r"""
local cur = redis.call('HMGET', KEYS[1], 'o', 'n', 'x')
local owner = ARGV[1]
local free = (not cur[1]) or cur[1] == owner or (tonumber(cur[3]) or 0) <= now
if ARGV[3] ~= '1' and not free then return {0, cur[1], cur[2], cur[3]} end
local n = cur[2]
if cur[1] ~= owner then
  local us = tonumber(clock[1]) * 1000000 + tonumber(clock[2])
  n = string.format('%.0f', math.max((tonumber(cur[2]) or 0) + 1, us))
end
local x = now + tonumber(ARGV[2])
redis.call('HSET', KEYS[1], 'o', owner, 'n', n, 'x', string.format('%.0f', x))
redis.call('PEXPIREAT', KEYS[1], x + tonumber(ARGV[4]))
return {1, owner, n, string.format('%.0f', x)}
"""
)

# ARGV: owner, number, lease ms, ms the key outlives the lease. Reply: the fence after.
FENCE_RENEW = (
    _FENCE_NOW
    + r"""
local cur = redis.call('HMGET', KEYS[1], 'o', 'n', 'x')
if cur[1] == ARGV[1] and cur[2] == ARGV[2] then
  local x = now + tonumber(ARGV[3])
  cur[3] = string.format('%.0f', x)
  redis.call('HSET', KEYS[1], 'x', cur[3])
  redis.call('PEXPIREAT', KEYS[1], x + tonumber(ARGV[4]))
end
return cur
"""
)

# ARGV: owner, number. The number stays: a later owner's is still larger.
FENCE_RELEASE = r"""
local cur = redis.call('HMGET', KEYS[1], 'o', 'n')
if cur[1] == ARGV[1] and cur[2] == ARGV[2] then
  redis.call('HDEL', KEYS[1], 'o', 'x')
  return 1
end
return 0
"""

SCRIPTS: dict[str, str] = {
    name: PRELUDE + RECORD_LUA + body
    for name, body in {
        "put": PUT,
        "put_writes": PUT_WRITES,
        "get": GET,
        "page": PAGE,
        "members": MEMBERS,
        "fetch": FETCH,
        "filter": FILTER,
        "delta": DELTA,
        "delete": DELETE,
        "prune_latest": PRUNE_LATEST,
        "delete_runs": DELETE_RUNS,
        "drop_orphans": DROP_ORPHANS,
        "thread_id": THREAD_ID,
        "resolve": RESOLVE,
        "dump": DUMP,
        "restore": RESTORE,
        "reindex": REINDEX,
    }.items()
}
# On one index set, not a thread's keys (see threads/redis.py).
SCRIPTS["put_fenced"] = PRELUDE + RECORD_LUA + FENCE_CHECK + PUT
SCRIPTS["put_writes_fenced"] = PRELUDE + RECORD_LUA + FENCE_CHECK + PUT_WRITES
SCRIPTS["fence_take"] = FENCE_TAKE
SCRIPTS["fence_renew"] = FENCE_RENEW
SCRIPTS["fence_release"] = FENCE_RELEASE
SCRIPTS["zrem_if"] = ZREM_IF
# Rekey (privacy/rekey.py): set one hash field only if it still holds what was read.
SCRIPTS["hcas"] = """
if redis.call('HGET', KEYS[1], ARGV[1]) == ARGV[2] then
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
  return 1
end
return 0
"""
SCRIPTS["tix_count"] = COUNT_ONE_NODE
SCRIPTS["tix_add"] = TIX_ADD  # sent by its digest in a put's step 1 (threads/redis.py)
SCRIPTS.update(TRANSCRIPT_SCRIPTS)  # on a transcript's two keys
