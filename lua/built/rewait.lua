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

-- rewait.lua: jobs whose start was refused after unwait.lua took their counts (the start check rode the same
-- MULTI) count waiting again, under the fields unwait.lua returned: the job did not start, so it still waits.
-- include: waiting
-- KEYS     the job key's waiting counts and jobs (core/keys.py Keys.waiting), one tag.
-- ARGV     a flat list of (job id digest, field), as unwait.lua returned it.
-- Returns  how many jobs count again.
local n = 0
for i = 1, #ARGV, 2 do n = n + wait(KEYS[1], KEYS[2], ARGV[i], ARGV[i + 1]) end
return n
