--[[
  acquire_lease: give a process a lease in this shard, under which it holds sessions
  (includes/live.lua): the lowest slot no lease has, its owner the process's token.

  KEYS[1]  leases    ZSET  member=slot  score=the moment the lease lapses, ms; the owners key
                           (HASH slot -> token) is named from it (same hash tag)
  ARGV[1]  token     string: the process's, unique to it
  ARGV[2]  ttl_ms    int ms: the lease lapses this long after its last renewal
  Returns  the slot, an int from 1
  Work     O(leases in the shard): a slot stays taken until the sweep has ended every
           session of a lapsed lease
]]
--- @include "clock"
--- @include "connections"
leases.key = KEYS[1]
local token, ttl_ms = ARGV[1], tonumber(ARGV[2])

local now = now_ms()
local slot = 1
while redis.call('HEXISTS', lease_owners_key(), slot) == 1 do slot = slot + 1 end
redis.call('HSET', lease_owners_key(), slot, token)
redis.call('ZADD', leases.key, now + ttl_ms, slot)
return slot
