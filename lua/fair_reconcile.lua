-- fair_reconcile.lua: a fair queue's per-tenant waiting counts made to agree with rq's list when our processes
-- read them (fairqueue/reconcile.py: `fair-router tenant show`, the dashboard, /metrics), after rq's own commands
-- changed the list without our scripts: members whose id rq took off the list (Job.cancel, Job.delete, a plain
-- Queue.remove, `rq empty`) are dropped as stale (lib/stale.lua); ids rq pushed by itself (`rq requeue`,
-- FailedJobRegistry.requeue, StartedJobRegistry.cleanup's retries) are handed to the caller, which reads their
-- jobs' tenants (rq's serializer: not readable here) and calls again with them to adopt: each joins its tenant's
-- FIFO at the tail, at its list position, only if it is still listed and no member.
-- Bounded: everything is compared only when the list and the members each hold at most `bound` entries (one
-- LRANGE, one HGETALL); beyond it nothing is compared and the reply says the counts are not exact.
-- An empty list is always exact (every member left is stale).
-- include: fair_keys, stride, members, fifo, charge, stale
-- KEYS     keys.FairQueueKeys, in field order.
-- ARGV     bound, then one group of five per job to adopt: job_id, tenant (encoded), weight, func, declared
--          (as fair_push.lua's).
-- Returns  {exact (1 compared, 0 beyond the bound), stale members dropped, jobs adopted, listed ids that are no
--          members (when compared: at most `bound`), rq's list length}.
local GROUP = 5
local bound = tonumber(ARGV[1])
local length = redis.call('LLEN', rq_list)
if length == 0 then
  return {1, drop_all_stale(), 0, {}, 0}
end
if length > bound or redis.call('HLEN', members) > 2 * bound then
  return {0, 0, 0, {}, length}
end

local head = head_pos(nil)
local listed = redis.call('LRANGE', rq_list, 0, -1)
local index = {}  -- id -> its index on the list
for i, id in ipairs(listed) do
  if not index[id] then index[id] = i - 1 end
end

-- Stale members first (their FIFO places are fields "<tenant>:<seq>"; rq 3.0 job ids hold no ':'), and the
-- positions of the listed ones recorded again where rq's LREM or LPUSH moved them.
local gone, member = {}, {}
local all = redis.call('HGETALL', members)
for i = 1, #all, 2 do
  local id, value = all[i], all[i + 1]
  if not string.find(id, ':', 1, true) then
    member[id] = true
    local at = index[id]
    if at == nil then
      leave(id, value)
      gone[#gone + 1] = id
    else
      local field, _, pos = parse_member(value)
      if pos ~= head + at then redis.call('HSET', members, id, (head + at) .. '|' .. field) end
    end
  end
end
note_stale(gone)

-- Adoptions: rq pushed these ids itself; the caller read their tenants.
local any_parked = #ARGV > 1 and redis.call('ZCARD', parked) > 0
local adopted = 0
for i = 2, #ARGV, GROUP do
  local id, tenant, weight = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  if index[id] ~= nil and not member[id] then
    member[id] = true
    enter(id, tenant, place(tenant, false, nil, weight, nil), head + index[id])
    keep_costs(id, ARGV[i + 4], ARGV[i + 3])
    if not (any_parked and redis.call('ZSCORE', parked, tenant)) then
      activate(tenant)
      if any_parked then wake_one() end
    end
    adopted = adopted + 1
  end
end

-- What is listed and no member: rq's own pushes, for the caller to adopt.
local plain = {}
for i, id in ipairs(listed) do
  if not member[id] and index[id] == i - 1 then plain[#plain + 1] = id end
end
return {1, #gone, adopted, plain, length}
