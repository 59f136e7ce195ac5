-- route.lua: record enqueues in per-tenant sliding windows and pick each job's throttle rule.
-- include: time
-- KEYS[k]  window sorted set of one (job key, tenant): member = job id digest, score = enqueue time (ms);
--          the LAST key is the job key's routed counters (hash target queue -> jobs routed there).
--          All KEYS share one hash tag (the job key).
-- ARGV     now_ms ('' = server TIME), ttl_ms (longest window), cap (newest entries kept),
--          n_rules, base queue, then n_rules triples (per_ms, threshold, queue) in rule order,
--          then one pair (key_index, job_id) per job, in enqueue order.
-- Returns  per job, the 1-based index of the LAST rule whose window holds more than `threshold`
--          enqueues (this one included), or 0 when none matches.
local now_ms = clock_ms(ARGV[1])
local ttl_ms = tonumber(ARGV[2])
local cap = tonumber(ARGV[3])
local n_rules = tonumber(ARGV[4])
local first_job = 6 + 3 * n_rules

-- A window counts enqueues with time in (now - per, now].
local lower, threshold, target = {}, {}, {}
target[0] = ARGV[5]
for r = 1, n_rules do
  lower[r] = '(' .. (now_ms - tonumber(ARGV[3 + 3 * r]))
  threshold[r] = tonumber(ARGV[4 + 3 * r])
  target[r] = ARGV[5 + 3 * r]
end

local chosen, routed = {}, {}
local touched = {}
for i = first_job, #ARGV, 2 do
  local key = KEYS[tonumber(ARGV[i])]
  touched[key] = true
  -- NX: a job id already recorded keeps its first time and counts once.
  redis.call('ZADD', key, 'NX', now_ms, ARGV[i + 1])
  local size = redis.call('ZCARD', key)
  if size > cap then
    -- Bounded memory: the newest `cap` (= max threshold + 1) entries decide every rule exactly;
    -- trimming on every add keeps small windows in Redis' compact listpack encoding.
    redis.call('ZREMRANGEBYRANK', key, 0, size - cap - 1)
    size = cap
  end
  local rule = 0
  for r = n_rules, 1, -1 do  -- the last matching rule wins: look from the end
    -- A window can only exceed a threshold the whole set exceeds (ZCARD is O(1), ZCOUNT is not).
    -- The count includes this enqueue: the test of Rule.matches (fair_router/rules.py), which adds it.
    if size > threshold[r] and redis.call('ZCOUNT', key, lower[r], now_ms) > threshold[r] then
      rule = r
      break
    end
  end
  chosen[#chosen + 1] = rule
  routed[rule] = (routed[rule] or 0) + 1
end

-- Counted per target queue (fair_router.observe reads them): one HINCRBY per rule used by the batch.
for rule, n in pairs(routed) do
  redis.call('HINCRBY', KEYS[#KEYS], target[rule], n)
end

-- Entries older than the longest window are never counted; an idle window expires whole.
for key in pairs(touched) do
  redis.call('PEXPIRE', key, ttl_ms)
end
return chosen
