-- fair_park.lua: a popped job's tenant is at its concurrency limit. Put the job back on rq's list and
-- in its tenant's FIFO (where it was, else at the front) and park the tenant (pops skip it) until
-- `until_ms` or a slot frees. The job's claim ends (lib/claims.lua), and the tenant's limit is learnt.
-- include: fair_keys, stride, members, fifo, charge, claims
-- KEYS     keys.FairQueueKeys, in field order: bound to the locals of lib/fair_keys.lua.
-- ARGV     job_id, tenant (encoded), weight, until_ms, refund ('1' = a fair choice served the job: take
--          back what its pop added to the tenant's pass, 1 / weight or, charge="runtime", the estimate /
--          weight recorded in `charged`; '0' = a plain entry, nothing added),
--          seq (the job's place in its tenant's FIFO when a fair choice served it, else ''),
--          limit (the tenant's concurrency limit, 0 = none, '' = not known to the caller),
--          exact ('1' = a rate refused the start: until_ms, on the server's clock, is its next token, and the
--          park ends then, replacing a pop's bound for a paced tenant, unless it is at its concurrency limit),
--          org ('' = none, else "<encoded org>|<org weight>": the org of a job put back after its tenant's last),
--          org_limit (the org's concurrency limit, as limit: learnt, and the job's claim for its org ends),
--          org_full ('1' = the org's limit refused the start: its entry is parked too, lib/claims.lua park_org)
-- Returns  1 when the job was put back, 0 when it was already waiting.
bind_keys()
local job_id, tenant, weight, until_ms = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4])
local refund, old_seq, exact = ARGV[5] == '1', tonumber(ARGV[6]), ARGV[8] == '1'
learn_limit(tenant, ARGV[7] or '')
unclaim(tenant, job_id)
local org = string.match(ARGV[9] or '', '^([^|]+)|')
if org then
  learn_limit(ORG .. org, ARGV[10] or '')
  unclaim(ORG .. org, job_id)
end

redis.call('ZREM', inflight, job_id)
-- A refused job did not run: its tenant gets its turn back instead of losing one per refusal. The step
-- is the one the pop took: 1 / the stored weight (gone when the pop took the tenant's last job: `weight`).
local step = 0
local charge = redis.call('HGET', charged, job_id)
local declared, func = nil, nil  -- the job's `costs` entry again, for its next pop (charge="runtime")
if charge then
  redis.call('HDEL', charged, job_id)  -- nothing to settle: the job did not run
  local _, charged_weight, estimate, _, charged_declared, charged_func = parse_charged(charge)
  declared, func = charged_declared, charged_func
  if refund then step = estimate / charged_weight end
elseif refund then
  local _, _, stored = parse_tenant(redis.call('HGET', state, tenant_field(tenant)))
  step = 1 / tonumber(stored or weight)
end
stride_hold(tenant, until_ms, step)  -- it keeps its place: on return it starts at max(virtual time, kept pass)
if org and ARGV[11] == '1' then park_org(org, nil, until_ms) end  -- none of its tenants is served till a release
if exact and under_limit(tenant) then park_paced(tenant, until_ms) end
if redis.call('HEXISTS', members, job_id) == 1 then return 0 end

-- Back to its own place when that is free and not past the tail, so that jobs of one tenant refused by
-- several workers at once come back in FIFO order whatever order their parks land in; else the front.
local placed = weight
if (ARGV[9] or '') ~= '' then placed = weight .. '|' .. ARGV[9] end
fifo_enter(job_id, tenant, (fifo_place(tenant, true, old_seq, placed)), list_push(job_id, true))
if declared then keep_costs(job_id, declared, func) end
return 1
