-- lib/stale.lua: members found gone from rq's list (stale, lib/members.lua), counted so that our processes
-- can tell and report it. state.stale: how many were dropped, ever; state.stale_ids: the latest STALE_KEPT of
-- them (space-separated), which fair_tidy.lua hands to Python to look at their jobs: one that ran was
-- taken by a worker without our pop (a plain `rq worker`), one that did not was removed by rq (cancel, delete).
-- include: fair_keys, stride, members, fifo
local STALE_KEPT = 16

-- Count the stale members `ids` (just dropped) and keep the latest of them.
local function note_stale(ids)
  if #ids == 0 then return end
  redis.call('HINCRBY', state, 'stale', #ids)
  local kept = {}
  for id in string.gmatch(redis.call('HGET', state, 'stale_ids') or '', '%S+') do kept[#kept + 1] = id end
  for _, id in ipairs(ids) do kept[#kept + 1] = id end
  redis.call('HSET', state, 'stale_ids', table.concat(kept, ' ', math.max(1, #kept - STALE_KEPT + 1), #kept))
end

-- `job_id`, given to a pop by the caller's BLPOP, is no member: if a pop of another worker meanwhile dropped it as
-- stale (it was off the list, in this caller's hand), it was not: taken out of the stale count and ids again.
local function unnote_stale(job_id)
  local noted = redis.call('HGET', state, 'stale_ids')
  if not noted then return end
  local kept, found = {}, false
  for id in string.gmatch(noted, '%S+') do
    if id == job_id and not found then found = true else kept[#kept + 1] = id end
  end
  if not found then return end
  redis.call('HINCRBY', state, 'stale', -1)
  redis.call('HSET', state, 'stale_ids', table.concat(kept, ' '))
end

-- A member the pop met is not on rq's list: it leaves (its tenant's count with it) and is counted.
local function drop_stale(job_id, value)
  fifo_leave(job_id, value)
  note_stale({job_id})
end

-- rq's list is empty: every member left is stale. Drop them all, keeping their tenants' passes, and count them
-- (their tenants' waiting counts: `members` also holds their FIFO places, lib/fifo.lua). Returns how many.
local function drop_all_stale()
  if redis.call('HLEN', members) == 0 then return 0 end
  local n, ids, waiting = 0, {}, {}
  local fields = redis.call('HGETALL', state)
  for i = 1, #fields, 2 do
    if string.sub(fields[i], 1, #RECORD) == RECORD then  -- a tenant's record (stride.lua tenant_field)
      local _, _, _, count = parse_tenant(fields[i + 1])
      n = n + count
      waiting[#waiting + 1] = string.sub(fields[i], #RECORD + 1)
    end
  end
  -- a sample of the member entries (a FIFO place "<tenant>:<seq>" holds a job id, a member entry "<pos>|<place>")
  local sample = redis.call('HRANDFIELD', members, 2 * STALE_KEPT, 'WITHVALUES')
  for i = 1, #sample, 2 do
    local place = #ids < STALE_KEPT and string.match(sample[i + 1], '^[^|]*|(.+)$')
    if place and redis.call('HGET', members, place) == sample[i] then ids[#ids + 1] = sample[i] end
  end
  for _, tenant in ipairs(redis.call('ZRANGE', active, 0, -1)) do
    stride_idle(tenant, redis.call('ZSCORE', active, tenant))
  end
  for _, tenant in ipairs(waiting) do stride_idle(tenant, false) end
  redis.call('DEL', members, costs, orgs)
  note_stale(ids)
  if n > #ids then redis.call('HINCRBY', state, 'stale', n - #ids) end
  return n
end
