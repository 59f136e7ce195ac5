-- lib/charge.lua: charge="runtime" (FairQueue docstring): `costs` holds what a waiting member's pop needs
-- to estimate its run time (its function, a declared cost), `charged` what a popped job was charged until
-- fair_settle.lua replaces it with the real cost, `runtimes` the recent mean run times the estimates come
-- from.
-- include: fair_keys

-- A waiting member's `costs` entry, "<declared seconds or ''>|<function>"; nothing when both are ''.
local function keep_costs(job_id, declared, func)
  if func ~= '' or declared ~= '' then redis.call('HSET', costs, job_id, declared .. '|' .. func) end
end

-- A popped job's `charged` entry, "<tenant>|<weight>|<estimate>|<pop ms>|<declared>|<function>" (the pop
-- charged the tenant's pass estimate / weight; declared '' when the job declared no cost).
-- Returns tenant, weight, estimate, pop ms, declared (string), function.
local function parse_charged(value)
  local tenant, weight, estimate, popped, declared, func =
    string.match(value, '^([^|]*)|([^|]*)|([^|]*)|([^|]*)|([^|]*)|(.*)$')
  return tenant, tonumber(weight), tonumber(estimate), tonumber(popped), declared, func
end
