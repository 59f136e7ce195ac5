-- fair_unpark.lua: one of a tenant's concurrency slots was released. Make the tenant eligible again
-- in this queue and, if jobs wait without a token, put one token back on rq's list to wake a worker.
-- KEYS     the fair queue's keys, named in fair_common.lua (prepended at load).
-- ARGV     tenant (encoded)
-- Returns  1 if a token was pushed, else 0.
local tenant = ARGV[1]

redis.call('ZREM', parked, tenant)
if redis.call('HEXISTS', backlog, tenant) == 0 then return 0 end
activate(tenant)
if tonumber(redis.call('HGET', state, 'held') or '0') <= 0 then return 0 end
-- One freed slot lets one more job run: release one held token (any waiting id serves as the token).
local h = redis.call('HGET', head, tenant)
local job_id = h and redis.call('HGET', fifo, tenant .. ':' .. h)
if not job_id then job_id = redis.call('HRANDFIELD', members) end
if not job_id then return 0 end
redis.call('HINCRBY', state, 'held', -1)
redis.call('LPUSH', rq_list, job_id)
redis.call('HINCRBY', tokens, job_id, 1)
return 1
