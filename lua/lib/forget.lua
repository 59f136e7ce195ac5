-- lib/forget.lua: a fair queue's state stays bounded by the tenants active, not by every tenant ever seen.
-- `limits` holds a tenant's concurrency limit and its pace (lib/claims.lua) as workers reported them: needed
-- while the tenant has jobs waiting here, claims running or a park, and then dropped, by the script that
-- touched the tenant as it went idle (a pop that took its last job, a release, a park's end, a start report,
-- a settle). A tenant that comes back has its limit and pace reported again by its first release, refusal or
-- start (until then a pop may hand out a job its start refuses: one park, as before its first report).
-- include: fair_keys, stride

-- Whether `tenant` has nothing here: no job waiting, no claim (a job of its handed out and not released),
-- no park. The second result: its claim count is there at 0 (lib/claims.lua unclaim leaves it).
local function forgotten(tenant)
  if has_waiting(tenant) then return false end
  local held = redis.call('HGET', claimed, tenant)
  if held and tonumber(held) > 0 then return false end
  return not redis.call('ZSCORE', parked, tenant), held ~= false
end

-- `tenant` may have gone idle: when it has nothing here, its limit, pace and claim count (0) go.
local function forget(tenant)
  local gone, counted = forgotten(tenant)
  if not gone then return end
  redis.call('HDEL', limits, tenant, tenant .. '|r')
  if counted then redis.call('HDEL', claimed, tenant) end
end
