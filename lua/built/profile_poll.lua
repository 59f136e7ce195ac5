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

-- profile_poll.lua: read-only; the tenants whose profile changed since a tier cache's last poll
-- (profile_note.lua writes them), so it evicts only those.
-- include: time
-- KEYS[1]  the profile changes sorted set (keys.profile_changes): tenant -> time of its last change (ms).
-- ARGV     since_ms ('' = first poll: only the time is wanted), cap (most tenants returned), now_ms ('' =
--          server TIME)
-- Returns  {now_ms, 0} on a first poll; {now_ms, -1} when more than cap tenants changed (clear everything);
--          else {now_ms, n, tenant 1, ..., tenant n}: those changed at or after since_ms.
local changes = KEYS[1]
local since, cap = tonumber(ARGV[1]), tonumber(ARGV[2])
local now_ms = clock_ms(ARGV[3] or '')

if not since then return {now_ms, 0} end
local changed = redis.call('ZRANGEBYSCORE', changes, since, '+inf', 'LIMIT', 0, cap + 1)
if #changed > cap then return {now_ms, -1} end
local result = {now_ms, #changed}
for i = 1, #changed do result[i + 2] = changed[i] end
return result
