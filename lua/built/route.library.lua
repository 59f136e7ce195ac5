#!lua name=fair_router_route_da8cb484388b5de1
local KEYS, ARGV
-- lib/time_text.lua: the clock of lib/time.lua, as text too: what redis.call sends as it is, where a number
-- is formatted with printf's float path on every call that passes it (and parsed back by the command).

-- Now in whole ms, as text and as a number: `given` (the injected clock's ARGV slot) as sent when it is a number,
-- else the server's TIME, its seconds joined to the ms digits of its microseconds as text. redis.call sends a
-- string as it is, where it would format a number with printf's float path (and the command parse it back).
local function clock_text(given)
  if given ~= '' then
    local now = tonumber(given)
    if now then return given, now end
  end
  local t = redis.call('TIME')
  local us = t[2]  -- six digits nine times in ten: their first three, else padded first
  local text = t[1] .. (#us == 6 and string.sub(us, 1, 3) or string.sub('00000' .. us, -6, -4))
  return text, tonumber(text)
end

-- lib/slices.lua: one Redis command over a long list of arguments, sent in slices: Lua's unpack() gives at
-- most about 8,000 values, and a batch of 10,000 jobs is a longer list than that.

-- Values per slice: far below unpack()'s limit, large enough that a batch of 10,000 costs ten calls.
local SLICE = 2000

-- redis.call(command, key, values...) for each slice of `values` (at most `per` of them, a multiple of the
-- command's arity), or redis.call(command, key, option, values...) when an `option` is given (ZADD's 'GT');
-- `each(reply, first)` gets each slice's reply and the index of its first value.
local function call_sliced(command, key, values, per, each, option)
  for first = 1, #values, per do
    local last = math.min(first + per - 1, #values)
    local reply
    if option then
      reply = redis.call(command, key, option, unpack(values, first, last))
    else
      reply = redis.call(command, key, unpack(values, first, last))
    end
    if each then each(reply, first) end
  end
end

-- lib/windows.lua: route.lua's throttle rules, read from the route's header where they stand (no table of them
-- is built: most calls route one job and read only the rules' thresholds), and an enqueue recorded in its tenant's
-- sliding window, which answers the last rule the window now matches; or a batch's enqueues of one tenant recorded
-- together, each answered as if recorded alone in turn.
-- include: slices
-- ARGV[2]: the route's header, one binary argument (fair_router/store/scripts.py route_header: one where ten cost
-- the client 1-2 us each), read in place with struct.unpack: '>HI4I4I4' n_rules, cap (newest entries kept), the
-- 1-based offsets of the shard queues' suffix and of the base queue; per rule r, at 16r - 1, '>I8I4I4' per_ms,
-- threshold, its queue's offset; the ttl (ms, the longest window) at 15 + 16 n_rules. Texts are '>I4c0' (length,
-- bytes): what redis.call sends as it is.

-- Redis' default zset-max-listpack-entries: a sorted set of at most this many entries can be a listpack.
local LISTPACK_MAX = 128

-- The header's text at `at` (few functions: the one-round-trip enqueue's EVALSHA defines each at every call).
local function header_text(at)
  return (struct.unpack('>I4c0', ARGV[2], at))
end

-- The queue family of rule `r` (0: the base queue: its offset is where rule 0's would be).
local function rule_target(r)
  return header_text((struct.unpack('>I4', ARGV[2], 16 * r + 11)))
end

-- Record the enqueue `member` (a job id digest) at `now_ms` (`now_text`: the same as text) in window `key`.
-- Returns the 1-based index of the LAST of the `n_rules` rules whose window holds more than its threshold (this
-- enqueue included), 0 when none.
local function record_and_match(key, member, now_text, now_ms, n_rules)
  -- NX: a job id already recorded keeps its first time and counts once.
  redis.call('ZADD', key, 'NX', now_text, member)
  local size = redis.call('ZCARD', key)
  local cap = struct.unpack('>I4', ARGV[2], 3)
  if size > cap then
    -- Bounded memory: the newest `cap` (= max threshold + 1) entries decide every rule exactly;
    -- trimming on every add keeps small windows in Redis' compact listpack encoding.
    local last = size - cap - 1  -- one past the cap (the usual case): text, no number to format
    redis.call('ZREMRANGEBYRANK', key, '0', last == 0 and '0' or last)
    size = cap
  end
  for r = n_rules, 1, -1 do  -- the last matching rule wins: look from the end
    -- A window can only exceed a threshold the whole set exceeds (ZCARD is O(1), ZCOUNT is not).
    -- The count includes this enqueue: the test of Rule.matches (fair_router/core/rules.py), which adds it.
    -- A window counts enqueues with time in (now - per, now]; times are whole ms (clock_ms), so the lower
    -- bound is now - per + 1 inclusive, sent as '%d' text: integer printf, where redis.call would format a
    -- number with the float path (0.2 us more).
    local per, threshold = struct.unpack('>I8I4', ARGV[2], 16 * r - 1)
    if size > threshold and redis.call('ZCOUNT', key, string.format('%d', now_ms - per + 1),
                                       now_text) > threshold then
      return r
    end
  end
  return 0
end

-- Record the enqueues `members` (job id digests, in enqueue order; all of one window `key`, at `now_ms`) as
-- record_and_match would one after another, in a few commands whatever their number (a ZADD per 1,000 members).
-- Returns the rule each member matched; nil, having recorded nothing, where only one-by-one recording follows
-- what happens: a member in the window already or twice in `members` (whether a re-sent id counts again depends
-- on the trims before it), or an entry newer than now_ms (the clock stepped back: such entries outlive every
-- trim, so trims lower the count of a rule's range below cap).
-- Exact otherwise: the entries inside a rule's range are the window's newest (this call's are all at now_ms),
-- so the k-th member sees the range's count before the call plus k, which trimming to the newest `cap` could
-- only lower past cap > every threshold; one trim after all the adds keeps the newest `cap`, as one per add.
local function record_all_and_match(key, members, now_text, now_ms, n_rules)
  local seen = {}
  for _, member in ipairs(members) do
    if seen[member] then return nil end
    seen[member] = true
  end
  local size, cap, counts, newest = redis.call('ZCARD', key), struct.unpack('>I4', ARGV[2], 3), {}, now_ms
  if size > 0 and size <= LISTPACK_MAX then  -- a small window is read whole (ZMSCORE scans a listpack per member)
    local entries = redis.call('ZRANGE', key, 0, -1, 'WITHSCORES')
    for i = 1, #entries, 2 do
      if seen[entries[i]] then return nil end
    end
    newest = tonumber(entries[#entries])
  elseif size > 0 then
    local repeated = false
    call_sliced('ZMSCORE', key, members, SLICE, function(scores)
      for i = 1, #scores do repeated = repeated or scores[i] ~= false end
    end)
    if repeated then return nil end
    newest = tonumber(redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')[2])
  end
  if newest > now_ms then return nil end
  local thresholds = {}
  for r = 1, n_rules do  -- false: the window cannot pass the rule's threshold, even with every member
    local per, threshold = struct.unpack('>I8I4', ARGV[2], 16 * r - 1)
    thresholds[r] = threshold
    counts[r] = size + #members > threshold and redis.call('ZCOUNT', key, now_ms - per + 1, now_text)
  end
  local zadd = {}
  for _, member in ipairs(members) do
    zadd[#zadd + 1] = now_text
    zadd[#zadd + 1] = member
  end
  call_sliced('ZADD', key, zadd, SLICE, nil)
  if size + #members > cap then
    redis.call('ZREMRANGEBYRANK', key, 0, size + #members - cap - 1)
  end
  if size + #members > LISTPACK_MAX and cap <= LISTPACK_MAX then
    -- The adds took the window past a listpack's size (a skiplist then, which the trim does not undo): rewritten
    -- whole, it is a listpack again (ZRANGESTORE sizes its destination by what it stores), and its TTL, which the
    -- rewrite drops, is set again at once. REV: each entry goes in at the listpack's head, where in order each
    -- would walk the whole list.
    redis.call('ZRANGESTORE', key, key, 0, -1, 'REV')
    redis.call('PEXPIRE', key, header_text(15 + 16 * n_rules))
  end
  local rules = {}
  for i = 1, #members do
    rules[i] = 0
    for r = n_rules, 1, -1 do
      if counts[r] and counts[r] + i > thresholds[r] then
        rules[i] = r
        break
      end
    end
  end
  return rules
end

-- lib/shardload.lua: route.lua's shard section: each queue family's jobs waiting on each shard it may use, and
-- the least loaded of a job's candidate shards (a batch's own jobs count: ten jobs of one tenant spread).

-- The shard section from ARGV[at]: n_used, the used shard numbers, then per family f = 0..n_rules and used
-- shard u a pair (load key index into KEYS or 0, base load). Returns the loads (nil when n_used = 0:
-- unsharded, no table built) and the ARGV index after it.
local function read_loads(at, n_rules)
  if ARGV[at] == '0' then return nil, at + 1 end
  local loads = {n = tonumber(ARGV[at]), shard_no = {}, at = {}, known = {}}
  at = at + 1
  for u = 1, loads.n do loads.shard_no[u] = tonumber(ARGV[at + u - 1]) end
  at = at + loads.n
  for slot = 1, (n_rules + 1) * loads.n do  -- slot f * n_used + u: family f on used shard u
    loads.at[slot] = at
    at = at + 2
  end
  return loads, at
end

-- Jobs waiting in `slot` (read on first use: LLEN of its key plus its base load; then counted here).
local function load_of(loads, slot)
  local known = loads.known[slot]
  if known == nil then
    local i = loads.at[slot]
    local key = tonumber(ARGV[i])
    known = tonumber(ARGV[i + 1]) + (key > 0 and redis.call('LLEN', KEYS[key]) or 0)
    loads.known[slot] = known
  end
  return known
end

-- The least loaded of the candidates (ARGV[at + 1 .. at + n_cand]: used-shard positions) in family `rule`,
-- ties to the first listed, counted one job busier. Returns its shard number, -1 when there is none.
local function least_loaded(loads, rule, at, n_cand)
  if not loads then return -1 end
  local best, best_slot = nil, nil
  for c = 1, n_cand do
    local slot = rule * loads.n + tonumber(ARGV[at + c])
    local waiting = load_of(loads, slot)
    if best == nil or waiting < best then best, best_slot = waiting, slot end
  end
  if not best_slot then return -1 end
  loads.known[best_slot] = best + 1
  return loads.shard_no[(best_slot - 1) % loads.n + 1]
end

-- lib/routepush.lua: route.lua's push section (FairRouter's one-round-trip enqueue, routing/enqueue.py): the
-- job, saved by rq earlier in the same MULTI with its base queue as origin, goes to the queue its rule chose
-- as rq's enqueue would put it there.
-- Its keys are the last of KEYS: when a family is a fair queue, first each family's fair `inflight` key (a plain
-- family's list stands in, untouched), then the job hash, rq:queues, then the rq list of each family
-- f = 0..n_rules.

-- The section from ARGV[at]: 0 (none), or 1 (push at the back) or 2 (at the front: one argument, not a marker
-- and a flag), then job_id, the job's meta for each rule's family r = 1..n_rules (the base family's is the one
-- rq saved), and which families are fair queues (a string of n_rules + 1 '0'/'1', base first). Returns the
-- section's start (nil: none) and the ARGV index after it.
local function read_push(at, n_rules)
  if ARGV[at] ~= '1' and ARGV[at] ~= '2' then return nil, at + 1 end
  return at, at + 3 + n_rules
end

-- Push the job (section at ARGV[a]) to family `rule` of `n_rules`, queue `queue`: origin and meta (the rule is
-- in it) set, the id pushed (LPUSH at_front, else RPUSH), the list added to rq:queues. The base family
-- (rule 0) keeps the origin and meta rq saved: they are the base family's already (routing/enqueue.py saves so).
-- A fair family's job is not pushed here: its id goes into that queue's `inflight` (at `now_text`, ms as
-- text), and the fair_push.lua call of each fair family queued after this one in the MULTI (``from_inflight``)
-- adds it to the one queue that holds it, taking it out of `inflight`: the fair push of the chosen queue only.
local function push_job(a, n_rules, rule, queue, now_text)
  local job = #KEYS - n_rules - 2  -- the job hash's KEYS index; rq:queues, then the lists, follow it
  local list = KEYS[job + 2 + rule]
  if rule > 0 then redis.call('HSET', KEYS[job], 'origin', queue, 'meta', ARGV[a + 1 + rule]) end
  redis.call('SADD', KEYS[job + 1], list)
  if string.sub(ARGV[a + 2 + n_rules], rule + 1, rule + 1) == '1' then
    redis.call('ZADD', KEYS[job - n_rules - 1 + rule], now_text, ARGV[a + 1])
    return
  end
  redis.call(ARGV[a] == '2' and 'LPUSH' or 'RPUSH', list, ARGV[a + 1])
end

-- lib/waiting.lua: per-tenant waiting counts of the plain queues fair-router routes into (what the dashboard
-- shows waiting there, no scan): `counts` HASH "<queue>|<encoded tenant>" -> jobs waiting; `jobs` HASH job id
-- digest -> its field, so that a job counts once and its start takes back exactly its own count. Both keys
-- carry the job key's tag (core/keys.py Keys.waiting), the tag of route.lua's windows.
-- include: slices

-- Job `member` (its id digest) waits under `field`; a job counted already stays counted once. Returns 1 when
-- it counts now, 0 when it counted already.
local function wait(counts, jobs, member, field)
  if redis.call('HSETNX', jobs, member, field) == 0 then return 0 end
  redis.call('HINCRBY', counts, field, '1')
  return 1
end

-- Jobs `members[i]` wait under `fields[i]`, as wait() one by one would count them, in a few commands whatever
-- their number (an HMGET and an HSET per slice, an HINCRBY per field).
local function wait_all(counts, jobs, members, fields)
  if #members == 1 then return wait(counts, jobs, members[1], fields[1]) end
  local counted, hset, per_field = {}, {}, {}
  call_sliced('HMGET', jobs, members, SLICE, function(have, first)
    for i = 1, #have do
      if have[i] then counted[members[first + i - 1]] = true end
    end
  end)
  for i, member in ipairs(members) do
    if not counted[member] then
      counted[member] = true
      hset[#hset + 1] = member
      hset[#hset + 1] = fields[i]
      per_field[fields[i]] = (per_field[fields[i]] or 0) + 1
    end
  end
  call_sliced('HSET', jobs, hset, SLICE, nil)
  for field, n in pairs(per_field) do redis.call('HINCRBY', counts, field, n) end
end

-- Job `member` started (or left): its count is taken back. Returns the field it counted under, or false when
-- it was not counted.
local function unwait(counts, jobs, member)
  local field = redis.call('HGET', jobs, member)
  if not field then return false end
  redis.call('HDEL', jobs, member)
  if redis.call('HINCRBY', counts, field, -1) <= 0 then redis.call('HDEL', counts, field) end
  return field
end

-- route.lua's waiting section from ARGV[at]: 0 (none), or 1 (every job counts) or 2 (only jobs no rule moved:
-- the rules' queues are fair queues, which count their own) then the encoded tenant of each of the n_windows
-- windows; the counts and jobs are KEYS[2 + n_windows], KEYS[3 + n_windows].
-- `n_windows` comes as ARGV gives it (text): parsed only when the section is there. Returns the section's start
-- (nil: none; no table built), the ARGV index after it and n_windows (a number when the section is there).
local function read_waiting(at, n_windows)
  if ARGV[at] ~= '1' and ARGV[at] ~= '2' then return nil, at + 1, n_windows end
  n_windows = tonumber(n_windows)
  return at, at + 1 + n_windows, n_windows
end

-- Whether a job that rule `rule` (0: none) moved counts waiting (the section at ARGV[w]).
local function counts_waiting(w, rule)
  return rule == 0 or ARGV[w] == '1'
end

-- route.lua: job `member`, recorded in window `window` (its tenant's), goes to family `queue` on `shard` (-1:
-- unsharded; the shard queues' suffix is route.lua's header's): it counts waiting there (section at ARGV[w],
-- n_windows windows), at once, or when `waits` (a batch's: route_waits counts them all) is given, later.
local function route_wait(waits, w, n_windows, window, member, queue, shard)
  if shard >= 0 then  -- the header's text at the offset its bytes 7-10 give (lib/windows.lua)
    queue = queue .. struct.unpack('>I4c0', ARGV[2], (struct.unpack('>I4', ARGV[2], 7))) .. shard
  end
  local field = queue .. '|' .. ARGV[w + window]
  if not waits then return wait(KEYS[2 + n_windows], KEYS[3 + n_windows], member, field) end
  waits.members[#waits.members + 1] = member
  waits.fields[#waits.fields + 1] = field
end

-- route.lua: the jobs route_wait added to `waits` count waiting, once each.
local function route_waits(waits, n_windows)
  if #waits.members > 0 then wait_all(KEYS[2 + n_windows], KEYS[3 + n_windows], waits.members, waits.fields) end
end

redis.register_function{function_name='fair_router_route_da8cb484388b5de1', flags={}, callback=function(keys, args)
KEYS, ARGV = keys, args
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

end}
