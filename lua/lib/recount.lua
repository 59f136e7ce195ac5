-- lib/recount.lua: one tenant's waiting count checked against rq's list, member by member (lib/members.lua).
-- rq's own commands (Job.cancel, Job.delete, a plain Queue.remove, `rq empty`) take ids off the list without
-- our scripts, leaving *stale* members whose tenant still counts them until a pop meets them. Before a backlog
-- cap refuses a tenant (fair_push.lua, fair_recount.lua) its members are looked for on the list: those gone
-- are dropped as stale there and then (lib/stale.lua), so a cap never refuses a tenant for jobs rq removed.
-- Cost: one LINDEX per member (the tenant's count: small where a cap applies) and, only when some member is
-- not at its recorded position (rq's LREM or LPUSH moved the list), one read of the list in chunks, after
-- which the positions found are recorded again (the next recount is LINDEXes only).
-- include: fair_keys, stride, members, fifo, stale
local RECOUNT_CHUNK = 1000  -- list entries per LRANGE of the one read along the list
local RECOUNT_HOLES = 1000  -- empty FIFO places skipped at most, beyond the tenant's count (else: not verified)

-- `tenant`'s waiting count after its stale members were dropped, and whether it was verified (false: its FIFO
-- has more than RECOUNT_HOLES holes; the count is then left as it was).
local function recount(tenant)
  local h, t, _, n = parse_tenant(redis.call('HGET', state, tenant_field(tenant)))
  if not h then return 0, true end
  local head = head_pos(nil)
  local missing, values, n_missing = {}, {}, 0
  local seen, holes = 0, 0
  for seq = h, t do
    local job_id = redis.call('HGET', members, tenant .. ':' .. seq)
    if job_id then
      seen = seen + 1
      local value = redis.call('HGET', members, job_id)
      local pos = value and select(3, parse_member(value))
      if value and not (pos and pos >= head and redis.call('LINDEX', rq_list, pos - head) == job_id) then
        missing[job_id], values[job_id], n_missing = true, value, n_missing + 1
      end
    else
      holes = holes + 1
      if holes > RECOUNT_HOLES then return n, false end
    end
  end
  if n_missing > 0 then  -- look for them along the list, recording where they are
    local start = 0
    while n_missing > 0 do
      local chunk = redis.call('LRANGE', rq_list, start, start + RECOUNT_CHUNK - 1)
      for i, entry in ipairs(chunk) do
        if missing[entry] then
          missing[entry], n_missing = nil, n_missing - 1
          local field = parse_member(values[entry])
          redis.call('HSET', members, entry, (head + start + i - 1) .. '|' .. field)
        end
      end
      if #chunk < RECOUNT_CHUNK then break end
      start = start + RECOUNT_CHUNK
    end
    local gone = {}
    for job_id in pairs(missing) do
      fifo_leave(job_id, values[job_id])
      gone[#gone + 1] = job_id
    end
    note_stale(gone)
  end
  local _, _, _, left = parse_tenant(redis.call('HGET', state, tenant_field(tenant)))
  return left or 0, true
end
