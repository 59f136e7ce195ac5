-- why_place.lua: read-only: where one waiting job stands in its queue, for `fair-router why`
-- (fair_router/observe/whyplace.py). Never writes. Bounded work whatever the backlog: at most `bound` FIFO
-- places checked one by one, `bound` tenants' records read (an org's tenants each count), `scan` list entries
-- compared (plain queue).
-- include: fair_keys, time, fifo, orgs, why_count
-- KEYS     the fair queue's keys, FairQueueKeys.all_for_scripts() (rq's list first; on a plain queue the
--          fair keys are empty and only the list is read).
-- ARGV[1]  job id; ARGV[2] bound; ARGV[3] scan; ARGV[4] now_ms ('' = server TIME).
-- Returns  {'plain', now_ms, list length, index on the list or -1 (not within `scan`)} for a job that is no
--          fair member; else {'fair', now_ms, list length, tenant, fifo places ahead, 1 if that count is exact,
--          weight, waiting, 'active'|'parked'|'idle', pass (of its top-level entry: its org's for a tenant of
--          an org), parked until (ms or ''), vtime, limit (''), claimed, paced until (''), tenants (and orgs)
--          served before it, jobs ahead of it in serving order, why that count is approximate ('' = exact, else
--          some of fifo_bound, not_active, tenant_bound), active top-level entries, tied jobs (other entries'
--          jobs due at this job's pass: each may go before or after it)}.
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
local h, _, weight, waiting, org = parse_tenant(redis.call('HGET', state, tenant_field(tenant)))
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
local known = redis.call('HMGET', limits, tenant, tenant .. '|r')
local held = redis.call('HGET', claimed, tenant) or '0'
local parked_until = redis.call('ZSCORE', parked, tenant) or ''

-- How many jobs go before it: lib/why_count.lua (the stride schedule, both levels).
local c = {bound = bound, reads = 0, over = false}
-- Inside its org: the org's jobs served before this one (its tenant's own ahead and its org mates' turns); ties
-- there (`inner` of them, `first` counted before it) move its org's turn among the others: both ends counted.
local w = tonumber(weight) or 1
local entry, jobs, before, inner, first = tenant, ahead, 0, 0, 0
if org then
  entry = ORG .. org.name
  if org.on then
    local target_in = tonumber(org.pass) + ahead * step_of(w)  -- passes in an org: 6 decimals, each step too
    for _, m in ipairs(org_members(c, org.name)) do
      if m[1] > target_in + 1e-7 then break end
      if m[2] ~= tenant then
        local _, _, their_weight, their_waiting = parse_tenant(m[3])
        local n, tie = served_before((target_in - m[1]) / step_of(tonumber(their_weight) or 1), their_waiting or 0,
          m[2] < tenant, 1e-6)
        if n > 0 then before, jobs = before + 1, jobs + n end
        if tie then inner, first = inner + 1, first + (m[2] < tenant and 1 or 0) end
      end
    end
  end
  w = tonumber(org.weight) or 1
end
local where, pass = 'active', tonumber(redis.call('ZSCORE', active, entry) or '')
if not pass or (org and (not org.on or parked_until ~= '')) then
  where = parked_until ~= '' and 'parked' or 'idle'
  pass = pass or math.max(vtime, tonumber(redis.call('ZSCORE', kept, entry) or '') or vtime)
  approx[#approx + 1] = 'not_active'  -- its pass when it returns is a guess
end

-- Among the top-level entries: each other one whose pass is below the pass this job is served at.
local entries = top_entries(c, pass + (jobs + inner - first) / w, entry)
local n, others, tied = top_count(entries, pass + jobs / w, entry)
if inner > 0 then  -- the count if no inner tie went before it, and if all did
  local low, _, low_tied = top_count(entries, pass + (jobs - first) / w, entry)
  local high, _, high_tied = top_count(entries, pass + (jobs + inner - first) / w, entry)
  tied = math.max(n + first - low + low_tied, high + inner - first - n + high_tied)
end
before, jobs = before + others, jobs + n
if c.over then approx[#approx + 1] = 'tenant_bound' end
return {'fair', tostring(now_ms), tostring(listed), tenant, tostring(ahead), tostring(counted), tostring(weight or 1),
  tostring(waiting or 0), where, tostring(pass), tostring(parked_until), tostring(vtime), tostring(known[1] or ''),
  tostring(held), tostring(known[2] or ''), tostring(before), tostring(jobs), table.concat(approx, ','),
  tostring(redis.call('ZCARD', active)), tostring(tied)}
