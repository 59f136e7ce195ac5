-- lib/members.lua: rq's list and the fair queue's members, the invariant every fair_*.lua script keeps.
-- include: fair_keys
--
-- rq's list holds exactly one entry per waiting job, the job's own id. A fair job is also a *member*: it
-- has a place in its tenant's FIFO (lib/fifo.lua). An entry that is not a member was pushed by rq's
-- internals with a plain Queue (scheduler, registry requeues) and is served in list order. A member whose
-- id is no longer on the list was removed by rq behind our back (Job.cancel, Job.delete, a plain
-- Queue.remove): it is *stale*, and dropped when the scheduler meets it.
--
-- Each member also records its *list position*: a virtual index that stays put while the list changes
-- at its ends (state.head is the position of the list head: LPOP adds 1, LPUSH takes 1). So a pop can
-- take its chosen id out with LINDEX/LSET at a known index, O(list length / listpack node size), where
-- an LREM would compare every entry. rq's own LREM or LPUSH behind our back shifts positions it does
-- not tell us about: locate() (lib/locate.lua) then looks around the recorded index, and re-records every position when
-- the drift has grown.

-- A members entry is "<list position>|<tenant>:<seq>" (position '' when unknown), `tenant:seq` its FIFO
-- field, which lives in `members` too ("<tenant>:<seq>" -> job id; rq 3.0 job ids hold no ':').
-- Returns field, tenant, position.
local function parse_member(value)
  local pos, field = string.match(value, '^([^|]*)|(.*)$')
  if not field then field = value end
  return field, string.match(field, '^(.*):[^:]*$'), tonumber(pos)
end

-- The list head's position: state.head as the caller read it already (`known`: its value, false when unset),
-- else read here.
local function head_pos(known)
  if known == nil then known = redis.call('HGET', state, 'head') end
  return tonumber(known or '0')
end

-- Push `job_id` at the list's tail (or head); returns its list position. `head`: state.head when the caller
-- read it already (as for head_pos), else nil.
local function list_push(job_id, at_front, head)
  if at_front then
    redis.call('LPUSH', rq_list, job_id)
    return redis.call('HINCRBY', state, 'head', -1)
  end
  return head_pos(head) + redis.call('RPUSH', rq_list, job_id) - 1
end
