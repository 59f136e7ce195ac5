-- acquire.lua: take (or keep) one of a tenant's concurrency slots for a job; idempotent by job id.
-- KEYS[1]  the tenant's leases: sorted set, member = job id, score = lease expiry (ms).
-- ARGV     now_ms ('' = server TIME), job_id, limit, lease_ms
-- Returns  {status, reclaimed}: status 1 = newly granted, 2 = already held (lease extended),
--          0 = refused (limit reached); reclaimed = expired leases dropped by this call
--          (their workers died or stalled: the slot comes back by itself).
local now_ms = tonumber(ARGV[1])
local job_id = ARGV[2]
local limit = tonumber(ARGV[3])
local lease_ms = tonumber(ARGV[4])

if not now_ms then
  local t = redis.call('TIME')
  now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local reclaimed = redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now_ms)
local status = 0
if redis.call('ZSCORE', KEYS[1], job_id) then
  status = 2
elseif redis.call('ZCARD', KEYS[1]) < limit then
  status = 1
end
if status > 0 then
  redis.call('ZADD', KEYS[1], now_ms + lease_ms, job_id)
  -- Every lease ends within lease_ms of its last refresh, but the key outlives it by a day: a lease
  -- whose worker died must still be here for the next acquire to drop *and count* as reclaimed (a key
  -- expiring with its last lease took that lease away uncounted). Expired leases never count toward
  -- the limit, so the longer life costs only the memory of an idle tenant's small set.
  local keep_ms = lease_ms + 86400000
  if redis.call('PTTL', KEYS[1]) < keep_ms then
    redis.call('PEXPIRE', KEYS[1], keep_ms)
  end
end
return {status, reclaimed}
