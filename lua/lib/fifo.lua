-- lib/fifo.lua: each tenant's FIFO of waiting members: a job's place, its entry and its leaving. The FIFO's
-- fields ("<tenant>:<seq>" -> job id) live in `members`, beside the members' own (lib/members.lua).
-- include: fair_keys, stride, members
--
-- A tenant with waiting jobs has a *record*, field "=<tenant>" of `state` (stride.lua tenant_field):
-- "<head seq>|<tail seq>|<weight>", its FIFO's ends and its weight from its last push. One field, in the
-- hash the pop reads and writes anyway, so a pop reads and updates all of it with the state's own fields.

-- A record's head and tail (numbers) and weight (as stored), or nil when there is none.
local function parse_tenant(value)
  if not value then return nil end
  local h, t, weight = string.match(value, '^([^|]*)|([^|]*)|(.*)$')
  return tonumber(h), tonumber(t), weight
end

-- The place of a new job in its tenant's FIFO: after its tail, or before its head (`at_front`);
-- `wanted` (a refused job's old place) is used when it is free and not past the tail. Writes the
-- tenant's record, with `weight`.
local function place(tenant, at_front, wanted, weight)
  local h, t = parse_tenant(redis.call('HGET', state, tenant_field(tenant)))
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
  redis.call('HSET', state, tenant_field(tenant), h .. '|' .. t .. '|' .. weight)
  return seq
end

-- A job joins its tenant's FIFO at `seq` (from place()); its id sits at list position `pos` ('' when unknown).
local function enter(job_id, tenant, seq, pos)
  local field = tenant .. ':' .. seq
  redis.call('HSET', members, field, job_id, job_id, pos .. '|' .. field)  -- its FIFO place and its entry
  redis.call('HINCRBY', backlog, tenant, 1)
end

-- A member leaves its tenant's FIFO other than by a fair pop (taken as a list entry, removed, or
-- found stale). Its tenant goes idle, keeping its pass, when that was its last job.
local function leave(job_id, value)
  local field, tenant = parse_member(value)
  redis.call('HDEL', members, job_id, field)
  redis.call('HDEL', costs, job_id)
  if redis.call('HINCRBY', backlog, tenant, -1) <= 0 then
    idle(tenant, redis.call('ZSCORE', active, tenant))
  end
end
