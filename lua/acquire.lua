-- acquire.lua: admit one job start of a tenant: its pause, its rate limits (GCRA) and (with limit > 0) one
-- of its concurrency slots, in one call, so the checks cost no round trip of their own. Idempotent by job
-- id: a job that already holds a slot only has its lease extended (the lease refresh).
-- include: time
-- KEYS[1]  the tenant's leases: sorted set, member = job id, score = lease expiry (ms).
-- KEYS[2]  the tenant's pause flag: exists while the tenant is paused.
-- KEYS[3]  this job's reserved start (ms): written when a rate limit deferred it with `reserve`.
-- KEYS[4..] one GCRA state per rate scope: the scope's theoretical arrival time (TAT, ms), a string that
--          expires when the TAT passes (after that, absent and a past TAT mean the same).
-- ARGV     now_ms ('' = server TIME), job_id, limit (0 = no slot: concurrency limits are off), lease_ms,
--          reserve ('1' = on a rate refusal, take the job's token now and reserve its start time),
--          tenant_scopes (how many of the first rate scopes hold every job of the tenant), then per rate
--          scope (KEYS[4..] in order): interval_ms, tolerance_ms ((burst - 1) * interval).
-- Returns  {status, reclaimed, at_ms, now_ms, next_ms}. next_ms (admitted): when the tenant's next start is
--          allowed by its first tenant_scopes scopes, 0 when at once (a fair queue parks it till then). status 1 = admitted (slot taken when limit > 0);
--          2 = already held (lease extended); 0 = refused, at the concurrency limit; 3 = refused by a rate,
--          the next start is allowed at at_ms; 4 = refused, the tenant is paused; 5 = refused by a rate and
--          reserved: the job may start at at_ms without paying again. reclaimed = expired leases dropped
--          (their workers died or stalled: the slot comes back by itself).
local leases, paused, paid = KEYS[1], KEYS[2], KEYS[3]
local now_ms = clock_ms(ARGV[1])
local job_id = ARGV[2]
local limit = tonumber(ARGV[3])
local lease_ms = tonumber(ARGV[4])
local reserve = ARGV[5] == '1'
local tenant_scopes = tonumber(ARGV[6])
local PAID_KEEP_MS = 3600000  -- a reservation left unused this long after its time is dropped

local reclaimed = 0
if limit > 0 then
  reclaimed = redis.call('ZREMRANGEBYSCORE', leases, '-inf', now_ms)
  if redis.call('ZSCORE', leases, job_id) then
    redis.call('ZADD', leases, now_ms + lease_ms, job_id)
    return {2, reclaimed, 0, now_ms, 0}
  end
end
if redis.call('EXISTS', paused) == 1 then return {4, reclaimed, 0, now_ms, 0} end
if limit > 0 and redis.call('ZCARD', leases) >= limit then return {0, reclaimed, 0, now_ms, 0} end

-- GCRA: a scope with interval T and tolerance tau admits a start at `now` when TAT - tau <= now; the start
-- moves its TAT to max(TAT, now) + T. One timestamp per scope, whatever the rate.
local n = #KEYS - 3
local tats, allowed = {}, now_ms
local reserved = tonumber(redis.call('GET', paid) or '')
if reserved then
  if reserved > now_ms then return {3, reclaimed, reserved, now_ms, 0} end  -- back early: not yet its time
  n = 0  -- its token was taken when it was deferred
end
for i = 1, n do
  local tat = tonumber(redis.call('GET', KEYS[3 + i]) or '0')
  if tat < now_ms then tat = now_ms end
  tats[i] = tat
  local at = tat - tonumber(ARGV[6 + 2 * i])
  if at > allowed then allowed = at end
end

-- Take a token of every scope for a start at `start`; returns when the first tenant_scopes allow the next.
local function take(start)
  local next_ms = 0
  for i = 1, n do
    local tat = math.max(tats[i], start) + tonumber(ARGV[5 + 2 * i])
    redis.call('SET', KEYS[3 + i], tat, 'PX', tat - now_ms)
    local at = tat - tonumber(ARGV[6 + 2 * i])
    if i <= tenant_scopes and at > now_ms and at > next_ms then next_ms = at end
  end
  return next_ms
end

if allowed > now_ms then
  if not reserve then return {3, reclaimed, allowed, now_ms, 0} end
  take(allowed)
  redis.call('SET', paid, allowed, 'PX', allowed - now_ms + PAID_KEEP_MS)
  return {5, reclaimed, allowed, now_ms, 0}
end
local next_ms = take(now_ms)
if reserved then redis.call('DEL', paid) end
if limit > 0 then
  redis.call('ZADD', leases, now_ms + lease_ms, job_id)
  -- Every lease ends within lease_ms of its last refresh, but the key outlives it by a day: a lease
  -- whose worker died must still be here for the next acquire to drop *and count* as reclaimed (a key
  -- expiring with its last lease took that lease away uncounted). Expired leases never count toward
  -- the limit, so the longer life costs only the memory of an idle tenant's small set.
  local keep_ms = lease_ms + 86400000
  if redis.call('PTTL', leases) < keep_ms then
    redis.call('PEXPIRE', leases, keep_ms)
  end
end
return {1, reclaimed, 0, now_ms, next_ms}
