-- lib/time_text.lua: the clock of lib/time.lua, as text too: what redis.call sends as it is, where a number
-- is formatted with printf's float path on every call that passes it (and parsed back by the command).

-- Now in whole ms, as text and as a number: `given` (the injected clock's ARGV slot) as sent when it is a number,
-- else the server's TIME, its seconds joined to the ms digits of its microseconds as text. redis.call sends a
-- string as it is, where it would format a number with printf's float path (and the command parse it back).
local function clock_text(given)
  if given ~= '' then
    local now = tonumber(given)
    if now then return given, now end
  end
  local t = redis.call('TIME')
  local us = t[2]  -- six digits nine times in ten: their first three, else padded first
  local text = t[1] .. (#us == 6 and string.sub(us, 1, 3) or string.sub('00000' .. us, -6, -4))
  return text, tonumber(text)
end
