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
