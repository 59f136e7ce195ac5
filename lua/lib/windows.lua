-- lib/windows.lua: route.lua's throttle rules, read from ARGV where they stand (no table built per call: a
-- call records one enqueue at a time and most read only the rules' thresholds), and an enqueue recorded in
-- its tenant's sliding window, which answers the last rule the window now matches.
-- ARGV[3..]: cap, n_rules, base queue, then per rule r: per_ms, threshold, queue (ARGV[3 + 3r .. 5 + 3r]).

-- The queue family of rule `r` (0: the base queue).
local function rule_target(r)
  return ARGV[5 + 3 * r]
end

-- Record the enqueue `member` (a job id digest) at `now_ms` in window `key`. Returns the 1-based index of the
-- LAST of the `n_rules` rules whose window holds more than its threshold (this enqueue included), 0 when none.
local function record_and_match(key, member, now_ms, n_rules)
  -- NX: a job id already recorded keeps its first time and counts once.
  redis.call('ZADD', key, 'NX', now_ms, member)
  local size = redis.call('ZCARD', key)
  local cap = tonumber(ARGV[3])
  if size > cap then
    -- Bounded memory: the newest `cap` (= max threshold + 1) entries decide every rule exactly;
    -- trimming on every add keeps small windows in Redis' compact listpack encoding.
    redis.call('ZREMRANGEBYRANK', key, 0, size - cap - 1)
    size = cap
  end
  for r = n_rules, 1, -1 do  -- the last matching rule wins: look from the end
    -- A window can only exceed a threshold the whole set exceeds (ZCARD is O(1), ZCOUNT is not).
    -- The count includes this enqueue: the test of Rule.matches (fair_router/core/rules.py), which adds it.
    -- A window counts enqueues with time in (now - per, now]; times are whole ms (clock_ms), so the lower
    -- bound is now - per + 1 inclusive: a number, which redis.call formats faster than Lua builds '(' .. n.
    local threshold = tonumber(ARGV[4 + 3 * r])
    if size > threshold
        and redis.call('ZCOUNT', key, now_ms - tonumber(ARGV[3 + 3 * r]) + 1, now_ms) > threshold then
      return r
    end
  end
  return 0
end
