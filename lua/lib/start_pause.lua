-- start_pause.lua: the pause control of a job start (controls/pauses.py): refused (4) while the flag exists.
-- KEYS +1  the tenant's pause flag.   ARGV  none.
-- Or, for a job under an org (its call's keys on the org's slot, not the tenant's): KEYS none, ARGV +1 '1'
-- when the worker's tier cache saw the tenant paused.
-- The flag is read with the start's other string keys (lib/start.lua `reads`: one MGET).
local start_pause = {reads = true}
function start_pause.check(s, k, a, n, r)
  if n == 0 then
    if ARGV[a + 1] == '1' then return 4 end
  elseif s.got[r + 1] then
    return 4
  end
end
