-- fair_reconcile.lua: repair the token accounting after rq removed list entries behind our back. rq's
-- Job.delete / Job.cancel and a plain Queue's get_jobs / compact LREM ids through a plain Queue; an id
-- may be the token of *another* waiting job (tokens are interchangeable), whose job then has no entry
-- to wake a worker. Run by rq's maintenance (FairQueue.reconcile, with recover), O(list length).
-- KEYS     the fair queue's keys, named in fair_common.lua (prepended at load).
-- ARGV     (none)
-- Returns  {tokens put back, token counts corrected}.
local listed = {}
for _, id in ipairs(redis.call('LRANGE', rq_list, 0, -1)) do listed[id] = (listed[id] or 0) + 1 end

-- A token count above the entries actually listed under that id counts removed entries: lower it, so
-- that a later plain push of the same id is not taken for a token.
local corrected, entries = 0, 0
local counts = redis.call('HGETALL', tokens)
for i = 1, #counts, 2 do
  local id, n = counts[i], tonumber(counts[i + 1])
  local have = listed[id] or 0
  if have < n then
    corrected = corrected + 1
    if have == 0 then redis.call('HDEL', tokens, id) else redis.call('HSET', tokens, id, have) end
    n = have
  end
  entries = entries + n
end

-- Every waiting fair job has a token, listed or held, less the stale ones due to be dropped.
local held = tonumber(redis.call('HGET', state, 'held') or '0')
local stale = tonumber(redis.call('HGET', state, 'stale') or '0')
local missing = redis.call('HLEN', members) - (entries + held - stale)
local restored = 0
if missing > 0 then
  restored = restore_tokens(missing)
elseif missing < 0 then
  redis.call('HINCRBY', state, 'stale', -missing)  -- more tokens than jobs: drop the extra as they surface
end
return {restored, corrected}
