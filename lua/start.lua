-- start.lua: decide one job start by the worker's start controls (fair_router/controls/gate.py): pause,
-- concurrency slot, rate, those the call names, in its order (lib/start.lua runs them). One text for every
-- list of controls a worker may run: Redis runs this file's build, lua/built/start.min.lua (sent as EVAL on
-- rq's job-start MULTI at every start: without comments, less to hash).
-- include: start, start_pause, start_slot, start_rate
-- KEYS     every named control's keys, control by control (each piece's header says which).
-- ARGV     now_ms ('' = server TIME), job_id, then per control: its name (start_pause, start_org_pause,
--          start_slot, start_org_slot, start_rate), its number of keys, its number of args, its args.
-- Returns  {status, reclaimed, at_ms, now_ms, next_ms[, report]} (controls/gate.py Verdict and Admission).
-- The org's pause and slot (controls/orglimits.py) are the tenant's pieces on the org's keys, refusing with
-- their own statuses (7 ORG_PAUSED, 6 ORG_LIMIT); a job without an org sends them no keys: skipped.
local function refusing_as(piece, status)
  return {keyed = true, held = piece.held, take = piece.take, reads = piece.reads,
          check = function(s, k, a, n) if piece.check(s, k, a, n) then return status end end}
end
return run_start({start_pause = start_pause, start_slot = start_slot, start_rate = start_rate,
                  start_org_pause = refusing_as(start_pause, 7), start_org_slot = refusing_as(start_slot, 6)})
