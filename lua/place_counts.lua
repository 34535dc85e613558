--[[
  place_counts: how many sessions and users are in each of several places of this shard now.

  KEYS[1..n]     members  ZSET  place i's (includes/places.lua)
  KEYS[n+1..2n]  users    HASH  place i's: user_id -> the user's sessions in the place
  KEYS[2n+1]     leases   ZSET  member=slot  score=the moment the lease lapses, ms; the leases'
                                place books are named from it (same hash tag)
  ARGV[1..n]     place_id string
  ARGV[n+1]      shard packed once per shard by the store (Shard.options, includes/options.lua): the
                  names of a lease's keys (lease_owners, lease_next, lease_users_prefix, ...), each
                  followed by the lease's slot where it ends in ':'
  Returns  {sessions_1, users_1, sessions_2, users_2, ...} in the order given
  Work     O(1) per place and lapsed lease, whatever the places' sizes (`users` as in
           lua/place_members.lua)
]]
--- @include "clock"
--- @include "connections"
--- @include "places"
--- @include "options"
local shard = shard_options(ARGV[#ARGV])
local n = #ARGV - 1
local leases = lease_book(KEYS[2 * n + 1], shard)

local now = now_ms()
local lapsed = lapsed_slots(leases, now)
local reply = {}
for i = 1, n do
  local sessions = redis.call('ZCARD', KEYS[i])
  for _, slot in ipairs(lapsed) do
    sessions = sessions - redis.call('SCARD', lease_members_key(leases, slot, ARGV[i]))
  end
  reply[#reply + 1] = sessions
  reply[#reply + 1] = place_user_count({users = KEYS[n + i]})
end
return reply
