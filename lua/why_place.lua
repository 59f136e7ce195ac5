-- why_place.lua: read-only: where one waiting job stands in its queue, for `fair-router why`
-- (fair_router/observe/whyplace.py). Never writes. Bounded work whatever the backlog: at most `bound` FIFO
-- places checked one by one, `bound` tenants read, `scan` list entries compared (plain queue).
-- include: fair_keys, time, fifo
-- KEYS     the fair queue's keys, FairQueueKeys.all_for_scripts() (rq's list first; on a plain queue the
--          fair keys are empty and only the list is read).
-- ARGV[1]  job id; ARGV[2] bound; ARGV[3] scan; ARGV[4] now_ms ('' = server TIME).
-- Returns  {'plain', now_ms, list length, index on the list or -1 (not within `scan`)} for a job that is no
--          fair member; else {'fair', now_ms, list length, tenant, fifo places ahead, 1 if that count is exact,
--          weight, waiting, 'active'|'parked'|'idle', pass, parked until (ms or ''), vtime, limit (''),
--          claimed, paced until (''), tenants served before it, jobs ahead of it in serving order, why that
--          count is approximate ('' = exact, else some of fifo_bound, not_active, tenant_bound), active
--          tenants, tied jobs (other tenants' jobs due at this job's pass: each may go before or after it)}.
--          Numbers as strings (a Lua number reply would be cut to an integer).
bind_keys()
local job_id, bound, scan = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local now_ms = clock_ms(ARGV[4])
local listed = redis.call('LLEN', rq_list)
local value = redis.call('HGET', members, job_id)
if not value then
  local index = redis.call('LPOS', rq_list, job_id, 'MAXLEN', scan)
  return {'plain', tostring(now_ms), tostring(listed), tostring(index or -1)}
end

local field, tenant = parse_member(value)
local seq = tonumber(string.match(field, ':([^:]*)$'))
local h, _, weight, waiting = parse_tenant(redis.call('HGET', state, tenant_field(tenant)))
h = h or seq
-- Places ahead in the tenant's FIFO: counted one by one within `bound`, else the span (holes of jobs that
-- left other than by a pop count too: an upper bound).
local ahead, counted = seq - h, 1
if ahead > bound then
  counted = 0
elseif ahead > 0 then
  local fields = {}
  for s = h, seq - 1 do fields[#fields + 1] = tenant .. ':' .. s end
  ahead = 0
  for _, id in ipairs(redis.call('HMGET', members, unpack(fields))) do
    if id then ahead = ahead + 1 end
  end
end

local approx = {}  -- why the count is approximate ('' = it is exact)
if counted == 0 then approx[#approx + 1] = 'fifo_bound' end
local vtime = tonumber(redis.call('HGET', state, 'vtime') or '0')
local where, pass = 'active', tonumber(redis.call('ZSCORE', active, tenant) or '')
local parked_until = redis.call('ZSCORE', parked, tenant) or ''
if not pass then
  where = parked_until ~= '' and 'parked' or 'idle'
  pass = math.max(vtime, tonumber(redis.call('ZSCORE', kept, tenant) or '') or vtime)
  approx[#approx + 1] = 'not_active'  -- its pass when it returns is a guess
end
local known = redis.call('HMGET', limits, tenant, tenant .. '|r')
local held = redis.call('HGET', claimed, tenant) or '0'

-- Serving order by stride: a pop serves the least pass (ties: the smaller name); each job served adds
-- 1 / weight to its tenant's pass. This job is served at its tenant's pass + ahead / weight; every other
-- active tenant is served before it while its own pass is lower (equal: by name).
local w = tonumber(weight) or 1
local target = pass + ahead / w
local eps = 1e-9
local before, jobs = 0, ahead
local reach = redis.call('ZRANGEBYSCORE', active, '-inf', target + eps, 'WITHSCORES', 'LIMIT', 0, bound + 1)
if #reach > 2 * bound then approx[#approx + 1] = 'tenant_bound' end
local tied = 0
for i = 1, math.min(#reach, 2 * bound), 2 do
  local other = reach[i]
  if other ~= tenant then
    local _, _, their_weight, their_waiting = parse_tenant(redis.call('HGET', state, tenant_field(other)))
    local x = (target - tonumber(reach[i + 1])) * (tonumber(their_weight) or 1)
    local n = math.ceil(x - eps)
    if math.abs(x - math.floor(x + 0.5)) < eps then  -- a tie: pops prefer the tenant holding the list's head,
      n = math.floor(x + 0.5) + ((other < tenant) and 1 or 0)  -- counted here as ZRANGE's order (by name)
      if math.floor(x + 0.5) < (their_waiting or 0) then tied = tied + 1 end  -- its tied job exists
    end
    n = math.min(math.max(n, 0), their_waiting or 0)
    if n > 0 then
      before = before + 1
      jobs = jobs + n
    end
  end
end
return {'fair', tostring(now_ms), tostring(listed), tenant, tostring(ahead), tostring(counted), tostring(weight or 1),
  tostring(waiting or 0), where, tostring(pass), tostring(parked_until), tostring(vtime), tostring(known[1] or ''),
  tostring(held), tostring(known[2] or ''), tostring(before), tostring(jobs), table.concat(approx, ','),
  tostring(redis.call('ZCARD', active)), tostring(tied)}
