-- release.lua: a job's concurrency slot is given back, and the fair queues where the tenant waits for it are
-- taken (Keys.parked_in, filled by refused starts: lib/start_slot.lua), in one step, so every park that began
-- before this release is ended by it (the worker unparks the tenant in each queue returned) and every later
-- one is recorded for the next release.
-- KEYS     the tenant's leases (Keys.leases), its parked-in set (Keys.parked_in): one tag.
-- ARGV     job_id
-- Returns  {removed (1 if the job held a slot, else 0), queue names...}
local removed = redis.call('ZREM', KEYS[1], ARGV[1])
local queues = redis.call('SMEMBERS', KEYS[2])
if #queues > 0 then redis.call('DEL', KEYS[2]) end
table.insert(queues, 1, removed)
return queues
