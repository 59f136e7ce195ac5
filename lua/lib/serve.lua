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
