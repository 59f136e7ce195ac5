-- fair_unpark.lua: one of a tenant's concurrency slots was released (or a pause ended). Its claim here
-- ends (lib/claims.lua) and, if it has jobs or had that claim here, its limit is learnt; below that limit
-- the tenant is eligible again in this queue and one worker blocked while only parked tenants' jobs waited
-- is woken. Claims past their expiry are swept by about one release in SWEEP_EVERY (those whose job id's last
-- byte is a multiple of it) and by the pops once a park is due (fair_pop.lua).
-- include: fair_keys, time, stride, claims, forget
-- KEYS     keys.FairQueueKeys, in field order: bound to the locals of lib/fair_keys.lua.
-- ARGV     tenant (encoded), job_id (the job that released the slot, '' = none), limit (the tenant's
--          concurrency limit, 0 = none, '' = not known to the caller), now_ms ('' = server TIME), org (the
--          job's org, encoded; '' = none: then nothing of an org is touched), org_limit (as limit, the org's).
--          The org's claim ends likewise and its limit is learnt; below it, its entry's park ends (lib/claims.lua).
-- Returns  1 if the tenant has jobs waiting here and may be served, else 0.
local SWEEP_EVERY = 4
bind_keys()
local tenant, job_id, limit = ARGV[1], ARGV[2] or '', ARGV[3] or ''

-- A park's end activates `tenant` (lib/stride.lua activate): without an org, as lib/orgs.lua activate_entry
-- does, with the virtual time read with its record and one ZADD NX in place of its ZSCORE of `active`; the kept
-- passes are made to last (PERSIST) only when state.kept_ttl says they may expire (lib/kept.lua).
local function reenter(tenant, record, vtime, kept_ttl)
  if select(5, parse_tenant(record)) then return activate(tenant, record) end
  local start = tonumber(vtime or '0')
  local last = tonumber(redis.call('ZSCORE', kept, tenant) or '')
  if last and last > start then start = last end
  if redis.call('ZADD', active, 'NX', start, tenant) == 0 then return end  -- active already
  if last then redis.call('ZREM', kept, tenant) end
  kept_last(kept_ttl)  -- an entry is active again: the kept passes no longer expire (lib/kept.lua)
end

-- its record and the virtual time, read once: whether it has jobs waiting here, and what a park's end activates;
-- state.due: without it nothing is parked here (lib/stride.lua park_until sets it with every park), no ZREM
local read = redis.call('HMGET', state, tenant_field(tenant), 'vtime', 'kept_ttl', 'due')
local record = read[1]
local here, known, held = record ~= false, nil, nil
if job_id ~= '' then
  held = unclaim(tenant, job_id)  -- the claims it holds here now, false when this job held none
  here = held or here
  if string.byte(job_id, -1) % SWEEP_EVERY == 0 then
    sweep_claims(clock_ms(ARGV[4] or ''))
    held = nil  -- the sweep may have ended more of its claims: read them again
  end
end
if here then known = learn_limit(tenant, limit) end
local org = ARGV[5] or ''
if org ~= '' then  -- first: the tenant's reactivation below would leave a parked org's entry out
  local entry = ORG .. org
  local org_known = ((job_id ~= '' and unclaim(entry, job_id)) or here) and learn_limit(entry, ARGV[6] or '') or nil
  if under_limit(entry, org_known) and redis.call('ZREM', parked, entry) == 1 and org_first(org) then
    activate_entry(entry)
    wake_one()
  end
end

-- below its limit: the claims unclaim() left (not read again), else under_limit's read
local below
if held then
  local bound = known or tonumber(redis.call('HGET', limits, tenant) or '')
  below = not bound or bound == 0 or held < bound
else
  below = under_limit(tenant, known)
end
-- its park ends (lib/stride.lua end_park, with the record read above)
if below and read[4] and redis.call('ZREM', parked, tenant) == 1 and record then
  reenter(tenant, record, read[2], read[3])
  wake_one()
  return 1
end
-- nothing waiting, claimed or parked here: its limit goes (lib/forget.lua); with jobs waiting it stays
if not record then forget(tenant) end
return 0
