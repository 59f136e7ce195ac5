-- fair_push.lua: add jobs to a fair queue (a tenant's FIFO + one token on rq's list), or put popped
-- jobs back (recovery after a dead worker).
-- KEYS     the fair queue's keys, named in fair_common.lua (prepended at load).
-- ARGV     then one group of five per job: job_id, tenant (encoded), weight, at_front ('1'/'0'),
--          from_inflight ('1' = only if still recorded as popped-not-started, which is then cleared).
-- Returns  how many jobs were added (a job already waiting is left where it is).

local added = 0
for i = 1, #ARGV, 5 do
  local job_id, tenant, weight = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  local at_front, from_inflight = ARGV[i + 3] == '1', ARGV[i + 4] == '1'
  local go = redis.call('HEXISTS', members, job_id) == 0
  if go and from_inflight then
    go = redis.call('ZREM', inflight, job_id) == 1
  end
  if go then
    local seq
    local h = redis.call('HGET', head, tenant)
    if not h then
      seq = 0
      redis.call('HSET', head, tenant, 0)
      redis.call('HSET', tail, tenant, 0)
    elseif at_front then
      seq = tonumber(h) - 1
      redis.call('HSET', head, tenant, seq)
    else
      seq = redis.call('HINCRBY', tail, tenant, 1)
    end
    enter(job_id, tenant, seq, weight)
    if redis.call('ZSCORE', parked, tenant) then
      -- A parked tenant cannot be served: a token would only wake a worker for nothing. The job is
      -- counted as held instead (FairQueue.count = LLEN + held - stale).
      redis.call('HINCRBY', state, 'held', 1)
    else
      activate(tenant)
      if at_front then
        redis.call('LPUSH', rq_list, job_id)
      else
        redis.call('RPUSH', rq_list, job_id)
      end
      redis.call('HINCRBY', tokens, job_id, 1)
    end
    added = added + 1
  end
end
return added
