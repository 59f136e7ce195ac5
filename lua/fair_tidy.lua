-- fair_tidy.lua: our processes' look at a fair queue's stale members (lib/stale.lua), so that counts stay exact
-- and a plain rq worker's pops are reported even when no fair pop comes: with rq's list empty every member
-- left is stale and dropped here, as the next pop would. Then hands over the stale ids noted since the last
-- tidy (taken: one caller looks at each) and the queue's counts.
-- include: fair_keys, stale
-- KEYS     keys.FairQueueKeys, in field order.
-- ARGV     none. (The caller adds the ids it finds run by some worker to state.plain itself: one HINCRBY.)
-- Returns  {stale ids (space-separated, '' none), state.stale, state.plain, rq's list length}.
bind_keys()
local length = redis.call('LLEN', rq_list)
if length == 0 then drop_all_stale() end
local ids = redis.call('HGET', state, 'stale_ids') or ''
if ids ~= '' then redis.call('HDEL', state, 'stale_ids') end
local counts = redis.call('HMGET', state, 'stale', 'plain')
return {ids, tonumber(counts[1] or '0'), tonumber(counts[2] or '0'), length}
