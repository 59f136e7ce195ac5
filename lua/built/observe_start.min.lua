-- lua/built/observe_start.min.lua: lua/observe_start.lua without comments (make lua)
local function clock_ms(given)
local now = tonumber(given)
if now then return now, given end
local t = redis.call('TIME')
local us = t[2]
local ms = string.sub(string.rep('0', 6 - #us) .. us, 1, 3)
return tonumber(t[1]) * 1000 + math.floor(tonumber(us) / 1000), t[1] .. ms
end
local cap, ttl, minute_slots, tick_ms, tick_slots, n_buckets, recent_ms = tonumber(ARGV[2]), tonumber(ARGV[3]),
tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8])
local FIRST_GROUP = 9  -- ARGV index of the first group's fields (lib/obs_groups.lua)
local SLICE = 2000
local function call_sliced(command, key, values, per, each, option)
for first = 1, #values, per do
local last = math.min(first + per - 1, #values)
local reply
if option then
reply = redis.call(command, key, option, unpack(values, first, last))
else
reply = redis.call(command, key, unpack(values, first, last))
end
if each then each(reply, first) end
end
end
local function obs_int(x) return string.format('%d', x) end
local minutes, ticks, totals = {}, {}, {}
local function minute_of(minute)
local n = minutes[minute]
if not n then
local ms = minute % minute_slots
n = {minute = minute, held = 'm' .. ms, places = 'a' .. ms, value = obs_int(minute), prefix = ms .. ':', b = {}}
minutes[minute] = n
end
return n
end
local function tick_of(tick)
local n = ticks[tick]
if not n then
local ts = tick % tick_slots
n = {tick = tick, held = 't' .. ts, value = obs_int(tick), n = 'n' .. ts, s = 's' .. ts}
ticks[tick] = n
end
return n
end
local function read_groups(now_ms)
local groups, tenants, order = {}, {}, {}
local i = FIRST_GROUP
for g = 1, #KEYS - 3 do
local at = now_ms - tonumber(ARGV[i])
local m = minute_of(math.floor(at / 60000))
local group = {key = KEYS[3 + g], tenant = string.match(KEYS[3 + g], '[^:]*$'), at = at, m = m,
t = tick_of(math.floor(at / tick_ms)),
n = tonumber(ARGV[i + 1]), us = tonumber(ARGV[i + 2]), b = {}}
for j = i + 4, i + 2 + 2 * tonumber(ARGV[i + 3]), 2 do
local b = ARGV[j]
if not m.b[b] then m.b[b] = m.prefix .. b end
if not totals[b] then totals[b] = 'c:' .. b end
group.b[b] = tonumber(ARGV[j + 1])
end
i = i + 4 + 2 * tonumber(ARGV[i + 3])
groups[g] = group
local own = tenants[group.key]
if not own then
own = {}
tenants[group.key] = own
order[#order + 1] = group.key
end
own[#own + 1] = group
end
return groups, tenants, order
end
local function record_delta() return {m = {}, t = {}, c = {}, us = 0, any = false} end
local function record_add(d, g)
local m = d.m[g.m]
if not m then
m = {}
d.m[g.m] = m
end
local c = d.c
for b, count in pairs(g.b) do
m[b] = (m[b] or 0) + count
c[b] = (c[b] or 0) + count
end
local t = d.t[g.t]
if not t then
t = {0, 0}
d.t[g.t] = t
end
t[1], t[2] = t[1] + g.n, t[2] + g.us
d.us = d.us + g.us
d.any = true
end
local function record_read(key, d, places)
local names = {'c:us'}
for m, buckets in pairs(d.m) do
names[#names + 1] = m.held
if places then names[#names + 1] = m.places end
for b in pairs(buckets) do names[#names + 1] = m.b[b] end
end
for t in pairs(d.t) do
names[#names + 1], names[#names + 2], names[#names + 3] = t.held, t.n, t.s
end
for b in pairs(d.c) do names[#names + 1] = totals[b] end
local values = redis.call('HMGET', key, unpack(names))
local v = {}
for j = 1, #names do v[names[j]] = values[j] end
return v
end
local function record_write(key, v, d, places)
local out, renewed = {}, false
local function set(name, value)
out[#out + 1], out[#out + 2] = name, obs_int(value)
end
for m, buckets in pairs(d.m) do
local held = tonumber(v[m.held])
if not held or held < m.minute then  -- the slot's first start this minute: drop what it held before
local stale = {}
for b = 0, n_buckets - 1 do stale[#stale + 1] = m.prefix .. b end
redis.call('HDEL', key, unpack(stale))
renewed = true
out[#out + 1], out[#out + 2] = m.held, m.value
for b, count in pairs(buckets) do set(m.b[b], count) end
elseif held == m.minute then
for b, count in pairs(buckets) do set(m.b[b], (tonumber(v[m.b[b]]) or 0) + count) end
end  -- else the slot holds a newer minute: this one has left the windows
if places and places[m.minute] and (not held or held <= m.minute) then set(m.places, places[m.minute]) end
end
for t, add_t in pairs(d.t) do
local held = tonumber(v[t.held])
if not held or held < t.tick then
out[#out + 1], out[#out + 2] = t.held, t.value
set(t.n, add_t[1])
set(t.s, add_t[2])
elseif held == t.tick then
set(t.n, (tonumber(v[t.n]) or 0) + add_t[1])
set(t.s, (tonumber(v[t.s]) or 0) + add_t[2])
end
end
for b, count in pairs(d.c) do set(totals[b], (tonumber(v[totals[b]]) or 0) + count) end
set('c:us', (tonumber(v['c:us']) or 0) + d.us)
redis.call('HSET', key, unpack(out))
if renewed then redis.call('EXPIRE', key, ttl) end
end
local function unread(order, tenants, places, now_ms)
local candidates, names = {}, {}
for _, key in ipairs(order) do
local full = true
for _, g in ipairs(tenants[key]) do
local count = places[g.m.minute]
if not count or count < cap or g.m.minute * 60000 < now_ms - recent_ms then
full = false
break
end
end
if full then
candidates[#candidates + 1] = key
names[#names + 1] = tenants[key][1].tenant
end
end
local skip = {}
if #names == 0 then return skip end
local last = redis.call('ZMSCORE', KEYS[3], unpack(names))
for i, key in ipairs(candidates) do
local at = tonumber(last[i])
local admitted = false
for _, g in ipairs(tenants[key]) do
if at and at >= g.m.minute * 60000 then admitted = true end
end
if not admitted then skip[key] = true end
end
return skip
end
local now_ms = clock_ms(ARGV[1])
local groups, tenants, order = read_groups(now_ms)  -- lib/obs_groups.lua; records: lib/obs_record.lua
local all = record_delta()
for _, g in ipairs(groups) do record_add(all, g) end
local all_v = record_read(KEYS[2], all, true)
local places = {}
for m in pairs(all.m) do
local held = tonumber(all_v[m.held])
if held == m.minute then places[m.minute] = tonumber(all_v[m.places]) or 0
elseif held and held > m.minute then places[m.minute] = false  -- too old to check: not capped
else places[m.minute] = 0 end
end
local skip = unread(order, tenants, places, now_ms)
local values, decided = {}, {}
for _, key in ipairs(order) do
if not skip[key] then
local d = record_delta()
for _, g in ipairs(tenants[key]) do record_add(d, g) end
values[key] = record_read(key, d, false)
end
decided[key] = {}
end
local other, admitted = record_delta(), {}
for _, g in ipairs(groups) do
local minute = g.m.minute
local verdict = decided[g.key][minute]
if verdict == nil and skip[g.key] then
verdict = false
decided[g.key][minute] = false
elseif verdict == nil then
local held = tonumber(values[g.key][g.m.held])
if places[minute] == false or (held and held >= minute) then
verdict = true  -- it holds the minute already (or the minute is too old for the cap)
elseif places[minute] < cap then
places[minute] = places[minute] + 1
admitted[g.tenant] = math.max(admitted[g.tenant] or 0, g.at)  -- the latest, whatever the groups' order
verdict = true
else
verdict = false
end
decided[g.key][minute] = verdict
end
g.own = verdict
if not verdict then record_add(other, g) end
end
for _, key in ipairs(order) do
local mine = record_delta()
for _, g in ipairs(tenants[key]) do
if g.own then record_add(mine, g) end
end
if mine.any then record_write(key, values[key], mine, false) end
end
if other.any then record_write(KEYS[1], record_read(KEYS[1], other, false), other, false) end
for minute, count in pairs(places) do
if count == false then places[minute] = nil end
end
record_write(KEYS[2], all_v, all, places)
local zadd = {}
for tenant, at in pairs(admitted) do
zadd[#zadd + 1] = obs_int(at)
zadd[#zadd + 1] = tenant
end
call_sliced('ZADD', KEYS[3], zadd, SLICE, nil, 'GT')
if next(admitted) then
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', '(' .. obs_int(now_ms - recent_ms))
redis.call('PEXPIRE', KEYS[3], obs_int(recent_ms))
end
local placed = {}
for g, group in ipairs(groups) do placed[g] = group.own and 1 or 0 end
return placed
