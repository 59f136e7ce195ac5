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
