-- observe_start.lua: record one job start (its wait) in its tenant's record and in the all-tenant record.
-- KEYS[1] the tenant's record (its last ':' part is the encoded tenant), KEYS[2] the overflow record
--         (#other), KEYS[3] the all-tenant record (#all), KEYS[4] recent: sorted set tenant -> when it
--         was last admitted (ms). All tagged {obs}.
-- ARGV    bucket, wait_us, and now_ms only when a clock is injected (else server TIME)
-- The recorder puts one line in front of this file: cap (tenants per minute), ttl (record expiry, s),
-- minute_slots, tick_ms, tick_slots, n_buckets, recent_ms. Constants rather than ARGV: every argument
-- costs the worker microseconds to pack, on the job's start.
-- A record is a hash:
--   m<s> = the minute held by minute slot s (minute % minute_slots); <s>:<b> = its starts in wait bucket b
--   t<s> = the tick held by tick slot s; n<s>, s<s> = its starts and their total wait (us)
--   c:<b> = starts in bucket b since the record was created; c:us = their total wait (us)
--   a<s> (#all only) = tenants given their own record in the minute of slot s
-- A slot is cleared when a new minute (tick) first writes to it, so a record holds the last minute_slots
-- minutes and tick_slots ticks. Each record costs one HMGET and one HSET (a script's redis.call costs
-- about as much as a command), plus, once a minute, the slot's clearing and the expiry.
-- Returns 1 if the start went to the tenant's own record, 0 if to #other.
local now_ms = tonumber(ARGV[3])
if not now_ms then
  local t = redis.call('TIME')
  now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local bucket, wait_us = ARGV[1], tonumber(ARGV[2])

local function int(x) return string.format('%d', x) end
local minute = math.floor(now_ms / 60000)
local tick = math.floor(now_ms / tick_ms)
local ms, ts = minute % minute_slots, tick % tick_slots
local minute_s, tick_s = int(minute), int(tick)
local f_minute, f_tick, f_bucket, f_total = 'm' .. ms, 't' .. ts, ms .. ':' .. bucket, 'c:' .. bucket
local f_n, f_s, f_admitted = 'n' .. ts, 's' .. ts, 'a' .. ms

local function read(key)
  return redis.call('HMGET', key, f_minute, f_tick, f_bucket, f_total, 'c:us', f_n, f_s, f_admitted)
end

local function record(key, v, admitted)
  if v[1] ~= minute_s then  -- the slot's first start this minute: drop what it held minute_slots ago
    local stale = {}
    for b = 0, n_buckets - 1 do stale[#stale + 1] = ms .. ':' .. b end
    redis.call('HDEL', key, unpack(stale))
    redis.call('EXPIRE', key, ttl)
    v[3] = false
  end
  if v[2] ~= tick_s then v[6], v[7] = false, false end
  local fields = {f_minute, minute_s, f_tick, tick_s,
    f_bucket, int((tonumber(v[3]) or 0) + 1), f_total, int((tonumber(v[4]) or 0) + 1),
    'c:us', int((tonumber(v[5]) or 0) + wait_us), f_n, int((tonumber(v[6]) or 0) + 1),
    f_s, int((tonumber(v[7]) or 0) + wait_us)}
  if admitted then
    fields[#fields + 1], fields[#fields + 2] = f_admitted, int(admitted)
  end
  redis.call('HSET', key, unpack(fields))
end

local all = read(KEYS[3])
local admitted = 0
if all[1] == minute_s then admitted = tonumber(all[8]) or 0 end
local key = KEYS[1]
local held = read(key)
if held[1] ~= minute_s then
  -- The tenant's first start this minute: its own record while the minute has room, else #other.
  if admitted >= cap then
    key = KEYS[2]
    held = read(key)
  else
    admitted = admitted + 1
    redis.call('ZADD', KEYS[4], now_ms, string.match(KEYS[1], '[^:]*$'))
    redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', '(' .. int(now_ms - recent_ms))
  end
end
record(key, held, false)
record(KEYS[3], all, admitted)
if key == KEYS[1] then return 1 end
return 0
