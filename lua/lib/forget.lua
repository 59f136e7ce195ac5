-- lib/forget.lua: a fair queue's state stays bounded by the tenants active, not by every tenant ever seen.
-- `limits` holds a tenant's concurrency limit and its pace (lib/claims.lua) as workers reported them: needed
-- while the tenant has jobs waiting here, claims running or a park, and then dropped, by the script that
-- touched the tenant as it went idle (a pop that took its last job, a release, a park's end, a start report,
-- a settle). A tenant that comes back has its limit and pace reported again by its first release, refusal or
-- start (until then a pop may hand out a job its start refuses: one park, as before its first report).
-- include: fair_keys, stride

-- Whether `tenant` has nothing here: no job waiting, no claim (a job of its handed out and not released),
-- no park.
local function forgotten(tenant)
  return not has_waiting(tenant) and redis.call('HEXISTS', claimed, tenant) == 0
    and not redis.call('ZSCORE', parked, tenant)
end

-- `tenant` may have gone idle: when it has nothing here, its limit and pace go.
local function forget(tenant)
  if forgotten(tenant) then redis.call('HDEL', limits, tenant, tenant .. '|r') end
end
