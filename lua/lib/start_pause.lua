-- start_pause.lua: the pause control of a job start (controls/pauses.py): refused (4) while the flag exists.
-- KEYS +1  the tenant's pause flag.   ARGV  none.
local start_pause = {}
function start_pause.check(s, k, a)
  if redis.call('EXISTS', KEYS[k + 1]) == 1 then return 4 end
end
