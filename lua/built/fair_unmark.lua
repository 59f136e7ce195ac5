-- fair_unmark.lua: `fair-router queue plain NAME`: take a queue's fairness mark away, only while it is empty
-- (no entry on rq's list, no job in the fair structure): a queue with jobs waiting stays fair, so no job
-- waiting in a tenant's FIFO is ever served out of fair order or left behind.
-- KEYS[1]  rq's list of the queue (rq:queue:<name>)
-- KEYS[2]  the fair structure's members hash under the prefix the mark names (two fields per waiting job)
-- KEYS[3]  the queue's fairness mark (keys.Keys.fair_mark: the producers' prefix)
-- ARGV     none
-- Returns  1 when the mark was removed; 0 when there was none; -N when N jobs still wait (nothing changed).
local waiting = math.max(redis.call('LLEN', KEYS[1]), math.floor(redis.call('HLEN', KEYS[2]) / 2))
if waiting > 0 then return -waiting end
return redis.call('DEL', KEYS[3])
