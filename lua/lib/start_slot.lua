-- start_slot.lua: the concurrency-slot control of a job start (controls/concurrency.py): a lease per running
-- job, refused (0) at the tenant's limit; a job that holds its slot already has its lease extended (HELD).
-- KEYS +1  the tenant's leases: sorted set, member = job id, score = lease expiry (ms); +2 its parked-in set
--          (Keys.parked_in).
-- ARGV +1  limit (slots the tenant may hold), +2 lease_ms, +3 the fair queue whose job this is ('' = none): a
--          refusal records it in the parked-in set, where the next release (release.lua) finds it.
local start_slot = {}
-- Expired leases are dropped first (their workers died or stalled: the slot comes back), counted as reclaimed.
-- The count read first: an empty set (a tenant with no job running, at every start under a limit of 1) has no
-- lease to drop or hold, so neither is asked (3 commands to 1). s.slots[k]: the leases left, for check.
function start_slot.held(s, k, a)
  local leases = KEYS[k + 1]
  local count = redis.call('ZCARD', leases)
  if count > 0 then
    local expired = redis.call('ZREMRANGEBYSCORE', leases, '-inf', s.now_ms)
    s.reclaimed, count = s.reclaimed + expired, count - expired
  end
  s.slots[k] = count
  if count > 0 and redis.call('ZSCORE', leases, s.job_id) then
    redis.call('ZADD', leases, string.format('%d', s.now_ms + tonumber(ARGV[a + 2])), s.job_id)
    return true
  end
  return false
end
-- Refused: s.at_ms is when its first slot comes back by itself (the earliest lease's expiry; a release may
-- come sooner), so that a tenant whose slot a dead worker holds is parked no longer than that lease lives.
function start_slot.check(s, k, a)
  local leases = KEYS[k + 1]
  if s.slots[k] >= tonumber(ARGV[a + 1]) then
    local first = redis.call('ZRANGE', leases, 0, 0, 'WITHSCORES')
    s.at_ms = tonumber(first[2]) or 0
    local queue = ARGV[a + 3]
    if queue ~= '' then  -- parked there until a release: it lasts a lease at most, so does the record
      redis.call('SADD', KEYS[k + 2], queue)
      redis.call('PEXPIRE', KEYS[k + 2], 2 * tonumber(ARGV[a + 2]))
    end
    return 0
  end
end
function start_slot.take(s, k, a)
  local leases, lease_ms = KEYS[k + 1], tonumber(ARGV[a + 2])
  redis.call('ZADD', leases, string.format('%d', s.now_ms + lease_ms), s.job_id)
  -- Every lease ends within lease_ms of its last refresh, but the key outlives it by a day: a lease
  -- whose worker died must still be here for the next start to drop *and count* as reclaimed (a key
  -- expiring with its last lease took that lease away uncounted). Expired leases never count toward
  -- the limit, so the longer life costs only the memory of an idle tenant's small set. Set at every
  -- take, no PTTL read first: a lease set by a worker whose lease_ms is longer still ends a day before
  -- (leases up to a day long).
  redis.call('PEXPIRE', leases, string.format('%d', lease_ms + 86400000))
end
