-- lib/shardload.lua: route.lua's shard section: each queue family's jobs waiting on each shard it may use, and
-- the least loaded of a job's candidate shards (a batch's own jobs count: ten jobs of one tenant spread).

-- The shard section from ARGV[at]: n_used, the used shard numbers, then per family f = 0..n_rules and used
-- shard u a pair (load key index into KEYS or 0, base load). Returns the loads (nil when n_used = 0:
-- unsharded, no table built) and the ARGV index after it.
local function read_loads(at, n_rules)
  if ARGV[at] == '0' then return nil, at + 1 end
  local loads = {n = tonumber(ARGV[at]), shard_no = {}, at = {}, known = {}}
  at = at + 1
  for u = 1, loads.n do loads.shard_no[u] = tonumber(ARGV[at + u - 1]) end
  at = at + loads.n
  for slot = 1, (n_rules + 1) * loads.n do  -- slot f * n_used + u: family f on used shard u
    loads.at[slot] = at
    at = at + 2
  end
  return loads, at
end

-- Jobs waiting in `slot` (read on first use: LLEN of its key plus its base load; then counted here).
local function load_of(loads, slot)
  local known = loads.known[slot]
  if known == nil then
    local i = loads.at[slot]
    local key = tonumber(ARGV[i])
    known = tonumber(ARGV[i + 1]) + (key > 0 and redis.call('LLEN', KEYS[key]) or 0)
    loads.known[slot] = known
  end
  return known
end

-- The least loaded of the candidates (ARGV[at + 1 .. at + n_cand]: used-shard positions) in family `rule`,
-- ties to the first listed, counted one job busier. Returns its shard number, -1 when there is none.
local function least_loaded(loads, rule, at, n_cand)
  if not loads then return -1 end
  local best, best_slot = nil, nil
  for c = 1, n_cand do
    local slot = rule * loads.n + tonumber(ARGV[at + c])
    local waiting = load_of(loads, slot)
    if best == nil or waiting < best then best, best_slot = waiting, slot end
  end
  if not best_slot then return -1 end
  loads.known[best_slot] = best + 1
  return loads.shard_no[(best_slot - 1) % loads.n + 1]
end
