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
