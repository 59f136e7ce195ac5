-- lib/fifo.lua: each tenant's FIFO of waiting members: a job's place, its entry and its leaving. The FIFO's
-- fields ("<tenant>:<seq>" -> job id) live in `members`, beside the members' own (lib/members.lua).
-- include: fair_keys, stride, members, forget
--
-- A tenant with waiting jobs has a *record*, field "=<tenant>" of `state` (stride.lua tenant_field):
-- "<head seq>|<tail seq>|<weight>|<waiting>", its FIFO's ends, its weight from its last push and how many of
-- its jobs wait here. One field, in the hash the pop reads and writes anyway, so a pop reads and updates all
-- of it with the state's own fields (a count of its own would cost each push and each pop a command). A tenant
-- of an organisation adds its org's fields (lib/stride.lua parse_tenant).

-- One job of `tenant` less waiting here (it left its FIFO other than by a pop): the tenant goes idle,
-- keeping its pass, when that was its last job.
local function uncount(tenant)
  local h, t, weight, n, org = parse_tenant(redis.call('HGET', state, tenant_field(tenant)))
  if not h or n <= 1 then
    stride_idle(tenant, not org and redis.call('ZSCORE', active, tenant), org or false)
    forget(tenant)  -- lib/forget.lua: with no claim nor park here, its limit and pace go
  else
    redis.call('HSET', state, tenant_field(tenant), tenant_record(h, t, weight, n - 1, org))
  end
end

-- The place of a new job in its tenant's FIFO: after its tail, or before its head (`at_front`);
-- `wanted` (a refused job's old place) is used when it is free and not past the tail. Writes the
-- tenant's record, with `weight` and the job counted. `weight`: the tenant's weight, or for a tenant of an
-- organisation "<weight>|<encoded org>|<org weight>" (a record's org stays, its weight follows the push).
-- `record`: the tenant's record when the caller read it already (false: it has none), else nil. Returns the
-- place, the record written and its org (nil: none), so that a caller need not parse the record again.
local function fifo_place(tenant, at_front, wanted, weight, record)
  if record == nil then record = redis.call('HGET', state, tenant_field(tenant)) end
  local h, t, _, n, org = parse_tenant(record)
  local own, org_name, org_weight = string.match(weight, '^([^|]*)|([^|]*)|(.*)$')
  if own then
    weight = own
    if org then org.weight = org_weight else org = {name = org_name, weight = org_weight, pass = '', on = false} end
  end
  local seq
  if not h then
    seq = wanted or 0
    h, t = seq, seq
  elseif wanted and wanted <= t and redis.call('HEXISTS', members, tenant .. ':' .. wanted) == 0 then
    seq = wanted
    if wanted < h then h = wanted end
  elseif at_front then
    h = h - 1
    seq = h
  else
    t = t + 1
    seq = t
  end
  record = tenant_record(h, t, weight, (n or 0) + 1, org)
  redis.call('HSET', state, tenant_field(tenant), record)
  return seq, record, org
end

-- A job joins its tenant's FIFO at `seq` (from fifo_place(), which counted it); its id sits at list position
-- `pos` ('' when unknown).
local function fifo_enter(job_id, tenant, seq, pos)
  local field = tenant .. ':' .. seq
  redis.call('HSET', members, field, job_id, job_id, pos .. '|' .. field)  -- its FIFO place and its entry
end

-- A member leaves its tenant's FIFO other than by a fair pop (taken as a list entry, removed, or
-- found stale). Its tenant goes idle, keeping its pass, when that was its last job.
local function fifo_leave(job_id, value)
  local field, tenant = parse_member(value)
  redis.call('HDEL', members, job_id, field)
  redis.call('HDEL', costs, job_id)
  uncount(tenant)
end
