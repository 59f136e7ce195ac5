-- lib/fair_keys.lua: the fair queue's keys, one local each, in the order fair_router.core.keys.FairQueueKeys
-- declares its fields (FairQueueKeys.all_for_scripts passes them in that order; tests/test_lua_files.py
-- checks the two agree). A fair script calls bind_keys() first: the pieces it includes read these locals.
-- Bound per call rather than where they are declared, so that the same text serves a Redis function
-- library, whose pieces are defined once and whose calls each bring their own KEYS.
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

-- lib/time.lua: the one clock every script decides with.

-- Now in ms: `given` (an ARGV slot holding the injected clock's ms) when it is a number, else ('') the
-- Redis server's TIME, so that every caller sharing one Redis agrees on the time. The second result is the same
-- ms as text, for redis.call (a Lua number crosses it through sprintf "%.17g"): `given` as it is, or TIME's two
-- replies joined (its microseconds padded to six digits, their first three: no number formatted).
local function clock_ms(given)
  local now = tonumber(given)
  if now then return now, given end
  local t = redis.call('TIME')
  local us = t[2]
  local ms = string.sub(string.rep('0', 6 - #us) .. us, 1, 3)
  return tonumber(t[1]) * 1000 + math.floor(tonumber(us) / 1000), t[1] .. ms
end

-- lib/records.lua: a tenant's record in a fair queue's `state` (lib/fifo.lua): its field, reading and writing it.
-- include: fair_keys

-- The field of `tenant`'s record in `state` (lib/fifo.lua). '=' is never part of an encoded tenant, so a
-- record cannot meet the state's own fields (head, vtime, due, limited, kept_ttl).
local RECORD = '='
local function tenant_field(tenant)
  return RECORD .. tenant
end

-- Whether `tenant` has jobs waiting here: it has a record (lib/fifo.lua) exactly while it does.
local function has_waiting(tenant)
  return redis.call('HEXISTS', state, tenant_field(tenant)) == 1
end

-- A record's head and tail (numbers), weight (as stored), waiting count and organisation (nil: the tenant is
-- its own org), or nil when there is none (or it cannot be read: then as if there were none). A record
-- without a count (written before counts moved in, with no count for fair_migrate.lua to fold in) counts its
-- places, holes too: a count too high is safe and corrects itself (serve_choose() idles a tenant whose FIFO
-- it finds empty), one too low would strand jobs. A tenant of an org has four more fields, "|<org>|<org
-- weight>|<pass in its org>|<1: in `orgs`, 0: not (parked, or not yet activated)>", read into a table. Then the
-- head and tail as written: a caller that only passes them on to redis.call or into a record need not format them
-- again (a Lua number becomes text through sprintf, about 0.2 µs each).
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

-- A record's value (parse_tenant reads it); `org`: its organisation as parse_tenant returns it, or nil.
local function tenant_record(h, t, weight, n, org)
  local value = h .. '|' .. t .. '|' .. weight .. '|' .. n
  if org then
    value = value .. '|' .. org.name .. '|' .. org.weight .. '|' .. org.pass .. '|' .. (org.on and '1' or '0')
  end
  return value
end


-- lib/kept.lua: the passes of entries gone idle or parked (`kept`), and their life while nothing is active.
-- include: fair_keys

-- While no tenant is active, the kept passes expire together this long after the last was kept: a pass kept
-- above the virtual time is a debt of about one step, which a queue that served no one for a minute forgets
-- (the returning tenant then starts at the virtual time), so tenants that came and went leave no state.
local KEPT_IDLE_MS = 60000

-- An entry's pass is kept for its return (idle or parked); while nothing is active the kept passes expire
-- after KEPT_IDLE_MS, and state.kept_ttl says so (kept_last). `others`: the caller knows another entry stays
-- active (no EXISTS to ask).
local function stride_keep(entry, pass, others)
  redis.call('ZADD', kept, pass, entry)
  if not others and redis.call('EXISTS', active) == 0 then
    redis.call('PEXPIRE', kept, KEPT_IDLE_MS)
    redis.call('HSET', state, 'kept_ttl', 1)
  end
end

-- An entry is active again: the kept passes no longer expire. `ttl`: state.kept_ttl as the caller read it with
-- the state's other fields; without it they do not expire (only stride_keep gives them a life): no PERSIST.
local function kept_last(ttl)
  if not ttl then return end
  redis.call('PERSIST', kept)
  redis.call('HDEL', state, 'kept_ttl')
end

-- lib/orgs.lua: organisations above tenants (docs/fair-queue.md, "Organisations"): the top-level entries of
-- `active` (a tenant without org, or an org) and each org's set of active tenants in `orgs`.
-- include: fair_keys, records, kept

-- and, for each org with an active tenant, the entry ORG .. <encoded org> scored by the org's pass ('!' is
-- never part of an encoded tenant, nor the '#none' of jobs without tenant). Inside an org its active tenants
-- are members "<org>\0<pass key><tenant>" of `orgs`, all scored 0: the first in lex order from "<org>\0" is the
-- org's min-pass tenant. The pass key is the pass as its record writes it (PASS_FORMAT: 6 decimals) packed as 8
-- bytes of a big-endian double, which for passes >= 0 sort as the numbers do (8 bytes where the text took 20, an
-- encoded org never holds '\0'). A tenant's pass in its org lives in its record, so its member can be rebuilt; an
-- org's own pass lives in `active` (or `kept`) like a tenant's. Queues without orgs never touch `orgs`: one byte
-- compared per pop is their cost.
local ORG = '!'
local PASS_FORMAT = '%.6f'
local KEY_BYTES = 8

local function is_org(entry)
  return string.byte(entry, 1) == 33  -- '!'
end

-- The key a pass as written (a record's text) sorts by in `orgs` (-0 as 0: its sign bit would sort it last); nil
-- for none.
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

-- The min-pass active tenant of org `name`, its pass key, its member and whether it is the org's only active
-- tenant; nil when it has none. The key has its fixed width: cut out by position.
local function org_first(name)
  local got = redis.call('ZRANGEBYLEX', orgs, '[' .. name .. '\0', '(' .. name .. '\1', 'LIMIT', '0', '2')
  local member, n = got[1], #name
  if not member then return nil end
  return string.sub(member, n + 2 + KEY_BYTES), string.sub(member, n + 2, n + 1 + KEY_BYTES), member, got[2] == nil
end

-- The tenant a top-level entry stands for: itself, or an org's min-pass tenant (nil: none), and for an org's
-- whether that tenant is its only active one, its member in `orgs` and its pass key there.
local function entry_tenant(entry)
  if entry and is_org(entry) then
    local tenant, pass, member, alone = org_first(string.sub(entry, 2))
    return tenant, alone, member, pass
  end
  return entry
end

-- A pop's read of an org tenant's place (entry_tenant's) onto its record's org: whether it is alone, and its
-- member when the record's pass is the member's (leaving the set then need not build it again).
local function org_known(org, alone, member, key)
  org.alone = alone
  if org.on and key == pass_key(org.pass) then org.member = member end
end

-- `tenant` of `org` enters its org's set at `pass` (a number); its record is written by the caller.
local function org_enter(org, tenant, pass)
  if not (pass > 0) then pass = 0 end  -- -0 too: written '-0...' it would not be the 0 it is
  org.pass, org.on = string.format(PASS_FORMAT, pass), true
  org.member = org_member(org, tenant)
  redis.call('ZADD', orgs, '0', org.member)
end

-- `tenant` of `org` leaves its org's set (its pass stays in its record for its return).
local function org_leave(org, tenant)
  if org.on then redis.call('ZREM', orgs, org.member or org_member(org, tenant)) end
  org.on, org.member = false, nil
end

-- (Re)activation of a top-level entry (a tenant without org, or an org not parked): it starts at the virtual time,
-- or at its pass when it went idle if later. Idle time earns nothing; nor does draining and refilling a turn.
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

-- Org `name` is in `active` exactly while its set has an active tenant: after one entered or left it, the org
-- (re)activates, or leaves keeping its pass like a tenant.
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

-- A parked tenant of an org leaves its org's set keeping its pass less `step` in its record; its org's pass
-- is refunded by the same share at the org's weight. Returns true when `tenant` has an org.
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

-- lib/stride.lua: the stride schedule of a fair queue's tenants: who may be served (active), the passes
-- kept for idle and parked tenants, and the wake-ups of workers blocked while only parked tenants wait.
-- include: fair_keys, records, orgs

local WAKE_CAP = 16  -- wake-ups kept for workers blocked while only parked tenants' jobs wait

-- (Re)activation of a tenant with waiting jobs (`record`: its record when the caller read it, else nil). A
-- tenant without org is a top-level entry (activate_entry). A tenant of an org starts at its org's min pass,
-- or at the pass it kept (parked) if later, by at most one step (its org's passes restart from 0 whenever
-- none of its tenants is active, so an older pass is capped); its org then activates if it was not. `waited`:
-- it had jobs waiting here before and is not parked, so a tenant without org is active already (no ZSCORE).
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

-- Org `org`'s tenant whose last job a pop just took has left its set: the org goes on at `pass` (its pass after
-- that take) while it has other active tenants, else it leaves keeping that pass. Whether the tenant was alone
-- there is what the pop read (org.alone; nil when it did not read it: then org_settle() looks).
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

-- A tenant without waiting jobs leaves the schedule (and any park); `pass`, when given, is kept for its return
-- (a tenant of an org keeps none: it returns at its org's min pass). `org`: its org as its record says (false:
-- none), nil when the caller did not read its record. `served`: a pop just took its last job (lib/serve.lua):
-- it was active, so not parked; for a tenant of an org, its org's pass after that take (lib/orgs.lua org_served).
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

-- The park of `tenant` ends at `until_ms` (`later`: unless it ends later already). state.due is kept at or
-- before the first park end, so that a pop looks for parks to end only once one may be due. `due`: state.due
-- when the caller read it already (false: none), nil: read it.
local function park_until(tenant, until_ms, later, due)
  if later then
    redis.call('ZADD', parked, 'GT', until_ms, tenant)
  else
    redis.call('ZADD', parked, until_ms, tenant)
  end
  if due == nil then due = tonumber(redis.call('HGET', state, 'due') or '') end
  if not due or until_ms < due then redis.call('HSET', state, 'due', until_ms) end
end

-- Park a tenant until `until_ms` (a later bound it has stays): pops skip it, its jobs stay in its FIFO. It
-- leaves the schedule keeping its pass less `step` (the refund of a refused pop) for its return. `due`: as
-- park_until's.
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

-- A park ends (its bound passed, or one of the tenant's slots was released). Returns true when the
-- tenant has jobs waiting here, which are then eligible again.
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

-- When the first park ends (ms), -1 when no tenant is parked.
local function first_park_end()
  local first = redis.call('ZRANGE', parked, 0, 0, 'WITHSCORES')
  if #first == 0 then return -1 end
  return tonumber(first[2])
end

-- Wake one worker blocked on this queue's wake list (workers block there instead of on rq's list while
-- only parked tenants' jobs wait on it).
local function wake_one()
  -- past the cap, trimmed to half of it: one LTRIM per WAKE_CAP / 2 wake-ups while nobody takes them
  if redis.call('RPUSH', wake, '1') > WAKE_CAP then redis.call('LTRIM', wake, -WAKE_CAP / 2, -1) end
end

-- lib/forget.lua: a fair queue's state stays bounded by the tenants active, not by every tenant ever seen.
-- `limits` holds a tenant's concurrency limit and its pace (lib/claims.lua) as workers reported them: needed
-- while the tenant has jobs waiting here, claims running or a park, and then dropped, by the script that
-- touched the tenant as it went idle (a pop that took its last job, a release, a park's end, a start report,
-- a settle). A tenant that comes back has its limit and pace reported again by its first release, refusal or
-- start (until then a pop may hand out a job its start refuses: one park, as before its first report).
-- include: fair_keys, stride

-- Whether `tenant` has nothing here: no job waiting, no claim (a job of its handed out and not released),
-- no park. The second result: its claim count is there at 0 (lib/claims.lua unclaim leaves it).
local function forgotten(tenant)
  if has_waiting(tenant) then return false end
  local held = redis.call('HGET', claimed, tenant)
  if held and tonumber(held) > 0 then return false end
  return not redis.call('ZSCORE', parked, tenant), held ~= false
end

-- `tenant` may have gone idle: when it has nothing here, its limit, pace and claim count (0) go.
local function forget(tenant)
  local gone, counted = forgotten(tenant)
  if not gone then return end
  redis.call('HDEL', limits, tenant, tenant .. '|r')
  if counted then redis.call('HDEL', claimed, tenant) end
end

-- lib/claims.lua: a mirror, on the fair queue's own cluster slot, of its limited tenants' concurrency slots,
-- so that a pop parks a tenant that reached its limit instead of handing out a job acquire.lua would refuse.
-- `limits`: tenant -> its limit as workers last reported it (with each release and each refused start);
-- `claims`: "<tenant>|<job id>" -> expiry (ms): jobs of limited tenants that pops handed out, until their
-- release, their refusal or (a dead worker, a job outliving its lease) their expiry; `claimed`: tenant ->
-- its claims. A tenant with a rate of its own is *paced*: `limits` field "<tenant>|r" holds until when
-- (ms) its last start report (fair_hold.lua) keeps it so; a pop parks a paced tenant after each take, for
-- PACED_WAIT_MS at most, until that job's start reports when its rate allows the next one.
-- acquire.lua stays the authority: the mirror only spares the pops it would refuse.
-- include: fair_keys, stride, forget
local PACED_FOR_MS = 60000  -- a tenant stays paced this long after its last start report that wrote it
local PACED_RENEW_MS = 30000  -- a report renews the pace only when less than this is left (a read, no writes)
local PACED_WAIT_MS = 2000  -- a pop parks a paced tenant this long at most, until its start's report

-- An org's entry `!<org>` (lib/orgs.lua ORG) has its limit in `limits`, its claims in `claims` and `claimed`
-- under that name, as a tenant has (an encoded tenant never starts with '!').
-- A pop handed out `tenant`'s job: claim it for `lease_ms` when the tenant's limit is known. Returns
-- until when the tenant must be parked (ms): `lease_ms` on when it is at its limit (till a release),
-- PACED_WAIT_MS when it is paced (till its start's report); nil when it may be served on. `limited`:
-- state.limited, set once any limit or pace was reported here. `org`: the tenant's org's name (nil: none):
-- the job is claimed for it too when its limit is known; the second result: until when the org's entry must
-- be parked (nil: not).
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

-- A pop took org `name` to its known limit (or a start was refused at it: fair_park.lua): its entry leaves `active`
-- keeping `pass` (nil: the one it has there) and is parked until `until_ms` or a release of one of its jobs
-- (fair_unpark.lua): none of its tenants is served meanwhile (lib/orgs.lua activate_entry leaves a parked org's
-- entry out). `due`: as park_until's.
local function park_org(name, pass, until_ms, due)
  local entry = ORG .. name
  if pass == nil then pass = redis.call('ZSCORE', active, entry) end
  if redis.call('ZREM', active, entry) == 1 and pass then stride_keep(entry, pass) end
  park_until(entry, until_ms, true, due)
end

-- A start of paced `tenant` was admitted (its report): while its rate binds (its next start is after now) it
-- stays paced for PACED_FOR_MS; a tenant paced for PACED_RENEW_MS more already is left as it is (one read per
-- report, the two writes about twice a minute). A report of a start its rate no longer holds (sent only when
-- the tenant was paced: lib/start_rate.lua) ends the pace: pops stop parking it after each take.
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

-- Park paced `tenant` exactly until `until_ms`, when its rate allows its next start (its start's report, or a
-- start its rate refused). This replaces a pop's PACED_WAIT_MS bound, so the park may now end before the first
-- park end that pops told blocked workers (lib/stride.lua first_park_end): then one is woken, to look again
-- and block until this end instead of oversleeping the tenant's token.
local function park_paced(tenant, until_ms)
  local first = first_park_end()
  park_until(tenant, until_ms, false)
  if first < 0 or until_ms < first then wake_one() end
end

-- A claim ends (released, refused, expired). Returns false when `job_id` held none here, else how many claims
-- `tenant` holds here now (a number, true in Lua even when 0). A count back at 0 stays (one command less per
-- release; a claim counts up from it) until the tenant is forgotten (lib/forget.lua drops it with its limit).
local function unclaim(tenant, job_id)
  if redis.call('ZREM', claims, tenant .. '|' .. job_id) == 0 then return false end
  local left = redis.call('HINCRBY', claimed, tenant, -1)
  if left >= 0 then return left end
  redis.call('HDEL', claimed, tenant)  -- below 0 (a count lost): back to none
  return 0
end

-- Record `tenant`'s limit as a worker reported it: '' = not known to the caller (unchanged), 0 = none.
-- Returns the limit now known (0 none; nil when the caller did not know it), for under_limit.
local function learn_limit(tenant, limit)
  local n = tonumber(limit)
  if n and n > 0 then
    -- a limit already known as it is (every release reports it) is one read, not two writes
    if tonumber(redis.call('HGET', limits, tenant) or '') == n then return n end
    redis.call('HSET', limits, tenant, n)
    redis.call('HSET', state, 'limited', 1)
  elseif n then
    redis.call('HDEL', limits, tenant)
  end
  return n
end

-- True when `tenant` holds fewer claims here than its known limit (or has no known limit). `known`: the limit
-- learn_limit just returned (0 none), so it is not read again; nil: read it.
local function under_limit(tenant, known)
  local limit = known or tonumber(redis.call('HGET', limits, tenant) or '')
  if limit == 0 then return true end
  return not limit or tonumber(redis.call('HGET', claimed, tenant) or '0') < limit
end

-- Drop claims past their expiry, 64 a call at most.
local function sweep_claims(now_ms)
  for _, member in ipairs(redis.call('ZRANGEBYSCORE', claims, '-inf', now_ms, 'LIMIT', 0, 64)) do
    local tenant, job_id = string.match(member, '^([^|]*)|(.*)$')
    unclaim(tenant, job_id)
    forget(tenant)  -- lib/forget.lua: its last claim expired with nothing waiting: its limit goes
  end
end

-- fair_hold.lua: park a tenant that may not start jobs for now before any pop hands one of its jobs out:
-- paused (until `until_ms`, a later bound it has stays), or (paced) a start of a tenant with a rate of its
-- own was admitted: parked exactly until its rate allows its next start, or unparked when that is now. A
-- report of a start its rate holds also marks it paced (lib/claims.lua): pops park it after each take until
-- the next report; one of a start its rate no longer holds ends the pace (sent only then: lib/start_rate.lua).
-- include: fair_keys, time, stride, claims, forget
-- KEYS     keys.FairQueueKeys, in field order: bound to the locals of lib/fair_keys.lua.
-- ARGV     tenant (encoded), until_ms, paced ('1' = a paced tenant's start report, '0' = a pause), now_ms
--          ('' = server TIME)
-- Returns  1 if the tenant has jobs waiting here, else 0 (a pause then changes nothing).
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
