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
