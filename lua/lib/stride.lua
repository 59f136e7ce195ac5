-- lib/stride.lua: the stride schedule of a fair queue's tenants: who may be served (active), the passes
-- kept for idle and parked tenants, and the wake-ups of workers blocked while only parked tenants wait.
-- include: fair_keys, records, orgs

local WAKE_CAP = 16  -- wake-ups kept for workers blocked while only parked tenants' jobs wait

-- (Re)activation of a tenant with waiting jobs (`record`: its record when the caller read it, else nil). A
-- tenant without org is a top-level entry (activate_entry). A tenant of an org starts at its org's min pass,
-- or at the pass it kept (parked) if later, by at most one step (its org's passes restart from 0 whenever
-- none of its tenants is active, so an older pass is capped); its org then activates if it was not. `waited`:
-- it had jobs waiting here before and is not parked, so a tenant without org is active already (no ZSCORE).
local function activate(tenant, record, waited)
  if record == nil then record = redis.call('HGET', state, tenant_field(tenant)) end
  local h, t, weight, n, org = parse_tenant(record)
  if not org then
    if not waited then activate_entry(tenant) end
    return
  end
  if org.on then return end
  local _, first = org_first(org.name)
  local start = tonumber(org.pass)
  if first then
    local base = key_pass(first)
    start = math.max(base, math.min(start or base, base + 1 / (tonumber(weight) or 1)))
  end
  org_enter(org, tenant, start or 0)
  redis.call('HSET', state, tenant_field(tenant), tenant_record(h, t, weight, n, org))
  activate_entry(ORG .. org.name)  -- its set has an active tenant now: org_settle() need not read it again
end

-- Org `org`'s tenant whose last job a pop just took has left its set: the org goes on at `pass` (its pass after
-- that take) while it has other active tenants, else it leaves keeping that pass. Whether the tenant was alone
-- there is what the pop read (org.alone; nil when it did not read it: then org_settle() looks).
local function org_served(org, pass)
  local entry = ORG .. org.name
  if org.alone == false then
    redis.call('ZADD', active, pass, entry)
  elseif org.alone then
    redis.call('ZREM', active, entry)
    stride_keep(entry, pass)
  else
    redis.call('ZADD', active, pass, entry)
    org_settle(org.name)
  end
end

-- A tenant without waiting jobs leaves the schedule (and any park); `pass`, when given, is kept for its return
-- (a tenant of an org keeps none: it returns at its org's min pass). `org`: its org as its record says (false:
-- none), nil when the caller did not read its record. `served`: a pop just took its last job (lib/serve.lua):
-- it was active, so not parked; for a tenant of an org, its org's pass after that take (lib/orgs.lua org_served).
local function stride_idle(tenant, pass, org, served)
  if org == nil then org = select(5, parse_tenant(redis.call('HGET', state, tenant_field(tenant)))) or false end
  if not served then redis.call('ZREM', parked, tenant) end
  redis.call('HDEL', state, tenant_field(tenant))  -- its record (lib/fifo.lua), waiting count and all
  if org then
    org_leave(org, tenant)
    if served then org_served(org, served) else org_settle(org.name) end
  else
    redis.call('ZREM', active, tenant)
    if pass then stride_keep(tenant, pass) end
  end
end

-- The park of `tenant` ends at `until_ms` (`later`: unless it ends later already). state.due is kept at or
-- before the first park end, so that a pop looks for parks to end only once one may be due. `due`: state.due
-- when the caller read it already (false: none), nil: read it.
local function park_until(tenant, until_ms, later, due)
  if later then
    redis.call('ZADD', parked, 'GT', until_ms, tenant)
  else
    redis.call('ZADD', parked, until_ms, tenant)
  end
  if due == nil then due = tonumber(redis.call('HGET', state, 'due') or '') end
  if not due or until_ms < due then redis.call('HSET', state, 'due', until_ms) end
end

-- Park a tenant until `until_ms` (a later bound it has stays): pops skip it, its jobs stay in its FIFO. It
-- leaves the schedule keeping its pass less `step` (the refund of a refused pop) for its return. `due`: as
-- park_until's.
local function stride_hold(tenant, until_ms, step, due)
  local pass = redis.call('ZSCORE', active, tenant)
  if pass then
    redis.call('ZREM', active, tenant)
    stride_keep(tenant, tonumber(pass) - step)
  elseif org_hold(tenant, step) then  -- luacheck: ignore (a tenant of an org: done)
  elseif step > 0 then  -- not active: its last job was taken (idle, pass kept), or it is parked already
    local last = tonumber(redis.call('ZSCORE', kept, tenant) or '')
    if last then redis.call('ZADD', kept, last - step, tenant) end
  end
  park_until(tenant, until_ms, true, due)
end

-- A park ends (its bound passed, or one of the tenant's slots was released). Returns true when the
-- tenant has jobs waiting here, which are then eligible again.
local function end_park(tenant)
  if redis.call('ZREM', parked, tenant) == 0 then return false end
  if is_org(tenant) then  -- an org's entry (lib/claims.lua park_org): back while it has active tenants
    if not org_first(string.sub(tenant, 2)) then return false end
    activate_entry(tenant)
    return true
  end
  local record = redis.call('HGET', state, tenant_field(tenant))
  if not record then return false end
  activate(tenant, record)
  return true
end

-- When the first park ends (ms), -1 when no tenant is parked.
local function first_park_end()
  local first = redis.call('ZRANGE', parked, 0, 0, 'WITHSCORES')
  if #first == 0 then return -1 end
  return tonumber(first[2])
end

-- Wake one worker blocked on this queue's wake list (workers block there instead of on rq's list while
-- only parked tenants' jobs wait on it).
local function wake_one()
  -- past the cap, trimmed to half of it: one LTRIM per WAKE_CAP / 2 wake-ups while nobody takes them
  if redis.call('RPUSH', wake, '1') > WAKE_CAP then redis.call('LTRIM', wake, -WAKE_CAP / 2, -1) end
end
