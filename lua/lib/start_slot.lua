-- start_slot.lua: the concurrency-slot control of a job start (controls/concurrency.py): a lease per running
-- job, refused (0) at the tenant's limit; a job that holds its slot already has its lease extended (HELD).
-- KEYS +1  the tenant's leases: sorted set, member = job id, score = lease expiry (ms); +2 its parked-in set
--          (Keys.parked_in).
-- ARGV +1  limit (slots the tenant may hold), +2 lease_ms, +3 the fair queue whose job this is ('' = none): a
--          refusal records it in the parked-in set, where the next release (release.lua) finds it.
local start_slot = {}
local KEEP_MS = 86400000  -- the lease set outlives its last renewal by a day more than a lease
local RENEW_EVERY = 16  -- a take into a set holding leases renews its life when now_ms is a multiple of this

-- Every lease ends within lease_ms of its last refresh, but the set outlives it by a day: a lease whose worker
-- died must still be here for the next start to drop *and count* as reclaimed (a key expiring with its last
-- lease took that lease away uncounted). Expired leases never count toward the limit, so the longer life costs
-- only the memory of an idle tenant's small set. No PTTL read first: a set renewed by a worker whose lease_ms
-- is longer still ends a day after (leases up to a day long).
local function keep(leases, lease_ms)
  redis.call('PEXPIRE', leases, string.format('%d', lease_ms + KEEP_MS))
end
-- Expired leases are dropped first (their workers died or stalled: the slot comes back), counted as reclaimed.
-- The count read first: an empty set (a tenant with no job running, at every start under a limit of 1) has no
-- lease to drop or hold, so neither is asked (3 commands to 1). s.slots[k]: the leases left, for check.
function start_slot.held(s, k, a)
  local leases = KEYS[k + 1]
  local count = redis.call('ZCARD', leases)
  if count > 0 then
    local expired = redis.call('ZREMRANGEBYSCORE', leases, '-inf', string.format('%d', s.now_ms))
    s.reclaimed, count = s.reclaimed + expired, count - expired
  end
  local slots = s.slots or {0}  -- (made at the size of a tenant's slot alone)
  slots[k], s.slots = count, slots
  if count > 0 and redis.call('ZSCORE', leases, s.job_id) then
    local lease_ms = tonumber(ARGV[a + 2])
    redis.call('ZADD', leases, string.format('%d', s.now_ms + lease_ms), s.job_id)
    keep(leases, lease_ms)  -- a running job's refresh: its set lives as long as it runs
    return true
  end
  return false
end
-- Refused: s.at_ms is when its first slot comes back by itself (the earliest lease's expiry; a release may
-- come sooner), so that a tenant whose slot a dead worker holds is parked no longer than that lease lives.
function start_slot.check(s, k, a)
  local leases = KEYS[k + 1]
  if s.slots[k] >= tonumber(ARGV[a + 1]) then
    local first = redis.call('ZRANGE', leases, '0', '0', 'WITHSCORES')
    s.at_ms = tonumber(first[2]) or 0
    local queue = ARGV[a + 3]
    if queue ~= '' then  -- parked there until a release: it lasts a lease at most, so does the record
      redis.call('SADD', KEYS[k + 2], queue)
      redis.call('PEXPIRE', KEYS[k + 2], string.format('%d', 2 * tonumber(ARGV[a + 2])))
    end
    return 0
  end
end
-- The set's life is set when this take creates it (no lease left in it: every start of a tenant running one
-- job at a time), and renewed by every lease refresh (held) and by about one take in RENEW_EVERY into a set
-- that holds leases already: a set kept from emptying by running jobs has each of them refreshed every
-- lease_ttl / 3 or, for jobs shorter than that, thousands of takes a day; the other takes spare the PEXPIRE.
function start_slot.take(s, k, a)
  local leases, lease_ms = KEYS[k + 1], tonumber(ARGV[a + 2])
  redis.call('ZADD', leases, string.format('%d', s.now_ms + lease_ms), s.job_id)
  if s.slots[k] == 0 or s.now_ms % RENEW_EVERY == 0 then keep(leases, lease_ms) end
end
