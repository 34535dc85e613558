-- Variadic commands take at most CHUNK entries per call, in every script. Lua's unpack puts
-- its values on a C stack of 8,000 slots (LUAI_MAXCSTACK), and an entry may take four values
-- (BITFIELD's SET u1 index 1): 1,000 entries stay well below that, and are enough that the
-- cost of a call is spread over many entries (a call costs about as much as ten entries).
local CHUNK = 1000
-- An argument repeated for each entry is best made a string once: Redis writes a number
-- argument out (snprintf) at every call that passes it.

-- The ranges first, last of `count` entries, CHUNK at a time: `for first, last in chunks(n)`.
local function chunks(count)
  local first = 1 - CHUNK
  return function()
    first = first + CHUNK
    if first > count then return nil end
    return first, math.min(first + CHUNK - 1, count)
  end
end

-- Calls `command key items...` a chunk at a time; returns the sum of the integer replies.
local function call_in_chunks(command, key, items)
  local total = 0
  for first, last in chunks(#items) do
    total = total + redis.call(command, key, unpack(items, first, last))
  end
  return total
end

-- Calls `command key items...` a chunk at a time; returns the replies of a command that
-- answers one value per item (HMGET, ZMSCORE) as one list, in the order of items.
local function read_in_chunks(command, key, items)
  local values = {}
  for first, last in chunks(#items) do
    local found = redis.call(command, key, unpack(items, first, last))
    for i = first, last do values[i] = found[i - first + 1] end
  end
  return values
end

-- Calls `command key [fixed...] values...` for `count` entries a chunk at a time (`fixed`: nil,
-- one argument, or a list of them), where put(args, n, i) appends entry i's values to args
-- after position n and returns the new length.
local function call_chunked(command, key, fixed, count, put)
  if type(fixed) ~= 'table' then fixed = {fixed} end
  for first, last in chunks(count) do
    local args, n = {}, 0
    for _, arg in ipairs(fixed) do n = n + 1; args[n] = arg end
    for i = first, last do n = put(args, n, i) end
    redis.call(command, key, unpack(args, 1, n))
  end
end
