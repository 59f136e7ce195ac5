-- unwait.lua: routed jobs that started stop counting waiting (lib/waiting.lua), queued on the weighted worker's
-- job-start MULTI (no round trip of its own). A job not counted (a fair queue's, a retry's) changes nothing.
-- include: waiting
-- KEYS     the job key's waiting counts and jobs (core/keys.py Keys.waiting), one tag.
-- ARGV     job id digests.
-- Returns  a flat list of (digest, field) of the jobs that were counted (and are no more), for rewait.lua.
local taken = {}
for i = 1, #ARGV do
  local field = unwait(KEYS[1], KEYS[2], ARGV[i])
  if field then
    taken[#taken + 1] = ARGV[i]
    taken[#taken + 1] = field
  end
end
return taken
