-- peek.lua: read-only window counts of one (job key, tenant), for `fair-router stats`.
-- KEYS[1]  window sorted set (see route.lua).
-- ARGV     now_ms ('' = server TIME), then one per_ms per rule.
-- Returns  {now_ms, count for rule 1, count for rule 2, ...}
local now_ms = tonumber(ARGV[1])
if not now_ms then
  local t = redis.call('TIME')
  now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local result = {now_ms}
for i = 2, #ARGV do
  result[#result + 1] = redis.call('ZCOUNT', KEYS[1], '(' .. (now_ms - tonumber(ARGV[i])), now_ms)
end
return result
