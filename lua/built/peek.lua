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

-- peek.lua: read-only window counts of one (job key, tenant), for `fair-router stats`.
-- include: time
-- KEYS[1]  window sorted set (see route.lua).
-- ARGV     now_ms ('' = server TIME), then one per_ms per rule.
-- Returns  {now_ms, count for rule 1, count for rule 2, ...}
local window = KEYS[1]
local now_ms = clock_ms(ARGV[1])

local result = {now_ms}
for i = 2, #ARGV do
  result[#result + 1] = redis.call('ZCOUNT', window, '(' .. (now_ms - tonumber(ARGV[i])), now_ms)
end
return result
