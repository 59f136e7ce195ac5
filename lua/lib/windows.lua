-- lib/windows.lua: route.lua's throttle rules: the rules read from ARGV, and an enqueue recorded in its
-- tenant's sliding window, which answers the last rule the window now matches.

-- The rules from ARGV[3..] (cap, n_rules, base queue, then per rule: per_ms, threshold, queue). Returns
-- {cap, n, lower[r] (ZCOUNT's exclusive lower bound at now_ms), threshold[r], target[r] (target[0]: base)}.
local function read_rules(now_ms)
  local rules = {cap = tonumber(ARGV[3]), n = tonumber(ARGV[4]), lower = {}, threshold = {}, target = {[0] = ARGV[5]}}
  for r = 1, rules.n do  -- a window counts enqueues with time in (now - per, now]
    rules.lower[r] = '(' .. (now_ms - tonumber(ARGV[3 + 3 * r]))
    rules.threshold[r] = tonumber(ARGV[4 + 3 * r])
    rules.target[r] = ARGV[5 + 3 * r]
  end
  return rules
end

-- Record the enqueue `member` (a job id digest) at `now_ms` in window `key`. Returns the 1-based index of the
-- LAST rule whose window holds more than its threshold (this enqueue included), 0 when none matches.
local function record_and_match(key, member, now_ms, rules)
  -- NX: a job id already recorded keeps its first time and counts once.
  redis.call('ZADD', key, 'NX', now_ms, member)
  local size = redis.call('ZCARD', key)
  if size > rules.cap then
    -- Bounded memory: the newest `cap` (= max threshold + 1) entries decide every rule exactly;
    -- trimming on every add keeps small windows in Redis' compact listpack encoding.
    redis.call('ZREMRANGEBYRANK', key, 0, size - rules.cap - 1)
    size = rules.cap
  end
  for r = rules.n, 1, -1 do  -- the last matching rule wins: look from the end
    -- A window can only exceed a threshold the whole set exceeds (ZCARD is O(1), ZCOUNT is not).
    -- The count includes this enqueue: the test of Rule.matches (fair_router/core/rules.py), which adds it.
    if size > rules.threshold[r] and redis.call('ZCOUNT', key, rules.lower[r], now_ms) > rules.threshold[r] then
      return r
    end
  end
  return 0
end
