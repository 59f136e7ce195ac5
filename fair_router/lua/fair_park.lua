-- fair_park.lua: a popped job's tenant is at its concurrency limit. Put the job back at the front of
-- its tenant's FIFO and park the tenant (pops skip it) until `until_ms` or until a slot frees.
-- KEYS     the fair queue's keys, named in fair_common.lua (prepended at load).
-- ARGV     job_id, tenant (encoded), weight, until_ms
-- Returns  1 when the job was put back, 0 when it was already waiting.
local job_id, tenant, weight, until_ms = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4])

redis.call('ZREM', inflight, job_id)
local pass = redis.call('ZSCORE', active, tenant)
if pass then
  -- Parked tenants keep their place: on return they start at max(virtual time, this pass).
  redis.call('ZREM', active, tenant)
  redis.call('HSET', lastpass, tenant, pass)
end
redis.call('ZADD', parked, until_ms, tenant)
if redis.call('HEXISTS', members, job_id) == 1 then return 0 end

local seq
local h = redis.call('HGET', head, tenant)
if h then
  seq = tonumber(h) - 1
else
  seq = 0
  redis.call('HSET', tail, tenant, 0)
end
redis.call('HSET', head, tenant, seq)
local field = tenant .. ':' .. seq
redis.call('HSET', fifo, field, job_id)
redis.call('HSET', members, job_id, field)
redis.call('HINCRBY', backlog, tenant, 1)
redis.call('HSET', weights, tenant, weight)
-- Its token was spent by the pop; while the tenant is parked the job is counted as held, not listed.
redis.call('HINCRBY', state, 'held', 1)
return 1
