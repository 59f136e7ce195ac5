-- lua/built/fair_settle.min.lua: lua/fair_settle.lua without comments (make lua)
local rq_list, members, active, kept, parked, state, inflight, wake, costs, charged, runtimes, limits, claims,
claimed, orgs
local function bind_keys()
rq_list = KEYS[1]
members = KEYS[2]
active = KEYS[3]
kept = KEYS[4]
parked = KEYS[5]
state = KEYS[6]
inflight = KEYS[7]
wake = KEYS[8]
costs = KEYS[9]
charged = KEYS[10]
runtimes = KEYS[11]
limits = KEYS[12]
claims = KEYS[13]
claimed = KEYS[14]
orgs = KEYS[15]
end
local function clock_ms(given)
local now = tonumber(given)
if now then return now, given end
local t = redis.call('TIME')
local us = t[2]
local ms = string.sub(string.rep('0', 6 - #us) .. us, 1, 3)
return tonumber(t[1]) * 1000 + math.floor(tonumber(us) / 1000), t[1] .. ms
end
local RECORD = '='
local function tenant_field(tenant)
return RECORD .. tenant
end
local function has_waiting(tenant)
return redis.call('HEXISTS', state, tenant_field(tenant)) == 1
end
local function parse_tenant(value)
if not value then return nil end
local head, tail, weight, n, rest = string.match(value, '^([^|]*)|([^|]*)|([^|]*)|?([^|]*)|?(.*)$')
local h, t = tonumber(head), tonumber(tail)
if not (h and t) then return nil end
local org = nil
if rest ~= '' then
local name, org_weight, pass, on = string.match(rest, '^([^|]*)|([^|]*)|([^|]*)|(.*)$')
if name then org = {name = name, weight = org_weight, pass = pass, on = on == '1'} end
end
return h, t, weight, tonumber(n) or (t - h + 1), org, head, tail
end
local function tenant_record(h, t, weight, n, org)
local value = h .. '|' .. t .. '|' .. weight .. '|' .. n
if org then
value = value .. '|' .. org.name .. '|' .. org.weight .. '|' .. org.pass .. '|' .. (org.on and '1' or '0')
end
return value
end
local KEPT_IDLE_MS = 60000
local function stride_keep(entry, pass, others)
redis.call('ZADD', kept, pass, entry)
if not others and redis.call('EXISTS', active) == 0 then
redis.call('PEXPIRE', kept, KEPT_IDLE_MS)
redis.call('HSET', state, 'kept_ttl', 1)
end
end
local function kept_last(ttl)
if not ttl then return end
redis.call('PERSIST', kept)
redis.call('HDEL', state, 'kept_ttl')
end
local ORG = '!'
local PASS_FORMAT = '%.6f'
local KEY_BYTES = 8
local function is_org(entry)
return string.byte(entry, 1) == 33  -- '!'
end
local function pass_key(written)
local pass = tonumber(written)
if not pass then return nil end
return struct.pack('>d', pass > 0 and pass or 0)
end
local function key_pass(key)  -- a pass key back as a number
return (struct.unpack('>d', key))
end
local function org_member(org, tenant)
return org.name .. '\0' .. pass_key(org.pass) .. tenant
end
local function org_first(name)
local got = redis.call('ZRANGEBYLEX', orgs, '[' .. name .. '\0', '(' .. name .. '\1', 'LIMIT', '0', '2')
local member, n = got[1], #name
if not member then return nil end
return string.sub(member, n + 2 + KEY_BYTES), string.sub(member, n + 2, n + 1 + KEY_BYTES), member, got[2] == nil
end
local function entry_tenant(entry)
if entry and is_org(entry) then
local tenant, pass, member, alone = org_first(string.sub(entry, 2))
return tenant, alone, member, pass
end
return entry
end
local function org_known(org, alone, member, key)
org.alone = alone
if org.on and key == pass_key(org.pass) then org.member = member end
end
local function org_enter(org, tenant, pass)
if not (pass > 0) then pass = 0 end  -- -0 too: written '-0...' it would not be the 0 it is
org.pass, org.on = string.format(PASS_FORMAT, pass), true
org.member = org_member(org, tenant)
redis.call('ZADD', orgs, '0', org.member)
end
local function org_leave(org, tenant)
if org.on then redis.call('ZREM', orgs, org.member or org_member(org, tenant)) end
org.on, org.member = false, nil
end
local function activate_entry(entry)
if redis.call('ZSCORE', active, entry) then return end
if is_org(entry) and redis.call('ZSCORE', parked, entry) then return end  -- at its limit (lib/claims.lua)
local got = redis.call('HMGET', state, 'vtime', 'kept_ttl')
local start = tonumber(got[1] or '0')
local last = tonumber(redis.call('ZSCORE', kept, entry) or '')
if last and last > start then start = last end
if last then redis.call('ZREM', kept, entry) end
kept_last(got[2])  -- an entry is active again: the kept passes no longer expire (lib/kept.lua)
redis.call('ZADD', active, start, entry)
end
local function org_settle(name)
local entry = ORG .. name
if org_first(name) then
activate_entry(entry)
else
local pass = redis.call('ZSCORE', active, entry)
redis.call('ZREM', active, entry)
if pass then stride_keep(entry, pass) end
end
end
local function org_hold(tenant, step)
local h, t, weight, n, org = parse_tenant(redis.call('HGET', state, tenant_field(tenant)))
if not org then return false end
org_leave(org, tenant)
if step > 0 then
local own = tonumber(org.pass)  -- none when its record was written again while it was parked
if own then org.pass = string.format(PASS_FORMAT, math.max(0, own - step)) end
local entry, share = ORG .. org.name, step * (tonumber(weight) or 1) / (tonumber(org.weight) or 1)
local top = redis.call('ZSCORE', active, entry)
if top then redis.call('ZADD', active, tonumber(top) - share, entry) end
end
redis.call('HSET', state, tenant_field(tenant), tenant_record(h, t, weight, n, org))
org_settle(org.name)
return true
end
local WAKE_CAP = 16  -- wake-ups kept for workers blocked while only parked tenants' jobs wait
local function activate(tenant, record, waited)
if record == nil then record = redis.call('HGET', state, tenant_field(tenant)) end
local h, t, weight, n, org = parse_tenant(record)
if not org then
if not waited then activate_entry(tenant) end
return
end
if org.on then return end
local _, first = org_first(org.name)
local start = tonumber(org.pass)
if first then
local base = key_pass(first)
start = math.max(base, math.min(start or base, base + 1 / (tonumber(weight) or 1)))
end
org_enter(org, tenant, start or 0)
redis.call('HSET', state, tenant_field(tenant), tenant_record(h, t, weight, n, org))
activate_entry(ORG .. org.name)  -- its set has an active tenant now: org_settle() need not read it again
end
local function org_served(org, pass)
local entry = ORG .. org.name
if org.alone == false then
redis.call('ZADD', active, pass, entry)
elseif org.alone then
redis.call('ZREM', active, entry)
stride_keep(entry, pass)
else
redis.call('ZADD', active, pass, entry)
org_settle(org.name)
end
end
local function stride_idle(tenant, pass, org, served)
if org == nil then org = select(5, parse_tenant(redis.call('HGET', state, tenant_field(tenant)))) or false end
if not served then redis.call('ZREM', parked, tenant) end
redis.call('HDEL', state, tenant_field(tenant))  -- its record (lib/fifo.lua), waiting count and all
if org then
org_leave(org, tenant)
if served then org_served(org, served) else org_settle(org.name) end
else
redis.call('ZREM', active, tenant)
if pass then stride_keep(tenant, pass) end
end
end
local function park_until(tenant, until_ms, later, due)
if later then
redis.call('ZADD', parked, 'GT', until_ms, tenant)
else
redis.call('ZADD', parked, until_ms, tenant)
end
if due == nil then due = tonumber(redis.call('HGET', state, 'due') or '') end
if not due or until_ms < due then redis.call('HSET', state, 'due', until_ms) end
end
local function stride_hold(tenant, until_ms, step, due)
local pass = redis.call('ZSCORE', active, tenant)
if pass then
redis.call('ZREM', active, tenant)
stride_keep(tenant, tonumber(pass) - step)
elseif org_hold(tenant, step) then  -- luacheck: ignore (a tenant of an org: done)
elseif step > 0 then  -- not active: its last job was taken (idle, pass kept), or it is parked already
local last = tonumber(redis.call('ZSCORE', kept, tenant) or '')
if last then redis.call('ZADD', kept, last - step, tenant) end
end
park_until(tenant, until_ms, true, due)
end
local function end_park(tenant)
if redis.call('ZREM', parked, tenant) == 0 then return false end
if is_org(tenant) then  -- an org's entry (lib/claims.lua park_org): back while it has active tenants
if not org_first(string.sub(tenant, 2)) then return false end
activate_entry(tenant)
return true
end
local record = redis.call('HGET', state, tenant_field(tenant))
if not record then return false end
activate(tenant, record)
return true
end
local function first_park_end()
local first = redis.call('ZRANGE', parked, 0, 0, 'WITHSCORES')
if #first == 0 then return -1 end
return tonumber(first[2])
end
local function wake_one()
if redis.call('RPUSH', wake, '1') > WAKE_CAP then redis.call('LTRIM', wake, -WAKE_CAP / 2, -1) end
end
local function keep_costs(job_id, declared, func)
if func ~= '' or declared ~= '' then redis.call('HSET', costs, job_id, declared .. '|' .. func) end
end
local function charge_entry(tenant, weight, cost, now_ms, declared, func, org, waiting)
local value = table.concat({tenant, weight, cost, now_ms, declared, func}, '|')
if not org then return value end
local inner = not org.alone and waiting > 1
return '!' .. org.name .. '|' .. org.weight .. '|' .. (inner and '1' or '0') .. '|' .. value
end
local function parse_charged(value)
local org = nil
if string.byte(value, 1) == 33 then  -- '!'
local name, org_weight, inner, rest = string.match(value, '^!([^|]*)|([^|]*)|([^|]*)|(.*)$')
org, value = {name = name, weight = tonumber(org_weight) or 1, inner = inner == '1'}, rest
end
local tenant, weight, estimate, popped, declared, func =
string.match(value, '^([^|]*)|([^|]*)|([^|]*)|([^|]*)|([^|]*)|(.*)$')
return tenant, tonumber(weight), tonumber(estimate), tonumber(popped), declared, func, org
end
bind_keys()
local now_ms = clock_ms(ARGV[1])
local job_id, measured, trust = ARGV[2], tonumber(ARGV[3]), ARGV[4] == '1'
local ALPHA = 0.2  -- weight of the newest run time in the recent means (about the last 5-10 runs count)
local MAX_MEANS = 10000
local value = redis.call('HGET', charged, job_id)
if not value then return 0 end
redis.call('HDEL', charged, job_id)
local tenant, weight, estimate, popped, declared, func, org = parse_charged(value)
local cost = measured or math.max(0, (now_ms - popped) / 1000)
if trust and tonumber(declared) then cost = tonumber(declared) end
local function moved(known)
local mean = tonumber(known or '')
if mean then return mean + ALPHA * (measured - mean) end
return measured
end
if measured then
local own, of_func = tenant .. '|' .. func, '*|' .. func
local known = redis.call('HMGET', runtimes, own, of_func, '*|*')
if has_waiting(tenant) then
redis.call('HSET', runtimes, own, moved(known[1]), of_func, moved(known[2]), '*|*', moved(known[3]))
else
redis.call('HSET', runtimes, of_func, moved(known[2]), '*|*', moved(known[3]))
if known[1] then redis.call('HDEL', runtimes, own) end
end
if redis.call('HLEN', runtimes) > MAX_MEANS then
for _, field in ipairs(redis.call('HRANDFIELD', runtimes, 2)) do
if string.sub(field, 1, 2) ~= '*|' then redis.call('HDEL', runtimes, field) end
end
end
end
local function settle_entry(entry, delta)
local pass = redis.call('ZSCORE', active, entry)
if pass then
redis.call('ZADD', active, tonumber(pass) + delta, entry)
return
end
local last = redis.call('ZSCORE', kept, entry)
if last then
redis.call('ZADD', kept, tonumber(last) + delta, entry)
elseif delta > 0 then
local vtime = tonumber(redis.call('HGET', state, 'vtime') or '0')
stride_keep(entry, vtime + delta)  -- lib/kept.lua: expires with the other kept passes while none is active
end
end
local function settle_in_org(name, delta)
local h, t, stored, n, org = parse_tenant(redis.call('HGET', state, tenant_field(tenant)))
if not (org and org.name == name and tonumber(org.pass)) then return end
local pass = math.max(0, tonumber(org.pass) + delta)
if org.on then
org_leave(org, tenant)
org_enter(org, tenant, pass)
else
org.pass = string.format(PASS_FORMAT, pass)
end
redis.call('HSET', state, tenant_field(tenant), tenant_record(h, t, stored, n, org))
end
local excess = cost - estimate
if excess == 0 then return 1 end
if not org then
settle_entry(tenant, excess / weight)
return 1
end
settle_entry(ORG .. org.name, excess / org.weight)
if org.inner then settle_in_org(org.name, excess / weight) end
return 1
