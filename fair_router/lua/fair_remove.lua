-- fair_remove.lua: take one job out of a fair queue (FairQueue.remove): its list entry and its FIFO
-- place, keeping the token accounting (LLEN + held - stale = backlog) exact.
-- KEYS     the fair queue's keys, named in fair_common.lua (prepended at load).
-- ARGV     job_id
-- Returns  1 if the job was waiting in the queue (fair or plain), else 0.
local job_id = ARGV[1]

local field = redis.call('HGET', members, job_id)
local listed = redis.call('LREM', rq_list, 1, job_id) == 1
local token = false
if listed then
  local n = tonumber(redis.call('HGET', tokens, job_id) or '0')
  if n > 0 then
    token = true
    if n == 1 then redis.call('HDEL', tokens, job_id) else redis.call('HINCRBY', tokens, job_id, -1) end
  end
end
if not field then
  if token then
    -- The token of a job served earlier stands in for another waiting job: keep it.
    redis.call('LPUSH', rq_list, job_id)
    redis.call('HINCRBY', tokens, job_id, 1)
    return 0
  end
  return listed and 1 or 0
end
leave(job_id, field)
if not token then settle_token() end
return 1
