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
