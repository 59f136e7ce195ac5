-- lib/estimate.lua: what a fair pop charges for a job before it has run (charge="runtime", lib/charge.lua).
-- include: fair_keys
local FIRST_ESTIMATE = 0.01  -- seconds, charged while nothing at all has been measured on this queue

-- charge="runtime": what serving `job_id` costs before it has run: its declared cost, else the recent
-- mean run time of its function for this tenant, else for any tenant, else of any job here. The pop
-- cannot read rq's job hash (another cluster slot), so the push recorded the function in `costs`.
-- Returns the estimate (seconds), the declared cost ('' if none) and the function.
local function estimate(job_id, tenant)
  local declared, func = '', ''
  local info = redis.call('HGET', costs, job_id)
  if info then declared, func = string.match(info, '^([^|]*)|(.*)$') end
  local cost = tonumber(declared)
  if not cost then
    local known = redis.call('HMGET', runtimes, tenant .. '|' .. func, '*|' .. func, '*|*')
    cost = tonumber(known[1]) or tonumber(known[2]) or tonumber(known[3]) or FIRST_ESTIMATE
  end
  return cost, declared, func
end
