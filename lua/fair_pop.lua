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
