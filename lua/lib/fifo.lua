-- lib/fifo.lua: each tenant's FIFO of waiting members: a job's place, its entry and its leaving.
-- include: fair_keys, stride, members

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
