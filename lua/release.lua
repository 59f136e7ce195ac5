-- release.lua: a job's concurrency slot is given back, and the fair queues where the tenant waits for it are
-- taken (Keys.parked_in, filled by refused starts: lib/start_slot.lua), in one step, so every park that began
-- before this release is ended by it (the worker unparks the tenant in each queue returned) and every later
-- one is recorded for the next release. A job under an org with a limit gives its org's slot back too, and
-- takes the "<tenant>|<queue>" parks the org's limit made (Keys.org_parked_in).
-- KEYS     the tenant's leases (Keys.leases), its parked-in set (Keys.parked_in), then for a job under an org
--          the org's leases and parked-in set (Keys.org_leases, Keys.org_parked_in): one tag (the org's).
-- ARGV     job_id
-- Returns  {removed (1 if the job held a slot, else 0), number of queues, queue names..., org parks...}
local removed = redis.call('ZREM', KEYS[1], ARGV[1])
local queues = redis.call('SMEMBERS', KEYS[2])
if #queues > 0 then redis.call('DEL', KEYS[2]) end
local reply = {removed, #queues}
for _, queue in ipairs(queues) do reply[#reply + 1] = queue end
if KEYS[3] then
  redis.call('ZREM', KEYS[3], ARGV[1])
  local parks = redis.call('SMEMBERS', KEYS[4])
  if #parks > 0 then redis.call('DEL', KEYS[4]) end
  for _, park in ipairs(parks) do reply[#reply + 1] = park end
end
return reply
