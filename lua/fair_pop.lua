-- fair_pop.lua: take the next job of a fair queue. rq's list head decides between the two kinds of
-- entries: an id rq's internals pushed (not a member) is served as it is; a member's turn goes to the
-- stride scheduler's choice (the min-pass active tenant's oldest job), whose id the head entry then
-- replaces on the list (LSET at its recorded position). O(log tenants + list length / node size).
-- include: fair_keys, time, stride, members, fifo
-- KEYS     keys.FairQueueKeys, in field order: bound to locals named as the fields by the fair_keys include.
-- ARGV     now_ms ('' = server TIME), given ('' or an entry the caller already took off rq_list with
--          BLPOP), runtime ('1' = charge="runtime": the pass advances by the job's estimated run time /
--          weight, settled later by fair_settle.lua; '0' = by 1 / weight), n_acks, then n_acks job ids
--          this caller handed out earlier (they have run: forget them).
-- Returns  {kind, job_id, wake_ms, seq}. kind 0 = the list is empty; 1 = a plain entry; 2 = a fair
--          choice (seq: its place in its tenant's FIFO, for fair_park to put it back there);
--          3 = jobs wait, but only parked tenants' (wake_ms: when the first park ends, -1 if none).
local now_ms = clock_ms(ARGV[1])
local given = ARGV[2]
local runtime = ARGV[3] == '1'
local n_acks = tonumber(ARGV[4])
local MAX_STALE = 1000  -- stale members dropped per call at most; the next call goes on
local FIRST_ESTIMATE = 0.01  -- seconds, charged while nothing at all has been measured on this queue

for i = 5, 4 + n_acks do
  redis.call('ZREM', inflight, ARGV[i])
end

-- Parks end by themselves after their bound (a slot may have freed where we could not see it).
local due = redis.call('ZRANGEBYSCORE', parked, '-inf', now_ms, 'LIMIT', 0, 64)
for _, tenant in ipairs(due) do end_park(tenant) end
if redis.call('ZCARD', parked) == 0 then redis.call('DEL', wake) end

local function first_park_end()
  local first = redis.call('ZRANGE', parked, 0, 0, 'WITHSCORES')
  if #first == 0 then return -1 end
  return tonumber(first[2])
end

-- The stride choice, not yet taken: the min-pass active tenant's oldest job. Returns job id, seq,
-- tenant, pass; or nil when no tenant can be served.
local function choose()
  while true do
    local top = redis.call('ZRANGE', active, 0, 0, 'WITHSCORES')
    if #top == 0 then return nil end
    local tenant, pass = top[1], tonumber(top[2])
    local h = tonumber(redis.call('HGET', head, tenant) or '1')
    local t = tonumber(redis.call('HGET', tail, tenant) or '0')
    while h <= t do  -- skips holes left by FairQueue.remove and by stale members dropped
      local job_id = redis.call('HGET', fifo, tenant .. ':' .. h)
      if job_id then
        redis.call('HSET', head, tenant, h)
        return job_id, h, tenant, pass
      end
      h = h + 1
    end
    idle(tenant, false)  -- nothing left in its FIFO (its backlog count was off): drop it
  end
end

-- charge="runtime": what serving `job_id` costs before it has run: its declared cost, else the recent
-- mean run time of its function for this tenant, else for any tenant, else of any job here. The pop
-- cannot read rq's job hash (another cluster slot), so the push recorded the function in `costs`.
-- Returns the estimate (seconds), the declared cost ('' if none) and the function.
local function estimate(job_id, tenant)
  local declared, func = '', ''
  local info = redis.call('HGET', costs, job_id)
  if info then declared, func = string.match(info, '^([^|]*)|(.*)$') end
  local cost = tonumber(declared)
  if not cost then
    local known = redis.call('HMGET', runtimes, tenant .. '|' .. func, '*|' .. func, '*|*')
    cost = tonumber(known[1]) or tonumber(known[2]) or tonumber(known[3]) or FIRST_ESTIMATE
  end
  return cost, declared, func
end

-- Serve the choice: it leaves its FIFO, its tenant's pass advances by 1 / weight (charge="jobs") or by
-- its estimated run time / weight, recorded in `charged` for the settlement (charge="runtime").
local function take(job_id, seq, tenant, pass)
  redis.call('HDEL', fifo, tenant .. ':' .. seq)
  redis.call('HDEL', members, job_id)
  local weight = tonumber(redis.call('HGET', weights, tenant) or '1')
  local step = 1
  if runtime then
    local cost, declared, func = estimate(job_id, tenant)
    step = cost
    redis.call('HSET', charged, job_id, table.concat({tenant, weight, cost, now_ms, declared, func}, '|'))
  end
  redis.call('HDEL', costs, job_id)
  local next_pass = pass + step / weight
  redis.call('HSET', state, 'vtime', pass)
  -- Kept passes at or below the virtual time change nothing on return (start = max(vtime, kept)):
  -- drop them, so idle tenants leave no state behind (O(log n) when there is none to drop).
  redis.call('ZREMRANGEBYSCORE', kept, '-inf', pass)
  if redis.call('HINCRBY', backlog, tenant, -1) <= 0 then
    idle(tenant, next_pass)
  else
    redis.call('HSET', head, tenant, seq + 1)
    redis.call('ZADD', active, next_pass, tenant)
  end
  redis.call('ZADD', inflight, now_ms, job_id)
end

-- Only parked tenants' members are at hand, `entry` (a member, just popped off the head) among them:
-- serve the first plain entry further down, if there is one (there is when the list holds more
-- entries than there are members). `entry` takes its slot, so no other entry moves.
local function plain_further_down(entry)
  if redis.call('LLEN', rq_list) + 1 <= redis.call('HLEN', members) then return nil end
  local start = 0
  while true do
    local chunk = redis.call('LRANGE', rq_list, start, start + 99)
    if #chunk == 0 then return nil end
    for i, plain in ipairs(chunk) do
      if redis.call('HEXISTS', members, plain) == 0 then
        redis.call('LSET', rq_list, start + i - 1, entry)
        set_pos(entry, head_pos() + start + i - 1)
        return plain
      end
    end
    start = start + 100
  end
end

local entry = given
if entry == '' then entry = redis.call('LPOP', rq_list) end
if not entry then
  -- Nothing waits: any member left is stale. Drop them all, keeping their tenants' passes.
  if redis.call('HLEN', members) > 0 then
    for _, tenant in ipairs(redis.call('ZRANGE', active, 0, -1)) do
      idle(tenant, redis.call('ZSCORE', active, tenant))
    end
    for _, tenant in ipairs(redis.call('HKEYS', backlog)) do idle(tenant, false) end
    redis.call('DEL', members, fifo, costs)
  end
  redis.call('HDEL', state, 'head')
  return {0, '', first_park_end(), ''}
end
redis.call('HINCRBY', state, 'head', 1)  -- the head left (LPOP here, or the caller's BLPOP)
if redis.call('HEXISTS', members, entry) == 0 then
  redis.call('ZADD', inflight, now_ms, entry)
  return {1, entry, -1, ''}
end
for _ = 1, MAX_STALE do
  local job_id, seq, tenant, pass = choose()
  if not job_id then
    local plain = plain_further_down(entry)
    if plain then
      redis.call('ZADD', inflight, now_ms, plain)
      return {1, plain, -1, ''}
    end
    list_push(entry, true)  -- back where it was
    return {3, '', first_park_end(), ''}
  end
  local value = redis.call('HGET', members, job_id)
  if not value then  -- a FIFO place without its members entry: never written so; drop it
    redis.call('HDEL', fifo, tenant .. ':' .. seq)
    value = '|' .. tenant .. ':' .. seq
    redis.call('HINCRBY', backlog, tenant, 1)
  end
  if job_id == entry then
    take(job_id, seq, tenant, pass)
    return {2, job_id, -1, seq}
  end
  local _, _, pos = parse_member(value)
  local index = locate(job_id, pos)
  if index then
    -- The head entry takes the chosen id's slot: one LSET, and no other entry moves.
    redis.call('LSET', rq_list, index, entry)
    set_pos(entry, head_pos() + index)
    take(job_id, seq, tenant, pass)
    return {2, job_id, -1, seq}
  end
  leave(job_id, value)  -- stale: rq removed it behind our back
end
list_push(entry, true)
return {3, '', first_park_end(), ''}
