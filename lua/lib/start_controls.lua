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
