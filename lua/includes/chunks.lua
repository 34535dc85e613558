-- Calls `command key items...` in chunks, since Lua's unpack is limited to a few thousand
-- values; returns the sum of the integer replies.
local function call_in_chunks(command, key, items)
  local total = 0
  for i = 1, #items, 5000 do
    total = total + redis.call(command, key, unpack(items, i, math.min(i + 4999, #items)))
  end
  return total
end
