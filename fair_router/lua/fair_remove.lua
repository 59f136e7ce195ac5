-- fair_remove.lua: take one job out of a fair queue (FairQueue.remove): its list entry and its FIFO
-- place, keeping the token accounting (LLEN + held - stale = backlog) exact.
-- KEYS     rq_list, tokens, members, fifo, head, tail, backlog, active, lastpass, weights, parked, state,
--          inflight (FairQueueKeys order; one cluster slot).
-- ARGV     job_id
-- Returns  1 if the job was waiting in the queue (fair or plain), else 0.
local rq_list, tokens, members, fifo, head, tail = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local backlog, active, lastpass, weights, parked, state = KEYS[7], KEYS[8], KEYS[9], KEYS[10], KEYS[11], KEYS[12]
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
local tenant = string.match(field, '^(.*):[^:]*$')
redis.call('HDEL', members, job_id)
redis.call('HDEL', fifo, field)
if redis.call('HINCRBY', backlog, tenant, -1) <= 0 then
  local pass = redis.call('ZSCORE', active, tenant)
  redis.call('ZREM', active, tenant)
  redis.call('ZREM', parked, tenant)
  redis.call('HDEL', head, tenant)
  redis.call('HDEL', tail, tenant)
  redis.call('HDEL', backlog, tenant)
  redis.call('HDEL', weights, tenant)
  if pass then redis.call('HSET', lastpass, tenant, pass) end
end
if not token then
  if tonumber(redis.call('HGET', state, 'held') or '0') > 0 then
    redis.call('HINCRBY', state, 'held', -1)
  else
    redis.call('HINCRBY', state, 'stale', 1)
  end
end
return 1
