--[[
  set_place_state: replace the state of a session that is in a place.

  KEYS[1]  members     ZSET  "user_id \0 session_id" -> -(joined, ms) (includes/places.lua)
  KEYS[2]  holders     HASH  member -> "generation slot"
  KEYS[3]  states      HASH  member -> state, JSON
  KEYS[4]  users       HASH  user_id -> the user's sessions in the place; "" -> its events' count
  KEYS[5]  leases      ZSET  member=slot  score=the moment the lease lapses, ms
  ARGV[1]  place_id    string
  ARGV[2]  user_id     string
  ARGV[3]  session_id  string
  ARGV[4]  state       string: JSON object
  ARGV[5]  channel     string: the place's events channel
  ARGV[6]  publish    string: "PUBLISH", or "SPUBLISH" for sharded pub/sub (then every channel
                      given is in the hash tag of KEYS; lua/includes/events.lua)
  Returns  the moment the session joined, ms
  Events   UPDATED with the state, unless it is the state already
  Errors   "NOT_IN_PLACE" (the session is not held in the place now); nothing is written then
]]
--- @include "clock"
--- @include "connections"
--- @include "places"
local place = {members = KEYS[1], holders = KEYS[2], states = KEYS[3], users = KEYS[4], id = ARGV[1],
  channel = ARGV[5], publish = ARGV[6]}
leases.key = KEYS[5]
local user_id, session_id, state = ARGV[2], ARGV[3], ARGV[4]

local now = now_ms()
local member = member_of(user_id, session_id)
local holder = place_holder(place, member)
if not holder or not slot_live(holder.slot, now) then return redis.error_reply('NOT_IN_PLACE') end
if redis.call('HGET', place.states, member) ~= state then
  redis.call('HSET', place.states, member, state)
  local events = {}
  add_place_event(events, place, 'UPDATED', user_id, session_id, now, state)
  announce_place(place, events)
end
return -tonumber(redis.call('ZSCORE', place.members, member))
