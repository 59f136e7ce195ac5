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
