-- lib/time.lua: the one clock every script decides with.

-- Now in ms: `given` (an ARGV slot holding the injected clock's ms) when it is a number, else ('') the
-- Redis server's TIME, so that every caller sharing one Redis agrees on the time.
local function clock_ms(given)
  local now = tonumber(given)
  if now then return now end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
