-- fair_hold.lua: park a tenant that may not start jobs for now (paused, or its rate's next start lies
-- ahead) before any pop hands one of its jobs out: pops skip it until `until_ms` or an unpark.
-- include: fair_keys, stride
-- KEYS     keys.FairQueueKeys, in field order: bound to locals named as the fields by the fair_keys include.
-- ARGV     tenant (encoded), until_ms (a later bound the tenant has stays)
-- Returns  1 if the tenant has jobs waiting here (it is parked), else 0 (nothing to hold: nothing changes).
local tenant, until_ms = ARGV[1], tonumber(ARGV[2])

if redis.call('HEXISTS', backlog, tenant) == 0 then return 0 end
hold(tenant, until_ms, 0)
return 1
