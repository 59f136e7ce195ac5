-- route.lua: record enqueues in per-tenant sliding windows, pick each job's throttle rule and, for a sharded
-- job key, the least loaded of its tenant's shards in the queue family that rule chose.
-- include: time
-- KEYS     KEYS[1] the job key's routed counters (hash target queue -> jobs routed there);
--          then n_windows window sorted sets, one per (job key, tenant): member = job id digest, score =
--          enqueue time (ms); then the load keys (rq lists of shard queues) the shard section names.
--          The routed counters and windows share one hash tag (the job key). The load keys are rq's own
--          untagged list keys: one call may read them on a standalone Redis only; on a Redis Cluster the shard
--          loads must come in ARGV instead (the shard section's base loads), read on each list's own slot.
-- ARGV     now_ms ('' = server TIME), ttl_ms (longest window), cap (newest entries kept),
--          n_rules, base queue, then n_rules triples (per_ms, threshold, queue) in rule order,
--          then n_windows, then the shard section: n_used (0 = not sharded), then n_used shard numbers,
--          then for each family f = 0 (base), 1..n_rules and each used shard u, a pair (load key index into
--          KEYS or 0, base load): the family's member on that shard waits `LLEN(key) + base` jobs;
--          then the push section: 0 (none), or 1 then job hash KEYS index, rq:queues KEYS index, at_front ('1'/'0'),
--          job_id, and for each family f = 0..n_rules a pair (its rq list KEYS index, the job's meta for it);
--          then per job, in enqueue order: window index (1-based among the windows; 0 = not recorded, e.g.
--          a system job), job_id, n_candidates, then that many used-shard positions (1-based) to choose among.
-- Push     (one unsharded job, rq's keys on this server: FairRouter's one-round-trip enqueue) the job, saved
--          by rq earlier in the same MULTI with its base queue as origin, goes to the queue its rule chose, as
--          rq's enqueue would put it there: origin and meta (the rule is in it) set, the id pushed onto the
--          list (LPUSH at_front, else RPUSH), the list added to rq:queues. On a Redis Cluster these keys are on
--          other slots: the router routes first and enqueues with rq after (two round trips).
-- Returns  per job a pair: the 1-based index of the LAST rule whose window holds more than `threshold`
--          enqueues (this one included), or 0 when none matches; and the chosen shard number, -1 unsharded.
--          A batch's own jobs count in the loads: ten jobs of one tenant spread over its shards.
local now_ms = clock_ms(ARGV[1])
local ttl_ms = tonumber(ARGV[2])
local cap = tonumber(ARGV[3])
local n_rules = tonumber(ARGV[4])
local at = 6 + 3 * n_rules
local n_windows = tonumber(ARGV[at])
local n_used = tonumber(ARGV[at + 1])
at = at + 2

-- A window counts enqueues with time in (now - per, now].
local lower, threshold, target = {}, {}, {}
target[0] = ARGV[5]
for r = 1, n_rules do
  lower[r] = '(' .. (now_ms - tonumber(ARGV[3 + 3 * r]))
  threshold[r] = tonumber(ARGV[4 + 3 * r])
  target[r] = ARGV[5 + 3 * r]
end

local shard_no = {}
for u = 1, n_used do
  shard_no[u] = tonumber(ARGV[at + u - 1])
end
at = at + n_used
-- load_at[f * n_used + u] = ARGV index of the (key index, base load) pair of family f on used shard u;
-- load[...] its jobs waiting, read on first use and counting this batch's own jobs.
local load_at, load = {}, {}
for f = 0, n_rules do
  for u = 1, n_used do
    load_at[f * n_used + u] = at
    at = at + 2
  end
end
local function load_of(slot)
  local known = load[slot]
  if known == nil then
    local i = load_at[slot]
    local key = tonumber(ARGV[i])
    known = tonumber(ARGV[i + 1]) + (key > 0 and redis.call('LLEN', KEYS[key]) or 0)
    load[slot] = known
  end
  return known
end

local push = tonumber(ARGV[at]) == 1
local push_at = at + 1
at = push and (at + 5 + 2 * (n_rules + 1)) or (at + 1)

local reply, routed = {}, {}
local touched = {}
while at <= #ARGV do
  local window, job_id, n_cand = tonumber(ARGV[at]), ARGV[at + 1], tonumber(ARGV[at + 2])
  local rule = 0
  if window > 0 and n_rules > 0 then
    local key = KEYS[1 + window]
    touched[key] = true
    -- NX: a job id already recorded keeps its first time and counts once.
    redis.call('ZADD', key, 'NX', now_ms, job_id)
    local size = redis.call('ZCARD', key)
    if size > cap then
      -- Bounded memory: the newest `cap` (= max threshold + 1) entries decide every rule exactly;
      -- trimming on every add keeps small windows in Redis' compact listpack encoding.
      redis.call('ZREMRANGEBYRANK', key, 0, size - cap - 1)
      size = cap
    end
    for r = n_rules, 1, -1 do  -- the last matching rule wins: look from the end
      -- A window can only exceed a threshold the whole set exceeds (ZCARD is O(1), ZCOUNT is not).
      -- The count includes this enqueue: the test of Rule.matches (fair_router/rules.py), which adds it.
      if size > threshold[r] and redis.call('ZCOUNT', key, lower[r], now_ms) > threshold[r] then
        rule = r
        break
      end
    end
    routed[rule] = (routed[rule] or 0) + 1
  end
  -- The least loaded candidate of the chosen family; ties go to the first listed.
  local shard, best, best_slot = -1, nil, nil
  for c = 1, n_cand do
    local slot = rule * n_used + tonumber(ARGV[at + 2 + c])
    local waiting = load_of(slot)
    if best == nil or waiting < best then
      best, best_slot = waiting, slot
    end
  end
  if best_slot then
    load[best_slot] = best + 1
    shard = shard_no[(best_slot - 1) % n_used + 1]
  end
  reply[#reply + 1] = rule
  reply[#reply + 1] = shard
  at = at + 3 + n_cand
end

-- Counted per target queue family (fair_router.observe reads them): one HINCRBY per rule used by the batch.
for rule, n in pairs(routed) do
  redis.call('HINCRBY', KEYS[1], target[rule], n)
end

if push then
  local job, at_front, job_id = KEYS[tonumber(ARGV[push_at])], ARGV[push_at + 2] == '1', ARGV[push_at + 3]
  local family = push_at + 4 + 2 * reply[1]
  local list = KEYS[tonumber(ARGV[family])]
  redis.call('HSET', job, 'origin', target[reply[1]], 'meta', ARGV[family + 1])
  redis.call(at_front and 'LPUSH' or 'RPUSH', list, job_id)
  redis.call('SADD', KEYS[tonumber(ARGV[push_at + 1])], list)
end

-- Entries older than the longest window are never counted; an idle window expires whole.
for key in pairs(touched) do
  redis.call('PEXPIRE', key, ttl_ms)
end
return reply
