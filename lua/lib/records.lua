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

