-- lua/built/start.min.lua: lua/start.lua without comments (make lua)
local function clock_ms(given)
local now = tonumber(given)
if now then return now, given end
local t = redis.call('TIME')
local us = t[2]
local ms = string.sub(string.rep('0', 6 - #us) .. us, 1, 3)
return tonumber(t[1]) * 1000 + math.floor(tonumber(us) / 1000), t[1] .. ms
end
local function run_start(controls)
local now_ms = clock_ms(ARGV[1])
local s = {false, 0, 0, 0, 0, false, 0, 0, 0, 0, false, 0, 0, 0, 0, now_ms = now_ms, job_id = ARGV[2],
reclaimed = 0, at_ms = 0, next_ms = 0, report = 0, got = false, rate_n = 0, tats = false,
reserved = false, pace_key = false, pace_marked = false, slots = false}
local reads, n_reads, last = {false, false, false, false, false}, 0, 0
local n_argv, k, a = #ARGV, 0, 2
while a < n_argv do
local control, n_keys = controls[ARGV[a + 1]], tonumber(ARGV[a + 2])
if not control then return redis.error_reply('start.lua: no start control ' .. ARGV[a + 1]) end
if n_keys > 0 or not control.keyed then  -- a control sent no keys (an org's, no org): nothing to decide
s[last + 1], s[last + 2], s[last + 3], s[last + 4], s[last + 5] = control, k, a + 3, n_keys, n_reads
last = last + 5
if control.reads then
for i = 1, n_keys do reads[n_reads + i] = KEYS[k + i] end
n_reads = n_reads + n_keys
end
end
k, a = k + n_keys, a + 3 + tonumber(ARGV[a + 3])
end
local held = false
for i = 1, last, 5 do
local control = s[i]
if control.held and control.held(s, s[i + 1], s[i + 2], s[i + 3]) then held = true end
end
if held then return {2, s.reclaimed, 0, now_ms, 0} end
if n_reads > 0 then s.got = redis.call('MGET', unpack(reads, 1, n_reads)) end
for i = 1, last, 5 do
local refused = s[i].check(s, s[i + 1], s[i + 2], s[i + 3], s[i + 4])
if refused then return {refused, s.reclaimed, s.at_ms, now_ms, 0} end
end
for i = 1, last, 5 do
local control = s[i]
if control.take then control.take(s, s[i + 1], s[i + 2], s[i + 3]) end
end
return {1, s.reclaimed, 0, now_ms, s.next_ms, s.report}
end
local start_pause = {reads = true}
function start_pause.check(s, k, a, n, r)
if n == 0 then
if ARGV[a + 1] == '1' then return 4 end
elseif s.got[r + 1] then
return 4
end
end
local start_slot = {}
local KEEP_MS = 86400000  -- the lease set outlives its last renewal by a day more than a lease
local RENEW_EVERY = 16  -- a take into a set holding leases renews its life when now_ms is a multiple of this
local function keep(leases, lease_ms)
redis.call('PEXPIRE', leases, string.format('%d', lease_ms + KEEP_MS))
end
function start_slot.held(s, k, a)
local leases = KEYS[k + 1]
local count = redis.call('ZCARD', leases)
if count > 0 then
local expired = redis.call('ZREMRANGEBYSCORE', leases, '-inf', string.format('%d', s.now_ms))
s.reclaimed, count = s.reclaimed + expired, count - expired
end
local slots = s.slots or {0}  -- (made at the size of a tenant's slot alone)
slots[k], s.slots = count, slots
if count > 0 and redis.call('ZSCORE', leases, s.job_id) then
local lease_ms = tonumber(ARGV[a + 2])
redis.call('ZADD', leases, string.format('%d', s.now_ms + lease_ms), s.job_id)
keep(leases, lease_ms)  -- a running job's refresh: its set lives as long as it runs
return true
end
return false
end
function start_slot.check(s, k, a)
local leases = KEYS[k + 1]
if s.slots[k] >= tonumber(ARGV[a + 1]) then
local first = redis.call('ZRANGE', leases, '0', '0', 'WITHSCORES')
s.at_ms = tonumber(first[2]) or 0
local queue = ARGV[a + 3]
if queue ~= '' then  -- parked there until a release: it lasts a lease at most, so does the record
redis.call('SADD', KEYS[k + 2], queue)
redis.call('PEXPIRE', KEYS[k + 2], string.format('%d', 2 * tonumber(ARGV[a + 2])))
end
return 0
end
end
function start_slot.take(s, k, a)
local leases, lease_ms = KEYS[k + 1], tonumber(ARGV[a + 2])
redis.call('ZADD', leases, string.format('%d', s.now_ms + lease_ms), s.job_id)
if s.slots[k] == 0 or s.now_ms % RENEW_EVERY == 0 then keep(leases, lease_ms) end
end
local start_rate = {reads = true}  -- its keys read before the checks (lib/start.lua: s.got)
local PAID_KEEP_MS = 3600000  -- a reservation left unused this long after its time is dropped
local PACE_MARK_MS = '65000'  -- the pace mark's life (ms, as sent): longer than lib/claims.lua's PACED_FOR_MS
local function rate_take(s, k, a, start)
local next_ms, tenant_scopes, tats = 0, tonumber(ARGV[a + 2]), s.tats
for i = 1, s.rate_n do
local interval = tats[3 * i - 1]
local tat = math.max(tats[3 * i - 2], start or tats[3 * i - 2]) + interval
redis.call('SET', KEYS[k + 1 + i], string.format('%d', tat), 'PX', string.format('%d', tat - s.now_ms + interval))
local at = tat - tats[3 * i]
if i <= tenant_scopes and at > s.now_ms and at > next_ms then next_ms = at end
end
return next_ms
end
function start_rate.check(s, k, a, n_keys, o)
local paid, now_ms = KEYS[k + 1], s.now_ms
local paced = ARGV[a + 3] == '1'
local n, tats, allowed = n_keys - (paced and 2 or 1), {0, 0, 0}, now_ms  -- (one scope: no growth)
local got = s.got
local reserved = tonumber(got[o + 1] or '')
s.pace_key = paced and KEYS[k + n_keys] or nil
s.pace_marked = paced and got[o + n_keys] ~= false
if reserved then
if reserved > now_ms then  -- back early: not yet its time
s.at_ms = reserved
return 3
end
n = 0  -- its token was taken when it was deferred
end
for i = 1, n do
local tat, interval = tonumber(got[o + 1 + i] or '0'), tonumber(ARGV[a + 2 + 2 * i])
local tolerance = tonumber(ARGV[a + 3 + 2 * i])
if tat <= now_ms - interval then tat = now_ms end  -- T late or more: a new schedule
tats[3 * i - 2], tats[3 * i - 1], tats[3 * i] = tat, interval, tolerance
local at = tat - tolerance
if at > allowed then allowed = at end
end
s.rate_n, s.tats, s.reserved = n, tats, reserved
if allowed <= now_ms then return nil end
s.at_ms = allowed
if ARGV[a + 1] ~= '1' then return 3 end
rate_take(s, k, a, allowed)
redis.call('SET', paid, string.format('%d', allowed), 'PX', string.format('%d', allowed - now_ms + PAID_KEEP_MS))
return 5
end
function start_rate.take(s, k, a)
s.next_ms = rate_take(s, k, a, nil)
if s.reserved then redis.call('DEL', KEYS[k + 1]) end
if not s.pace_key then return end
if s.next_ms > s.now_ms then
redis.call('SET', s.pace_key, '1', 'PX', PACE_MARK_MS)
s.report = 1
elseif s.pace_marked then
redis.call('DEL', s.pace_key)
s.report = 1
end
end
local function refusing_as(piece, status)
return {keyed = true, held = piece.held, take = piece.take, reads = piece.reads,
check = function(s, k, a, n, r) if piece.check(s, k, a, n, r) then return status end end}
end
local START_CONTROLS = {start_pause = start_pause, start_slot = start_slot, start_rate = start_rate,
start_org_pause = refusing_as(start_pause, 7), start_org_slot = refusing_as(start_slot, 6)}
return run_start(START_CONTROLS)
