-- lib/routepush.lua: route.lua's push section (FairRouter's one-round-trip enqueue, routing/onetrip.py): the
-- job, saved by rq earlier in the same MULTI with its base queue as origin, goes to the queue its rule chose
-- as rq's enqueue would put it there.

-- The section from ARGV[at]: 0 (none), or 1 then the KEYS indexes of the job hash and rq:queues, at_front
-- ('1'/'0'), job_id, and per family f = 0..n_rules a pair (its rq list KEYS index, the job's meta for it).
-- Returns the section's start (nil: none) and the ARGV index after it.
local function read_push(at, n_rules)
  if tonumber(ARGV[at]) ~= 1 then return nil, at + 1 end
  return at + 1, at + 5 + 2 * (n_rules + 1)
end

-- Push the job (section at ARGV[a]) to family `rule`, queue `queue`: origin and meta (the rule is in it) set,
-- the id pushed (LPUSH at_front, else RPUSH), the list added to rq:queues. The base family (rule 0) keeps
-- the origin and meta rq saved: they are the base family's already (onetrip.py saves the job so).
local function push_job(a, rule, queue)
  local at_front, job_id = ARGV[a + 2] == '1', ARGV[a + 3]
  local family = a + 4 + 2 * rule
  local list = KEYS[tonumber(ARGV[family])]
  if rule > 0 then redis.call('HSET', KEYS[tonumber(ARGV[a])], 'origin', queue, 'meta', ARGV[family + 1]) end
  redis.call(at_front and 'LPUSH' or 'RPUSH', list, job_id)
  redis.call('SADD', KEYS[tonumber(ARGV[a + 1])], list)
end
