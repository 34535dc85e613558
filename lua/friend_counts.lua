--[[
  friend_counts: how many friends several users' friend sets keep in one shard (the parts of
  their sets whose friends live here), so that the store can bound a set kept in several.

  KEYS[1..n]  friends  SET  the friend set (this shard's part) of user i
  Returns  {count, ...}: one per key, in order
  Work     O(n): the store sends at most 10,001 keys
]]
local counts = {}
for i = 1, #KEYS do counts[i] = redis.call('SCARD', KEYS[i]) end
return counts
