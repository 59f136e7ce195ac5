-- lib/why_count.lua: the counting pieces of why_place.lua (read-only). Serving order by stride, two levels: a pop
-- serves the least-pass top-level entry (a tenant without org, or an org standing for its least-pass tenant;
-- ties: the smaller name); each job served adds 1 / weight to its entry's pass, and to its tenant's pass in its
-- org 1 / the tenant's weight. A job `x` passes' worth of steps of another (x = pass gap x its weight) has that
-- one served ceil(x) times before it (a tie: by name, counted as tied), at most its waiting jobs.
-- `c`: the count's budget, {bound = records that may be read, reads = 0, over = false (some left out)}.
-- include: fair_keys, records, orgs

-- Jobs of another (`their_waiting` jobs) served before this one, `x` its steps below this job's pass; and whether
-- one of its jobs ties with this one (due at the same pass: before or after it, as the pops find the list).
local function served_before(x, their_waiting, earlier, tolerance)
  local n, near, tie = math.ceil(x - tolerance), math.floor(x + 0.5), false
  if math.abs(x - near) < tolerance then
    n, tie = near + (earlier and 1 or 0), near < their_waiting
  end
  return math.min(math.max(n, 0), their_waiting), tie
end

-- One job's step of a tenant's pass in its org, as the pops write it: 1 / its weight with 6 decimals (PASS_FORMAT
-- of lib/orgs.lua, each pass written so: a pass plus the step loses the same remainder each time).
local function step_of(weight)
  return tonumber(string.format('%.6f', 1 / weight))
end

-- An org's active tenants (least pass first) as {pass, tenant, record} (records read within the budget; `c.over`
-- when some are left out).
local function org_members(c, name)
  local room = math.max(c.bound - c.reads, 0)
  local got = redis.call('ZRANGEBYLEX', orgs, '[' .. name .. '\0', '(' .. name .. '\1', 'LIMIT', 0, room + 1)
  if #got > room then c.over = true end
  local out = {}
  local at = #name + 2  -- the member's pass key (lib/orgs.lua org_first), then its tenant
  for i = 1, math.min(#got, room) do
    local other, key = string.sub(got[i], at + KEY_BYTES), string.sub(got[i], at, at + KEY_BYTES - 1)
    out[#out + 1] = {key_pass(key), other, redis.call('HGET', state, tenant_field(other))}
  end
  c.reads = c.reads + #out
  return out
end

-- The top-level entries other than `entry` whose pass is at most `target`: {name, pass, weight, waiting} (an org: its
-- active tenants' jobs, at its weight).
local function top_entries(c, target, entry)
  local reach = redis.call('ZRANGEBYSCORE', active, '-inf', target + 1e-9, 'WITHSCORES', 'LIMIT', 0, c.bound + 1)
  if #reach > 2 * c.bound then c.over = true end
  local out = {}
  for i = 1, math.min(#reach, 2 * c.bound), 2 do
    local other, weight, waiting = reach[i], 1, 0
    if other ~= entry and c.reads >= c.bound then
      c.over = true
      break
    elseif other ~= entry and is_org(other) then
      for _, m in ipairs(org_members(c, string.sub(other, 2))) do
        local _, _, _, n, org = parse_tenant(m[3])
        waiting = waiting + (n or 0)
        if org then weight = tonumber(org.weight) or 1 end
      end
    elseif other ~= entry then
      c.reads = c.reads + 1
      local _, _, stored, n = parse_tenant(redis.call('HGET', state, tenant_field(other)))
      weight, waiting = tonumber(stored) or 1, n or 0
    end
    if other ~= entry then out[#out + 1] = {other, tonumber(reach[i + 1]), weight, waiting} end
  end
  return out
end

-- Of `entries` (top_entries), the jobs served before a job of `entry` due at pass `target`, the entries that
-- have some, and the tied jobs.
local function top_count(entries, target, entry)
  local jobs, before, tied = 0, 0, 0
  for _, e in ipairs(entries) do
    local n, tie = served_before((target - e[2]) * e[3], e[4], e[1] < entry, 1e-9)
    if n > 0 then before, jobs = before + 1, jobs + n end
    if tie then tied = tied + 1 end
  end
  return jobs, before, tied
end
