-- rewait.lua: jobs whose start was refused after unwait.lua took their counts (the start check rode the same
-- MULTI) count waiting again, under the fields unwait.lua returned: the job did not start, so it still waits.
-- include: waiting
-- KEYS     the job key's waiting counts and jobs (core/keys.py Keys.waiting), one tag.
-- ARGV     a flat list of (job id digest, field), as unwait.lua returned it.
-- Returns  how many jobs count again.
local n = 0
for i = 1, #ARGV, 2 do n = n + wait(KEYS[1], KEYS[2], ARGV[i], ARGV[i + 1]) end
return n
