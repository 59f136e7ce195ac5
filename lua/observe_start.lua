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
