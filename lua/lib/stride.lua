-- lib/stride.lua: the stride schedule of a fair queue's tenants: who may be served (active), the passes
-- kept for idle and parked tenants, and the wake-ups of workers blocked while only parked tenants wait.
-- include: fair_keys

local WAKE_CAP = 16  -- wake-ups kept for workers blocked while only parked tenants' jobs wait
-- While no tenant is active, the kept passes expire together this long after the last was kept: a pass kept
-- above the virtual time is a debt of about one step, which a queue that served no one for a minute forgets
-- (the returning tenant then starts at the virtual time), so tenants that came and went leave no state.
local KEPT_IDLE_MS = 60000

-- The field of `tenant`'s record in `state` (lib/fifo.lua). '=' is never part of an encoded tenant, so a
-- record cannot meet the state's own fields (head, vtime, due, limited).
local RECORD = '='
local function tenant_field(tenant)
  return RECORD .. tenant
end

-- Whether `tenant` has jobs waiting here: it has a record (lib/fifo.lua) exactly while it does.
local function has_waiting(tenant)
  return redis.call('HEXISTS', state, tenant_field(tenant)) == 1
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
  redis.call('PERSIST', kept)  -- a tenant is active again: the kept passes no longer expire (KEPT_IDLE_MS)
  redis.call('ZADD', active, start, tenant)
end

-- `tenant`'s pass is kept for its return (idle or parked); while no tenant is active the kept passes expire
-- after KEPT_IDLE_MS.
local function stride_keep(tenant, pass)
  redis.call('ZADD', kept, pass, tenant)
  if redis.call('EXISTS', active) == 0 then redis.call('PEXPIRE', kept, KEPT_IDLE_MS) end
end

-- A tenant without waiting jobs leaves the schedule (and any park); `pass`, when given, is kept
-- for its return.
local function stride_idle(tenant, pass)
  redis.call('ZREM', active, tenant)
  redis.call('ZREM', parked, tenant)
  redis.call('HDEL', state, tenant_field(tenant))  -- its record (lib/fifo.lua), waiting count and all
  if pass then stride_keep(tenant, pass) end
end

-- The park of `tenant` ends at `until_ms` (`later`: unless it ends later already). state.due is kept at or
-- before the first park end, so that a pop looks for parks to end only once one may be due.
local function park_until(tenant, until_ms, later)
  if later then
    redis.call('ZADD', parked, 'GT', until_ms, tenant)
  else
    redis.call('ZADD', parked, until_ms, tenant)
  end
  local due = tonumber(redis.call('HGET', state, 'due') or '')
  if not due or until_ms < due then redis.call('HSET', state, 'due', until_ms) end
end

-- Park a tenant until `until_ms` (a later bound it has stays): pops skip it, its jobs stay in its FIFO. It
-- leaves the schedule keeping its pass less `step` (the refund of a refused pop) for its return.
local function stride_hold(tenant, until_ms, step)
  local pass = redis.call('ZSCORE', active, tenant)
  if pass then
    redis.call('ZREM', active, tenant)
    stride_keep(tenant, tonumber(pass) - step)
  elseif step > 0 then  -- not active: its last job was taken (idle, pass kept), or it is parked already
    local last = tonumber(redis.call('ZSCORE', kept, tenant) or '')
    if last then redis.call('ZADD', kept, last - step, tenant) end
  end
  park_until(tenant, until_ms, true)
end

-- A park ends (its bound passed, or one of the tenant's slots was released). Returns true when the
-- tenant has jobs waiting here, which are then eligible again.
local function end_park(tenant)
  if redis.call('ZREM', parked, tenant) == 0 or not has_waiting(tenant) then return false end
  activate(tenant)
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
  redis.call('RPUSH', wake, '1')
  redis.call('LTRIM', wake, -WAKE_CAP, -1)
end
