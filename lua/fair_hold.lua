-- fair_hold.lua: park a tenant that may not start jobs for now before any pop hands one of its jobs out:
-- paused (until `until_ms`, a later bound it has stays), or (paced) a start of a tenant with a rate of its
-- own was admitted: parked exactly until its rate allows its next start, or unparked when that is now. A
-- report of a start its rate holds also marks it paced (lib/claims.lua): pops park it after each take until
-- the next report; one of a start its rate no longer holds ends the pace (sent only then: lib/start_rate.lua).
-- include: fair_keys, time, stride, claims, forget
-- KEYS     keys.FairQueueKeys, in field order: bound to the locals of lib/fair_keys.lua.
-- ARGV     tenant (encoded), until_ms, paced ('1' = a paced tenant's start report, '0' = a pause), now_ms
--          ('' = server TIME)
-- Returns  1 if the tenant has jobs waiting here, else 0 (a pause then changes nothing).
bind_keys()
local tenant, until_ms, paced = ARGV[1], tonumber(ARGV[2]), ARGV[3] == '1'
local now_ms = clock_ms(ARGV[4])

if paced then report_pace(tenant, now_ms, until_ms) end
if not has_waiting(tenant) then
  forget(tenant)  -- nothing waiting, claimed or parked here: its pace goes (lib/forget.lua)
  return 0
end
if not paced then
  stride_hold(tenant, until_ms, 0)
elseif not under_limit(tenant) then  -- parked at its concurrency limit too: that park ends at a release
  park_until(tenant, until_ms, true)
elseif until_ms > now_ms then
  park_paced(tenant, until_ms)
elseif end_park(tenant) then
  wake_one()
end
return 1
