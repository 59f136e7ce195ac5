-- obs_fields.lua: the start record's field names, built once per call for each minute, tick and bucket a
-- batch touches (Lua's string work, not Redis', is most of an observe_start call: reuse beats rebuilding).
-- Reads the settings minute_slots and tick_slots (lib/obs_settings.lua).
-- include: obs_settings
-- minute_of(m) / tick_of(t) -> the names of minute m's (tick t's) slot; totals[b] = 'c:<b>'; obs_int(x) -> '%d'.
local function obs_int(x) return string.format('%d', x) end

local minutes, ticks, totals = {}, {}, {}
local function minute_of(minute)
  local n = minutes[minute]
  if not n then
    local ms = minute % minute_slots
    n = {minute = minute, held = 'm' .. ms, places = 'a' .. ms, value = obs_int(minute), prefix = ms .. ':', b = {}}
    minutes[minute] = n
  end
  return n
end
local function tick_of(tick)
  local n = ticks[tick]
  if not n then
    local ts = tick % tick_slots
    n = {tick = tick, held = 't' .. ts, value = obs_int(tick), n = 'n' .. ts, s = 's' .. ts}
    ticks[tick] = n
  end
  return n
end
