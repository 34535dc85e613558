--[[
  acquire_lease: give a process a lease in this shard, under which it holds sessions
  (includes/live.lua): a slot never handed out before, so that nothing left of an earlier
  lease can come back to life under it; its owner the process's token.

  KEYS[1]  leases    ZSET  member=slot  score=the moment the lease lapses, ms
  ARGV[1]  token     string: the process's, unique to it
  ARGV[2]  ttl_ms    int ms: the lease lapses this long after its last renewal
  ARGV[3]  shard  packed once per shard by the store (Shard.options, includes/options.lua): the
                  names of a lease's keys (lease_owners, lease_next, lease_users_prefix, ...), each
                  followed by the lease's slot where it ends in ':': the owners (HASH slot -> token)
                  and the slot counter (STRING), in the hash tag of KEYS
  Returns  the slot, an int from 1 (far below the 7 * 2^50 that held scores leave room for)
]]
--- @include "clock"
--- @include "connections"
--- @include "options"
local shard = shard_options(ARGV[3])
local leases = lease_book(KEYS[1], shard)
local token, ttl_ms = ARGV[1], tonumber(ARGV[2])

local now = now_ms()
local slot = redis.call('INCR', leases.names.lease_next)
redis.call('HSET', lease_owners_key(leases), slot, token)
redis.call('ZADD', leases.key, now + ttl_ms, slot)
return slot
