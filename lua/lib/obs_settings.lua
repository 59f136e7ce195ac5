-- lib/obs_settings.lua: the record layout's settings, from observe_start.lua's ARGV[2..8] (the recorder sends
-- them with every call: fair_router/observe/recorder.py): cap (tenants per minute), ttl (record expiry, s),
-- minute_slots, tick_ms, tick_slots, n_buckets, recent_ms.
local cap, ttl, minute_slots, tick_ms, tick_slots, n_buckets, recent_ms = tonumber(ARGV[2]), tonumber(ARGV[3]),
  tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8])
local FIRST_GROUP = 9  -- ARGV index of the first group's fields (lib/obs_groups.lua)
