-- start.lua: decide one job start by the worker's start controls (fair_router/controls/gate.py): pause,
-- concurrency slot, rate, those the call names, in its order (lib/start.lua runs them). One text for every
-- list of controls a worker may run: Redis runs this file's build, lua/built/start.min.lua (sent as EVAL on
-- rq's job-start MULTI at every start: without comments, less to hash).
-- include: start, start_pause, start_slot, start_rate
-- KEYS     every named control's keys, control by control (each piece's header says which).
-- ARGV     now_ms ('' = server TIME), job_id, then per control: its name (start_pause, start_slot,
--          start_rate), its number of keys, its number of args, its args.
-- Returns  {status, reclaimed, at_ms, now_ms, next_ms[, report]} (controls/gate.py Verdict and Admission).
return run_start({start_pause = start_pause, start_slot = start_slot, start_rate = start_rate})
