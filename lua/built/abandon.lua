-- abandon.lua: move abandoned executions out of rq's StartedJobRegistry into our staging set, but only
-- those that no heartbeat reached since the caller read them (compare-and-move on the entry's score).
-- KEYS[1]  rq's StartedJobRegistry of one queue (rq:wip:<name>): member <job id>:<execution id>,
--          score = the execution's last heartbeat + its TTL, rewritten by every heartbeat (ZADD XX).
-- KEYS[2]  our staging set for that queue (score 0: due at once for rq's own cleanup).
-- KEYS[3]  the queue's count of abandoned jobs (fair_router.observe reads it), same tag: one write.
-- ARGV     pairs: member, the score the caller read with it.
-- Returns  the members moved. A member whose score changed (its worker heartbeated after all) or that
--          is gone (the job ended) stays where it is.
local started, staging = KEYS[1], KEYS[2]

local moved = {}
for i = 1, #ARGV, 2 do
  local member, expected = ARGV[i], tonumber(ARGV[i + 1])
  local score = redis.call('ZSCORE', started, member)
  if score and tonumber(score) == expected then
    redis.call('ZREM', started, member)
    redis.call('ZADD', staging, 0, member)
    moved[#moved + 1] = member
  end
end
if #moved > 0 then redis.call('INCRBY', KEYS[3], #moved) end
return moved
