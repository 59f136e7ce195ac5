-- fair_common.lua: prepended to every fair_*.lua script when it is loaded (scripts.load_script), as
-- Redis 6.2 has no function libraries. It names the fair queue's KEYS, which every fair script gets
-- in FairQueueKeys order (one cluster slot), and the two schedule changes they share.
local rq_list, tokens, members, fifo, head, tail = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local backlog, active, kept, weights, parked, state = KEYS[7], KEYS[8], KEYS[9], KEYS[10], KEYS[11], KEYS[12]
local inflight = KEYS[13]

-- (Re)activation of a tenant with waiting jobs: it starts at the virtual time, or at the pass it had
-- when it went idle if that is later. Idle time earns nothing, and a tenant that just used its turn
-- cannot reset it by draining and refilling.
local function activate(tenant)
  if redis.call('ZSCORE', active, tenant) then return end
  local start = tonumber(redis.call('HGET', state, 'vtime') or '0')
  local last = tonumber(redis.call('ZSCORE', kept, tenant) or '')
  if last and last > start then start = last end
  redis.call('ZREM', kept, tenant)
  redis.call('ZADD', active, start, tenant)
end

-- A tenant without waiting jobs leaves the schedule (and any park); `pass`, when given, is kept
-- for its return.
local function idle(tenant, pass)
  redis.call('ZREM', active, tenant)
  redis.call('ZREM', parked, tenant)
  redis.call('HDEL', head, tenant)
  redis.call('HDEL', tail, tenant)
  redis.call('HDEL', backlog, tenant)
  redis.call('HDEL', weights, tenant)
  if pass then redis.call('ZADD', kept, pass, tenant) end
end

-- A waiting job leaves its tenant's FIFO other than by a fair pop (served from a plain entry, or
-- removed); `field` is its members entry. Its tenant goes idle when that was its last job.
local function leave(job_id, field)
  local tenant = string.match(field, '^(.*):[^:]*$')
  redis.call('HDEL', members, job_id)
  redis.call('HDEL', fifo, field)
  if redis.call('HINCRBY', backlog, tenant, -1) <= 0 then
    idle(tenant, redis.call('ZSCORE', active, tenant))
  end
end

-- A job left with its token still somewhere on rq's list: count it held-back (if tokens are held)
-- or stale (dropped when it surfaces), so that LLEN + held - stale stays the backlog.
local function settle_token()
  if tonumber(redis.call('HGET', state, 'held') or '0') > 0 then
    redis.call('HINCRBY', state, 'held', -1)
  else
    redis.call('HINCRBY', state, 'stale', 1)
  end
end
