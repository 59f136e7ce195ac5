#!lua name=fair_router_fair_push_4eb4a25fdf3c3d67
local KEYS, ARGV
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

-- lib/recount.lua: one tenant's waiting count checked against rq's list, member by member (lib/members.lua).
-- rq's own commands (Job.cancel, Job.delete, a plain Queue.remove, `rq empty`) take ids off the list without
-- our scripts, leaving *stale* members whose tenant still counts them until a pop meets them. Before a backlog
-- cap refuses a tenant (fair_push.lua, fair_recount.lua) its members are looked for on the list: those gone
-- are dropped as stale there and then (lib/stale.lua), so a cap never refuses a tenant for jobs rq removed.
-- Cost: one LINDEX per member (the tenant's count: small where a cap applies) and, only when some member is
-- not at its recorded position (rq's LREM or LPUSH moved the list), one read of the list in chunks, after
-- which the positions found are recorded again (the next recount is LINDEXes only).
-- include: fair_keys, stride, members, fifo, stale
local RECOUNT_CHUNK = 1000  -- list entries per LRANGE of the one read along the list
local RECOUNT_HOLES = 1000  -- empty FIFO places skipped at most, beyond the tenant's count (else: not verified)

-- `tenant`'s waiting count after its stale members were dropped, and whether it was verified (false: its FIFO
-- has more than RECOUNT_HOLES holes; the count is then left as it was).
local function recount(tenant)
  local h, t, _, n = parse_tenant(redis.call('HGET', state, tenant_field(tenant)))
  if not h then return 0, true end
  local head = head_pos(nil)
  local missing, values, n_missing = {}, {}, 0
  local seen, holes = 0, 0
  for seq = h, t do
    local job_id = redis.call('HGET', members, tenant .. ':' .. seq)
    if job_id then
      seen = seen + 1
      local value = redis.call('HGET', members, job_id)
      local pos = value and select(3, parse_member(value))
      if value and not (pos and pos >= head and redis.call('LINDEX', rq_list, pos - head) == job_id) then
        missing[job_id], values[job_id], n_missing = true, value, n_missing + 1
      end
    else
      holes = holes + 1
      if holes > RECOUNT_HOLES then return n, false end
    end
  end
  if n_missing > 0 then  -- look for them along the list, recording where they are
    local start = 0
    while n_missing > 0 do
      local chunk = redis.call('LRANGE', rq_list, start, start + RECOUNT_CHUNK - 1)
      for i, entry in ipairs(chunk) do
        if missing[entry] then
          missing[entry], n_missing = nil, n_missing - 1
          local field = parse_member(values[entry])
          redis.call('HSET', members, entry, (head + start + i - 1) .. '|' .. field)
        end
      end
      if #chunk < RECOUNT_CHUNK then break end
      start = start + RECOUNT_CHUNK
    end
    local gone = {}
    for job_id in pairs(missing) do
      fifo_leave(job_id, values[job_id])
      gone[#gone + 1] = job_id
    end
    note_stale(gone)
  end
  local _, _, _, left = parse_tenant(redis.call('HGET', state, tenant_field(tenant)))
  return left or 0, true
end

redis.register_function{function_name='fair_router_fair_push_4eb4a25fdf3c3d67', flags={}, callback=function(keys, args)
KEYS, ARGV = keys, args
-- fair_push.lua: add jobs to a fair queue: each id onto rq's list and into its tenant's FIFO. Also
-- puts popped jobs back (recovery after a dead worker) and adopts ids rq pushed itself (unique=True).
-- include: fair_keys, stride, members, fifo, charge, recount
-- KEYS     keys.FairQueueKeys, in field order: bound to the locals of lib/fair_keys.lua.
-- ARGV     one group of nine per job: job_id, tenant (encoded), weight (for a tenant of an organisation
--          "<weight>|<encoded org>|<org weight>": lib/fifo.lua fifo_place), at_front ('1'/'0'),
--          from_inflight ('1' = only if still recorded as popped-not-started, which is then cleared),
--          listed ('1' = rq already pushed the id onto its list: only give it a FIFO place),
--          cap (the tenant's backlog cap in this queue, 0 = none),
--          func (charge="runtime": the job's function, whose recent run time the pop charges; '' = none),
--          declared (the job's declared cost in seconds, fair_cost=; '' = none).
-- Returns  how many jobs were added (a job already waiting is left where it is). When the i-th job
--          (from 0) would take its tenant's waiting jobs past its cap, nothing is added and the reply is
--          the error "FAIRBACKLOG <i> ...": an error, so that a caller's own pipeline (rq's MULTI, which
--          also saved the job) fails loudly on execute rather than leaving the job saved but not queued.
--          A tenant with waiting jobs here under one org (or none) pushed under another is refused the
--          same way, whole: "FAIRORG <i> ..." (a tenant changes org once none of its jobs waits here).
bind_keys()
local GROUP = 9

-- The FAIRORG refusal of the i-th job (from 1) when its tenant's `record` holds another org than its own (nil:
-- no refusal).
local function org_refusal(i, tenant, record)
  local _, _, _, _, org = parse_tenant(record)
  local has, wanted = org and org.name or '', string.match(ARGV[i + 2], '^[^|]*|([^|]*)|') or ''
  if has == wanted then return nil end
  return redis.error_reply(string.format(
    'FAIRORG %d tenant %s has jobs waiting in %s under org %s: it cannot join org %s until they are '
    .. 'served (nothing of this push was queued; job %s was saved but is not queued)', (i - 1) / GROUP,
    tenant, rq_list, has == '' and '(none)' or has, wanted == '' and '(none)' or wanted, ARGV[i]))
end

-- Orgs and backlog caps first, for the whole call, so that a batch is all or nothing. One job without an org
-- (not a recovery's) is checked on the read of its record below, before anything is written: an org-less
-- enqueue costs no command for orgs. Otherwise a queue without orgs reads no record for this: `orgs` exists
-- while an org has an active tenant.
local single = #ARGV == GROUP and ARGV[5] ~= '1' and not string.find(ARGV[3], '|', 1, true)
local adding = {}
local any_orgs = not single and redis.call('EXISTS', orgs) == 1
for i = 1, #ARGV, GROUP do
  local tenant, cap = ARGV[i + 1], tonumber(ARGV[i + 6])
  local record = (any_orgs or string.find(ARGV[i + 2], '|', 1, true))
    and redis.call('HGET', state, tenant_field(tenant))
  if record and redis.call('HEXISTS', members, ARGV[i]) == 0 then
    local refused = org_refusal(i, tenant, record)
    if refused then return refused end
  end
  if cap > 0 and redis.call('HEXISTS', members, ARGV[i]) == 0 then
    adding[tenant] = (adding[tenant] or 0) + 1
    local _, _, _, waiting = parse_tenant(redis.call('HGET', state, tenant_field(tenant)))
    if (waiting or 0) + adding[tenant] > cap then  -- before refusing: rq may have removed some (lib/recount.lua)
      waiting = recount(tenant)
    end
    if (waiting or 0) + adding[tenant] > cap then
      return redis.error_reply(string.format(
        'FAIRBACKLOG %d tenant %s would pass its backlog cap of %d waiting jobs in %s: nothing of this '
        .. 'push was queued (job %s was saved but is not queued)', (i - 1) / GROUP, tenant, cap, rq_list, ARGV[i]))
    end
  end
end

-- Parks are rare: with none, no job here needs its tenant's park looked up nor a blocked worker woken. Looked
-- up only when state.due is set (lib/stride.lua park_until sets it with every park: none without it), read with
-- the first job's record.
local any_parked = nil
local added = 0
for i = 1, #ARGV, GROUP do
  local job_id, tenant, weight = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  local at_front, from_inflight, listed = ARGV[i + 3] == '1', ARGV[i + 4] == '1', ARGV[i + 5] == '1'
  local func, declared = ARGV[i + 7], ARGV[i + 8]
  local go = redis.call('HEXISTS', members, job_id) == 0
  if go and from_inflight then
    go = redis.call('ZREM', inflight, job_id) == 1
  end
  if go then
    local st = redis.call('HMGET', state, 'head', tenant_field(tenant), 'due')  -- the list head's position, the record
    if any_parked == nil then any_parked = st[3] ~= false and redis.call('ZCARD', parked) > 0 end
    if single and st[2] then
      local refused = org_refusal(i, tenant, st[2])
      if refused then return refused end
    end
    local pos = ''
    if not listed then
      pos = list_push(job_id, at_front, st[1])
    elseif redis.call('LINDEX', rq_list, -1) == job_id then  -- rq's RPUSH: no other entry moved
      pos = head_pos(st[1]) + redis.call('LLEN', rq_list) - 1
    elseif redis.call('LINDEX', rq_list, 0) == job_id then  -- rq's LPUSH: the head moved one up
      pos = redis.call('HINCRBY', state, 'head', -1)
    end
    local seq, record, org = fifo_place(tenant, at_front, nil, weight, st[2])
    fifo_enter(job_id, tenant, seq, pos)
    keep_costs(job_id, declared, func)
    if not (any_parked and redis.call('ZSCORE', parked, tenant)) then
      -- lib/stride.lua activate, which has nothing to do for a tenant without org that waited already (active)
      if org or not st[2] then activate(tenant, record, st[2] ~= false) end
      if any_parked then wake_one() end  -- a worker may be blocked while only parked tenants' jobs waited
    end
    added = added + 1
  end
end
return added

end}
