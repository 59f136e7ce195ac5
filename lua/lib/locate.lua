-- lib/locate.lua: finding a member on rq's list by its recorded position (lib/members.lua), for the pop.
-- include: fair_keys, members

-- Record that member `job_id` (members entry `value`) now sits at list position `pos`.
local function set_pos(job_id, pos, value)
  local field = parse_member(value)
  redis.call('HSET', members, job_id, pos .. '|' .. field)
end

-- Re-record the position of every member from the list itself (`head`: the list head's position):
-- O(list length), after drift.
local function reindex(head)
  local listed = redis.call('LRANGE', rq_list, 0, -1)
  for i, entry in ipairs(listed) do
    local value = redis.call('HGET', members, entry)
    if value then set_pos(entry, head + i - 1, value) end
  end
end

-- The index of member `job_id` on rq's list, or nil when it is not there (stale). `pos`: its recorded
-- position (nil when unknown); `head`: the list head's position. Exact (one LINDEX) unless rq shifted the
-- list behind our back; then a look around the expected index, else a scan of the whole list and a reindex.
local function locate(job_id, pos, head)
  if pos then
    local expected = pos - head
    if expected >= 0 and redis.call('LINDEX', rq_list, expected) == job_id then return expected end
    for _, reach in ipairs({8, 128}) do
      local lo = math.max(0, expected - reach)
      local near = expected + reach >= 0 and redis.call('LRANGE', rq_list, lo, expected + reach) or {}
      for i, entry in ipairs(near) do
        if entry == job_id then return lo + i - 1 end
      end
    end
  end
  local found = redis.call('LPOS', rq_list, job_id)
  if found then reindex(head) end
  return found or nil
end

-- A pop found only parked tenants' members at hand, `entry` (a member, just popped off the head; members
-- entry `value`; `head` the list head's position) among them: the first plain entry further down, if there
-- is one (there is when the list holds more entries than there are members), which `entry` replaces on
-- the list, so no other entry moves. Returns that plain entry, or nil.
local function plain_further_down(entry, value, head)
  -- Each member has two fields in `members` (its entry and its FIFO place).
  if redis.call('LLEN', rq_list) + 1 <= redis.call('HLEN', members) / 2 then return nil end
  local start = 0
  while true do
    local chunk = redis.call('LRANGE', rq_list, start, start + 99)
    if #chunk == 0 then return nil end
    for i, plain in ipairs(chunk) do
      if redis.call('HEXISTS', members, plain) == 0 then
        redis.call('LSET', rq_list, start + i - 1, entry)
        set_pos(entry, head + start + i - 1, value)
        return plain
      end
    end
    start = start + 100
  end
end
