-- obs_record.lua: what one start record gets from a batch (a delta), and its one read and one write:
-- record_delta() / record_add(d, group); record_read(key, d, places) -> field -> value (one HMGET); record_write(key, v, d, places) (one
-- HSET, plus a cleared minute slot's HDEL and EXPIRE). places (#all only): minute -> tenants given a record.
-- include: obs_fields

-- Per minute its starts by bucket, per tick its starts and wait, and the cumulative ones.
local function record_delta() return {m = {}, t = {}, c = {}, us = 0, any = false} end
local function record_add(d, g)
  local m = d.m[g.m]
  if not m then
    m = {}
    d.m[g.m] = m
  end
  local c = d.c
  for b, count in pairs(g.b) do
    m[b] = (m[b] or 0) + count
    c[b] = (c[b] or 0) + count
  end
  local t = d.t[g.t]
  if not t then
    t = {0, 0}
    d.t[g.t] = t
  end
  t[1], t[2] = t[1] + g.n, t[2] + g.us
  d.us = d.us + g.us
  d.any = true
end

-- One HMGET of every field the delta touches (and #all's places of its minutes): name -> value.
local function record_read(key, d, places)
  local names = {'c:us'}
  for m, buckets in pairs(d.m) do
    names[#names + 1] = m.held
    if places then names[#names + 1] = m.places end
    for b in pairs(buckets) do names[#names + 1] = m.b[b] end
  end
  for t in pairs(d.t) do
    names[#names + 1], names[#names + 2], names[#names + 3] = t.held, t.n, t.s
  end
  for b in pairs(d.c) do names[#names + 1] = totals[b] end
  local values = redis.call('HMGET', key, unpack(names))
  local v = {}
  for j = 1, #names do v[names[j]] = values[j] end
  return v
end

local function record_write(key, v, d, places)
  local out, renewed = {}, false
  local function set(name, value)
    out[#out + 1], out[#out + 2] = name, obs_int(value)
  end
  for m, buckets in pairs(d.m) do
    local held = tonumber(v[m.held])
    if not held or held < m.minute then  -- the slot's first start this minute: drop what it held before
      local stale = {}
      for b = 0, n_buckets - 1 do stale[#stale + 1] = m.prefix .. b end
      redis.call('HDEL', key, unpack(stale))
      renewed = true
      out[#out + 1], out[#out + 2] = m.held, m.value
      for b, count in pairs(buckets) do set(m.b[b], count) end
    elseif held == m.minute then
      for b, count in pairs(buckets) do set(m.b[b], (tonumber(v[m.b[b]]) or 0) + count) end
    end  -- else the slot holds a newer minute: this one has left the windows
    if places and places[m.minute] and (not held or held <= m.minute) then set(m.places, places[m.minute]) end
  end
  for t, add_t in pairs(d.t) do
    local held = tonumber(v[t.held])
    if not held or held < t.tick then
      out[#out + 1], out[#out + 2] = t.held, t.value
      set(t.n, add_t[1])
      set(t.s, add_t[2])
    elseif held == t.tick then
      set(t.n, (tonumber(v[t.n]) or 0) + add_t[1])
      set(t.s, (tonumber(v[t.s]) or 0) + add_t[2])
    end
  end
  for b, count in pairs(d.c) do set(totals[b], (tonumber(v[totals[b]]) or 0) + count) end
  set('c:us', (tonumber(v['c:us']) or 0) + d.us)
  redis.call('HSET', key, unpack(out))
  if renewed then redis.call('EXPIRE', key, ttl) end
end
