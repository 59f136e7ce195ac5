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
-- charged the tenant's pass estimate / weight; declared '' when the job declared no cost). A tenant of an org
-- (`org`: its record's) has "!<org>|<org weight>|<1: its pass in its org was charged too, else 0>|" in front:
-- the pop charges that pass unless the tenant is alone in its org or leaves it (`waiting`: its count before).
local function charge_entry(tenant, weight, cost, now_ms, declared, func, org, waiting)
  local value = table.concat({tenant, weight, cost, now_ms, declared, func}, '|')
  if not org then return value end
  local inner = not org.alone and waiting > 1
  return '!' .. org.name .. '|' .. org.weight .. '|' .. (inner and '1' or '0') .. '|' .. value
end

-- Returns tenant, weight, estimate, pop ms, declared (string), function and the org ({name, weight, inner}),
-- nil for a tenant without org.
local function parse_charged(value)
  local org = nil
  if string.byte(value, 1) == 33 then  -- '!'
    local name, org_weight, inner, rest = string.match(value, '^!([^|]*)|([^|]*)|([^|]*)|(.*)$')
    org, value = {name = name, weight = tonumber(org_weight) or 1, inner = inner == '1'}, rest
  end
  local tenant, weight, estimate, popped, declared, func =
    string.match(value, '^([^|]*)|([^|]*)|([^|]*)|([^|]*)|([^|]*)|(.*)$')
  return tenant, tonumber(weight), tonumber(estimate), tonumber(popped), declared, func, org
end
