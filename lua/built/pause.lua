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

-- pause.lua: pause a tenant (controls/pauses.py): its pause flag holds the time of the pause (ms), kept when
-- it is already paused, so that "paused since" is the first pause's. Readers only test that the flag exists.
-- include: time
-- KEYS[1]  the tenant's pause flag (keys.paused).
-- ARGV     now_ms ('' = server TIME)
-- Returns  the flag's value: the time of the pause in ms (1: paused by a version that recorded no time).
local flag = KEYS[1]
local since = redis.call('GET', flag)
if since then return tonumber(since) or 1 end
local now_ms = clock_ms(ARGV[1] or '')
redis.call('SET', flag, now_ms)
return now_ms
