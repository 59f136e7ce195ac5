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
