-- fair_unpark.lua: one of a tenant's concurrency slots was released. Make the tenant eligible again
-- in this queue and wake one worker blocked while only parked tenants' jobs waited.
-- KEYS     the fair queue's keys, named in fair_common.lua (prepended at load).
-- ARGV     tenant (encoded)
-- Returns  1 if the tenant has jobs waiting here, else 0.
local tenant = ARGV[1]

if redis.call('ZREM', parked, tenant) == 0 or redis.call('HEXISTS', backlog, tenant) == 0 then return 0 end
activate(tenant)
redis.call('RPUSH', wake, '1')
redis.call('LTRIM', wake, -WAKE_CAP, -1)
return 1
