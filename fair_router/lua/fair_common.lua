-- fair_common.lua: prepended to every fair_*.lua script when it is loaded (scripts.load_script), as
-- Redis 6.2 has no function libraries. It names the fair queue's KEYS, which every fair script gets
-- in FairQueueKeys order (one cluster slot), and the helpers they share.
--
-- The invariant every script keeps: rq's list holds exactly one entry per waiting job, the job's own
-- id. A fair job is also a *member*: it has a place in its tenant's FIFO. An entry that is not a
-- member was pushed by rq's internals with a plain Queue (scheduler, registry requeues) and is served
-- in list order. A member whose id is no longer on the list was removed by rq behind our back
-- (Job.cancel, Job.delete, a plain Queue.remove): it is *stale*, and dropped when the scheduler meets it.
--
-- Each member also records its *list position*: a virtual index that stays put while the list changes
-- at its ends (state.head is the position of the list head: LPOP adds 1, LPUSH takes 1). So a pop can
-- take its chosen id out with LINDEX/LSET at a known index, O(list length / listpack node size), where
-- an LREM would compare every entry. rq's own LREM or LPUSH behind our back shifts positions it does
-- not tell us about: locate() then looks around the recorded index, and re-records every position when
-- the drift has grown.
local rq_list, members, fifo, head, tail = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local backlog, active, kept, weights, parked = KEYS[6], KEYS[7], KEYS[8], KEYS[9], KEYS[10]
local state, inflight, wake = KEYS[11], KEYS[12], KEYS[13]
-- charge="runtime" (FairQueue docstring): `costs` holds what a waiting member's pop needs to estimate its
-- run time (its function, a declared cost), `charged` what a popped job was charged until fair_settle.lua
-- replaces it with the real cost, `runtimes` the recent mean run times the estimates come from.
local costs, charged, runtimes = KEYS[14], KEYS[15], KEYS[16]

local WAKE_CAP = 16  -- wake-ups kept for workers blocked while only parked tenants' jobs wait

-- Now in ms: the injected clock's value, else the Redis server's TIME.
local function clock_ms(given)
  local now = tonumber(given)
  if now then return now end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

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

-- A members entry is "<list position>|<tenant>:<seq>" (position '' when unknown), `tenant:seq` its FIFO
-- field. Returns field, tenant, position.
local function parse_member(value)
  local pos, field = string.match(value, '^([^|]*)|(.*)$')
  if not field then field = value end
  return field, string.match(field, '^(.*):[^:]*$'), tonumber(pos)
end

local function head_pos()
  return tonumber(redis.call('HGET', state, 'head') or '0')
end

-- Record that member `job_id` now sits at list position `pos`.
local function set_pos(job_id, pos)
  local value = redis.call('HGET', members, job_id)
  if value then
    local field = parse_member(value)
    redis.call('HSET', members, job_id, pos .. '|' .. field)
  end
end

-- Push `job_id` at the list's tail (or head); returns its list position.
local function list_push(job_id, at_front)
  if at_front then
    redis.call('LPUSH', rq_list, job_id)
    return redis.call('HINCRBY', state, 'head', -1)
  end
  return head_pos() + redis.call('RPUSH', rq_list, job_id) - 1
end

-- Re-record the position of every member from the list itself: O(list length), after drift.
local function reindex()
  local head = head_pos()
  local listed = redis.call('LRANGE', rq_list, 0, -1)
  for i, entry in ipairs(listed) do set_pos(entry, head + i - 1) end
end

-- The index of member `job_id` on rq's list, or nil when it is not there (stale). `pos`: its recorded
-- position (nil when unknown). Exact unless rq shifted the list behind our back; then a look around
-- the expected index, else a scan of the whole list and a reindex.
local function locate(job_id, pos)
  local len = redis.call('LLEN', rq_list)
  if pos then
    local expected = pos - head_pos()
    if expected >= 0 and expected < len and redis.call('LINDEX', rq_list, expected) == job_id then
      return expected
    end
    for _, reach in ipairs({8, 128}) do
      local lo = math.max(0, expected - reach)
      local near = redis.call('LRANGE', rq_list, lo, math.min(len - 1, expected + reach))
      for i, entry in ipairs(near) do
        if entry == job_id then return lo + i - 1 end
      end
    end
  end
  local found = redis.call('LPOS', rq_list, job_id)
  if found then reindex() end
  return found or nil
end

-- The place of a new job in its tenant's FIFO: after its tail, or before its head (`at_front`);
-- `wanted` (a refused job's old place) is used when it is free and not past the tail.
local function place(tenant, at_front, wanted)
  local h = redis.call('HGET', head, tenant)
  if not h then
    local seq = wanted or 0
    redis.call('HSET', head, tenant, seq)
    redis.call('HSET', tail, tenant, seq)
    return seq
  end
  if wanted and wanted <= tonumber(redis.call('HGET', tail, tenant))
      and redis.call('HEXISTS', fifo, tenant .. ':' .. wanted) == 0 then
    if wanted < tonumber(h) then redis.call('HSET', head, tenant, wanted) end
    return wanted
  end
  if at_front then
    local seq = tonumber(h) - 1
    redis.call('HSET', head, tenant, seq)
    return seq
  end
  return redis.call('HINCRBY', tail, tenant, 1)
end

-- A job joins its tenant's FIFO at `seq`; its id sits at list position `pos` ('' when unknown).
local function enter(job_id, tenant, seq, weight, pos)
  local field = tenant .. ':' .. seq
  redis.call('HSET', fifo, field, job_id)
  redis.call('HSET', members, job_id, pos .. '|' .. field)
  redis.call('HINCRBY', backlog, tenant, 1)
  redis.call('HSET', weights, tenant, weight)
end

-- A member leaves its tenant's FIFO other than by a fair pop (taken as a list entry, removed, or
-- found stale). Its tenant goes idle, keeping its pass, when that was its last job.
local function leave(job_id, value)
  local field, tenant = parse_member(value)
  redis.call('HDEL', members, job_id)
  redis.call('HDEL', fifo, field)
  redis.call('HDEL', costs, job_id)
  if redis.call('HINCRBY', backlog, tenant, -1) <= 0 then
    idle(tenant, redis.call('ZSCORE', active, tenant))
  end
end

-- A job of a tenant that can be served now was queued: wake one worker blocked on this queue's wake
-- list (workers block there instead of on rq's list while only parked tenants' jobs wait on it).
local function nudge()
  if redis.call('ZCARD', parked) > 0 then
    redis.call('RPUSH', wake, '1')
    redis.call('LTRIM', wake, -WAKE_CAP, -1)
  end
end

-- charge="runtime": a popped job's `charged` entry, "<tenant>|<weight>|<estimate>|<pop ms>|<declared>|<function>"
-- (the pop charged the tenant's pass estimate / weight; declared '' when the job declared no cost).
-- Returns tenant, weight, estimate, pop ms, declared (string), function.
local function parse_charged(value)
  local tenant, weight, estimate, popped, declared, func =
    string.match(value, '^([^|]*)|([^|]*)|([^|]*)|([^|]*)|([^|]*)|(.*)$')
  return tenant, tonumber(weight), tonumber(estimate), tonumber(popped), declared, func
end
