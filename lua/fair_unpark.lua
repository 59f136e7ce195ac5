-- fair_unpark.lua: one of a tenant's concurrency slots was released (or a pause ended). Its claim here
-- ends (lib/claims.lua) and, if it has jobs or had that claim here, its limit is learnt; below that limit
-- the tenant is eligible again in this queue and one worker blocked while only parked tenants' jobs waited
-- is woken.
-- include: fair_keys, time, stride, claims, forget
-- KEYS     keys.FairQueueKeys, in field order: bound to the locals of lib/fair_keys.lua.
-- ARGV     tenant (encoded), job_id (the job that released the slot, '' = none), limit (the tenant's
--          concurrency limit, 0 = none, '' = not known to the caller), now_ms ('' = server TIME)
-- Returns  1 if the tenant has jobs waiting here and may be served, else 0.
bind_keys()
local tenant, job_id, limit = ARGV[1], ARGV[2] or '', ARGV[3] or ''

local waiting = has_waiting(tenant)
local here, known = waiting, nil
if job_id ~= '' then
  here = unclaim(tenant, job_id) or here
  sweep_claims(clock_ms(ARGV[4] or ''))
end
if here then known = learn_limit(tenant, limit) end
if not under_limit(tenant, known) or not end_park(tenant) then
  -- nothing waiting, claimed or parked here: its limit goes (lib/forget.lua); with jobs waiting it stays
  if not waiting then forget(tenant) end
  return 0
end
wake_one()
return 1
