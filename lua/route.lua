-- route.lua: record enqueues in per-tenant sliding windows, pick each job's throttle rule and, for a sharded
-- job key, the least loaded of its tenant's shards in the queue family that rule chose.
-- include: time_text, windows, shardload, routepush, waiting
-- KEYS     KEYS[1] the job key's routed counters (hash target queue -> jobs routed there);
--          then n_windows window sorted sets, one per (job key, tenant): member = job id digest, score =
--          enqueue time (whole ms); then the load keys (rq lists of shard queues) the shard section names; then
--          the push section's keys, last (lib/routepush.lua finds them from the end). The routed counters,
--          windows and waiting counts share one hash tag (the job key). The load keys are rq's own untagged
--          list keys: one call may read them on a standalone Redis only; on a Redis Cluster the shard loads
--          must come in ARGV instead (the shard section's base loads), read on each list's own slot. So are
--          the push section's rq keys (job hash, rq:queues, lists).
-- ARGV     now_ms ('' = server TIME), the route's header (one binary string: the rules, the cap, the ttl, the base
--          queue, the shard suffix; lib/windows.lua), then n_windows, then the waiting section (lib/waiting.lua:
--          0 = none; its keys follow the windows), then the shard section (lib/shardload.lua: n_used = 0 when not
--          sharded), then the push section (lib/routepush.lua: 0 = none), then per job, in enqueue order: window
--          index (1-based among the windows; 0 = not recorded, e.g. a system job), job id digest, n_candidates,
--          then that many used-shard positions (1-based) to choose among.
-- Push     (one unsharded job, rq's keys on this server: FairRouter's one-round-trip enqueue) the job goes to
--          the queue its rule chose, as rq's enqueue would put it there (a fair queue: by the fair push that
--          follows in the same MULTI, lib/routepush.lua).
--          On a Redis Cluster these keys are on other slots: the router routes first and enqueues with rq
--          after (two round trips).
-- Waiting  (a routed enqueue into plain queues) each recorded job counts waiting for its tenant in the queue
--          chosen (shard included) until its start (observe/waiting.py); with the rules' queues fair, only the
--          jobs no rule moved (a fair queue counts its own).
-- Returns  per job a pair: the 1-based index of the LAST rule whose window holds more than `threshold`
--          enqueues (this one included), or 0 when none matches; and the chosen shard number, -1 unsharded.
local now_text, now_ms = clock_text(ARGV[1])  -- text where redis.call sends it (lib/time_text.lua)
local n_rules = struct.unpack('>H', ARGV[2])
local waiting, loads, push, at, n_windows  -- the windows are KEYS[2 .. 1 + n_windows]; only waiting reads their number
waiting, at, n_windows = read_waiting(4, ARGV[3])
loads, at = read_loads(at, n_rules)
push, at = read_push(at, n_rules)
local n_argv = #ARGV

-- One job (every delay(), most record_and_route calls): straight through, no tables, no closures, numbers parsed
-- only where arithmetic needs them (a tonumber is a strtod: 0.1 us); its waiting count goes at once.
local n_cand = ARGV[at + 2]
if n_cand == '0' and at + 2 == n_argv or at <= n_argv and at + 3 + tonumber(n_cand) > n_argv then
  local window, rule, key = ARGV[at], 0, nil
  local recorded = window ~= '0'
  if recorded then
    window = window == '1' and 1 or tonumber(window)  -- one tenant's jobs: always its first window
    if n_rules > 0 then
      key = KEYS[1 + window]
      rule = record_and_match(key, ARGV[at + 1], now_text, now_ms, n_rules)
    end
  end
  local target = rule_target(rule)
  local shard = loads and least_loaded(loads, rule, at + 2, tonumber(n_cand)) or -1
  if waiting and recorded and counts_waiting(waiting, rule) then
    route_wait(nil, waiting, n_windows, window, ARGV[at + 1], target, shard)
  end
  if key then redis.call('HINCRBY', KEYS[1], target, '1') end
  if push then push_job(push, n_rules, rule, target, now_text) end
  if key then redis.call('PEXPIRE', key, header_text(15 + 16 * n_rules)) end
  return {rule, shard}
end

-- The rule of each job (by its ARGV index) whose window holds several of this call's jobs: that window records
-- them together (record_all_and_match), in a few commands however many there are. Jobs alone in their
-- window, or in one record_all_and_match leaves to one-by-one recording, are recorded in the loop below.
local function record_shared_windows(at, n_argv)
  local windows, order, rules = {}, {}, {}
  while at <= n_argv do
    local window = tonumber(ARGV[at])
    if window > 0 and n_rules > 0 then
      local jobs = windows[window]
      if not jobs then
        jobs = {members = {}, at = {}}
        windows[window], order[#order + 1] = jobs, window
      end
      jobs.members[#jobs.members + 1], jobs.at[#jobs.at + 1] = ARGV[at + 1], at
    end
    at = at + 3 + tonumber(ARGV[at + 2])
  end
  for _, window in ipairs(order) do
    local jobs = windows[window]
    local matched = #jobs.at > 1 and record_all_and_match(KEYS[1 + window], jobs.members, now_text, now_ms, n_rules)
    for i, rule in ipairs(matched or {}) do rules[jobs.at[i]] = rule end
  end
  return rules
end

local reply, routed, touched = {}, {}, {}
local shared = at <= n_argv and record_shared_windows(at, n_argv)
local waits = shared and {members = {}, fields = {}}
while at <= n_argv do
  local window, member, n_cand = tonumber(ARGV[at]), ARGV[at + 1], tonumber(ARGV[at + 2])
  local rule = 0
  if window > 0 and n_rules > 0 then
    local key = KEYS[1 + window]
    touched[key] = true
    rule = shared and shared[at] or record_and_match(key, member, now_text, now_ms, n_rules)
    routed[rule] = (routed[rule] or 0) + 1
  end
  local shard = least_loaded(loads, rule, at + 2, n_cand)
  if waiting and window > 0 and counts_waiting(waiting, rule) then
    route_wait(waits, waiting, n_windows, window, member, rule_target(rule), shard)
  end
  reply[#reply + 1] = rule
  reply[#reply + 1] = shard
  at = at + 3 + n_cand
end
if waiting and waits then route_waits(waits, n_windows) end

-- Counted per target queue family (the dashboard reads them): one HINCRBY per rule used by the batch.
for rule, n in pairs(routed) do
  redis.call('HINCRBY', KEYS[1], rule_target(rule), n)
end

if push then push_job(push, n_rules, reply[1], rule_target(reply[1]), now_text) end

-- Entries older than the longest window are never counted; an idle window expires whole (its ttl: the header's).
local ttl = next(touched) and header_text(15 + 16 * n_rules)
for key in pairs(touched) do
  redis.call('PEXPIRE', key, ttl)
end
return reply
