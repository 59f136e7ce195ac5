#!lua name=fair_router_start_42d23a9f309a406c
local KEYS, ARGV
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

-- lib/start.lua: run_start(controls): decide one job start by the controls the call names, in its order.
-- include: time
-- controls: name -> the table of its lua/lib/start_<name>.lua piece (lib/start_controls.lua holds every piece,
-- built once where the start runs as a Redis function; a call names the ones its worker runs:
-- fair_router/controls/gate.py). Three passes, each in the call's order:
--   held(s, k, a, n)     -> true when the job already holds what it needs (a lease refresh): admitted, HELD (2);
--   check(s, k, a, n, r) -> a refusal status, or nil to let the next control look (none writes but a rate's
--                           reservation, so a rate control goes last);
--   take(s, k, a, n)     -> take what the start uses (a slot, rate tokens); only once every check passed.
-- k, a: the control's offsets in KEYS and ARGV (its first key is KEYS[k + 1], its first arg ARGV[a + 1]);
-- n: how many keys it has. A control marked `keyed` is skipped when sent no keys (lib/start_controls.lua's
-- org controls, for a job without an org).
-- s: now_ms, job_id; a control sets s.reclaimed, s.at_ms (refusals), s.next_ms and s.report (admissions).
-- A control marked `reads` has its keys (strings) read for it before the checks, every such control's in one
-- MGET (the pause flag and the rate's keys: one command, was an EXISTS and an MGET): its i-th key's value is
-- s.got[r + i] (false when missing). s.slots[k]: a slot control's lease count, from its held pass.

-- ARGV is walked once (its counts parsed once): s[1..] holds, per control that runs, 5 slots: its table, k, a,
-- n and r (s made with 15 of them: three controls, the calls without an org, grow no table); `reads` the keys of
-- every `reads` control (made with 5, as many as those calls read), read in one MGET after the held pass (a
-- lease refresh reads none).
local function run_start(controls)
  local now_ms = clock_ms(ARGV[1])
  -- every field a control sets named here too: the table is made at its size once, not grown as they are set
  local s = {false, 0, 0, 0, 0, false, 0, 0, 0, 0, false, 0, 0, 0, 0, now_ms = now_ms, job_id = ARGV[2],
             reclaimed = 0, at_ms = 0, next_ms = 0, report = 0, got = false, rate_n = 0, tats = false,
             reserved = false, pace_key = false, pace_marked = false, slots = false}
  local reads, n_reads, last = {false, false, false, false, false}, 0, 0
  local n_argv, k, a = #ARGV, 0, 2
  while a < n_argv do
    local control, n_keys = controls[ARGV[a + 1]], tonumber(ARGV[a + 2])
    if not control then return redis.error_reply('start.lua: no start control ' .. ARGV[a + 1]) end
    if n_keys > 0 or not control.keyed then  -- a control sent no keys (an org's, no org): nothing to decide
      s[last + 1], s[last + 2], s[last + 3], s[last + 4], s[last + 5] = control, k, a + 3, n_keys, n_reads
      last = last + 5
      if control.reads then
        for i = 1, n_keys do reads[n_reads + i] = KEYS[k + i] end
        n_reads = n_reads + n_keys
      end
    end
    k, a = k + n_keys, a + 3 + tonumber(ARGV[a + 3])
  end
  -- Every control's held runs (a tenant's slot and its org's are both refreshed).
  local held = false
  for i = 1, last, 5 do
    local control = s[i]
    if control.held and control.held(s, s[i + 1], s[i + 2], s[i + 3]) then held = true end
  end
  if held then return {2, s.reclaimed, 0, now_ms, 0} end
  if n_reads > 0 then s.got = redis.call('MGET', unpack(reads, 1, n_reads)) end
  for i = 1, last, 5 do
    local refused = s[i].check(s, s[i + 1], s[i + 2], s[i + 3], s[i + 4])
    if refused then return {refused, s.reclaimed, s.at_ms, now_ms, 0} end
  end
  for i = 1, last, 5 do
    local control = s[i]
    if control.take then control.take(s, s[i + 1], s[i + 2], s[i + 3]) end
  end
  return {1, s.reclaimed, 0, now_ms, s.next_ms, s.report}
end

-- start_pause.lua: the pause control of a job start (controls/pauses.py): refused (4) while the flag exists.
-- KEYS +1  the tenant's pause flag.   ARGV  none.
-- Or, for a job under an org (its call's keys on the org's slot, not the tenant's): KEYS none, ARGV +1 '1'
-- when the worker's tier cache saw the tenant paused.
-- The flag is read with the start's other string keys (lib/start.lua `reads`: one MGET).
local start_pause = {reads = true}
function start_pause.check(s, k, a, n, r)
  if n == 0 then
    if ARGV[a + 1] == '1' then return 4 end
  elseif s.got[r + 1] then
    return 4
  end
end

-- start_slot.lua: the concurrency-slot control of a job start (controls/concurrency.py): a lease per running
-- job, refused (0) at the tenant's limit; a job that holds its slot already has its lease extended (HELD).
-- KEYS +1  the tenant's leases: sorted set, member = job id, score = lease expiry (ms); +2 its parked-in set
--          (Keys.parked_in).
-- ARGV +1  limit (slots the tenant may hold), +2 lease_ms, +3 the fair queue whose job this is ('' = none): a
--          refusal records it in the parked-in set, where the next release (release.lua) finds it.
local start_slot = {}
local KEEP_MS = 86400000  -- the lease set outlives its last renewal by a day more than a lease
local RENEW_EVERY = 16  -- a take into a set holding leases renews its life when now_ms is a multiple of this

-- Every lease ends within lease_ms of its last refresh, but the set outlives it by a day: a lease whose worker
-- died must still be here for the next start to drop *and count* as reclaimed (a key expiring with its last
-- lease took that lease away uncounted). Expired leases never count toward the limit, so the longer life costs
-- only the memory of an idle tenant's small set. No PTTL read first: a set renewed by a worker whose lease_ms
-- is longer still ends a day after (leases up to a day long).
local function keep(leases, lease_ms)
  redis.call('PEXPIRE', leases, string.format('%d', lease_ms + KEEP_MS))
end
-- Expired leases are dropped first (their workers died or stalled: the slot comes back), counted as reclaimed.
-- The count read first: an empty set (a tenant with no job running, at every start under a limit of 1) has no
-- lease to drop or hold, so neither is asked (3 commands to 1). s.slots[k]: the leases left, for check.
function start_slot.held(s, k, a)
  local leases = KEYS[k + 1]
  local count = redis.call('ZCARD', leases)
  if count > 0 then
    local expired = redis.call('ZREMRANGEBYSCORE', leases, '-inf', string.format('%d', s.now_ms))
    s.reclaimed, count = s.reclaimed + expired, count - expired
  end
  local slots = s.slots or {0}  -- (made at the size of a tenant's slot alone)
  slots[k], s.slots = count, slots
  if count > 0 and redis.call('ZSCORE', leases, s.job_id) then
    local lease_ms = tonumber(ARGV[a + 2])
    redis.call('ZADD', leases, string.format('%d', s.now_ms + lease_ms), s.job_id)
    keep(leases, lease_ms)  -- a running job's refresh: its set lives as long as it runs
    return true
  end
  return false
end
-- Refused: s.at_ms is when its first slot comes back by itself (the earliest lease's expiry; a release may
-- come sooner), so that a tenant whose slot a dead worker holds is parked no longer than that lease lives.
function start_slot.check(s, k, a)
  local leases = KEYS[k + 1]
  if s.slots[k] >= tonumber(ARGV[a + 1]) then
    local first = redis.call('ZRANGE', leases, '0', '0', 'WITHSCORES')
    s.at_ms = tonumber(first[2]) or 0
    local queue = ARGV[a + 3]
    if queue ~= '' then  -- parked there until a release: it lasts a lease at most, so does the record
      redis.call('SADD', KEYS[k + 2], queue)
      redis.call('PEXPIRE', KEYS[k + 2], string.format('%d', 2 * tonumber(ARGV[a + 2])))
    end
    return 0
  end
end
-- The set's life is set when this take creates it (no lease left in it: every start of a tenant running one
-- job at a time), and renewed by every lease refresh (held) and by about one take in RENEW_EVERY into a set
-- that holds leases already: a set kept from emptying by running jobs has each of them refreshed every
-- lease_ttl / 3 or, for jobs shorter than that, thousands of takes a day; the other takes spare the PEXPIRE.
function start_slot.take(s, k, a)
  local leases, lease_ms = KEYS[k + 1], tonumber(ARGV[a + 2])
  redis.call('ZADD', leases, string.format('%d', s.now_ms + lease_ms), s.job_id)
  if s.slots[k] == 0 or s.now_ms % RENEW_EVERY == 0 then keep(leases, lease_ms) end
end

-- start_rate.lua: the rate control of a job start (controls/gate.py): GCRA, one timestamp per scope (its
-- theoretical arrival time, TAT). A scope with interval T and tolerance tau admits a start at `now` when
-- TAT - tau <= now; the start moves its TAT to max(TAT, now) + T. Refused: 3 (next start at s.at_ms), or 5
-- with reserve (the job's token taken now, its start reserved at s.at_ms: it comes back without paying).
-- A start late for its token by less than T (a backlogged tenant's job waits for a worker to free up and
-- fetch it) keeps the schedule: its TAT moves to TAT + T, not now + T, so the lateness of each start does
-- not add up and a backlog starts at its rate, not at 1 / (T + lateness). So in any window of t seconds a
-- scope admits at most burst + t / T starts plus the one a late start gives back; a start later than T
-- (after an idle spell) begins a new schedule at now, as plain GCRA does.
-- KEYS +1  this job's reserved start (ms), +2.. one TAT per scope (a string expiring T after its TAT passes),
--          then with paced its pace mark in its fair queue (Keys.paced).
-- ARGV +1  reserve ('1'), +2 tenant_scopes (the first scopes hold every job of the tenant: s.next_ms says
--          when they allow its next start), +3 paced ('1': a fair queue's start held by the tenant's own
--          rate), then per scope: interval_ms, tolerance_ms ((burst - 1) * T).
-- Pace reports: the fair queue parks a paced tenant after each take until its start reports when the next may
-- come (fair_hold.lua). A start reports only when that changes something (s.report): its rate binds (the next
-- start is later than now: the mark is set, 65 s, outliving the queue's 60 s pace), or it no longer binds and
-- the mark says the queue may still pace the tenant (the mark goes, the report ends the pace). A tenant whose
-- rate never binds sends no report and is never parked by a pop.
local start_rate = {reads = true}  -- its keys read before the checks (lib/start.lua: s.got)
local PAID_KEEP_MS = 3600000  -- a reservation left unused this long after its time is dropped
local PACE_MARK_MS = '65000'  -- the pace mark's life (ms, as sent): longer than lib/claims.lua's PACED_FOR_MS

-- Takes a token of every scope for a start at `start` (nil: now, at each scope's kept schedule); returns
-- when the first tenant_scopes allow the next. s.tats: per scope its TAT, interval and tolerance (check's).
local function rate_take(s, k, a, start)
  local next_ms, tenant_scopes, tats = 0, tonumber(ARGV[a + 2]), s.tats
  for i = 1, s.rate_n do
    local interval = tats[3 * i - 1]
    local tat = math.max(tats[3 * i - 2], start or tats[3 * i - 2]) + interval
    -- kept T past it, for a late start; integer ms sent as '%d' (a Lua number crosses redis.call as '%.17g')
    redis.call('SET', KEYS[k + 1 + i], string.format('%d', tat), 'PX', string.format('%d', tat - s.now_ms + interval))
    local at = tat - tats[3 * i]
    if i <= tenant_scopes and at > s.now_ms and at > next_ms then next_ms = at end
  end
  return next_ms
end

function start_rate.check(s, k, a, n_keys, o)
  local paid, now_ms = KEYS[k + 1], s.now_ms
  local paced = ARGV[a + 3] == '1'
  local n, tats, allowed = n_keys - (paced and 2 or 1), {0, 0, 0}, now_ms  -- (one scope: no growth)
  -- the reservation, every scope's TAT and the pace mark, read with the start's other strings (lib/start.lua)
  local got = s.got
  local reserved = tonumber(got[o + 1] or '')
  s.pace_key = paced and KEYS[k + n_keys] or nil
  s.pace_marked = paced and got[o + n_keys] ~= false
  if reserved then
    if reserved > now_ms then  -- back early: not yet its time
      s.at_ms = reserved
      return 3
    end
    n = 0  -- its token was taken when it was deferred
  end
  for i = 1, n do
    local tat, interval = tonumber(got[o + 1 + i] or '0'), tonumber(ARGV[a + 2 + 2 * i])
    local tolerance = tonumber(ARGV[a + 3 + 2 * i])
    if tat <= now_ms - interval then tat = now_ms end  -- T late or more: a new schedule
    tats[3 * i - 2], tats[3 * i - 1], tats[3 * i] = tat, interval, tolerance
    local at = tat - tolerance
    if at > allowed then allowed = at end
  end
  s.rate_n, s.tats, s.reserved = n, tats, reserved
  if allowed <= now_ms then return nil end
  s.at_ms = allowed
  if ARGV[a + 1] ~= '1' then return 3 end
  rate_take(s, k, a, allowed)
  redis.call('SET', paid, string.format('%d', allowed), 'PX', string.format('%d', allowed - now_ms + PAID_KEEP_MS))
  return 5
end

function start_rate.take(s, k, a)
  s.next_ms = rate_take(s, k, a, nil)
  if s.reserved then redis.call('DEL', KEYS[k + 1]) end
  if not s.pace_key then return end
  if s.next_ms > s.now_ms then
    redis.call('SET', s.pace_key, '1', 'PX', PACE_MARK_MS)
    s.report = 1
  elseif s.pace_marked then
    redis.call('DEL', s.pace_key)
    s.report = 1
  end
end

-- lib/start_controls.lua: START_CONTROLS, every control a start may name (lib/start.lua run_start), by name.
-- Built where the pieces are defined: once per library load where the start runs as a Redis function, not at
-- each call.
-- include: start, start_pause, start_slot, start_rate
-- The org's pause and slot (controls/orglimits.py) are the tenant's pieces on the org's keys, refusing with
-- their own statuses (7 ORG_PAUSED, 6 ORG_LIMIT); a job without an org sends them no keys: skipped.
local function refusing_as(piece, status)
  return {keyed = true, held = piece.held, take = piece.take, reads = piece.reads,
          check = function(s, k, a, n, r) if piece.check(s, k, a, n, r) then return status end end}
end
local START_CONTROLS = {start_pause = start_pause, start_slot = start_slot, start_rate = start_rate,
                        start_org_pause = refusing_as(start_pause, 7), start_org_slot = refusing_as(start_slot, 6)}

redis.register_function{function_name='fair_router_start_42d23a9f309a406c', flags={}, callback=function(keys, args)
KEYS, ARGV = keys, args
-- start.lua: decide one job start by the worker's start controls (fair_router/controls/gate.py): pause,
-- concurrency slot, rate, those the call names, in its order (lib/start.lua runs them). One text for every
-- list of controls a worker may run, queued on rq's job-start MULTI at every start: as FCALL of its library
-- (lua/built/start.library.lua) where Redis has functions, else as EVAL of lua/built/start.min.lua.
-- include: start_controls
-- KEYS     every named control's keys, control by control (each piece's header says which).
-- ARGV     now_ms ('' = server TIME), job_id, then per control: its name (start_pause, start_org_pause,
--          start_slot, start_org_slot, start_rate), its number of keys, its number of args, its args.
-- Returns  {status, reclaimed, at_ms, now_ms, next_ms[, report]} (controls/gate.py Verdict and Admission).
-- The controls (lib/start_controls.lua) are built with the pieces: once per library load where this runs as a
-- Redis function (lua/built/start.library.lua, FCALL: controls/gate.py), not at each call.
return run_start(START_CONTROLS)

end}
