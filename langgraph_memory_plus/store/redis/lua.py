"""The Redis store's Lua scripts.

Two kinds of script, never mixed (see :mod:`.plans` for the key layout and its reasons):

- *Shard scripts* work on one or more shards whose keys share one hash slot (on a single
  server: any shards). ``KEYS`` holds eleven keys per shard, in :data:`SHARD_KINDS` order
  (the last two are the slot index of the shard's hash slot, shared by its shards);
  ``ARGV`` starts with the script's own arguments, then the number of shards, then the
  shards' paths (their labels joined by NUL), then each shard's arguments. Each script
  is one atomic step.
- *Slot index scripts* (``CANDIDATES``) read one slot index: its two keys alone.
- *Registry scripts* work on the six registry keys of the store (one hash slot of their
  own): the lexicographic index of shards, the due index for the TTL sweeper, the
  per-shard epochs, the last epoch given, the tombstones of short prefixes, and whether
  every shard is in its slot index.

Times are the server's (``TIME``), in microseconds since the epoch: exact in Lua's
doubles until the year 2255. Numbers leave a script formatted with ``%.0f``, since Lua
prints large numbers in exponent notation and Redis truncates numbers in replies.

An item record (the ``items`` hash value) is ``version,created,updated,ttl`` + ``\\n`` +
the value's JSON text; the item's expiry lives only in the ``exp`` sorted set, so a
refresh on read rewrites one score, not the value.
"""

from __future__ import annotations

SHARD_KINDS = ("meta", "items", "vecs", "order", "exp", "ns", "nsn", "tomb", "fv", "ix", "iv")
SLOT_KINDS = ("ix", "iv")  # the slot index's keys: one pair per hash slot, not per shard
REGISTRY_KINDS = ("shards", "due", "epoch", "seq", "tombs", "indexed")

# How long a closed shard's ``meta`` hash (its version clock and generation) outlives
# the shard's data: longer than any writer can take between two of its scripts.
TOMBSTONE_MS = 24 * 3600 * 1000

PRELUDE = (
    r"""
local NK = 11
local argi = 0
local function arg()
  argi = argi + 1
  return ARGV[argi]
end

-- Reads the shard count and steps over the shards' paths, which shard(i) picks up.
local PATHS = 0
local function shard_count()
  local n = tonumber(arg())
  PATHS = argi
  argi = argi + n
  return n
end

local function shard(i)
  local b = (i - 1) * NK
  return {meta = KEYS[b + 1], items = KEYS[b + 2], vecs = KEYS[b + 3], order = KEYS[b + 4],
          exp = KEYS[b + 5], ns = KEYS[b + 6], nsn = KEYS[b + 7], tomb = KEYS[b + 8],
          fv = KEYS[b + 9], ix = KEYS[b + 10], iv = KEYS[b + 11], path = ARGV[PATHS + i]}
end

local function now_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local NOW = now_us()

local function fmt(n) return string.format('%.0f', n) end

-- Reads the shard count, then calls fn(shard keys, shard number) for each shard in turn;
-- returns the list of fn's results (the usual reply of a shard script).
local function each_shard(fn)
  local out = {}
  for i = 1, shard_count() do out[i] = fn(shard(i), i) end
  return out
end

-- An item id is the namespace's labels joined by NUL, two NULs, then the key.
local function ns_of(id)
  return string.sub(id, 1, string.find(id, '\0\0', 1, true) - 1)
end

-- version (number), created, ttl (strings; ttl '' for none) of a record
local function header(rec)
  local c1 = string.find(rec, ',', 1, true)
  local c2 = string.find(rec, ',', c1 + 1, true)
  local c3 = string.find(rec, ',', c2 + 1, true)
  local nl = string.find(rec, '\n', c3 + 1, true)
  return tonumber(string.sub(rec, 1, c1 - 1)), string.sub(rec, c1 + 1, c2 - 1),
         string.sub(rec, c3 + 1, nl - 1)
end

-- The field tokens of a record's value (see FIELDS), as a set: path .. NUL .. string, for
-- every string of at most 64 bytes reached through dicts along keys of ASCII letters and
-- digits starting with a letter (the plans ask only for such tokens). A value cjson
-- cannot decode (nested too deeply) has the token NUL: it may hold anything.
local function tokens(rec)
  local out = {}
  if not rec then return out end
  local ok, v = pcall(cjson.decode, string.sub(rec, string.find(rec, '\n', 1, true) + 1))
  if not ok then
    out['\0'] = true
    return out
  end
  if type(v) ~= 'table' then return out end
  local function walk(t, path)
    for k, x in pairs(t) do
      if type(k) == 'string' and string.find(k, '^[A-Za-z][A-Za-z0-9]*$') then
        local at = k
        if path ~= '' then at = path .. '.' .. k end
        if type(x) == 'string' then
          if #x <= 64 then out[at .. '\0' .. x] = true end
        elseif type(x) == 'table' then
          walk(x, at)
        end
      end
    end
  end
  walk(v, '')
  return out
end

-- Whether the shard's field index covers all its items (see FIELDS): it then holds the
-- field SOH, at least the version of every item. Cached per script.
local function fv_on(s)
  if s.fvon == nil then s.fvon = redis.call('HEXISTS', s.fv, '\1') == 1 end
  return s.fvon
end

-- Whether the shard is in its slot index (see SLOTS): its field index then names that
-- index's key in the field STX (\2). Cached per script.
local function ix_on(s)
  if s.ixon == nil then s.ixon = redis.call('HGET', s.fv, '\2') == s.ix end
  return s.ixon
end

-- The slot index member of token t in shard s: the token's length, ':', the token, the
-- shard's path (the length keeps tokens apart whatever bytes they hold). Token '' stands
-- for the shard itself.
local function member(s, t) return #t .. ':' .. t .. s.path end

-- HSET of many fields in bounded calls (unpack has a limit on values).
local function hset_all(key, pairs_)
  for i = 1, #pairs_, 200 do
    redis.call('HSET', key, unpack(pairs_, i, math.min(i + 199, #pairs_)))
  end
end

-- Count the tokens of record `new` instead of those of `old` (either may be false):
-- only the difference is written, so an update that keeps its strings writes nothing.
-- A token a shard gains or loses enters or leaves the slot index. Returns new's tokens.
local function fv_move(s, old, new)
  local was, now = tokens(old), tokens(new)
  for t in pairs(was) do
    if not now[t] and redis.call('HINCRBY', s.fv, t, -1) <= 0 then
      redis.call('HDEL', s.fv, t)
      if ix_on(s) then
        local m = member(s, t)
        redis.call('ZREM', s.ix, m)
        redis.call('HDEL', s.iv, m)
      end
    end
  end
  for t in pairs(now) do
    if not was[t] and redis.call('HINCRBY', s.fv, t, 1) == 1 and ix_on(s) then
      redis.call('ZADD', s.ix, 0, member(s, t))
    end
  end
  return now
end

-- Raise the slot index's version bounds of the shard and of the tokens `now` to version
-- (newest: version is the shard's clock, above every bound it has: no compare needed).
local function ix_raise(s, now, version, newest)
  local ms = {member(s, '')}
  for t in pairs(now) do ms[#ms + 1] = member(s, t) end
  local out = {}
  for _, m in ipairs(ms) do
    if newest or tonumber(version) > tonumber(redis.call('HGET', s.iv, m) or '0') then
      out[#out + 1] = m
      out[#out + 1] = version
    end
  end
  hset_all(s.iv, out)
end

-- Build the field index of a shard written before there was one, and put the shard into
-- its slot index (a shard written before the slot index existed has the first only).
-- Its tokens' bounds start at the shard's bound: an upper bound of every item's version.
local function fv_ensure(s)
  if not fv_on(s) then
    local all = redis.call('HGETALL', s.items)
    for i = 2, #all, 2 do fv_move(s, false, all[i]) end
    redis.call('HSET', s.fv, '\1', redis.call('HGET', s.meta, 'clock') or '0')
    s.fvon = true
  end
  if ix_on(s) then return end
  local all = redis.call('HGETALL', s.fv)
  local bound, out = '0', {}
  for i = 1, #all, 2 do
    if all[i] == '\1' then bound = all[i + 1] end
  end
  for i = 1, #all, 2 do
    local t = all[i]
    if t ~= '\1' and t ~= '\2' then
      local m = member(s, t)
      redis.call('ZADD', s.ix, 0, m)
      out[#out + 1] = m
      out[#out + 1] = bound
    end
  end
  redis.call('ZADD', s.ix, 0, member(s, ''))
  out[#out + 1] = member(s, '')
  out[#out + 1] = bound
  hset_all(s.iv, out)
  redis.call('HSET', s.fv, '\2', s.ix)
  s.ixon = true
end

-- Take the shard and its tokens out of its slot index (it is being closed).
local function ix_drop(s)
  if not ix_on(s) then return end
  for _, t in ipairs(redis.call('HKEYS', s.fv)) do
    if t ~= '\1' and t ~= '\2' then
      local m = member(s, t)
      redis.call('ZREM', s.ix, m)
      redis.call('HDEL', s.iv, m)
    end
  end
  redis.call('ZREM', s.ix, member(s, ''))
  redis.call('HDEL', s.iv, member(s, ''))
end

local function live(s, id, now)
  local e = redis.call('ZSCORE', s.exp, id)
  return (not e) or tonumber(e) > now
end

local function unlink(s, id)
  if fv_on(s) then fv_move(s, redis.call('HGET', s.items, id), false) end
  if redis.call('HDEL', s.items, id) == 0 then return false end
  redis.call('HDEL', s.vecs, id)
  redis.call('ZREM', s.order, id)
  redis.call('ZREM', s.exp, id)
  local ns = ns_of(id)
  if redis.call('HINCRBY', s.nsn, ns, -1) <= 0 then
    redis.call('HDEL', s.nsn, ns)
    redis.call('ZREM', s.ns, ns)
  end
  return true
end

-- Store a record with its indexes; vec: nil leaves vectors alone, '' removes them. old:
-- the record it replaces (false: none; nil: read it). newest: version is the shard's
-- clock, so it is the field index's new bound.
local function link(s, id, rec, version, expires, vec, old, newest)
  if fv_on(s) then
    if old == nil then old = redis.call('HGET', s.items, id) end
    local now = fv_move(s, old, rec)
    if newest or tonumber(version) > tonumber(redis.call('HGET', s.fv, '\1')) then
      redis.call('HSET', s.fv, '\1', version)
    end
    if ix_on(s) then ix_raise(s, now, version, newest) end
  end
  if redis.call('HSET', s.items, id, rec) == 1 then
    local ns = ns_of(id)
    if redis.call('HINCRBY', s.nsn, ns, 1) == 1 then redis.call('ZADD', s.ns, 0, ns) end
  end
  redis.call('ZADD', s.order, version, id)
  if expires and expires ~= '' then
    redis.call('ZADD', s.exp, expires, id)
  else
    redis.call('ZREM', s.exp, id)
  end
  if vec == '' then
    redis.call('HDEL', s.vecs, id)
  elseif vec then
    redis.call('HSET', s.vecs, id, vec)
  end
end

-- An empty shard gives up its registration: writers must enroll it again, and the
-- generation tells a writer that enrolled before this moment to enroll once more.
local function close(s)
  ix_drop(s)
  redis.call('DEL', s.items, s.vecs, s.order, s.exp, s.ns, s.nsn, s.fv)
  redis.call('HDEL', s.meta, 'reg', 'hint')
  s.fvon = false
  s.ixon = false
  redis.call('HINCRBY', s.meta, 'gen', 1)
  redis.call('PEXPIRE', s.meta, """
    + str(TOMBSTONE_MS)
    + r""")
end

local function starts(id, pre) return pre == '' or string.sub(id, 1, #pre) == pre end

-- Items under the namespace prefix p (labels joined by NUL; '' for all) have ids
-- starting with this.
local function id_prefix(p)
  if p == '' then return '' end
  return p .. '\0'
end

local function each_expired(s, now, limit, fn)
  local ids
  if limit then
    ids = redis.call('ZRANGEBYSCORE', s.exp, '-inf', fmt(now), 'LIMIT', 0, limit)
  else
    ids = redis.call('ZRANGEBYSCORE', s.exp, '-inf', fmt(now))
  end
  for _, id in ipairs(ids) do fn(id) end
  return #ids
end

local function lex_range(pre)
  if pre == '' then return '-', '+' end
  return '[' .. pre, '(' .. pre .. '\1'
end
"""
)

# ARGV: mode ('check' | 'apply'), undo (0/1), shard count; per shard: the generation it
# was enrolled at ('' if not enrolled by this writer), the due-hint floor enrolled with
# it, the number of writes, then per write: id, op ('p' put | 'd' delete), expected
# version ('' for none), ttl in microseconds ('' for none), value record tail, vectors
# ('-' leave alone, '' none, else the packed vectors).
#
# A put under a live tombstone of the shard (TOMBS) is dropped, and counted in the reply.
# Every check runs before the first write, so a script that refuses writes nothing:
# 'conflict' (a condition failed), or 'refuse' (a shard must first be enrolled in the
# registry, or its due hint lowered; the caller does that and runs the script again).
WRITE = r"""
local mode, want_undo = arg(), arg() == '1'
local n = shard_count()
local now = NOW
local plans, refusals, dropped = {}, {}, 0
for i = 1, n do
  local s = shard(i)
  local enrolled_gen, floor, m = arg(), arg(), tonumber(arg())
  local writes, has_put, min_exp = {}, false, nil
  local tombed = redis.call('EXISTS', s.tomb) == 1
  for j = 1, m do
    local w = {id = arg(), op = arg(), expected = arg(), ttl = arg(), value = arg(), vec = arg()}
    if w.op == 'p' and tombed and tomb_live(s.tomb, ns_of(w.id), now) then
      w.op = 'x'  -- dropped: its namespace was erased (see TOMBS)
      dropped = dropped + 1
    end
    w.rec = redis.call('HGET', s.items, w.id)
    w.live = w.rec and live(s, w.id, now)
    if w.expected ~= '' and w.op ~= 'x' then
      local found = 0
      if w.live then found = header(w.rec) end
      if found ~= tonumber(w.expected) then return {'conflict', i, j, fmt(found)} end
    end
    if w.op == 'p' then
      has_put = true
      if w.ttl ~= '' then
        local e = now + tonumber(w.ttl)
        if not min_exp or e < min_exp then min_exp = e end
      end
    end
    writes[j] = w
  end
  local gen = redis.call('HGET', s.meta, 'gen') or '0'
  local enrolled = enrolled_gen ~= '' and enrolled_gen == gen
  local plan = {s = s, writes = writes, has_put = has_put}
  local needs = false
  if has_put and not redis.call('HGET', s.meta, 'reg') then
    if enrolled then plan.set_reg = true else needs = true end
  end
  if min_exp then
    local hint = redis.call('HGET', s.meta, 'hint')
    if not hint or min_exp < tonumber(hint) then
      if enrolled and floor ~= '' and tonumber(floor) <= min_exp then
        plan.set_hint = floor
      else
        needs = true
      end
    end
  end
  if needs then refusals[#refusals + 1] = {i, gen, min_exp and fmt(min_exp) or ''} end
  plans[i] = plan
end
if mode == 'check' then return {'ok'} end
if #refusals > 0 then return {'refuse', refusals} end

local undo, emptied = {}, {}
for i = 1, n do
  local p = plans[i]
  local s = p.s
  if p.set_reg then
    redis.call('HSET', s.meta, 'reg', '1')
    redis.call('PERSIST', s.meta)
  end
  if p.set_hint then redis.call('HSET', s.meta, 'hint', p.set_hint) end
  -- (a shard with nothing in it and nothing put gets no index keys)
  if p.has_put or redis.call('EXISTS', s.items) == 1 then fv_ensure(s) end
  local clock = tonumber(redis.call('HGET', s.meta, 'clock') or '0')
  local deleted = false
  for _, w in ipairs(p.writes) do
    local image
    if w.op == 'x' then
      -- dropped by a tombstone: nothing written, nothing to undo
    elseif want_undo then
      image = {i, w.id, w.rec or '', fmt(redis.call('ZSCORE', s.exp, w.id) or -1),
               redis.call('HGET', s.vecs, w.id) or '', ''}
    end
    if w.op == 'd' then
      if w.rec then
        unlink(s, w.id)
        deleted = true
      end
    elseif w.op == 'p' then
      clock = math.max(clock + 1, now)
      local created = fmt(now)
      if w.live then
        local _, c = header(w.rec)
        created = c
      end
      local expires = nil
      if w.ttl ~= '' then expires = fmt(now + tonumber(w.ttl)) end
      local vec = nil
      if w.vec ~= '-' then vec = w.vec end
      local rec = fmt(clock) .. ',' .. created .. ',' .. fmt(now) .. ',' .. w.ttl .. '\n' .. w.value
      link(s, w.id, rec, fmt(clock), expires, vec, w.rec, true)
      if image then image[6] = fmt(clock) end
    end
    if image then undo[#undo + 1] = image end
  end
  if p.has_put then redis.call('HSET', s.meta, 'clock', fmt(clock)) end
  if deleted and redis.call('EXISTS', s.items) == 0 then emptied[#emptied + 1] = i end
end
return {'ok', emptied, undo, dropped}
"""

# Puts back what WRITE replaced, item by item, where the item is still as WRITE left it.
# ARGV: shard count, the shards' paths, then images: shard number, id, old record ('' none),
# old expiry (-1 none), old vectors ('' none), version WRITE gave the item ('' it deleted it).
UNDO = r"""
local n = shard_count()
while argi < #ARGV do
  local s = shard(tonumber(arg()))
  local id, old, old_exp, old_vec, written = arg(), arg(), arg(), arg(), arg()
  local cur = redis.call('HGET', s.items, id)
  local untouched = not cur
  if written ~= '' then untouched = cur and header(cur) == tonumber(written) end
  if untouched then
    if old == '' then
      unlink(s, id)
    else
      local expires = nil
      if old_exp ~= '-1' then expires = old_exp end
      link(s, id, old, fmt(header(old)), expires, old_vec)
    end
  end
end
return n
"""

# ARGV: shard count; per shard: the number of ids, then (id, refresh 0/1) pairs.
# Reply: per shard, the records (nil where missing or expired).
GET = r"""
return each_shard(function(s)
  local found = {}
  for j = 1, tonumber(arg()) do
    local id, refresh = arg(), arg()
    local rec = redis.call('HGET', s.items, id)
    if rec and live(s, id, NOW) then
      if refresh == '1' then
        local _, _, ttl = header(rec)
        if ttl ~= '' then redis.call('ZADD', s.exp, fmt(NOW + tonumber(ttl)), id) end
      end
      found[j] = rec
    else
      found[j] = false
    end
  end
  return found
end)
"""

# Search filters, evaluated where the items are so that a filtered page reads only as
# far as its matches and sends only them. The plans compile a filter (``filter_args``)
# into ARGV tokens, one node each: its tag, then what the tag needs:
#
# - conditions: 'F' n (key, condition)*n (a dict's fields), 'L' n condition*n (a list's
#   elements), 'A' n condition*n (all of), 'E' / 'N' operand (== / !=), '$gt' '$gte'
#   '$lt' '$lte' number, 'U' (a part Lua cannot decide exactly);
# - operands: 'z' (null), 'n' number (booleans are 0/1: True == 1 in Python), 's' text,
#   'l' n operand*n, 'd' n (key, operand)*n.
#
# A test answers true, false, or nil where Lua cannot tell what Python's filters.holds
# would: cjson decodes [] and {} alike and integers past 2^53 inexactly, and float()
# reads text that tonumber() does not ('1_000', Unicode digits, 'inf'). The client
# decides those items itself.
FILTER = r"""
-- One node of a compiled filter ('' for no filter: nil).
local function read_node()
  local n = {k = arg()}
  local k = n.k
  if k == '' then return nil end
  if k == 'E' or k == 'N' then
    n.o = read_node()
  elseif k == 'F' or k == 'd' then
    n.items = {}
    for i = 1, tonumber(arg()) do n.items[i] = {arg(), read_node()} end
  elseif k == 'L' or k == 'A' or k == 'l' then
    n.items = {}
    for i = 1, tonumber(arg()) do n.items[i] = read_node() end
  elseif k == 's' then
    n.v = arg()
  elseif k ~= 'z' and k ~= 'U' then
    n.v = tonumber(arg()) -- 'n' and the order operators
  end
  return n
end

-- What a decoded value is to Python: 'z' None (missing, or cjson.null), 'n' a number or
-- bool, 's' text, 'l' a list, 'd' a dict, 'e' an empty list or dict (cjson can't tell).
local function kind(v)
  local t = type(v)
  if t == 'number' or t == 'boolean' then return 'n' end
  if t == 'string' then return 's' end
  if t ~= 'table' then return 'z' end
  local key = next(v)
  if key == nil then return 'e' end
  if type(key) == 'number' then return 'l' end
  return 'd'
end

-- Three-valued "all": false at the first false test(x, i), else nil if any was nil.
local function every(list, test)
  local out = true
  for i, x in ipairs(list) do
    local r = test(x, i)
    if r == false then return false end
    if r == nil then out = nil end
  end
  return out
end

-- Python's value == operand.
local function eq(o, v)
  local k = kind(v)
  if o.k == 'n' then
    if k ~= 'n' then return false end
    if v == true then v = 1 elseif v == false then v = 0 end
    return v == o.v -- exact: o.v < 2^53, and no value >= 2^53 decodes below it
  end
  if k == 'e' and (o.k == 'l' or o.k == 'd') then
    if #o.items == 0 then return nil end
    return false
  end
  if k ~= o.k then return false end
  if k == 's' then return v == o.v end
  if k == 'l' then
    if #v ~= #o.items then return false end
    return every(o.items, function(x, i) return eq(x, v[i]) end)
  end
  if k == 'd' then
    local size = 0
    for _ in pairs(v) do size = size + 1 end
    if size ~= #o.items then return false end
    return every(o.items, function(f)
      if v[f[1]] == nil then return false end
      return eq(f[2], v[f[1]])
    end)
  end
  return true -- both None
end

-- Python's float(v) for the order operators: a number, false where float() raises.
local function number(v)
  local t = type(v)
  if t == 'boolean' then return v and 1 or 0 end
  if t == 'number' then
    if v - v ~= 0 then return nil end -- an integer too large for a double
    return v
  end
  if t ~= 'string' then return false end
  if string.find(v, '[_\128-\255]') then return nil end
  local s = string.match(v, '^%s*(%S+)%s*$') -- float() strips the same ASCII spaces
  if not s then return false end
  local m = string.match(s, '^[+-]?([%d.]+)[eE][+-]?%d+$') or string.match(s, '^[+-]?([%d.]+)$')
  if m and string.find(m, '%d') and not string.find(m, '%..*%.') then return tonumber(s) end
  local word = string.lower(string.match(s, '^[+-]?(.*)$'))
  if word == 'inf' or word == 'infinity' or word == 'nan' then return nil end
  return false
end

local function holds(c, v)
  local k = c.k
  if k == 'E' then return eq(c.o, v) end
  if k == 'N' then
    local r = eq(c.o, v)
    if r == nil then return nil end
    return not r
  end
  if k == 'A' then return every(c.items, function(x) return holds(x, v) end) end
  if k == 'F' then
    local vk = kind(v)
    if vk ~= 'd' and vk ~= 'e' then return false end
    local r = every(c.items, function(f) return holds(f[2], v[f[1]]) end)
    if vk == 'e' and r ~= false then return nil end -- true for {}, false for []
    return r
  end
  if k == 'L' then
    if kind(v) == 'e' and #c.items == 0 then return nil end -- true for [], false for {}
    if kind(v) ~= 'l' or #v ~= #c.items then return false end
    return every(c.items, function(x, i) return holds(x, v[i]) end)
  end
  if k == 'U' then return nil end
  local x = number(v)
  if not x then return x end
  if k == '$gt' then return x > c.v end
  if k == '$gte' then return x >= c.v end
  if k == '$lt' then return x < c.v end
  return x <= c.v
end

-- Whether an item record's value satisfies the filter (nil: the client must decide).
local function matches(filter, rec)
  local ok, value = pcall(cjson.decode, string.sub(rec, string.find(rec, '\n', 1, true) + 1))
  if not ok then return nil end
  return holds(filter, value)
end
"""

# Field index (FIELDS: the ``fv`` hash of a shard): how many of the shard's items hold
# each field token (``tokens`` above), kept by link and unlink once the hash holds the
# field SOH (\1), an upper bound of the versions of the shard's items. A shard written
# before the index existed has no SOH: its next write (or REINDEX) builds the index.
#
# Slot index (SLOTS: the ``ix`` and ``iv`` keys of a hash slot; on a single server, one
# pair for the whole store): which shards of the slot hold which tokens, and an upper
# bound of the versions of the items holding each, so a search across many shards finds
# the ones that can hold a match in one script per slot, reading only the members of the
# filter's rarest token, instead of one key per shard. ``ix`` (sorted set, scores 0): a
# member per (token, shard) the shard's field index counts, and one of token '' per
# shard in the index (``member`` above: ordered by token, then by path, so a range finds
# a token's shards under a namespace prefix); ``iv`` (hash): member -> version bound.
# The shard scripts keep both atomically with the field index (fv_move, ix_raise,
# ix_drop): the keys are in the shards' slot. A shard is in the index once its field
# index holds the field STX (\2) naming the ``ix`` key; fv_ensure puts it there.

# KEYS: the shards (see the prelude). Puts each shard holding items into its slot index,
# building its field index first where it has none: a shard written by a release without
# the index. Reply: per shard, 1.
REINDEX = r"""
return each_shard(function(s)
  if redis.call('EXISTS', s.items) == 1 then fv_ensure(s) end
  return 1
end)
"""

# KEYS: one slot index (ix, iv). ARGV: a namespace prefix (labels joined by NUL, '' for
# all), the number of required tokens, the tokens. Reply: (path, bound) of the slot's
# shards under the prefix that may hold a match: every token, or the token NUL (a value
# cjson cannot read, which may hold anything); the bound is the least of the tokens'
# (a match holds them all), or the shard's own without tokens.
CANDIDATES = r"""
local IX, IV = KEYS[1], KEYS[2]
local prefix, n = ARGV[1], tonumber(ARGV[2])
local function head(t) return #t .. ':' .. t end
local function range(t)
  local h = head(t)
  if prefix == '' then return '[' .. h, '(' .. h .. '\255' end
  return '[' .. h .. prefix, '(' .. h .. prefix .. '\1'
end
local need = {}
for i = 1, n do need[i] = ARGV[i + 2] end
local rarest, fewest = '', nil
for i, t in ipairs(need) do
  local count = redis.call('ZLEXCOUNT', IX, range(t))
  if not fewest or count < fewest then rarest, fewest = t, count end
end
local out, seen = {}, {}
local function add(path)
  if seen[path] then return end
  seen[path] = true
  local bound = nil
  for _, t in ipairs(need) do
    local b = redis.call('HGET', IV, head(t) .. path)
    if not b then return end
    b = tonumber(b)
    if not bound or b < bound then bound = b end
  end
  if not bound then bound = tonumber(redis.call('HGET', IV, head('') .. path) or '0') end
  out[#out + 1] = path
  out[#out + 1] = string.format('%.0f', bound)
end
if fewest == 0 then need = {} else
  local skip = #head(rarest) + 1
  for _, m in ipairs(redis.call('ZRANGEBYLEX', IX, range(rarest))) do add(string.sub(m, skip)) end
end
if n > 0 then  -- shards with a value cjson cannot read: their own bound
  need = {}
  local skip = #head('\0') + 1
  for _, m in ipairs(redis.call('ZRANGEBYLEX', IX, range('\0'))) do add(string.sub(m, skip)) end
end
return out
"""

# ARGV: vectors (0/1), the filter (see FILTER), the floor ('' none), how many matches the
# page needs ('' all), shard count; per shard: the namespace prefix. Reply: per shard,
# (id, record, sure[, vectors]) of the live items under the prefix that match ('1') or
# that the filter leaves to the client ('0'), newest first, down to the floor: the
# version of the page's last match among those found so far (by the client in earlier
# scripts, then by this one); older items cannot make the page.
SEARCH = r"""
local with_vec = arg() == '1'
local filter = read_node()
local floor, want = tonumber(arg()), tonumber(arg())
local best = {} -- the versions of the newest `want` sure matches, ascending
local function note(version)
  if not want then return end
  local i = #best + 1
  while i > 1 and best[i - 1] > version do
    best[i] = best[i - 1]
    i = i - 1
  end
  best[i] = version
  if #best > want then table.remove(best, 1) end
  if #best == want and (not floor or best[1] > floor) then floor = best[1] end
end
return each_shard(function(s)
  local pre = id_prefix(arg())
  local found = {}
  local start = 0
  while true do
    local lo = floor and fmt(floor) or '-inf'
    local page = redis.call('ZREVRANGEBYSCORE', s.order, '+inf', lo, 'WITHSCORES',
                            'LIMIT', start, 256)
    if #page == 0 then return found end
    start = start + #page / 2
    for i = 1, #page, 2 do
      local id, version = page[i], tonumber(page[i + 1])
      if floor and version < floor then return found end
      if starts(id, pre) and live(s, id, NOW) then
        local rec = redis.call('HGET', s.items, id)
        local sure = true
        if filter then sure = matches(filter, rec) end
        if sure ~= false then
          found[#found + 1] = id
          found[#found + 1] = rec
          found[#found + 1] = sure and '1' or '0'
          if with_vec then found[#found + 1] = redis.call('HGET', s.vecs, id) or '' end
          if sure then note(version) end
        end
      end
    end
  end
end)
"""

# ARGV: shard count; per shard: the number of ids, then the ids. Restarts the TTL of
# those that are live and have one.
REFRESH = r"""
return each_shard(function(s)
  for _ = 1, tonumber(arg()) do
    local id = arg()
    local rec = redis.call('HGET', s.items, id)
    if rec and live(s, id, NOW) then
      local _, _, ttl = header(rec)
      if ttl ~= '' then redis.call('ZADD', s.exp, fmt(NOW + tonumber(ttl)), id) end
    end
  end
  return 1
end)
"""

# ARGV: shard count; per shard: a namespace prefix. Reply: per shard, its namespaces
# under the prefix that hold a live item, in order.
NAMESPACES = r"""
return each_shard(function(s)
  local lo, hi = lex_range(arg())
  local expired, found = {}, {}
  each_expired(s, NOW, nil, function(id)
    local ns = ns_of(id)
    expired[ns] = (expired[ns] or 0) + 1
  end)
  for _, ns in ipairs(redis.call('ZRANGEBYLEX', s.ns, lo, hi)) do
    if tonumber(redis.call('HGET', s.nsn, ns) or '0') > (expired[ns] or 0) then
      found[#found + 1] = ns
    end
  end
  return found
end)
"""

# ARGV: shard count; per shard: a namespace prefix. Reply: per shard, its live items
# under the prefix.
COUNT = r"""
return each_shard(function(s)
  local p = arg()
  local pre, total = id_prefix(p), 0
  if p == '' then
    total = redis.call('HLEN', s.items)
  else
    local lo, hi = lex_range(p)
    for _, ns in ipairs(redis.call('ZRANGEBYLEX', s.ns, lo, hi)) do
      total = total + tonumber(redis.call('HGET', s.nsn, ns) or '0')
    end
  end
  each_expired(s, NOW, nil, function(id)
    if starts(id, pre) then total = total - 1 end
  end)
  return total
end)
"""

# ARGV: shard count; per shard: a namespace prefix. Deletes every item under it, expired
# or not, and closes the shard if that empties it. Reply: per shard, {deleted, closed}.
PURGE = r"""
return each_shard(function(s)
  local p = arg()
  local deleted = 0
  if p == '' then
    deleted = redis.call('HLEN', s.items)
  else
    local pre = id_prefix(p)
    for _, id in ipairs(redis.call('ZRANGE', s.order, 0, -1)) do
      if starts(id, pre) then
        unlink(s, id)
        deleted = deleted + 1
      end
    end
  end
  local closed = 0
  if redis.call('HLEN', s.items) == 0 and (deleted > 0 or redis.call('EXISTS', s.meta) == 1) then
    close(s)
    closed = 1
  end
  return {deleted, closed}
end)
"""

# ARGV: budget, shard count. Deletes up to `budget` expired items of the shards in turn;
# closes a shard left empty; otherwise sets its due hint to its earliest expiry.
# Reply: per shard, {deleted, more expired left (0/1), new hint ('' none), closed (0/1)}.
SWEEP = r"""
local budget = tonumber(arg())
return each_shard(function(s)
  local deleted = 0
  if budget > 0 then
    deleted = each_expired(s, NOW, budget, function(id) unlink(s, id) end)
    budget = budget - deleted
  end
  local more = redis.call('ZCOUNT', s.exp, '-inf', fmt(NOW)) > 0
  local hint, closed = '', 0
  if redis.call('HLEN', s.items) == 0 then
    close(s)
    closed = 1
  elseif more then
    hint = redis.call('HGET', s.meta, 'hint') or ''
  else
    local first = redis.call('ZRANGE', s.exp, 0, 0, 'WITHSCORES')
    if first[2] then hint = fmt(tonumber(first[2])) end
    if hint ~= (redis.call('HGET', s.meta, 'hint') or '') then
      -- A writer that enrolled against the old hint must enroll again (see plans).
      if hint == '' then
        redis.call('HDEL', s.meta, 'hint')
      else
        redis.call('HSET', s.meta, 'hint', hint)
      end
      redis.call('HINCRBY', s.meta, 'gen', 1)
    end
  end
  return {deleted, more and 1 or 0, hint, closed}
end)
"""

REGISTRY_PRELUDE = r"""
local K_SHARDS, K_DUE, K_EPOCH, K_SEQ, K_TOMBS = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local K_INDEXED = KEYS[6]
local function now_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end
"""

# ARGV: (shard path, due hint or '') pairs. Registers each shard, gives it a fresh epoch
# (so a sweeper that looked before this will not unregister it) and lowers its hint.
# Epochs are the server's time, or the last epoch plus one where that is larger: they
# never repeat even though SETTLE forgets the last one when the registry empties.
# A shard under a live tombstone of the registry (TOMBS) is not enrolled: the reply
# lists those paths, whose puts the writer then drops. An empty registry means no shard
# holds items, none unindexed (see SLOTS): it is marked indexed.
ENROLL = r"""
local now = now_us()
if redis.call('EXISTS', K_SHARDS) == 0 then redis.call('SET', K_INDEXED, '1') end
local epoch = math.max(tonumber(redis.call('GET', K_SEQ) or '0') + 1, now)
epoch = string.format('%.0f', epoch)
redis.call('SET', K_SEQ, epoch)
local blocked = {}
local tombed = redis.call('EXISTS', K_TOMBS) == 1
for i = 1, #ARGV, 2 do
  local path, hint = ARGV[i], ARGV[i + 1]
  if tombed and tomb_live(K_TOMBS, path, now) then
    blocked[#blocked + 1] = path
  else
    redis.call('ZADD', K_SHARDS, 0, path)
    redis.call('HSET', K_EPOCH, path, epoch)
    if hint ~= '' then
      local cur = redis.call('ZSCORE', K_DUE, path)
      if (not cur) or tonumber(hint) < tonumber(cur) then redis.call('ZADD', K_DUE, hint, path) end
    end
  end
end
return blocked
"""

# ARGV: (path, epoch seen before the shard script ran, action, hint) quads. Acts only
# where no writer enrolled the shard since: 'close' unregisters it, 'hint' raises its
# due hint, 'drop' forgets it (no expiring items left), 'keep' leaves it due.
SETTLE = r"""
for i = 1, #ARGV, 4 do
  local path, epoch, action, hint = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]
  if (redis.call('HGET', K_EPOCH, path) or '') == epoch then
    if action == 'close' then
      redis.call('ZREM', K_SHARDS, path)
      redis.call('ZREM', K_DUE, path)
      redis.call('HDEL', K_EPOCH, path)
    elseif action == 'hint' then
      redis.call('ZADD', K_DUE, 'XX', hint, path)
    elseif action == 'drop' then
      redis.call('ZREM', K_DUE, path)
    end
  end
end
-- An empty registry leaves no key behind (ENROLL's epochs go on from the clock).
if redis.call('EXISTS', K_SHARDS) == 0 then redis.call('DEL', K_SEQ, K_INDEXED) end
return 1
"""

# ARGV: 'range', lo, hi, limit: up to `limit` registered shard paths in the lexicographic
# range; 'due', limit: up to `limit` shards whose due hint has come; or 'paths', path...:
# the given paths. Reply: (path, epoch or '') pairs; or, for 'names' lo hi limit, the
# paths of 'range' alone (what a read needs); for 'indexed', whether every shard is in its
# slot index (1 or 0); for 'mark', marks it so, if any shard is registered.
REGISTRY = r"""
local paths
if ARGV[1] == 'indexed' then
  return redis.call('EXISTS', K_INDEXED)
elseif ARGV[1] == 'mark' then
  if redis.call('EXISTS', K_SHARDS) == 1 then redis.call('SET', K_INDEXED, '1') end
  return 1
elseif ARGV[1] == 'names' then
  return redis.call('ZRANGEBYLEX', K_SHARDS, ARGV[2], ARGV[3], 'LIMIT', 0, tonumber(ARGV[4]))
elseif ARGV[1] == 'range' then
  paths = redis.call('ZRANGEBYLEX', K_SHARDS, ARGV[2], ARGV[3], 'LIMIT', 0, tonumber(ARGV[4]))
elseif ARGV[1] == 'due' then
  local now = string.format('%.0f', now_us())
  paths = redis.call('ZRANGEBYSCORE', K_DUE, '-inf', now, 'LIMIT', 0, tonumber(ARGV[2]))
else
  paths = {}
  for i = 2, #ARGV do paths[#paths + 1] = ARGV[i] end
end
local out = {}
for _, path in ipairs(paths) do
  out[#out + 1] = path
  out[#out + 1] = redis.call('HGET', K_EPOCH, path) or ''
end
return out
"""


# Namespace tombstones (see :mod:`..tombstones`): a hash of SHA-1 (hex) of a namespace
# prefix (labels joined by NUL) -> until (server microseconds). A prefix at least
# ``shard_depth`` labels long lives in its shard's ``tomb`` key, so WRITE checks it in the
# same script as the put; a shorter one spans shards and lives in the registry's
# ``tombs``, checked by ENROLL. The key expires with its last tombstone, and setting one
# prunes the expired: nothing piles up.
TOMBS = r"""
-- Whether a live tombstone in `key` covers the namespace `ns` or one of its prefixes.
local function tomb_live(key, ns, now)
  local at = 0
  while true do
    local nxt = string.find(ns, '\0', at + 1, true)
    local pre = nxt and string.sub(ns, 1, nxt - 1) or ns
    local until_us = redis.call('HGET', key, redis.sha1hex(pre))
    if until_us and tonumber(until_us) > now then return true end
    if not nxt then return false end
    at = nxt
  end
end

-- ARGV-driven: 'set' prefix hold_us | 'lift' prefix. Reply: 1 if a live one was there.
local function tomb_apply(key, action, prefix, hold, now)
  local field = redis.sha1hex(prefix)
  local old = redis.call('HGET', key, field)
  local was = (old and tonumber(old) > now) and 1 or 0
  if action == 'lift' then
    redis.call('HDEL', key, field)
    return was
  end
  redis.call('HSET', key, field, string.format('%.0f', now + tonumber(hold)))
  local last = 0
  local all = redis.call('HGETALL', key)
  for i = 1, #all, 2 do
    local u = tonumber(all[i + 1])
    if u <= now then redis.call('HDEL', key, all[i]) elseif u > last then last = u end
  end
  redis.call('PEXPIREAT', key, string.format('%.0f', math.ceil(last / 1000)))
  return was
end
"""

# ARGV: action, prefix, hold (µs, '' for lift), shard count (1). On the shard's tomb key.
TOMB = r"""
return tomb_apply(shard(1).tomb, ARGV[1], ARGV[2], ARGV[3], NOW)
"""

# ARGV: action, prefix, hold (µs, '' for lift). On the registry's tombs key.
REGISTRY_TOMB = r"""
return tomb_apply(K_TOMBS, ARGV[1], ARGV[2], ARGV[3], now_us())
"""


def _with(prelude: str, **bodies: str) -> dict[str, str]:
    return {name: prelude + body for name, body in bodies.items()}


SCRIPTS: dict[str, str] = {
    **_with(
        PRELUDE + TOMBS,
        tomb=TOMB,
        write=WRITE,
        undo=UNDO,
        get=GET,
        search=FILTER + SEARCH,
        reindex=REINDEX,
        refresh=REFRESH,
        namespaces=NAMESPACES,
        count=COUNT,
        purge=PURGE,
        sweep=SWEEP,
    ),
    **_with(
        REGISTRY_PRELUDE + TOMBS,
        enroll=ENROLL,
        settle=SETTLE,
        registry=REGISTRY,
        tombs=REGISTRY_TOMB,
    ),
    "candidates": CANDIDATES,
    # Rekey (privacy/rekey.py): set one hash field only if it still holds what was read.
    "hcas": """
if redis.call('HGET', KEYS[1], ARGV[1]) == ARGV[2] then
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
  return 1
end
return 0
""",
}
