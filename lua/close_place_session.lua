--[[
  close_place_session: take a held session out of a place at once, when its subscription ends.

  KEYS[1]  members     ZSET  "user_id \0 session_id" -> -(joined, ms) (includes/places.lua)
  KEYS[2]  holders     HASH  member -> "generation slot"
  KEYS[3]  states      HASH  member -> state, JSON
  KEYS[4]  users       HASH  user_id -> the user's sessions in the place; "" -> its events' count
  KEYS[5]  leases      ZSET  member=slot  score=the moment the lease lapses, ms
  ARGV[1]  place_id    string
  ARGV[2]  user_id     string
  ARGV[3]  session_id  string
  ARGV[4]  generation  int: the holder's; a session held by another (it was replaced) or no
                       longer held (kicked) is left as it is
  ARGV[5]  channel     string: the place's events channel
  ARGV[6]  shard  packed once per shard by the store (Shard.options, includes/options.lua): the
                  deployment's options and the shard's names that this script reads:
                  empty_place_ttl_ms (how long an emptied place keeps its users key, its
                  events' sequence, before it expires), publish, and
                  the names of a lease's keys (includes/connections.lua) (a name ending in ':' is
                  followed by a user id, in the hash tag of KEYS)
  Returns  1 if the session left the place, else 0
  Events   LEFT: now, or at its lease's lapse if that came first
]]
--- @include "clock"
--- @include "connections"
--- @include "places"
--- @include "options"
local shard = shard_options(ARGV[6])
local place = {members = KEYS[1], holders = KEYS[2], states = KEYS[3], users = KEYS[4], id = ARGV[1],
  channel = ARGV[5], publish = shard.publish,
  empty_ttl_ms = shard.empty_place_ttl_ms}
local leases = lease_book(KEYS[5], shard)
local user_id, session_id, generation = ARGV[2], ARGV[3], ARGV[4]

local now = now_ms()
local member = member_of(user_id, session_id)
local holder = place_holder(place, member)
if not holder then return 0 end
local events = {}
local live = slot_live(leases, holder.slot, now)
if live and holder.generation ~= generation then return 0 end
remove_member(leases, place, member, holder, live and now or (lapse_of(leases, holder.slot) or now), events)
announce_place(place, events)
return (live and 1) or 0
