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

-- profile_note.lua: a tenant's profile (tier, overrides or pause flag) was just written; note when, so that
-- every process's tier cache (fair_router.controls.tiers) evicts it at its next poll (profile_poll.lua).
-- Callers run it after their write: a poll that sees the note then re-reads the new value.
-- include: time
-- KEYS[1]  the profile changes sorted set (keys.profile_changes): tenant -> time of its last change (ms).
-- ARGV     tenant, horizon_ms (entries older than this are trimmed), now_ms ('' = server TIME)
-- Returns  now_ms, the time noted.
local changes = KEYS[1]
local tenant, horizon_ms = ARGV[1], tonumber(ARGV[2])
local now_ms = clock_ms(ARGV[3] or '')

redis.call('ZADD', changes, now_ms, tenant)
redis.call('ZREMRANGEBYSCORE', changes, '-inf', '(' .. (now_ms - horizon_ms))
redis.call('PEXPIRE', changes, horizon_ms)  -- nothing written for a horizon: every entry is stale anyway
return now_ms
