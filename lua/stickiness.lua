--[[
  stickiness: over some days, the users active on any of them, the sum of each day's active
  users, and how many users were active on exactly 1, 2, ... of them, from the day bitmaps.

  KEYS[1..17]  scratch  bitmaps, deleted before returning: two carries, then the seven bit
                        planes of each user's count of active days, then the eight nodes of
                        the walk that counts each total
  KEYS[18..]  days      the day bitmaps counted (the others are outside what is kept)
  ARGV[1]  days         int 1 to 90: how many days were asked for (the length of the reply's
                        histogram)
  Returns  {union, sum_of_daily, exactly_1, ..., exactly_days}
  Work     each day is added to the counts as to a binary counter (two BITOPs per bit plane
           it reaches); then a BITOP pair and a BITCOUNT per count met: all over bitmaps of
           (highest user index / 8) bytes, at most a few thousand for 90 days
]]
local carry = {KEYS[1], KEYS[2]}
local planes, nodes = {}, {}
for j = 0, 6 do planes[j] = KEYS[3 + j] end
for d = 1, 8 do nodes[d] = KEYS[9 + d] end
local asked = tonumber(ARGV[1])
local days = {}
for i = 18, #KEYS do days[#days + 1] = KEYS[i] end

local reply = {0, 0}
for k = 1, asked do reply[2 + k] = 0 end
redis.call('DEL', unpack(KEYS, 1, 17))
if #days == 0 then return reply end
local union = nodes[1]
redis.call('BITOP', 'OR', union, unpack(days))
reply[1] = redis.call('BITCOUNT', union)

-- Adds each day to the counts' bit planes: after i days a count takes at most bits(i) bits.
local width = 0
for i, day in ipairs(days) do
  if 2 ^ width <= i then width = width + 1 end
  reply[2] = reply[2] + redis.call('BITCOUNT', day)
  local c, flip = day, 1
  for j = 0, width - 1 do
    if j < width - 1 then
      redis.call('BITOP', 'AND', carry[flip], planes[j], c)
      redis.call('BITOP', 'XOR', planes[j], planes[j], c)
      c, flip = carry[flip], 3 - flip
    else
      redis.call('BITOP', 'XOR', planes[j], planes[j], c)
    end
  end
end

-- The users of each count, by a walk from the highest plane down: nodes[d] holds the users
-- (of the union) whose top d - 1 bits are `value`'s; an empty node ends its branch.
local function walk(depth, value)
  local node = nodes[depth]
  local size = redis.call('BITCOUNT', node)
  if size == 0 then return end
  if depth > width then
    if value >= 1 and value <= asked then reply[2 + value] = size end
    return
  end
  local plane, child = planes[width - depth], nodes[depth + 1]
  redis.call('BITOP', 'AND', child, node, plane)
  walk(depth + 1, value * 2 + 1)
  redis.call('BITOP', 'XOR', child, node, child)
  walk(depth + 1, value * 2)
end
walk(1, 0)
redis.call('DEL', unpack(KEYS, 1, 17))
return reply
