--[[
  friend_of_each: whether one user is in each of several users' friend sets, in one shard:
  the shard of that one user, which keeps each set's members that live there.

  KEYS[1..n]  friends  SET  the friend set (this shard's part) of user i
  ARGV[1]     user_id  string: the one looked for
  Returns  {0|1, ...}: one per key, in order
]]
local found = {}
for i = 1, #KEYS do found[i] = redis.call('SISMEMBER', KEYS[i], ARGV[1]) end
return found
