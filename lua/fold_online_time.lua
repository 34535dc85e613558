--[[
  fold_online_time: folds a closed day's online time from its dense counters (a u16 per bit
  index) into the compact layout (a bitmap of the indexes with time that day, their counters in
  index order and a rank directory: includes/online_time.lua), a few blocks of indexes a call.
  The first call marks the day folding, so that a period that ends later adds to it apart
  (ot:l<day>); each call takes up where the directory's length says the last one stopped, so
  that processes folding the same day at once fold each block once.

  KEYS[1]  next_index  STRING  the next bit index never handed out (includes/activity.lua)
  KEYS[2]  marker      STRING  ot:m<day>: how many blocks the day's fold covers, once begun
  KEYS[3]  bitmap      STRING  ot:b<day>
  KEYS[4]  counters    STRING  ot:c<day>
  KEYS[5]  directory   STRING  ot:r<day>
  ARGV[1]  shard  packed once per shard by the store (Shard.options, includes/options.lua):
                  online_time_prefix (the day's dense counters ot:d<day>:<block> are named from
                  it, in the hash tag of KEYS)
  ARGV[2]  day         int: the day's number (days since 1970-01-01 in the stats zone)
  ARGV[3]  blocks      int: at most this many blocks of BLOCK_USERS indexes folded this call
  ARGV[4]  expire_ms   int ms: when the day's keys expire (its end plus the analytics' time)
  Returns  {now, folded, blocks}: the blocks folded by this call, so far, and how many the
           fold covers; the day is folded when the last two are equal ({0, 0, 0}, with
           nothing written, while no index was ever handed out)
  Work     per block, a GET of its 8 KB of counters and a pass over its 4,096 indexes in Lua
           (about 1.5 ms of Redis time a block); the last call rewrites the day's three
           strings at their size (a GET and a SET each)
]]
--- @include "online_time"
--- @include "options"
local shard = shard_options(ARGV[1])
local next_key, marker_key, bits_key, counters_key, dir_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local day, per_call, expire_ms = ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
local sbyte, char, floor = string.byte, string.char, math.floor
local ENTRIES = BLOCK_USERS / DIRECTORY_USERS

local blocks = tonumber(redis.call('GET', marker_key))
if not blocks then
  blocks = math.ceil((tonumber(redis.call('GET', next_key)) or 0) / BLOCK_USERS)
  -- A shard that never handed out an index has nothing to fold, and keeps no marker.
  if blocks == 0 then return {0, 0, 0} end
  redis.call('SET', marker_key, blocks)
  redis.call('PEXPIREAT', marker_key, expire_ms)
end
local folded = floor(redis.call('STRLEN', dir_key) / (4 * ENTRIES))
local total = floor(redis.call('STRLEN', counters_key) / 2)
local first, last = folded, math.min(blocks, folded + per_call) - 1
for block = folded, last do
  local dense_key = shard.online_time_prefix .. 'd' .. day .. ':' .. block
  local dense = redis.call('GET', dense_key) or ''
  local bytes, units, dir, byte = {}, {}, {}, 0
  for i = 0, BLOCK_USERS - 1 do
    if i % DIRECTORY_USERS == 0 then
      dir[#dir + 1] = char(floor(total / 16777216), floor(total / 65536) % 256,
        floor(total / 256) % 256, total % 256)
    end
    local hi, lo = sbyte(dense, 2 * i + 1, 2 * i + 2)
    byte = byte * 2
    if hi and hi + lo > 0 then
      byte, total = byte + 1, total + 1
      units[#units + 1] = char(hi, lo)
    end
    if i % 8 == 7 then bytes[#bytes + 1], byte = char(byte), 0 end
  end
  redis.call('SETRANGE', bits_key, block * BLOCK_USERS / 8, table.concat(bytes))
  if #units > 0 then redis.call('APPEND', counters_key, table.concat(units)) end
  redis.call('APPEND', dir_key, table.concat(dir))
  redis.call('DEL', dense_key)
end
if last >= folded then
  folded = last + 1
  for _, key in ipairs({bits_key, counters_key, dir_key}) do
    if folded == blocks then
      -- Rewritten at their size: Redis grew them by APPEND and SETRANGE with room to spare.
      local value = redis.call('GET', key)
      if value then redis.call('SET', key, value) end
    end
    redis.call('PEXPIREAT', key, expire_ms)
  end
end
return {folded - first, folded, blocks}
