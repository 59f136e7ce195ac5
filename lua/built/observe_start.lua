-- lib/time.lua: the one clock every script decides with.

-- Now in ms: `given` (an ARGV slot holding the injected clock's ms) when it is a number, else ('') the
-- Redis server's TIME, so that every caller sharing one Redis agrees on the time. The second result is the same
-- ms as text, for redis.call (a Lua number crosses it through sprintf "%.17g"): `given` as it is, or TIME's two
-- replies joined (its microseconds padded to six digits, their first three: no number formatted).
local function clock_ms(given)
  local now = tonumber(given)
  if now then return now, given end
  local t = redis.call('TIME')
  local us = t[2]
  local ms = string.sub(string.rep('0', 6 - #us) .. us, 1, 3)
  return tonumber(t[1]) * 1000 + math.floor(tonumber(us) / 1000), t[1] .. ms
end

-- lib/obs_settings.lua: the record layout's settings, from observe_start.lua's ARGV[2..8] (the recorder sends
-- them with every call: fair_router/observe/recorder.py): cap (tenants per minute), ttl (record expiry, s),
-- minute_slots, tick_ms, tick_slots, n_buckets, recent_ms.
local cap, ttl, minute_slots, tick_ms, tick_slots, n_buckets, recent_ms = tonumber(ARGV[2]), tonumber(ARGV[3]),
  tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8])
local FIRST_GROUP = 9  -- ARGV index of the first group's fields (lib/obs_groups.lua)

-- lib/slices.lua: one Redis command over a long list of arguments, sent in slices: Lua's unpack() gives at
-- most about 8,000 values, and a batch of 10,000 jobs is a longer list than that.

-- Values per slice: far below unpack()'s limit, large enough that a batch of 10,000 costs ten calls.
local SLICE = 2000

-- redis.call(command, key, values...) for each slice of `values` (at most `per` of them, a multiple of the
-- command's arity), or redis.call(command, key, option, values...) when an `option` is given (ZADD's 'GT');
-- `each(reply, first)` gets each slice's reply and the index of its first value.
local function call_sliced(command, key, values, per, each, option)
  for first = 1, #values, per do
    local last = math.min(first + per - 1, #values)
    local reply
    if option then
      reply = redis.call(command, key, option, unpack(values, first, last))
    else
      reply = redis.call(command, key, unpack(values, first, last))
    end
    if each then each(reply, first) end
  end
end

-- obs_fields.lua: the start record's field names, built once per call for each minute, tick and bucket a
-- batch touches (Lua's string work, not Redis', is most of an observe_start call: reuse beats rebuilding).
-- Reads the settings minute_slots and tick_slots (lib/obs_settings.lua).
-- include: obs_settings
-- minute_of(m) / tick_of(t) -> the names of minute m's (tick t's) slot; totals[b] = 'c:<b>'; obs_int(x) -> '%d'.
local function obs_int(x) return string.format('%d', x) end

local minutes, ticks, totals = {}, {}, {}
local function minute_of(minute)
  local n = minutes[minute]
  if not n then
    local ms = minute % minute_slots
    n = {minute = minute, held = 'm' .. ms, places = 'a' .. ms, value = obs_int(minute), prefix = ms .. ':', b = {}}
    minutes[minute] = n
  end
  return n
end
local function tick_of(tick)
  local n = ticks[tick]
  if not n then
    local ts = tick % tick_slots
    n = {tick = tick, held = 't' .. ts, value = obs_int(tick), n = 'n' .. ts, s = 's' .. ts}
    ticks[tick] = n
  end
  return n
end

-- obs_groups.lua: read_groups(now_ms) -> groups (oldest first), tenants (record key -> its groups), order
-- (record keys, first seen first), from observe_start.lua's KEYS[4..] and ARGV[FIRST_GROUP..] (its header has the layout).
-- A group's `tenant` is its record key's last ':' part: the encoded tenant, as the recent set names it.
-- include: obs_fields
local function read_groups(now_ms)
  local groups, tenants, order = {}, {}, {}
  local i = FIRST_GROUP
  for g = 1, #KEYS - 3 do
    local at = now_ms - tonumber(ARGV[i])
    local m = minute_of(math.floor(at / 60000))
    local group = {key = KEYS[3 + g], tenant = string.match(KEYS[3 + g], '[^:]*$'), at = at, m = m,
                   t = tick_of(math.floor(at / tick_ms)),
                   n = tonumber(ARGV[i + 1]), us = tonumber(ARGV[i + 2]), b = {}}
    for j = i + 4, i + 2 + 2 * tonumber(ARGV[i + 3]), 2 do
      local b = ARGV[j]
      if not m.b[b] then m.b[b] = m.prefix .. b end
      if not totals[b] then totals[b] = 'c:' .. b end
      group.b[b] = tonumber(ARGV[j + 1])
    end
    i = i + 4 + 2 * tonumber(ARGV[i + 3])
    groups[g] = group
    local own = tenants[group.key]
    if not own then
      own = {}
      tenants[group.key] = own
      order[#order + 1] = group.key
    end
    own[#own + 1] = group
  end
  return groups, tenants, order
end

-- obs_record.lua: what one start record gets from a batch (a delta), and its one read and one write:
-- record_delta() / record_add(d, group); record_read(key, d, places) -> field -> value (one HMGET); record_write(key, v, d, places) (one
-- HSET, plus a cleared minute slot's HDEL and EXPIRE). places (#all only): minute -> tenants given a record.
-- include: obs_fields

-- Per minute its starts by bucket, per tick its starts and wait, and the cumulative ones.
local function record_delta() return {m = {}, t = {}, c = {}, us = 0, any = false} end
local function record_add(d, g)
  local m = d.m[g.m]
  if not m then
    m = {}
    d.m[g.m] = m
  end
  local c = d.c
  for b, count in pairs(g.b) do
    m[b] = (m[b] or 0) + count
    c[b] = (c[b] or 0) + count
  end
  local t = d.t[g.t]
  if not t then
    t = {0, 0}
    d.t[g.t] = t
  end
  t[1], t[2] = t[1] + g.n, t[2] + g.us
  d.us = d.us + g.us
  d.any = true
end

-- One HMGET of every field the delta touches (and #all's places of its minutes): name -> value.
local function record_read(key, d, places)
  local names = {'c:us'}
  for m, buckets in pairs(d.m) do
    names[#names + 1] = m.held
    if places then names[#names + 1] = m.places end
    for b in pairs(buckets) do names[#names + 1] = m.b[b] end
  end
  for t in pairs(d.t) do
    names[#names + 1], names[#names + 2], names[#names + 3] = t.held, t.n, t.s
  end
  for b in pairs(d.c) do names[#names + 1] = totals[b] end
  local values = redis.call('HMGET', key, unpack(names))
  local v = {}
  for j = 1, #names do v[names[j]] = values[j] end
  return v
end

local function record_write(key, v, d, places)
  local out, renewed = {}, false
  local function set(name, value)
    out[#out + 1], out[#out + 2] = name, obs_int(value)
  end
  for m, buckets in pairs(d.m) do
    local held = tonumber(v[m.held])
    if not held or held < m.minute then  -- the slot's first start this minute: drop what it held before
      local stale = {}
      for b = 0, n_buckets - 1 do stale[#stale + 1] = m.prefix .. b end
      redis.call('HDEL', key, unpack(stale))
      renewed = true
      out[#out + 1], out[#out + 2] = m.held, m.value
      for b, count in pairs(buckets) do set(m.b[b], count) end
    elseif held == m.minute then
      for b, count in pairs(buckets) do set(m.b[b], (tonumber(v[m.b[b]]) or 0) + count) end
    end  -- else the slot holds a newer minute: this one has left the windows
    if places and places[m.minute] and (not held or held <= m.minute) then set(m.places, places[m.minute]) end
  end
  for t, add_t in pairs(d.t) do
    local held = tonumber(v[t.held])
    if not held or held < t.tick then
      out[#out + 1], out[#out + 2] = t.held, t.value
      set(t.n, add_t[1])
      set(t.s, add_t[2])
    elseif held == t.tick then
      set(t.n, (tonumber(v[t.n]) or 0) + add_t[1])
      set(t.s, (tonumber(v[t.s]) or 0) + add_t[2])
    end
  end
  for b, count in pairs(d.c) do set(totals[b], (tonumber(v[totals[b]]) or 0) + count) end
  set('c:us', (tonumber(v['c:us']) or 0) + d.us)
  redis.call('HSET', key, unpack(out))
  if renewed then redis.call('EXPIRE', key, ttl) end
end

-- obs_recent.lua: unread(order, tenants, places, now_ms) -> record key -> true for each tenant whose record
-- observe_start.lua need not read: all its groups fall in minutes whose places are all given (places[m] >=
-- cap) and it was admitted in none of them (recent, KEYS[3], scores its last admission: older than the
-- minute's start). One ZMSCORE for them all; none while no minute is full.
-- Why it holds: a record holds a capped minute only once its tenant was admitted in it, and recent keeps
-- an admission for recent_ms and only moves it later (ZADD GT): a minute that began longer ago is read.
local function unread(order, tenants, places, now_ms)
  local candidates, names = {}, {}
  for _, key in ipairs(order) do
    local full = true
    for _, g in ipairs(tenants[key]) do
      local count = places[g.m.minute]
      if not count or count < cap or g.m.minute * 60000 < now_ms - recent_ms then
        full = false
        break
      end
    end
    if full then
      candidates[#candidates + 1] = key
      names[#names + 1] = tenants[key][1].tenant
    end
  end
  local skip = {}
  if #names == 0 then return skip end
  local last = redis.call('ZMSCORE', KEYS[3], unpack(names))
  for i, key in ipairs(candidates) do
    local at = tonumber(last[i])
    local admitted = false
    for _, g in ipairs(tenants[key]) do
      if at and at >= g.m.minute * 60000 then admitted = true end
    end
    if not admitted then skip[key] = true end
  end
  return skip
end

-- observe_start.lua: add a batch of job starts (one worker's buffer, fair_router/observe/recorder.py) to the
-- tenants' records and the all-tenant record.
-- include: time, obs_settings, slices, obs_fields, obs_groups, obs_record, obs_recent
-- KEYS[1] the overflow record (#other), KEYS[2] the all-tenant record (#all), KEYS[3] recent: sorted set
--         tenant -> when it was last admitted (ms); KEYS[3 + g] the record of group g's tenant (its last ':'
--         part is the encoded tenant; a tenant with starts in several seconds has several groups). All {obs}.
-- ARGV[1] now_ms ('' = server TIME); ARGV[2..8] the record layout's settings: cap (tenants per minute), ttl
--         (record expiry, s), minute_slots, tick_ms, tick_slots, n_buckets, recent_ms (lib/obs_settings.lua);
--         then per group g, oldest first: age_ms (its starts were taken that long
--         before now), starts, their total wait (us), k, then k pairs: wait bucket, starts in it.
-- A group is placed in the minute and 10-second tick of now_ms - age_ms: Redis' clock, as the reader's, and
-- the worker's only for the age (a clock difference between the two cancels out).
-- A record is a hash:
--   m<s> = the minute held by minute slot s (minute % minute_slots); <s>:<b> = its starts in wait bucket b
--   t<s> = the tick held by tick slot s; n<s>, s<s> = its starts and their total wait (us)
--   c:<b> = starts in bucket b since the record was created; c:us = their total wait (us)
--   a<s> (#all only) = tenants given their own record in the minute of slot s
-- A slot is cleared when a newer minute (tick) first writes to it, so a record holds the last minute_slots
-- minutes and tick_slots ticks; starts of a minute (tick) older than the one its slot holds count only in
-- the cumulative fields. Per tenant: the first group of a minute takes one of the minute's cap places if
-- its record does not hold that minute yet, else goes to #other (and so do its later groups that minute).
-- Each record touched costs one HMGET and one HSET, whatever the number of starts (plus, when a slot
-- starts a new minute, its clearing and the expiry); a tenant past a full minute's cap costs neither.
-- Returns per group 1 if it went to the tenant's own record, 0 if to #other.
local now_ms = clock_ms(ARGV[1])
local groups, tenants, order = read_groups(now_ms)  -- lib/obs_groups.lua; records: lib/obs_record.lua

-- #all gets every group; its a<s> say how many places each minute has given.
local all = record_delta()
for _, g in ipairs(groups) do record_add(all, g) end
local all_v = record_read(KEYS[2], all, true)
local places = {}
for m in pairs(all.m) do
  local held = tonumber(all_v[m.held])
  if held == m.minute then places[m.minute] = tonumber(all_v[m.places]) or 0
  elseif held and held > m.minute then places[m.minute] = false  -- too old to check: not capped
  else places[m.minute] = 0 end
end

-- Once a minute's places are all given, a tenant holds that minute only if it was admitted in it, so
-- recent (one ZMSCORE for them all) tells which records need no read: their groups go to #other.
local skip = unread(order, tenants, places, now_ms)
-- Each other tenant's record read once; then the groups, oldest first (as one call per start would have
-- met them): the tenant's own record or #other.
local values, decided = {}, {}
for _, key in ipairs(order) do
  if not skip[key] then
    local d = record_delta()
    for _, g in ipairs(tenants[key]) do record_add(d, g) end
    values[key] = record_read(key, d, false)
  end
  decided[key] = {}
end
local other, admitted = record_delta(), {}
for _, g in ipairs(groups) do
  local minute = g.m.minute
  local verdict = decided[g.key][minute]
  if verdict == nil and skip[g.key] then
    verdict = false
    decided[g.key][minute] = false
  elseif verdict == nil then
    local held = tonumber(values[g.key][g.m.held])
    if places[minute] == false or (held and held >= minute) then
      verdict = true  -- it holds the minute already (or the minute is too old for the cap)
    elseif places[minute] < cap then
      places[minute] = places[minute] + 1
      admitted[g.tenant] = math.max(admitted[g.tenant] or 0, g.at)  -- the latest, whatever the groups' order
      verdict = true
    else
      verdict = false
    end
    decided[g.key][minute] = verdict
  end
  g.own = verdict
  if not verdict then record_add(other, g) end
end
for _, key in ipairs(order) do
  local mine = record_delta()
  for _, g in ipairs(tenants[key]) do
    if g.own then record_add(mine, g) end
  end
  if mine.any then record_write(key, values[key], mine, false) end
end
if other.any then record_write(KEYS[1], record_read(KEYS[1], other, false), other, false) end
for minute, count in pairs(places) do
  if count == false then places[minute] = nil end
end
record_write(KEYS[2], all_v, all, places)

local zadd = {}
for tenant, at in pairs(admitted) do
  zadd[#zadd + 1] = obs_int(at)
  zadd[#zadd + 1] = tenant
end
-- GT: a late flush's older minute must not hide a newer admission from unread() (lib/obs_recent.lua)
call_sliced('ZADD', KEYS[3], zadd, SLICE, nil, 'GT')
if next(admitted) then
  redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', '(' .. obs_int(now_ms - recent_ms))
  -- Every entry is trimmed recent_ms after its admission: with no admission for that long the set would hold
  -- only such entries, so it expires then (tenants that came and went leave nothing without a TTL).
  redis.call('PEXPIRE', KEYS[3], obs_int(recent_ms))
end

local placed = {}
for g, group in ipairs(groups) do placed[g] = group.own and 1 or 0 end
return placed
