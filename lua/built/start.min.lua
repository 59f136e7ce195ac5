-- lua/built/start.min.lua: lua/start.lua without comments (make lua)
local function clock_ms(given)
local now = tonumber(given)
if now then return now, given end
local t = redis.call('TIME')
local us = t[2]
local ms = string.sub(string.rep('0', 6 - #us) .. us, 1, 3)
return tonumber(t[1]) * 1000 + math.floor(tonumber(us) / 1000), t[1] .. ms
end
local function prefetch(controls, s, n_argv)
local keys, k, a = {}, 0, 2
while a < n_argv do
local control, n_keys = controls[ARGV[a + 1]], tonumber(ARGV[a + 2])
if control.reads and n_keys > 0 then
s.read_at[k] = #keys
for i = 1, n_keys do keys[#keys + 1] = KEYS[k + i] end
end
k, a = k + n_keys, a + 3 + tonumber(ARGV[a + 3])
end
if #keys > 0 then s.got = redis.call('MGET', unpack(keys)) end
end
local function run_start(controls)
local s = {now_ms = clock_ms(ARGV[1]), job_id = ARGV[2], reclaimed = 0, at_ms = 0, next_ms = 0,
report = 0, slots = {}, read_at = {}}
local n_argv = #ARGV
local held = false
for pass = 0, 2 do
if pass == 1 then prefetch(controls, s, n_argv) end
local k, a = 0, 2
while a < n_argv do
local control, n_keys = controls[ARGV[a + 1]], tonumber(ARGV[a + 2])
if not control then return redis.error_reply('start.lua: no start control ' .. ARGV[a + 1]) end
local first = a + 3
if n_keys == 0 and control.keyed then  -- luacheck: ignore (nothing to decide)
elseif pass == 0 then
if control.held and control.held(s, k, first, n_keys) then held = true end
elseif pass == 1 then
local refused = control.check(s, k, first, n_keys)
if refused then return {refused, s.reclaimed, s.at_ms, s.now_ms, 0} end
elseif control.take then
control.take(s, k, first, n_keys)
end
k, a = k + n_keys, first + tonumber(ARGV[a + 3])
end
if held then return {2, s.reclaimed, 0, s.now_ms, 0} end
end
return {1, s.reclaimed, 0, s.now_ms, s.next_ms, s.report}
end
local start_pause = {reads = true}
function start_pause.check(s, k, a, n)
if n == 0 then
if ARGV[a + 1] == '1' then return 4 end
elseif s.got[s.read_at[k] + 1] then
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
local expired = redis.call('ZREMRANGEBYSCORE', leases, '-inf', s.now_ms)
s.reclaimed, count = s.reclaimed + expired, count - expired
end
s.slots[k] = count
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
local first = redis.call('ZRANGE', leases, 0, 0, 'WITHSCORES')
s.at_ms = tonumber(first[2]) or 0
local queue = ARGV[a + 3]
if queue ~= '' then  -- parked there until a release: it lasts a lease at most, so does the record
redis.call('SADD', KEYS[k + 2], queue)
redis.call('PEXPIRE', KEYS[k + 2], 2 * tonumber(ARGV[a + 2]))
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
local PACE_MARK_MS = 65000  -- the pace mark's life: longer than lib/claims.lua's PACED_FOR_MS
local function rate_take(s, k, a, start)
local next_ms, tenant_scopes = 0, tonumber(ARGV[a + 2])
for i = 1, s.rate_n do
local interval = tonumber(ARGV[a + 2 + 2 * i])
local tat = math.max(s.tats[i], start or s.tats[i]) + interval
redis.call('SET', KEYS[k + 1 + i], string.format('%d', tat), 'PX', string.format('%d', tat - s.now_ms + interval))
local at = tat - tonumber(ARGV[a + 3 + 2 * i])
if i <= tenant_scopes and at > s.now_ms and at > next_ms then next_ms = at end
end
return next_ms
end
function start_rate.check(s, k, a, n_keys)
local paid, now_ms = KEYS[k + 1], s.now_ms
local paced = ARGV[a + 3] == '1'
local n, tats, allowed = n_keys - (paced and 2 or 1), {}, now_ms
local got, o = s.got, s.read_at[k]
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
local tat = tonumber(got[o + 1 + i] or '0')
if tat <= now_ms - tonumber(ARGV[a + 2 + 2 * i]) then tat = now_ms end  -- T late or more: a new schedule
tats[i] = tat
local at = tat - tonumber(ARGV[a + 3 + 2 * i])
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
redis.call('SET', s.pace_key, 1, 'PX', PACE_MARK_MS)
s.report = 1
elseif s.pace_marked then
redis.call('DEL', s.pace_key)
s.report = 1
end
end
local function refusing_as(piece, status)
return {keyed = true, held = piece.held, take = piece.take, reads = piece.reads,
check = function(s, k, a, n) if piece.check(s, k, a, n) then return status end end}
end
return run_start({start_pause = start_pause, start_slot = start_slot, start_rate = start_rate,
start_org_pause = refusing_as(start_pause, 7), start_org_slot = refusing_as(start_slot, 6)})
