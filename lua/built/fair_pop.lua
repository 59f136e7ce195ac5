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

-- lib/members.lua: rq's list and the fair queue's members, the invariant every fair_*.lua script keeps.
-- include: fair_keys
--
-- rq's list holds exactly one entry per waiting job, the job's own id. A fair job is also a *member*: it
-- has a place in its tenant's FIFO (lib/fifo.lua). An entry that is not a member was pushed by rq's
-- internals with a plain Queue (scheduler, registry requeues) and is served in list order. A member whose
-- id is no longer on the list was removed by rq behind our back (Job.cancel, Job.delete, a plain
-- Queue.remove): it is *stale*, and dropped when the scheduler meets it.
--
-- Each member also records its *list position*: a virtual index that stays put while the list changes
-- at its ends (state.head is the position of the list head: LPOP adds 1, LPUSH takes 1). So a pop can
-- take its chosen id out with LINDEX/LSET at a known index, O(list length / listpack node size), where
-- an LREM would compare every entry. rq's own LREM or LPUSH behind our back shifts positions it does
-- not tell us about: locate() (lib/locate.lua) then looks around the recorded index, and re-records every position when
-- the drift has grown.

-- A members entry is "<list position>|<tenant>:<seq>" (position '' when unknown), `tenant:seq` its FIFO
-- field, which lives in `members` too ("<tenant>:<seq>" -> job id; rq 3.0 job ids hold no ':').
-- Returns field, tenant, position.
local function parse_member(value)
  local pos, field = string.match(value, '^([^|]*)|(.*)$')
  if not field then field = value end
  return field, string.match(field, '^(.*):[^:]*$'), tonumber(pos)
end

-- The list head's position: state.head as the caller read it already (`known`: its value, false when unset),
-- else read here.
local function head_pos(known)
  if known == nil then known = redis.call('HGET', state, 'head') end
  return tonumber(known or '0')
end

-- Push `job_id` at the list's tail (or head); returns its list position. `head`: state.head when the caller
-- read it already (as for head_pos), else nil.
local function list_push(job_id, at_front, head)
  if at_front then
    redis.call('LPUSH', rq_list, job_id)
    return redis.call('HINCRBY', state, 'head', -1)
  end
  return head_pos(head) + redis.call('RPUSH', rq_list, job_id) - 1
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

-- lib/fifo.lua: each tenant's FIFO of waiting members: a job's place, its entry and its leaving. The FIFO's
-- fields ("<tenant>:<seq>" -> job id) live in `members`, beside the members' own (lib/members.lua).
-- include: fair_keys, stride, members, forget
--
-- A tenant with waiting jobs has a *record*, field "=<tenant>" of `state` (stride.lua tenant_field):
-- "<head seq>|<tail seq>|<weight>|<waiting>", its FIFO's ends, its weight from its last push and how many of
-- its jobs wait here. One field, in the hash the pop reads and writes anyway, so a pop reads and updates all
-- of it with the state's own fields (a count of its own would cost each push and each pop a command). A tenant
-- of an organisation adds its org's fields (lib/stride.lua parse_tenant).

-- One job of `tenant` less waiting here (it left its FIFO other than by a pop): the tenant goes idle,
-- keeping its pass, when that was its last job.
local function uncount(tenant)
  local h, t, weight, n, org = parse_tenant(redis.call('HGET', state, tenant_field(tenant)))
  if not h or n <= 1 then
    stride_idle(tenant, not org and redis.call('ZSCORE', active, tenant), org or false)
    forget(tenant)  -- lib/forget.lua: with no claim nor park here, its limit and pace go
  else
    redis.call('HSET', state, tenant_field(tenant), tenant_record(h, t, weight, n - 1, org))
  end
end

-- The place of a new job in its tenant's FIFO: after its tail, or before its head (`at_front`);
-- `wanted` (a refused job's old place) is used when it is free and not past the tail. Writes the
-- tenant's record, with `weight` and the job counted. `weight`: the tenant's weight, or for a tenant of an
-- organisation "<weight>|<encoded org>|<org weight>" (a record's org stays, its weight follows the push).
-- `record`: the tenant's record when the caller read it already (false: it has none), else nil. Returns the
-- place, the record written and its org (nil: none), so that a caller need not parse the record again.
local function fifo_place(tenant, at_front, wanted, weight, record)
  if record == nil then record = redis.call('HGET', state, tenant_field(tenant)) end
  local h, t, _, n, org = parse_tenant(record)
  local own, org_name, org_weight = string.match(weight, '^([^|]*)|([^|]*)|(.*)$')
  if own then
    weight = own
    if org then org.weight = org_weight else org = {name = org_name, weight = org_weight, pass = '', on = false} end
  end
  local seq
  if not h then
    seq = wanted or 0
    h, t = seq, seq
  elseif wanted and wanted <= t and redis.call('HEXISTS', members, tenant .. ':' .. wanted) == 0 then
    seq = wanted
    if wanted < h then h = wanted end
  elseif at_front then
    h = h - 1
    seq = h
  else
    t = t + 1
    seq = t
  end
  record = tenant_record(h, t, weight, (n or 0) + 1, org)
  redis.call('HSET', state, tenant_field(tenant), record)
  return seq, record, org
end

-- A job joins its tenant's FIFO at `seq` (from fifo_place(), which counted it); its id sits at list position
-- `pos` ('' when unknown).
local function fifo_enter(job_id, tenant, seq, pos)
  local field = tenant .. ':' .. seq
  redis.call('HSET', members, field, job_id, job_id, pos .. '|' .. field)  -- its FIFO place and its entry
end

-- A member leaves its tenant's FIFO other than by a fair pop (taken as a list entry, removed, or
-- found stale). Its tenant goes idle, keeping its pass, when that was its last job.
local function fifo_leave(job_id, value)
  local field, tenant = parse_member(value)
  redis.call('HDEL', members, job_id, field)
  redis.call('HDEL', costs, job_id)
  uncount(tenant)
end

-- lib/locate.lua: finding a member on rq's list by its recorded position (lib/members.lua), for the pop.
-- include: fair_keys, members

-- Record that member `job_id` (members entry `value`) now sits at list position `pos`.
local function set_pos(job_id, pos, value)
  local field = parse_member(value)
  redis.call('HSET', members, job_id, pos .. '|' .. field)
end

-- Re-record the position of every member from the list itself (`head`: the list head's position):
-- O(list length), after drift.
local function reindex(head)
  local listed = redis.call('LRANGE', rq_list, 0, -1)
  for i, entry in ipairs(listed) do
    local value = redis.call('HGET', members, entry)
    if value then set_pos(entry, head + i - 1, value) end
  end
end

-- The index of member `job_id` on rq's list, or nil when it is not there (stale). `pos`: its recorded
-- position (nil when unknown); `head`: the list head's position. Exact (one LINDEX) unless rq shifted the
-- list behind our back; then a look around the expected index, else a scan of the whole list and a reindex.
local function locate(job_id, pos, head)
  if pos then
    local expected = pos - head
    if expected >= 0 and redis.call('LINDEX', rq_list, expected) == job_id then return expected end
    for _, reach in ipairs({8, 128}) do
      local lo = math.max(0, expected - reach)
      local near = expected + reach >= 0 and redis.call('LRANGE', rq_list, lo, expected + reach) or {}
      for i, entry in ipairs(near) do
        if entry == job_id then return lo + i - 1 end
      end
    end
  end
  local found = redis.call('LPOS', rq_list, job_id)
  if found then reindex(head) end
  return found or nil
end

-- A pop found only parked tenants' members at hand, `entry` (a member, just popped off the head; members
-- entry `value`; `head` the list head's position) among them: the first plain entry further down, if there
-- is one (there is when the list holds more entries than there are members), which `entry` replaces on
-- the list, so no other entry moves. Returns that plain entry, or nil.
local function plain_further_down(entry, value, head)
  -- Each member has two fields in `members` (its entry and its FIFO place).
  if redis.call('LLEN', rq_list) + 1 <= redis.call('HLEN', members) / 2 then return nil end
  local start = 0
  while true do
    local chunk = redis.call('LRANGE', rq_list, start, start + 99)
    if #chunk == 0 then return nil end
    for i, plain in ipairs(chunk) do
      if redis.call('HEXISTS', members, plain) == 0 then
        redis.call('LSET', rq_list, start + i - 1, entry)
        set_pos(entry, head + start + i - 1, value)
        return plain
      end
    end
    start = start + 100
  end
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

-- lib/estimate.lua: what a fair pop charges for a job before it has run (charge="runtime", lib/charge.lua).
-- include: fair_keys
local FIRST_ESTIMATE = 0.01  -- seconds, charged while nothing at all has been measured on this queue

-- charge="runtime": what serving `job_id` costs before it has run: its declared cost, else the recent
-- mean run time of its function for this tenant, else for any tenant, else of any job here. The pop
-- cannot read rq's job hash (another cluster slot), so the push recorded the function in `costs`.
-- Returns the estimate (seconds), the declared cost ('' if none) and the function.
local function estimate(job_id, tenant)
  local declared, func = '', ''
  local info = redis.call('HGET', costs, job_id)
  if info then declared, func = string.match(info, '^([^|]*)|(.*)$') end
  local cost = tonumber(declared)
  if not cost then
    local known = redis.call('HMGET', runtimes, tenant .. '|' .. func, '*|' .. func, '*|*')
    cost = tonumber(known[1]) or tonumber(known[2]) or tonumber(known[3]) or FIRST_ESTIMATE
  end
  return cost, declared, func
end

-- lib/charge.lua: charge="runtime" (FairQueue docstring): `costs` holds what a waiting member's pop needs
-- to estimate its run time (its function, a declared cost), `charged` what a popped job was charged until
-- fair_settle.lua replaces it with the real cost, `runtimes` the recent mean run times the estimates come
-- from.
-- include: fair_keys

-- A waiting member's `costs` entry, "<declared seconds or ''>|<function>"; nothing when both are ''.
local function keep_costs(job_id, declared, func)
  if func ~= '' or declared ~= '' then redis.call('HSET', costs, job_id, declared .. '|' .. func) end
end

-- A popped job's `charged` entry, "<tenant>|<weight>|<estimate>|<pop ms>|<declared>|<function>" (the pop
-- charged the tenant's pass estimate / weight; declared '' when the job declared no cost). A tenant of an org
-- (`org`: its record's) has "!<org>|<org weight>|<1: its pass in its org was charged too, else 0>|" in front:
-- the pop charges that pass unless the tenant is alone in its org or leaves it (`waiting`: its count before).
local function charge_entry(tenant, weight, cost, now_ms, declared, func, org, waiting)
  local value = table.concat({tenant, weight, cost, now_ms, declared, func}, '|')
  if not org then return value end
  local inner = not org.alone and waiting > 1
  return '!' .. org.name .. '|' .. org.weight .. '|' .. (inner and '1' or '0') .. '|' .. value
end

-- Returns tenant, weight, estimate, pop ms, declared (string), function and the org ({name, weight, inner}),
-- nil for a tenant without org.
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

-- lib/serve.lua: the stride choice of a fair pop and serving it (its tenant's pass advances).
-- include: fair_keys, stride, fifo, charge, estimate, claims, forget

-- The stride choice, not yet taken: the min-pass active entry's oldest job (an org's: its min-pass tenant's).
-- `first`: {tenant, pass, record, job} of that tenant and the entry's pass when the caller read them already (job: the id at its FIFO head, false when that place is a hole, nil
-- when not read), else nil. Returns job id, seq, tenant, pass (its top-level entry's), and the tenant's tail
-- seq, weight, waiting count and org (its record, for take); or nil when no tenant can be served.
local function serve_choose(first)
  while true do
    local tenant, pass, record, known, member, alone, inner
    if first then
      tenant, pass, record, known = first[1], first[2], first[3], first[4]
      first = nil
    else
      local top = redis.call('ZRANGE', active, '0', '0', 'WITHSCORES')
      if #top == 0 then return nil end
      tenant, pass = top[1], tonumber(top[2])
      if is_org(tenant) then tenant, inner, member, alone = org_first(string.sub(tenant, 2)) end
      if tenant then
        record = redis.call('HGET', state, tenant_field(tenant))
      else  -- an org entry without active tenant (never left so): it leaves
        redis.call('ZREM', active, top[1])
      end
    end
    if tenant then
      local h, t, weight, n, org = parse_tenant(record)
      if org then org_known(org, alone, member, inner) end
      if member and not (org and org.on) then  -- a member of `orgs` whose record says otherwise: it leaves
        redis.call('ZREM', orgs, member)
        org_settle(string.match(member, '^([^%z]*)'))
        h = nil
      end
      while h and h <= t do  -- skips holes left by FairQueue.remove and by stale members dropped
        local job_id = known
        if job_id == nil then job_id = redis.call('HGET', members, tenant .. ':' .. h) end
        known = nil
        if job_id then return job_id, h, tenant, pass, t, weight, n, org end
        h = h + 1
      end
      if not member or (org and org.on) then
        stride_idle(tenant, false, org or false)  -- nothing left in its FIFO (its waiting count was off): drop it
      end
    end
  end
end

-- Serve the choice: it leaves its FIFO, its tenant's pass advances by 1 / weight (charge="jobs") or by
-- its estimated run time / weight, recorded in `charged` for the settlement (charge="runtime"). A limited
-- tenant's job is claimed (lib/claims.lua); a tenant that reached its limit is parked until a release
-- or for `lease_ms`, a paced one until its start reports. `pop`: the pop's now_ms (now_text: the same as text,
-- lib/time.lua), runtime, lease_ms, head (the list head's position, written here with the virtual time), vtime
-- (before this pop), limited and due;
-- others: true when another entry stays active if this one leaves (lib/kept.lua stride_keep need not look).
-- `tail`, `stored`, `waiting`, `org`: the tenant's tail seq, weight, waiting count and org from its record
-- (serve_choose()). A tenant of an org: `pass` is its org's, which advances by the step / the org's weight,
-- and the tenant's own pass in its org by the step / its weight. `place`: the job's FIFO field, if built. The min
-- pass goes to redis.call as `active` answered it (pop.top_text): a Lua number would cross it through sprintf.
local function serve_take(job_id, seq, tenant, pass, pop, tail, stored, waiting, org, place)
  redis.call('HDEL', members, place or (tenant .. ':' .. seq), job_id)
  local weight = tonumber(stored) or 1
  local step = 1
  if pop.runtime then
    local cost, declared, func = estimate(job_id, tenant)
    step = cost
    redis.call('HSET', charged, job_id, charge_entry(tenant, weight, cost, pop.now_ms, declared, func, org, waiting))
    redis.call('HDEL', costs, job_id)
  end
  local next_pass = pass + step / (org and (tonumber(org.weight) or 1) or weight)
  -- Kept passes at or below the virtual time change nothing on return (start = max(vtime, kept)):
  -- drop them as it advances, so idle tenants leave no state behind.
  local pass_arg = pass == pop.top_pass and pop.top_text or pass
  if pass > pop.vtime then redis.call('ZREMRANGEBYSCORE', kept, '-inf', pass_arg) end
  -- The claim first: a tenant that reaches its limit (or is paced) is parked at once, never written into
  -- `active` to be read back and taken out again (state.due as the pop read it: pop.due).
  redis.call('ZADD', inflight, pop.now_text, job_id)
  local until_ms, org_until = claim(tenant, job_id, pop.now_ms, pop.lease_ms, pop.limited, org and org.name)
  if org then
    if waiting <= 1 then  -- its org goes on at next_pass, or leaves with it (lib/stride.lua org_served)
      redis.call('HSET', state, 'vtime', pass_arg, 'head', pop.head)
      stride_idle(tenant, false, org, next_pass)
    else  -- its pass in its org advances, unless it is the org's only active tenant (nothing to compare with)
      redis.call('ZADD', active, next_pass, ORG .. org.name)
      if not org.alone then
        org_leave(org, tenant)
        org_enter(org, tenant, tonumber(org.pass) + step / weight)
      end
      redis.call('HSET', state, 'vtime', pass_arg, 'head', pop.head, tenant_field(tenant),
                 tenant_record(seq + 1, tail, stored, waiting - 1, org))
    end
    if org_until then park_org(org.name, next_pass, org_until, pop.due) end  -- first: its tenant's hold keeps it out
    if until_ms and waiting <= 1 then  -- not in `active` nor in its org's set, no record: no pass to move
      park_until(tenant, until_ms, true, pop.due)
    elseif until_ms then
      stride_hold(tenant, until_ms, 0, pop.due)
    end
  elseif waiting <= 1 then
    redis.call('HSET', state, 'vtime', pass_arg, 'head', pop.head)
    stride_idle(tenant, next_pass, false, true)
    if until_ms then park_until(tenant, until_ms, true, pop.due) end  -- not active, no record: no pass to move
  else  -- one HSET: the virtual time, the list head and the tenant's record (its head moves on, one less waits)
    redis.call('HSET', state, 'vtime', pass_arg, 'head', pop.head, tenant_field(tenant),
               tenant_record(seq + 1, tail, stored, waiting - 1))
    if until_ms then  -- parked: it leaves `active`, its pass kept for its return (lib/stride.lua stride_hold)
      redis.call('ZREM', active, tenant)
      stride_keep(tenant, next_pass, pop.others)
      park_until(tenant, until_ms, true, pop.due)
    else
      redis.call('ZADD', active, next_pass, tenant)
    end
  end
  if not until_ms and pop.limited and waiting <= 1 then
    forget(tenant)  -- its last job, neither claimed nor parked: a limit of 0 or an old pace (lib/forget.lua)
  end
end

-- lib/ties.lua: which tenant a fair pop serves among those tied on the minimum pass (lib/serve.lua).
-- include: fair_keys, records, orgs, stride

-- Tenants tied on pass are served in the order their jobs wait on rq's list: the head entry's own tenant
-- when its pass is the minimum too (`min_pass`) and the entry (its FIFO place `field` of `tenant`) is its
-- oldest member (its places before it are holes), so that no other entry moves either. With equal weights and
-- charge="jobs" passes are whole numbers: ties are the rule. fair_pop decides this once per pop, before any
-- stale member is dropped (its model test and fairqueue/serving_order.py follow the same rule). A tenant of an
-- org ties when its org's pass is the minimum and its own pass is its org's minimum. `top`, `inner`, `alone`: when
-- the min-pass entry is an org's (else nil), that entry, its min pass inside the org and whether its min-pass
-- tenant is alone there, as the pop read them: a tenant of that same org is compared without reading them again.
-- Returns the entry's seq, its tenant's pass (its org's), tail seq, weight, waiting count and org (for take), or
-- nil when the entry is not the choice.
local function tied_entry(field, tenant, min_pass, top, inner, alone)
  local h, t, weight, n, org = parse_tenant(redis.call('HGET', state, tenant_field(tenant)))
  local pass, _
  if org then
    local entry = ORG .. org.name
    if entry == top then
      pass = min_pass
    else
      _, inner, _, alone = org_first(org.name)
      pass = tonumber(redis.call('ZSCORE', active, entry) or '')
    end
    if not org.on or inner ~= pass_key(org.pass) then return nil end
    org.alone = alone
  else
    pass = tonumber(redis.call('ZSCORE', active, tenant) or '')
  end
  if pass ~= min_pass then return nil end
  local seq = tonumber(string.match(field, ':([^:]*)$'))
  while h and h < seq and redis.call('HEXISTS', members, tenant .. ':' .. h) == 0 do h = h + 1 end
  if h ~= seq then return nil end
  return seq, pass, t, weight, n, org
end

-- lib/stale.lua: members found gone from rq's list (stale, lib/members.lua), counted so that our processes
-- can tell and report it. state.stale: how many were dropped, ever; state.stale_ids: the latest STALE_KEPT of
-- them (space-separated), which fair_tidy.lua hands to Python to look at their jobs: one that ran was
-- taken by a worker without our pop (a plain `rq worker`), one that did not was removed by rq (cancel, delete).
-- include: fair_keys, stride, members, fifo
local STALE_KEPT = 16

-- Count the stale members `ids` (just dropped) and keep the latest of them.
local function note_stale(ids)
  if #ids == 0 then return end
  redis.call('HINCRBY', state, 'stale', #ids)
  local kept = {}
  for id in string.gmatch(redis.call('HGET', state, 'stale_ids') or '', '%S+') do kept[#kept + 1] = id end
  for _, id in ipairs(ids) do kept[#kept + 1] = id end
  redis.call('HSET', state, 'stale_ids', table.concat(kept, ' ', math.max(1, #kept - STALE_KEPT + 1), #kept))
end

-- `job_id`, given to a pop by the caller's BLPOP, is no member: if a pop of another worker meanwhile dropped it as
-- stale (it was off the list, in this caller's hand), it was not: taken out of the stale count and ids again.
local function unnote_stale(job_id)
  local noted = redis.call('HGET', state, 'stale_ids')
  if not noted then return end
  local kept, found = {}, false
  for id in string.gmatch(noted, '%S+') do
    if id == job_id and not found then found = true else kept[#kept + 1] = id end
  end
  if not found then return end
  redis.call('HINCRBY', state, 'stale', -1)
  redis.call('HSET', state, 'stale_ids', table.concat(kept, ' '))
end

-- A member the pop met is not on rq's list: it leaves (its tenant's count with it) and is counted.
local function drop_stale(job_id, value)
  fifo_leave(job_id, value)
  note_stale({job_id})
end

-- rq's list is empty: every member left is stale. Drop them all, keeping their tenants' passes, and count them
-- (their tenants' waiting counts: `members` also holds their FIFO places, lib/fifo.lua). Returns how many.
local function drop_all_stale()
  if redis.call('HLEN', members) == 0 then return 0 end
  local n, ids, waiting = 0, {}, {}
  local fields = redis.call('HGETALL', state)
  for i = 1, #fields, 2 do
    if string.sub(fields[i], 1, #RECORD) == RECORD then  -- a tenant's record (stride.lua tenant_field)
      local _, _, _, count = parse_tenant(fields[i + 1])
      n = n + count
      waiting[#waiting + 1] = string.sub(fields[i], #RECORD + 1)
    end
  end
  -- a sample of the member entries (a FIFO place "<tenant>:<seq>" holds a job id, a member entry "<pos>|<place>")
  local sample = redis.call('HRANDFIELD', members, 2 * STALE_KEPT, 'WITHVALUES')
  for i = 1, #sample, 2 do
    local place = #ids < STALE_KEPT and string.match(sample[i + 1], '^[^|]*|(.+)$')
    if place and redis.call('HGET', members, place) == sample[i] then ids[#ids + 1] = sample[i] end
  end
  for _, tenant in ipairs(redis.call('ZRANGE', active, 0, -1)) do
    stride_idle(tenant, redis.call('ZSCORE', active, tenant))
  end
  for _, tenant in ipairs(waiting) do stride_idle(tenant, false) end
  redis.call('DEL', members, costs, orgs)
  note_stale(ids)
  if n > #ids then redis.call('HINCRBY', state, 'stale', n - #ids) end
  return n
end

-- fair_pop.lua: take the next job of a fair queue. rq's list head decides between the two kinds of entries: an
-- id rq's internals pushed (not a member) is served as it is; a member's turn goes to the stride choice
-- (lib/serve.lua: the min-pass entry's oldest job, an org's entry standing for its min-pass tenant; ties go to
-- the head entry's tenant), whose id the head entry then replaces on the list (LSET at its recorded position).
-- O(log tenants + list length / node size). Parked tenants (limit, paused, rate) are not active: never chosen.
-- include: fair_keys, time, stride, members, fifo, locate, claims, forget, estimate, serve, ties, stale
-- KEYS     keys.FairQueueKeys, in field order: bound to the locals of lib/fair_keys.lua.
-- ARGV     now_ms ('' = server TIME), given ('' or an entry the caller already took off rq_list with
--          BLPOP), runtime ('1' = charge="runtime": the pass advances by the job's estimated run time /
--          weight, settled later by fair_settle.lua; '0' = by 1 / weight), lease_ms (a claim's life, 0 = no
--          claims: lib/claims.lua), n_acks, then n_acks ids this caller handed out earlier (run: forget them).
-- Returns  {kind, job_id, wake_ms, seq[, now_ms]}. kind 0 = the list is empty; 1 = a plain entry; 2 = a fair
--          choice (seq: its place in its tenant's FIFO, for fair_park to put it back there);
--          3 = jobs wait, but only parked tenants' (wake_ms: when the first park ends, -1 if none). Kinds 0 and 3
--          add now_ms, this pop's clock, so that a caller waits wake_ms - now_ms whatever its own clock says.
bind_keys()
local now_ms, now_text = clock_ms(ARGV[1])  -- now_text: for redis.call (lib/time.lua)
local given, runtime = ARGV[2], ARGV[3] == '1'
local lease_ms, n_acks = tonumber(ARGV[4]), tonumber(ARGV[5])
local MAX_STALE = 1000  -- stale members dropped per call at most; the next call goes on

if n_acks > 0 then redis.call('ZREM', inflight, unpack(ARGV, 6, 5 + n_acks)) end
-- The min-pass entry's tenant first (lib/orgs.lua), so that one HMGET reads its record with the state's fields;
-- and the next entry: whether another stays active when this one's tenant is parked (lib/serve.lua serve_take).
local top = redis.call('ZRANGE', active, '0', '1', 'WITHSCORES')  -- numbers as text: no sprintf
local chosen, alone, member, inner = entry_tenant(top[1])
local st = redis.call('HMGET', state, 'head', 'vtime', 'due', 'limited', tenant_field(chosen or ''))
local first = chosen and {chosen, tonumber(top[2]), st[5]} or nil  -- serve_choose()'s first look

-- Parks end by themselves after their bound (a slot may have freed where we could not see it); claims
-- past their expiry go with them. Looked for only once state.due (lib/stride.lua park_until) has come.
local due = tonumber(st[3] or '')
if due and due <= now_ms then
  for _, tenant in ipairs(redis.call('ZRANGEBYSCORE', parked, '-inf', now_ms, 'LIMIT', 0, 64)) do
    if not end_park(tenant) then forget(tenant) end  -- nothing waits: its limit and pace go (lib/forget.lua)
  end
  sweep_claims(now_ms)
  local next_due = first_park_end()
  if next_due < 0 then
    redis.call('HDEL', state, 'due'); redis.call('DEL', wake); due = nil
  else
    redis.call('HSET', state, 'due', next_due); due = next_due
  end
  top = redis.call('ZRANGE', active, '0', '1', 'WITHSCORES')  -- parks ended: the min-pass entry may have changed
  chosen, alone, member, inner = entry_tenant(top[1])
  first = chosen and {chosen, tonumber(top[2]), redis.call('HGET', state, tenant_field(chosen))} or nil
end
local pop = {now_ms = now_ms, now_text = now_text, runtime = runtime, lease_ms = lease_ms, due = due or false,
             head = tonumber(st[1] or '0') + 1, vtime = tonumber(st[2] or '0'), limited = st[4] ~= false,
             top_pass = tonumber(top[2]), top_text = top[2]}
local entry = given ~= '' and given or redis.call('LPOP', rq_list)
if not entry then
  drop_all_stale()  -- nothing waits: any member left is stale (lib/stale.lua)
  redis.call('HDEL', state, 'head')
  if redis.call('ZCARD', parked) == 0 then redis.call('DEL', wake) end
  return {0, '', first_park_end(), '', now_ms}
end
local head = pop.head  -- the head left (LPOP here, or the caller's BLPOP): written with the outcome
-- One HMGET: the entry's members value (none: an id rq's internals pushed) and the min-pass tenant's oldest job.
local h, t, weight, waiting, org, head_text, tail_text
if first then h, t, weight, waiting, org, head_text, tail_text = parse_tenant(first[3]) end
if org then org_known(org, alone, member, inner) end
if first and is_org(top[1]) and not (org and org.on) then first, h = nil, nil end  -- serve_choose() repairs
local place = h and (first[1] .. ':' .. head_text)
local got = redis.call('HMGET', members, entry, place or entry)
local entry_value = got[1]
if h and got[2] == entry then  -- the common case: the entry is the choice
  pop.others = top[3] ~= nil  -- the entry read first is the one served: another stays active
  serve_take(entry, h, first[1], first[2], pop, tail_text, weight, waiting, org, place)
  return {2, entry, -1, h}
end
if h then first[4] = got[2] end  -- serve_choose() need not read it again
if not entry_value then  -- not a member: an id rq's internals pushed, served as it is
  if given ~= '' then unnote_stale(given) end  -- lib/stale.lua: another pop may have taken it for stale
  redis.call('HSET', state, 'head', head)
  redis.call('ZADD', inflight, now_text, entry)
  return {1, entry, -1, ''}
end
local field, tenant = parse_member(entry_value)
if first and tenant ~= first[1] then  -- ties on pass go to the entry's tenant (lib/serve.lua)
  local seq, pass, tail, stored, count, its_org = tied_entry(field, tenant, first[2], org and top[1], inner, alone)
  if seq then
    serve_take(entry, seq, tenant, pass, pop, tail, stored, count, its_org)
    return {2, entry, -1, seq}
  end
end
for _ = 1, MAX_STALE do
  local job_id, seq, chosen_tenant, pass, tail, stored, count, its_org = serve_choose(first)
  first = nil
  if job_id and job_id == entry then  -- holes skipped: the entry is the choice after all
    serve_take(job_id, seq, chosen_tenant, pass, pop, tail, stored, count, its_org)
    return {2, job_id, -1, seq}
  end
  if not job_id then
    redis.call('HSET', state, 'head', head)
    local plain = plain_further_down(entry, entry_value, head)
    if plain then
      redis.call('ZADD', inflight, now_text, plain)
      return {1, plain, -1, ''}
    end
    break
  end
  local value = redis.call('HGET', members, job_id)
  local index = value and locate(job_id, select(3, parse_member(value)), head)
  if index then
    -- The head entry takes the chosen id's slot: one LSET, and no other entry moves.
    redis.call('LSET', rq_list, index, entry)
    set_pos(entry, head + index, entry_value)
    serve_take(job_id, seq, chosen_tenant, pass, pop, tail, stored, count, its_org)
    return {2, job_id, -1, seq}
  elseif value then
    drop_stale(job_id, value)  -- stale: rq removed it behind our back (lib/stale.lua)
  else  -- a FIFO place without its members entry (never written so): drop it, choose again. Its count stays
    redis.call('HDEL', members, chosen_tenant .. ':' .. seq)  -- (too high: safe); an id still listed is served plain
    redis.call('HDEL', costs, job_id)
  end
end
redis.call('HSET', state, 'head', head)
set_pos(entry, list_push(entry, true), entry_value)  -- back where it was
return {3, '', first_park_end(), '', now_ms}
