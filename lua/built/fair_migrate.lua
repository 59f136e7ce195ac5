-- fair_migrate.lua: move one fair queue's state from an earlier layout into today's (lib/fifo.lua), once, so
-- jobs that were waiting across an upgrade keep their places. Two earlier layouts: a FIFO's head, tail and
-- weight in three hashes and its places in a fourth; and tenant records without their waiting count, which
-- sat in a hash of its own (`backlog`). A no-op (one EXISTS) when there is nothing old.
-- KEYS     state, members, then the old layouts' head, tail, weights, fifo and backlog hashes (one fair queue:
--          one tag)
-- ARGV     none
-- Returns  the number of tenants whose record was written (0 when there was nothing to move).
local state, members = KEYS[1], KEYS[2]
local old_head, old_tail, old_weights, old_fifo, old_backlog = KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7]
if redis.call('EXISTS', old_head, old_fifo, old_backlog) == 0 then return 0 end

-- A FIFO place "<tenant>:<seq>" -> job id joins members beside the job's own entry.
local places = redis.call('HGETALL', old_fifo)
for i = 1, #places, 2 do
  redis.call('HSET', members, places[i], places[i + 1])
end

-- How many of `tenant`'s jobs wait: its old count, else its places from head to tail that hold a job.
local function waiting(tenant, head, tail)
  local n = tonumber(redis.call('HGET', old_backlog, tenant) or '')
  if n then return n end
  n = 0
  for seq = head, tail do n = n + redis.call('HEXISTS', members, tenant .. ':' .. seq) end
  return n
end

-- '=' .. tenant: lib/stride.lua tenant_field. A record is "<head>|<tail>|<weight>|<waiting>".
local moved = 0
local heads = redis.call('HGETALL', old_head)
for i = 1, #heads, 2 do
  local tenant, head = heads[i], tonumber(heads[i + 1])
  local tail = tonumber(redis.call('HGET', old_tail, tenant) or head)
  local weight = redis.call('HGET', old_weights, tenant) or '1'
  redis.call('HSET', state, '=' .. tenant, table.concat({head, tail, weight, waiting(tenant, head, tail)}, '|'))
  moved = moved + 1
end
local fields = redis.call('HGETALL', state)
for i = 1, #fields, 2 do
  local tenant = string.match(fields[i], '^=(.*)$')
  local head, tail, weight = string.match(fields[i + 1], '^([^|]*)|([^|]*)|([^|]*)$')  -- no count yet
  head, tail = tonumber(head), tonumber(tail)
  if tenant and head and tail then
    redis.call('HSET', state, fields[i], table.concat({head, tail, weight, waiting(tenant, head, tail)}, '|'))
    moved = moved + 1
  end
end
redis.call('DEL', old_head, old_tail, old_weights, old_fifo, old_backlog)
return moved
