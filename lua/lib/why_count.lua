-- lib/why_count.lua: the counting pieces of why_place.lua (read-only). Serving order by stride, two levels: a pop
-- serves the least-pass top-level entry (a tenant without org, or an org standing for its least-pass tenant;
-- ties: the smaller name); each job served adds 1 / weight to its entry's pass, and to its tenant's pass in its
-- org 1 / the tenant's weight. A job `x` passes' worth of steps of another (x = pass gap x its weight) has that
-- one served ceil(x) times before it (a tie: by name, counted in `c.tied`), at most its waiting jobs.
-- `c`: the count's budget and findings, {bound = records that may be read, reads = 0, tied = 0, over = false}.
-- include: fair_keys, records

local function served_before(c, x, their_waiting, earlier, tolerance)
  local n, near = math.ceil(x - tolerance), math.floor(x + 0.5)
  if math.abs(x - near) < tolerance then
    n = near + (earlier and 1 or 0)
    if near < their_waiting then c.tied = c.tied + 1 end  -- its tied job exists: before or after this one
  end
  return math.min(math.max(n, 0), their_waiting)
end

-- An org's active tenants (least pass first) as {pass, tenant, record} (records read within the budget; `c.over`
-- when some are left out).
local function org_members(c, name)
  local room = math.max(c.bound - c.reads, 0)
  local got = redis.call('ZRANGEBYLEX', orgs, '[' .. name .. '\0', '(' .. name .. '\1', 'LIMIT', 0, room + 1)
  if #got > room then c.over = true end
  local out = {}
  for i = 1, math.min(#got, room) do
    local pass, other = string.match(got[i], '^[^%z]*%z([^%z]*)%z(.*)$')
    out[#out + 1] = {tonumber(pass), other, redis.call('HGET', state, tenant_field(other))}
  end
  c.reads = c.reads + #out
  return out
end
