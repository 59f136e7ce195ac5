-- fair_pop.lua: take the next job of a fair queue: rq's list head if rq's internals pushed it, else the
-- stride scheduler's choice (the min-pass active tenant's oldest job). O(log tenants) per call.
-- KEYS     the fair queue's keys, named in fair_common.lua (prepended at load).
-- ARGV     now_ms ('' = server TIME), given ('' or an entry the caller already took off rq_list with
--          BLPOP), n_acks, then n_acks job ids this caller handed out earlier (they have run: forget them).
-- Returns  {kind, job_id, wake_ms, seq}: kind 1 = a plain entry, 2 = a fair choice for a token (listed or
--          held), 3 = a fair choice with no token left at all, 0 = nothing to serve now (wake_ms: when the first parked
--          tenant becomes eligible again, -1 if none). seq: a fair choice's place in its tenant's FIFO (for
--          fair_park to put it back there), else ''.
local now_ms = tonumber(ARGV[1])
local given = ARGV[2]
local n_acks = tonumber(ARGV[3])

if not now_ms then
  local t = redis.call('TIME')
  now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
for i = 4, 3 + n_acks do
  redis.call('ZREM', inflight, ARGV[i])
end

-- Parks end by themselves after their bound (a slot may have freed where we could not see it).
local due = redis.call('ZRANGEBYSCORE', parked, '-inf', now_ms, 'LIMIT', 0, 64)
for _, tenant in ipairs(due) do
  redis.call('ZREM', parked, tenant)
  if redis.call('HEXISTS', backlog, tenant) == 1 then activate(tenant) end
end

local function wake()
  local first = redis.call('ZRANGE', parked, 0, 0, 'WITHSCORES')
  if #first == 0 then return -1 end
  return tonumber(first[2])
end

-- The stride scheduler: serve the active tenant with the smallest pass, advance it by 1 / weight.
-- Returns the job id and its FIFO seq, or false.
local function serve()
  while true do
    local top = redis.call('ZRANGE', active, 0, 0, 'WITHSCORES')
    if #top == 0 then return false end
    local tenant, pass = top[1], tonumber(top[2])
    local h = tonumber(redis.call('HGET', head, tenant) or '1')
    local t = tonumber(redis.call('HGET', tail, tenant) or '0')
    local job_id, seq = false, h
    while h <= t and not job_id do  -- skips holes left by FairQueue.remove
      local field = tenant .. ':' .. h
      job_id, seq = redis.call('HGET', fifo, field), h
      if job_id then redis.call('HDEL', fifo, field) end
      h = h + 1
    end
    if not job_id then
      idle(tenant, false)
    else
      local next_pass = pass + 1 / tonumber(redis.call('HGET', weights, tenant) or '1')
      redis.call('HSET', state, 'vtime', pass)
      -- Kept passes at or below the virtual time change nothing on return (start = max(vtime, kept)):
      -- drop them, so idle tenants leave no state behind (O(log n) when there is none to drop).
      redis.call('ZREMRANGEBYSCORE', kept, '-inf', pass)
      if h > t or redis.call('HINCRBY', backlog, tenant, -1) <= 0 then
        idle(tenant, next_pass)
      else
        redis.call('HSET', head, tenant, h)
        redis.call('ZADD', active, next_pass, tenant)
      end
      redis.call('HDEL', members, job_id)
      redis.call('ZADD', inflight, now_ms, job_id)
      return job_id, seq
    end
  end
end

local entry = false
if given ~= '' then entry = given end
for _ = 1, 1000 do
  if not entry then entry = redis.call('LPOP', rq_list) end
  if not entry then
    -- Nothing on the list, but fair jobs may still wait without a token (held, or a token an outside
    -- LREM took, e.g. rq's Job.cancel on a plain Queue): serve them rather than strand them.
    local job_id, seq = serve()
    if not job_id then return {0, '', wake(), ''} end
    if tonumber(redis.call('HGET', state, 'held') or '0') > 0 then
      redis.call('HINCRBY', state, 'held', -1)
      return {2, job_id, -1, seq}  -- served for a held token
    end
    return {3, job_id, -1, seq}
  end
  local n = tonumber(redis.call('HGET', tokens, entry) or '0')
  if n == 0 then
    -- Pushed by rq's internals (scheduler, plain Queue, registry requeue): serve it as it is.
    local field = redis.call('HGET', members, entry)
    if field then
      -- Also waiting in a tenant FIFO: take it out there, and settle the token it leaves behind.
      leave(entry, field)
      settle_token()
    end
    redis.call('ZADD', inflight, now_ms, entry)
    return {1, entry, -1, ''}
  end
  if n == 1 then redis.call('HDEL', tokens, entry) else redis.call('HINCRBY', tokens, entry, -1) end
  if tonumber(redis.call('HGET', state, 'stale') or '0') > 0 then
    redis.call('HINCRBY', state, 'stale', -1)  -- a token whose job left another way: drop it
  else
    local job_id, seq = serve()
    if job_id then return {2, job_id, -1, seq} end
    if redis.call('ZCARD', parked) > 0 then
      -- Only parked tenants wait: hold the token (counted, not on the list) so no worker spins on it.
      redis.call('HINCRBY', state, 'held', 1)
      return {0, '', wake(), ''}
    end
    -- A token and no fair job at all: it is stale, drop it and look at the next entry.
  end
  entry = false
end
return {0, '', wake(), ''}
