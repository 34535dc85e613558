--- @include "chunks"
-- Hourly cohorts kept as lists (fold_hour.lua, retention.lua), and ended days' first-timers
-- (first_lists.lua). A cohort's users are its bit indexes in runs of consecutive ones,
-- ascending, each run as two numbers: how many indexes lie between it and the run before (or
-- 0), and its length less one; each number in 7-bit groups, low group first, the high bit
-- set on every group but the last. New users take
-- fresh indexes as they arrive, so a cohort is mostly one run: a few bytes where a bitmap of
-- every index takes thousands, and counted in a bitmap by a BITCOUNT.
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

-- Runs ({first index, length, ...}, as unpack_runs gives them), packed as a list.
local function pack_runs(runs)
  local bytes = {}
  local function put(number)
    while number >= 128 do
      bytes[#bytes + 1] = 128 + number % 128
      number = math.floor(number / 128)
    end
    bytes[#bytes + 1] = number
  end
  local after = 0
  for r = 1, #runs, 2 do
    put(runs[r] - after)
    put(runs[r + 1] - 1)
    after = runs[r] + runs[r + 1]
  end
  local parts = {}
  for first, last in chunks(#bytes) do parts[#parts + 1] = string.char(unpack(bytes, first, last)) end
  return table.concat(parts)
end

-- The ascending indexes, packed as a list.
local function pack_indexes(indexes)
  local runs, i = {}, 1
  while i <= #indexes do
    local last = i
    while last < #indexes and indexes[last + 1] == indexes[last] + 1 do last = last + 1 end
    runs[#runs + 1], runs[#runs + 2] = indexes[i], last - i + 1
    i = last + 1
  end
  return pack_runs(runs)
end

-- The runs of a packed list (missing: none): {first index, length, ...}.
local function unpack_runs(packed)
  local runs, after, number, scale = {}, 0, 0, 1
  if not packed then return runs end
  for at = 1, #packed do
    local value = string.byte(packed, at)
    if value >= 128 then
      number, scale = number + (value - 128) * scale, scale * 128
    else
      number = number + value * scale
      if #runs % 2 == 0 then
        runs[#runs + 1] = after + number
      else
        runs[#runs + 1] = number + 1
        after = runs[#runs - 1] + number + 1
      end
      number, scale = 0, 1
    end
  end
  return runs
end

-- How many indexes of the runs (unpack_runs) have their bit set in the bitmap at `key`
-- (missing: none): a run's whole bytes by BITCOUNT, the bits at its ends one by one, from
-- blocks of the bitmap read 128 bytes at a time.
local COUNT_BLOCK = 128
local function count_set(key, runs)
  if #runs == 0 or redis.call('EXISTS', key) == 0 then return 0 end
  local count, block, block_at = 0, '', -COUNT_BLOCK
  local function test(index)
    local at = math.floor(index / 8)
    if at < block_at or at >= block_at + COUNT_BLOCK then
      block, block_at = redis.call('GETRANGE', key, at, at + COUNT_BLOCK - 1), at
    end
    local value = string.byte(block, at - block_at + 1)
    if value and bit.band(value, bit.rshift(128, index % 8)) ~= 0 then count = count + 1 end
  end
  for r = 1, #runs, 2 do
    local first, after = runs[r], runs[r] + runs[r + 1]
    local whole_from, whole_to = math.ceil(first / 8), math.floor(after / 8) - 1
    if whole_to - whole_from >= 1 then
      for index = first, whole_from * 8 - 1 do test(index) end
      count = count + redis.call('BITCOUNT', key, whole_from, whole_to)
      for index = (whole_to + 1) * 8, after - 1 do test(index) end
    else
      for index = first, after - 1 do test(index) end
    end
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
