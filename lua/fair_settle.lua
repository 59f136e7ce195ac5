-- fair_settle.lua: charge="runtime": a popped job ended (or was found abandoned). Its pop charged the
-- tenant's pass an estimate / weight (a tenant of an org: its org's pass estimate / org weight, and its pass in
-- its org estimate / weight); replace that with the real cost: the measured run time, or the
-- declared cost when the queue trusts declared costs. Also folds the measured time into the recent means
-- the next pops estimate from. Sent in the worker's own after-job pipeline (no round trip of its own).
-- include: fair_keys, time, stride, charge
-- KEYS     keys.FairQueueKeys, in field order: bound to the locals of lib/fair_keys.lua.
-- ARGV     now_ms ('' = server TIME), job_id, measured (seconds the job ran; '' = its worker died: charge
--          the time from its pop until now, and learn nothing from it), trust ('1' = a declared cost is
--          the charge).
-- Returns  1 when the job had a charge to settle, else 0 (charge="jobs", a plain entry, settled already).
bind_keys()
local now_ms = clock_ms(ARGV[1])
local job_id, measured, trust = ARGV[2], tonumber(ARGV[3]), ARGV[4] == '1'
local ALPHA = 0.2  -- weight of the newest run time in the recent means (about the last 5-10 runs count)
-- Bound on the recent means kept (one per tenant and function, plus one per function and '*|*'): past it,
-- each settle evicts two random per-tenant means (as Redis's allkeys-random does). An evicted tenant's next
-- estimate is its function's mean until it is learnt again; the memory stays under about 1 MB.
local MAX_MEANS = 10000

local value = redis.call('HGET', charged, job_id)
if not value then return 0 end
redis.call('HDEL', charged, job_id)
local tenant, weight, estimate, popped, declared, func, org = parse_charged(value)

local cost = measured or math.max(0, (now_ms - popped) / 1000)
if trust and tonumber(declared) then cost = tonumber(declared) end
-- The recent mean `known` (as read, false: none) moved toward the measured time.
local function moved(known)
  local mean = tonumber(known or '')
  if mean then return mean + ALPHA * (measured - mean) end
  return measured
end

if measured then
  -- The tenant's, its function's and the overall means: one read, one write (was three of each).
  local own, of_func = tenant .. '|' .. func, '*|' .. func
  local known = redis.call('HMGET', runtimes, own, of_func, '*|*')
  -- A tenant with nothing waiting here needs no estimate until its next push (which falls back to its
  -- function's mean): its own mean goes (is not written), so the means stay bounded by the tenants active
  -- (lib/forget.lua).
  if has_waiting(tenant) then
    redis.call('HSET', runtimes, own, moved(known[1]), of_func, moved(known[2]), '*|*', moved(known[3]))
  else
    redis.call('HSET', runtimes, of_func, moved(known[2]), '*|*', moved(known[3]))
    if known[1] then redis.call('HDEL', runtimes, own) end
  end
  if redis.call('HLEN', runtimes) > MAX_MEANS then
    for _, field in ipairs(redis.call('HRANDFIELD', runtimes, 2)) do
      if string.sub(field, 1, 2) ~= '*|' then redis.call('HDEL', runtimes, field) end
    end
  end
end

-- An entry of `active` (a tenant without org, or an org's) owes `delta` more: its pass moves, active or kept.
local function settle_entry(entry, delta)
  local pass = redis.call('ZSCORE', active, entry)
  if pass then
    redis.call('ZADD', active, tonumber(pass) + delta, entry)
    return
  end
  local last = redis.call('ZSCORE', kept, entry)
  if last then
    redis.call('ZADD', kept, tonumber(last) + delta, entry)
  elseif delta > 0 then
    -- Idle with a pass at or below the virtual time (no longer kept): it still owes the difference, counted
    -- from the virtual time (an undercharge, by at most what its pass was below it, would let it gain). An
    -- overcharge of an idle entry is dropped: idle entries bank nothing.
    local vtime = tonumber(redis.call('HGET', state, 'vtime') or '0')
    stride_keep(entry, vtime + delta)  -- lib/kept.lua: expires with the other kept passes while none is active
  end
end

-- A tenant of org `name` owes `delta` more in its org: its pass there (its record's, and its member of `orgs`
-- while it is in the set) moves. A tenant gone idle keeps no pass in its org (it returns at the org's min).
local function settle_in_org(name, delta)
  local h, t, stored, n, org = parse_tenant(redis.call('HGET', state, tenant_field(tenant)))
  if not (org and org.name == name and tonumber(org.pass)) then return end
  local pass = math.max(0, tonumber(org.pass) + delta)
  if org.on then
    org_leave(org, tenant)
    org_enter(org, tenant, pass)
  else
    org.pass = string.format(PASS_FORMAT, pass)
  end
  redis.call('HSET', state, tenant_field(tenant), tenant_record(h, t, stored, n, org))
end

local excess = cost - estimate
if excess == 0 then return 1 end
if not org then
  settle_entry(tenant, excess / weight)
  return 1
end
-- A tenant of an org: its org's pass moves by the difference / the org's weight, and its pass inside its org
-- by the difference / its weight when the pop charged that one too.
settle_entry(ORG .. org.name, excess / org.weight)
if org.inner then settle_in_org(org.name, excess / weight) end
return 1
