-- unwait.lua: routed jobs that started stop counting waiting (lib/waiting.lua), queued on the weighted worker's
-- job-start MULTI (no round trip of its own). A job not counted (a fair queue's, a retry's) changes nothing.
-- include: waiting
-- KEYS     the job key's waiting counts and jobs (core/keys.py Keys.waiting), one tag.
-- ARGV     job id digests.
-- Returns  how many of them were counted (and are no more).
local n = 0
for i = 1, #ARGV do n = n + unwait(KEYS[1], KEYS[2], ARGV[i]) end
return n
