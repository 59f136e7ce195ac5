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
