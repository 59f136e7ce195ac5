-- lib/slices.lua: one Redis command over a long list of arguments, sent in slices: Lua's unpack() gives at
-- most about 8,000 values, and a batch of 10,000 jobs is a longer list than that.

-- Values per slice: far below unpack()'s limit, large enough that a batch of 10,000 costs ten calls.
local SLICE = 2000

-- redis.call(command, key, values...) for each slice of `values` (at most `per` of them, a multiple of the
-- command's arity), or redis.call(command, key, option, values...) when an `option` is given (ZADD's 'GT');
-- `each(reply, first)` gets each slice's reply and the index of its first value.
local function call_sliced(command, key, values, per, each, option)
  for first = 1, #values, per do
    local last = math.min(first + per - 1, #values)
    local reply
    if option then
      reply = redis.call(command, key, option, unpack(values, first, last))
    else
      reply = redis.call(command, key, unpack(values, first, last))
    end
    if each then each(reply, first) end
  end
end
