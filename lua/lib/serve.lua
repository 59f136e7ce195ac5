-- lib/serve.lua: the stride choice of a fair pop and serving it (its tenant's pass advances).
-- include: fair_keys, stride, fifo, charge, claims, forget
local FIRST_ESTIMATE = 0.01  -- seconds, charged while nothing at all has been measured on this queue

-- The stride choice, not yet taken: the min-pass active tenant's oldest job. `first`: {tenant, pass, record,
-- job} of the min-pass tenant when the caller read them already (job: the id at its FIFO head, false when
-- that place is a hole, nil when not read), else nil. Returns job id, seq, tenant, pass, and the tenant's
-- tail seq, weight and waiting count (its record, for take); or nil when no tenant can be served.
local function serve_choose(first)
  while true do
    local tenant, pass, record, known
    if first then
      tenant, pass, record, known = first[1], first[2], first[3], first[4]
      first = nil
    else
      local top = redis.call('ZRANGE', active, 0, 0, 'WITHSCORES')
      if #top == 0 then return nil end
      tenant, pass = top[1], tonumber(top[2])
      record = redis.call('HGET', state, tenant_field(tenant))
    end
    local h, t, weight, n = parse_tenant(record)
    while h and h <= t do  -- skips holes left by FairQueue.remove and by stale members dropped
      local job_id = known
      if job_id == nil then job_id = redis.call('HGET', members, tenant .. ':' .. h) end
      known = nil
      if job_id then return job_id, h, tenant, pass, t, weight, n end
      h = h + 1
    end
    stride_idle(tenant, false)  -- nothing left in its FIFO (its waiting count was off): drop it
  end
end

-- Tenants tied on pass are served in the order their jobs wait on rq's list: the head entry's own tenant
-- when its pass is the minimum too (`min_pass`) and the entry (its FIFO place `field` of `tenant`) is its
-- oldest member (its places before it are holes), so that no other entry moves either. With equal weights and
-- charge="jobs" passes are whole numbers: ties are the rule. fair_pop decides this once per pop, before any
-- stale member is dropped (its model test and fairqueue/serving_order.py follow the same rule). Returns the
-- entry's seq, its tenant's pass, tail seq, weight and waiting count (for take), or nil when the entry is not
-- the choice.
local function tied_entry(field, tenant, min_pass)
  local pass = tonumber(redis.call('ZSCORE', active, tenant) or '')
  if pass ~= min_pass then return nil end
  local h, t, weight, n = parse_tenant(redis.call('HGET', state, tenant_field(tenant)))
  local seq = tonumber(string.match(field, ':([^:]*)$'))
  while h and h < seq and redis.call('HEXISTS', members, tenant .. ':' .. h) == 0 do h = h + 1 end
  if h ~= seq then return nil end
  return seq, pass, t, weight, n
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
-- its estimated run time / weight, recorded in `charged` for the settlement (charge="runtime"). A limited
-- tenant's job is claimed (lib/claims.lua); a tenant that reached its limit is parked until a release
-- or for `lease_ms`, a paced one until its start reports. `pop`: the pop's now_ms, runtime, lease_ms, head
-- (the list head's position, written here with the virtual time), vtime (before this pop) and limited.
-- `tail`, `stored`, `waiting`: the tenant's tail seq, weight and waiting count from its record (serve_choose()).
local function serve_take(job_id, seq, tenant, pass, pop, tail, stored, waiting)
  local now_ms = pop.now_ms
  redis.call('HDEL', members, tenant .. ':' .. seq, job_id)
  local weight = tonumber(stored) or 1
  local step = 1
  if pop.runtime then
    local cost, declared, func = estimate(job_id, tenant)
    step = cost
    redis.call('HSET', charged, job_id, table.concat({tenant, weight, cost, now_ms, declared, func}, '|'))
    redis.call('HDEL', costs, job_id)
  end
  local next_pass = pass + step / weight
  -- Kept passes at or below the virtual time change nothing on return (start = max(vtime, kept)):
  -- drop them as it advances, so idle tenants leave no state behind.
  if pass > pop.vtime then redis.call('ZREMRANGEBYSCORE', kept, '-inf', pass) end
  if waiting <= 1 then
    redis.call('HSET', state, 'vtime', pass, 'head', pop.head)
    stride_idle(tenant, next_pass)
  else  -- one HSET: the virtual time, the list head and the tenant's record (its head moves on, one less waits)
    redis.call('HSET', state, 'vtime', pass, 'head', pop.head, tenant_field(tenant),
               tenant_record(seq + 1, tail, stored, waiting - 1))
    redis.call('ZADD', active, next_pass, tenant)
  end
  redis.call('ZADD', inflight, now_ms, job_id)
  local until_ms = claim(tenant, job_id, now_ms, pop.lease_ms, pop.limited)
  if until_ms then
    stride_hold(tenant, until_ms, 0)
  elseif pop.limited and waiting <= 1 then
    forget(tenant)  -- its last job, neither claimed nor parked: a limit of 0 or an old pace (lib/forget.lua)
  end
end
