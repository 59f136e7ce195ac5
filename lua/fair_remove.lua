-- fair_remove.lua: take one job out of a fair queue (FairQueue.remove): its list entry and its FIFO place.
-- include: fair_keys, fifo
-- KEYS     keys.FairQueueKeys, in field order: bound to the locals of lib/fair_keys.lua.
-- ARGV     job_id
-- Returns  how many list entries were removed (1, or 0 when the job was not waiting), as rq's LREM.
bind_keys()
local job_id = ARGV[1]

local value = redis.call('HGET', members, job_id)
if value then fifo_leave(job_id, value) end
return redis.call('LREM', rq_list, 1, job_id)
