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
