-- lua/built/fair_hold.min.lua: lua/fair_hold.lua without comments (make lua)
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
local function forgotten(tenant)
if has_waiting(tenant) then return false end
local held = redis.call('HGET', claimed, tenant)
if held and tonumber(held) > 0 then return false end
return not redis.call('ZSCORE', parked, tenant), held ~= false
end
local function forget(tenant)
local gone, counted = forgotten(tenant)
if not gone then return end
redis.call('HDEL', limits, tenant, tenant .. '|r')
if counted then redis.call('HDEL', claimed, tenant) end
end
local PACED_FOR_MS = 60000  -- a tenant stays paced this long after its last start report that wrote it
local PACED_RENEW_MS = 30000  -- a report renews the pace only when less than this is left (a read, no writes)
local PACED_WAIT_MS = 2000  -- a pop parks a paced tenant this long at most, until its start's report
local function claim(tenant, job_id, now_ms, lease_ms, limited, org)
if not limited then return nil end  -- state.limited: no limit or pace was ever reported here
local entry = org and (ORG .. org) or nil
local known = entry and redis.call('HMGET', limits, tenant, tenant .. '|r', entry)
or redis.call('HMGET', limits, tenant, tenant .. '|r')  -- (a nil argument is refused)
local limit, paced, org_limit = tonumber(known[1]), tonumber(known[2]), tonumber(known[3])
local until_ms, org_until = nil, nil
if org_limit and lease_ms > 0 then
redis.call('ZADD', claims, string.format('%d', now_ms + lease_ms), entry .. '|' .. job_id)
if redis.call('HINCRBY', claimed, entry, 1) >= org_limit then org_until = now_ms + lease_ms end
end
if limit and lease_ms > 0 then
redis.call('ZADD', claims, string.format('%d', now_ms + lease_ms), tenant .. '|' .. job_id)
if redis.call('HINCRBY', claimed, tenant, 1) >= limit then until_ms = now_ms + lease_ms end
end
if not until_ms and paced and paced > now_ms then until_ms = now_ms + PACED_WAIT_MS end
return until_ms, org_until
end
local function park_org(name, pass, until_ms, due)
local entry = ORG .. name
if pass == nil then pass = redis.call('ZSCORE', active, entry) end
if redis.call('ZREM', active, entry) == 1 and pass then stride_keep(entry, pass) end
park_until(entry, until_ms, true, due)
end
local function report_pace(tenant, now_ms, until_ms)
if until_ms <= now_ms then
redis.call('HDEL', limits, tenant .. '|r')
return
end
local paced = tonumber(redis.call('HGET', limits, tenant .. '|r') or '')
if paced and paced - now_ms > PACED_RENEW_MS then return end
redis.call('HSET', limits, tenant .. '|r', string.format('%d', now_ms + PACED_FOR_MS))
redis.call('HSET', state, 'limited', 1)
end
local function park_paced(tenant, until_ms)
local first = first_park_end()
park_until(tenant, until_ms, false)
if first < 0 or until_ms < first then wake_one() end
end
local function unclaim(tenant, job_id)
if redis.call('ZREM', claims, tenant .. '|' .. job_id) == 0 then return false end
local left = redis.call('HINCRBY', claimed, tenant, -1)
if left >= 0 then return left end
redis.call('HDEL', claimed, tenant)  -- below 0 (a count lost): back to none
return 0
end
local function learn_limit(tenant, limit)
local n = tonumber(limit)
if n and n > 0 then
if tonumber(redis.call('HGET', limits, tenant) or '') == n then return n end
redis.call('HSET', limits, tenant, n)
redis.call('HSET', state, 'limited', 1)
elseif n then
redis.call('HDEL', limits, tenant)
end
return n
end
local function under_limit(tenant, known)
local limit = known or tonumber(redis.call('HGET', limits, tenant) or '')
if limit == 0 then return true end
return not limit or tonumber(redis.call('HGET', claimed, tenant) or '0') < limit
end
local function sweep_claims(now_ms)
for _, member in ipairs(redis.call('ZRANGEBYSCORE', claims, '-inf', now_ms, 'LIMIT', 0, 64)) do
local tenant, job_id = string.match(member, '^([^|]*)|(.*)$')
unclaim(tenant, job_id)
forget(tenant)  -- lib/forget.lua: its last claim expired with nothing waiting: its limit goes
end
end
bind_keys()
local tenant, until_ms, paced = ARGV[1], tonumber(ARGV[2]), ARGV[3] == '1'
local now_ms = clock_ms(ARGV[4])
if paced then report_pace(tenant, now_ms, until_ms) end
if not has_waiting(tenant) then
forget(tenant)  -- nothing waiting, claimed or parked here: its pace goes (lib/forget.lua)
return 0
end
if not paced then
stride_hold(tenant, until_ms, 0)
elseif not under_limit(tenant) then  -- parked at its concurrency limit too: that park ends at a release
park_until(tenant, until_ms, true)
elseif until_ms > now_ms then
park_paced(tenant, until_ms)
elseif end_park(tenant) then
wake_one()
end
return 1
