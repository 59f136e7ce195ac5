-- fair_common.lua: prepended to every fair_*.lua script when it is loaded (scripts.load_script), as
-- Redis 6.2 has no function libraries. It names the fair queue's KEYS, which every fair script gets
-- in FairQueueKeys order (one cluster slot), and the FIFO, schedule and token helpers they share.
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

-- A job joins its tenant's FIFO at `seq` (the caller has moved head/tail to cover it).
local function enter(job_id, tenant, seq, weight)
  local field = tenant .. ':' .. seq
  redis.call('HSET', fifo, field, job_id)
  redis.call('HSET', members, job_id, field)
  redis.call('HINCRBY', backlog, tenant, 1)
  redis.call('HSET', weights, tenant, weight)
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

-- Up to `n` waiting fair jobs lost their token to an LREM behind our back: a stale token (due to be
-- dropped) stands in first, else one is pushed at the list head (any waiting id serves), or counted
-- held when only parked tenants wait. Returns how many were restored.
local function restore_tokens(n)
  local restored = 0
  for _ = 1, n do
    if tonumber(redis.call('HGET', state, 'stale') or '0') > 0 then
      redis.call('HINCRBY', state, 'stale', -1)
    elseif redis.call('ZCARD', active) > 0 then
      local waiting = redis.call('HRANDFIELD', members)
      redis.call('LPUSH', rq_list, waiting)
      redis.call('HINCRBY', tokens, waiting, 1)
    elseif redis.call('HLEN', members) > 0 then
      redis.call('HINCRBY', state, 'held', 1)
    else
      break
    end
    restored = restored + 1
  end
  return restored
end
