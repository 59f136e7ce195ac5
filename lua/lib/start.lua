-- lib/start.lua: run_start(controls): decide one job start by the controls the call names, in its order.
-- include: time
-- controls: name -> the table of its lua/lib/start_<name>.lua piece (start.lua holds every piece; a call
-- names the ones its worker runs: fair_router/controls/gate.py). Three passes, each in the call's order:
--   held(s, k, a, n)  -> true when the job already holds what it needs (a lease refresh): admitted, HELD (2);
--   check(s, k, a, n) -> a refusal status, or nil to let the next control look (none writes but a rate's
--                        reservation, so a rate control goes last);
--   take(s, k, a, n)  -> take what the start uses (a slot, rate tokens); only once every check passed.
-- k, a: the control's offsets in KEYS and ARGV (its first key is KEYS[k + 1], its first arg ARGV[a + 1]);
-- n: how many keys it has. A control marked `keyed` is skipped when sent no keys (lua/start.lua's org
-- controls, for a job without an org).
-- s: now_ms, job_id; a control sets s.reclaimed, s.at_ms (refusals), s.next_ms and s.report (admissions).
-- A control marked `reads` has its keys (strings) read for it before the checks, every such control's in one
-- MGET (the pause flag and the rate's keys: one command, was an EXISTS and an MGET): its i-th key's value is
-- s.got[s.read_at[k] + i] (false when missing). s.slots[k]: a slot control's lease count, from its held pass.

-- The keys of every `reads` control, read in one MGET (after the held pass: a lease refresh reads none).
local function prefetch(controls, s, n_argv)
  local keys, k, a = {}, 0, 2
  while a < n_argv do
    local control, n_keys = controls[ARGV[a + 1]], tonumber(ARGV[a + 2])
    if control.reads and n_keys > 0 then
      s.read_at[k] = #keys
      for i = 1, n_keys do keys[#keys + 1] = KEYS[k + i] end
    end
    k, a = k + n_keys, a + 3 + tonumber(ARGV[a + 3])
  end
  if #keys > 0 then s.got = redis.call('MGET', unpack(keys)) end
end

local function run_start(controls)
  local s = {now_ms = clock_ms(ARGV[1]), job_id = ARGV[2], reclaimed = 0, at_ms = 0, next_ms = 0,
             report = 0, slots = {}, read_at = {}}
  local n_argv = #ARGV
  -- pass 0 (held), 1 (check), 2 (take); offsets walked again per pass: no tables built per call. Every
  -- control's held runs (a tenant's slot and its org's are both refreshed); a control sent no keys (an org
  -- control of a job without an org) is skipped.
  local held = false
  for pass = 0, 2 do
    if pass == 1 then prefetch(controls, s, n_argv) end
    local k, a = 0, 2
    while a < n_argv do
      local control, n_keys = controls[ARGV[a + 1]], tonumber(ARGV[a + 2])
      if not control then return redis.error_reply('start.lua: no start control ' .. ARGV[a + 1]) end
      local first = a + 3
      if n_keys == 0 and control.keyed then  -- luacheck: ignore (nothing to decide)
      elseif pass == 0 then
        if control.held and control.held(s, k, first, n_keys) then held = true end
      elseif pass == 1 then
        local refused = control.check(s, k, first, n_keys)
        if refused then return {refused, s.reclaimed, s.at_ms, s.now_ms, 0} end
      elseif control.take then
        control.take(s, k, first, n_keys)
      end
      k, a = k + n_keys, first + tonumber(ARGV[a + 3])
    end
    if held then return {2, s.reclaimed, 0, s.now_ms, 0} end
  end
  return {1, s.reclaimed, 0, s.now_ms, s.next_ms, s.report}
end
