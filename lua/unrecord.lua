-- unrecord.lua: take back the window entries of routed jobs whose enqueue failed after route.lua recorded
-- them (fair_router.routing.router), so no phantom enqueue counts toward a tenant's throttle rules.
-- include: waiting
-- KEYS[k]  window sorted sets (see route.lua); then the job key's waiting counts and jobs (lib/waiting.lua: a
--          job route.lua counted waiting stops counting); the LAST key is the job key's routed counters.
--          All KEYS share one hash tag (the job key), as in route.lua.
-- ARGV     one triple (key_index, job id digest, target queue) per job to take back.
-- Returns  the number of entries removed.
-- Runs under maxmemory: every ZREM is sent before any counter is touched, and Redis refuses a write that
-- may grow memory only as a script's first write, so the HINCRBYs after a removal still run.
local routed = KEYS[#KEYS]
local removed = {}
for i = 1, #ARGV, 3 do
  if redis.call('ZREM', KEYS[tonumber(ARGV[i])], ARGV[i + 1]) == 1 then
    removed[#removed + 1] = ARGV[i + 2]
  end
end
for i = 1, #ARGV, 3 do unwait(KEYS[#KEYS - 2], KEYS[#KEYS - 1], ARGV[i + 1]) end
-- An entry that was never recorded (or already trimmed or expired) leaves the counters alone.
for _, queue in ipairs(removed) do
  if tonumber(redis.call('HGET', routed, queue) or '0') > 0 then
    redis.call('HINCRBY', routed, queue, -1)
  end
end
return #removed
