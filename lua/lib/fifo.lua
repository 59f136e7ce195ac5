-- lib/fifo.lua: each tenant's FIFO of waiting members: a job's place, its entry and its leaving. The FIFO's
-- fields ("<tenant>:<seq>" -> job id) live in `members`, beside the members' own (lib/members.lua).
-- include: fair_keys, stride, members, forget
--
-- A tenant with waiting jobs has a *record*, field "=<tenant>" of `state` (stride.lua tenant_field):
-- "<head seq>|<tail seq>|<weight>|<waiting>", its FIFO's ends, its weight from its last push and how many of
-- its jobs wait here. One field, in the hash the pop reads and writes anyway, so a pop reads and updates all
-- of it with the state's own fields (a count of its own would cost each push and each pop a command).

-- A record's head and tail (numbers), weight (as stored) and waiting count, or nil when there is none (or it
-- cannot be read: then as if there were none). A record without a count (written before counts moved in, with
-- no count for fair_migrate.lua to fold in) counts its places, holes too: a count too high is safe and
-- corrects itself (serve_choose() idles a tenant whose FIFO it finds empty), one too low would strand jobs.
local function parse_tenant(value)
  if not value then return nil end
  local h, t, weight, n = string.match(value, '^([^|]*)|([^|]*)|([^|]*)|?(.*)$')
  h, t = tonumber(h), tonumber(t)
  if not (h and t) then return nil end
  return h, t, weight, tonumber(n) or (t - h + 1)
end

-- A record's value (parse_tenant reads it).
local function tenant_record(h, t, weight, n)
  return h .. '|' .. t .. '|' .. weight .. '|' .. n
end

-- One job of `tenant` less waiting here (it left its FIFO other than by a pop): the tenant goes idle,
-- keeping its pass, when that was its last job.
local function uncount(tenant)
  local h, t, weight, n = parse_tenant(redis.call('HGET', state, tenant_field(tenant)))
  if not h or n <= 1 then
    stride_idle(tenant, redis.call('ZSCORE', active, tenant))
    forget(tenant)  -- lib/forget.lua: with no claim nor park here, its limit and pace go
  else
    redis.call('HSET', state, tenant_field(tenant), tenant_record(h, t, weight, n - 1))
  end
end

-- The place of a new job in its tenant's FIFO: after its tail, or before its head (`at_front`);
-- `wanted` (a refused job's old place) is used when it is free and not past the tail. Writes the
-- tenant's record, with `weight` and the job counted. `record`: the tenant's record when the caller read it
-- already (false: it has none), else nil.
local function fifo_place(tenant, at_front, wanted, weight, record)
  if record == nil then record = redis.call('HGET', state, tenant_field(tenant)) end
  local h, t, _, n = parse_tenant(record)
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
  redis.call('HSET', state, tenant_field(tenant), tenant_record(h, t, weight, (n or 0) + 1))
  return seq
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
