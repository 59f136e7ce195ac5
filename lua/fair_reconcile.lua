-- fair_reconcile.lua: a fair queue's per-tenant waiting counts made to agree with rq's list when our processes
-- read them (fairqueue/reconcile.py: `fair-router tenant show`, the dashboard, /metrics), after rq's own commands
-- changed the list without our scripts: members whose id rq took off the list (Job.cancel, Job.delete, a plain
-- Queue.remove, `rq empty`) are dropped as stale (lib/stale.lua); ids rq pushed by itself (`rq requeue`,
-- FailedJobRegistry.requeue, StartedJobRegistry.cleanup's retries) are handed to the caller, which reads their
-- jobs' tenants (rq's serializer: not readable here) and calls again with them to adopt: each joins its tenant's
-- FIFO at the tail, at its list position, only if it is still listed and no member.
-- Bounded: compared only when the list holds at most `bound` entries (one LRANGE and an HMGET of the listed
-- ids); the members hash is read only when it holds more members than are listed: whole up to `bound` members,
-- else one HSCAN page of `bound` per call (state.reconcile_cursor), not exact until the pages dropped them all.
-- Beyond the bound nothing is compared and the reply says the counts are not exact.
-- An empty list is always exact (every member left is stale).
-- include: fair_keys, stride, members, fifo, charge, stale
-- KEYS     keys.FairQueueKeys, in field order.
-- ARGV     bound, then one group of five per job to adopt: job_id, tenant (encoded), weight, func, declared
--          (as fair_push.lua's).
-- Returns  {exact (1 compared, 0 beyond the bound or stale members left to page through), stale members dropped, jobs adopted, listed ids that are no
--          members (when compared: at most `bound`), rq's list length}.
bind_keys()
local GROUP = 5
local RECONCILE_SLICE = 1000  -- ids per HMGET (Lua's unpack has a stack bound)
local bound = tonumber(ARGV[1])
local length = redis.call('LLEN', rq_list)
if length == 0 then
  return {1, drop_all_stale(), 0, {}, 0}
end
local fields = redis.call('HLEN', members)  -- two per member (its entry and its FIFO place)
if length > bound then
  return {0, 0, 0, {}, length}
end

local head = head_pos(nil)
local listed = redis.call('LRANGE', rq_list, 0, -1)
local index = {}  -- id -> its index on the list
for i, id in ipairs(listed) do
  if not index[id] then index[id] = i - 1 end
end

-- The listed ids' members entries, a slice per HMGET; the positions of the listed members are recorded again
-- where rq's LREM or LPUSH moved them.
local member, n_listed = {}, 0
for first = 1, #listed, RECONCILE_SLICE do
  local last = math.min(#listed, first + RECONCILE_SLICE - 1)
  local values = redis.call('HMGET', members, unpack(listed, first, last))
  for k, value in ipairs(values) do
    local i = first + k - 1
    local id = listed[i]
    if value and index[id] == i - 1 then
      member[id], n_listed = true, n_listed + 1
      local field, _, pos = parse_member(value)
      if pos ~= head + i - 1 then redis.call('HSET', members, id, (head + i - 1) .. '|' .. field) end
    end
  end
end

-- Stale members: only when there are more members than listed ones is the members hash read whole (their
-- FIFO places are fields "<tenant>:<seq>"; rq 3.0 job ids hold no ':').
local gone = {}
local function drop_unlisted(pairs_)
  for i = 1, #pairs_, 2 do
    local id = pairs_[i]
    if index[id] == nil and not string.find(id, ':', 1, true) then
      fifo_leave(id, pairs_[i + 1])
      gone[#gone + 1] = id
    end
  end
end
local exact = 1
if fields > 2 * n_listed and fields <= 2 * bound then
  drop_unlisted(redis.call('HGETALL', members))
  redis.call('HDEL', state, 'reconcile_cursor')  -- a paging begun while there were more is done
elseif fields > 2 * n_listed then  -- more than the bound (a big queue emptied, then refilled): a page per read
  local page = redis.call('HSCAN', members, redis.call('HGET', state, 'reconcile_cursor') or '0', 'COUNT', 2 * bound)
  drop_unlisted(page[2])
  if page[1] ~= '0' and redis.call('HLEN', members) > 2 * n_listed then
    redis.call('HSET', state, 'reconcile_cursor', page[1])
    exact = 0
  else  -- all paged through, or none left to drop
    redis.call('HDEL', state, 'reconcile_cursor')
    if redis.call('HLEN', members) > 2 * n_listed then exact = 0 end
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
    local seq, record = fifo_place(tenant, false, nil, weight, nil)
    fifo_enter(id, tenant, seq, head + index[id])
    keep_costs(id, ARGV[i + 4], ARGV[i + 3])
    if not (any_parked and redis.call('ZSCORE', parked, tenant)) then
      activate(tenant, record)
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
return {exact, #gone, adopted, plain, length}
