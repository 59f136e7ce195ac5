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
