-- fair_migrate.lua: move one fair queue's state from the layout before tenant records (a FIFO's head, tail
-- and weight in three hashes, its places in a fourth) into today's (lib/fifo.lua), once, so jobs that were
-- waiting across an upgrade keep their places. A no-op (one EXISTS) when there is nothing old.
-- KEYS     state, members, then the old layout's head, tail, weights and fifo hashes (one fair queue: one tag)
-- ARGV     none
-- Returns  the number of tenants whose FIFO moved (0 when there was nothing to move).
local state, members = KEYS[1], KEYS[2]
local old_head, old_tail, old_weights, old_fifo = KEYS[3], KEYS[4], KEYS[5], KEYS[6]
if redis.call('EXISTS', old_head, old_fifo) == 0 then return 0 end

local heads = redis.call('HGETALL', old_head)
for i = 1, #heads, 2 do
  local tenant, head = heads[i], heads[i + 1]
  local tail = redis.call('HGET', old_tail, tenant) or head
  local weight = redis.call('HGET', old_weights, tenant) or '1'
  redis.call('HSET', state, '=' .. tenant, head .. '|' .. tail .. '|' .. weight)  -- lib/stride.lua tenant_field
end
-- A FIFO place "<tenant>:<seq>" -> job id joins members beside the job's own entry.
local places = redis.call('HGETALL', old_fifo)
for i = 1, #places, 2 do
  redis.call('HSET', members, places[i], places[i + 1])
end
redis.call('DEL', old_head, old_tail, old_weights, old_fifo)
return #heads / 2
