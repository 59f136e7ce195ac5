-- lib/kept.lua: the passes of entries gone idle or parked (`kept`), and their life while nothing is active.
-- include: fair_keys

-- While no tenant is active, the kept passes expire together this long after the last was kept: a pass kept
-- above the virtual time is a debt of about one step, which a queue that served no one for a minute forgets
-- (the returning tenant then starts at the virtual time), so tenants that came and went leave no state.
local KEPT_IDLE_MS = 60000

-- An entry's pass is kept for its return (idle or parked); while nothing is active the kept passes expire
-- after KEPT_IDLE_MS, and state.kept_ttl says so (kept_last). `others`: the caller knows another entry stays
-- active (no EXISTS to ask).
local function stride_keep(entry, pass, others)
  redis.call('ZADD', kept, pass, entry)
  if not others and redis.call('EXISTS', active) == 0 then
    redis.call('PEXPIRE', kept, KEPT_IDLE_MS)
    redis.call('HSET', state, 'kept_ttl', 1)
  end
end

-- An entry is active again: the kept passes no longer expire. `ttl`: state.kept_ttl as the caller read it with
-- the state's other fields; without it they do not expire (only stride_keep gives them a life): no PERSIST.
local function kept_last(ttl)
  if not ttl then return end
  redis.call('PERSIST', kept)
  redis.call('HDEL', state, 'kept_ttl')
end
