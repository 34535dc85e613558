--- @include "chunks"
-- Hourly cohorts kept as lists (fold_hour.lua, retention.lua). A cohort's users are its bit
-- indexes, ascending, each as the gap from the one before less one in 7-bit groups, low group
-- first, the high bit set on every group but the last: new users take fresh indexes, mostly
-- next to each other, so most take one byte where a bitmap of every index takes thousands.
-- A folded hour's row in its day's record is "active returning new retained_1 ... retained_k
-- +" while open: its cohort's list is kept and retained_k is filled as the k-th hour after it
-- is folded; once the 52nd is, the row is closed: no "+", trailing zeros left out.
local COHORT_HOURS = 52

-- The indexes of the bits set in the bitmap at `key`, ascending: a BITPOS skips to the next
-- set bit, then the 64 bytes from there are read in one GETRANGE.
local function set_bits_of(key)
  local found, from = {}, 0
  while true do
    local first_bit = redis.call('BITPOS', key, 1, from)
    if first_bit < 0 then return found end
    local at = math.floor(first_bit / 8)
    local block = redis.call('GETRANGE', key, at, at + 63)
    for i = 1, #block do
      local value = string.byte(block, i)
      local weight, index = 128, (at + i - 1) * 8
      while value > 0 do
        if value >= weight then
          found[#found + 1] = index
          value = value - weight
        end
        weight, index = weight / 2, index + 1
      end
    end
    from = at + 64
  end
end

-- The list of ascending indexes, packed.
local function pack_indexes(indexes)
  local bytes, previous = {}, -1
  for _, index in ipairs(indexes) do
    local gap = index - previous - 1
    previous = index
    while gap >= 128 do
      bytes[#bytes + 1] = 128 + gap % 128
      gap = math.floor(gap / 128)
    end
    bytes[#bytes + 1] = gap
  end
  local parts = {}
  for first, last in chunks(#bytes) do parts[#parts + 1] = string.char(unpack(bytes, first, last)) end
  return table.concat(parts)
end

-- The indexes of a packed list (missing: none).
local function unpack_indexes(packed)
  local indexes, previous, gap, scale = {}, -1, 0, 1
  if not packed then return indexes end
  for at = 1, #packed do
    local value = string.byte(packed, at)
    if value >= 128 then
      gap, scale = gap + (value - 128) * scale, scale * 128
    else
      previous = previous + gap + value * scale + 1
      indexes[#indexes + 1] = previous
      gap, scale = 0, 1
    end
  end
  return indexes
end

-- How many of the indexes (ascending) have their bit set in the bitmap at `key` (missing:
-- none). The bitmap is read 128 bytes at a time from the byte of an index not read yet: the
-- users of a cohort mostly have indexes next to each other (handed out as they arrived), so a
-- read serves many, and Lua tests each bit for less than a BITFIELD GET costs.
local COUNT_BLOCK = 128
local function count_set(key, indexes)
  if #indexes == 0 or redis.call('EXISTS', key) == 0 then return 0 end
  local count, block, block_at = 0, '', -COUNT_BLOCK
  for _, index in ipairs(indexes) do
    local at = math.floor(index / 8)
    if at >= block_at + COUNT_BLOCK then
      block, block_at = redis.call('GETRANGE', key, at, at + COUNT_BLOCK - 1), at
    end
    local value = string.byte(block, at - block_at + 1)
    if value and bit.band(value, bit.rshift(128, index % 8)) ~= 0 then count = count + 1 end
  end
  return count
end

-- A row's numbers, and whether it is open.
local function read_row(row)
  local counts = {}
  for n in string.gmatch(row, '%d+') do counts[#counts + 1] = tonumber(n) end
  return counts, string.sub(row, -1) == '+'
end

-- Writes a row: open, or closed with its trailing zeros left out.
local function write_row(record_key, start, counts, open)
  local last = #counts
  if not open then
    while last > 3 and counts[last] == 0 do last = last - 1 end
  end
  local row = table.concat(counts, ' ', 1, last)
  redis.call('HSET', record_key, start, open and row .. ' +' or row)
end
