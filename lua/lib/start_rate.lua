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
