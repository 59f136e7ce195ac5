-- pause.lua: pause a tenant (controls/pauses.py): its pause flag holds the time of the pause (ms), kept when
-- it is already paused, so that "paused since" is the first pause's. Readers only test that the flag exists.
-- include: time
-- KEYS[1]  the tenant's pause flag (keys.paused).
-- ARGV     now_ms ('' = server TIME)
-- Returns  the flag's value: the time of the pause in ms (1: paused by a version that recorded no time).
local flag = KEYS[1]
local since = redis.call('GET', flag)
if since then return tonumber(since) or 1 end
local now_ms = clock_ms(ARGV[1] or '')
redis.call('SET', flag, now_ms)
return now_ms
