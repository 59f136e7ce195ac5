-- fair_unpark.lua: one of a tenant's concurrency slots was released. Make the tenant eligible again
-- in this queue and wake one worker blocked while only parked tenants' jobs waited.
-- include: fair_keys, stride
-- KEYS     keys.FairQueueKeys, in field order: bound to locals named as the fields by the fair_keys include.
-- ARGV     tenant (encoded)
-- Returns  1 if the tenant has jobs waiting here, else 0.
local tenant = ARGV[1]

if not end_park(tenant) then return 0 end
wake_one()
return 1
