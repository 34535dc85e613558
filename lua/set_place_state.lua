--[[
  set_place_state: replace the state of a session that is in a place; announce it at once,
  or, within `interval_ms` of the session's last UPDATED, at the end of that interval.

  KEYS[1]  members      ZSET  "user_id \0 session_id" -> -(joined, ms) (includes/places.lua)
  KEYS[2]  holders      HASH  member -> "generation slot"
  KEYS[3]  states       HASH  member -> state, JSON; member .. "\0" -> its last UPDATED, ms,
                              and whether a state waits ("<ms>" or "<ms> pending")
  KEYS[4]  users        HASH  user_id -> the user's sessions in the place; "" -> its events' count
  KEYS[5]  leases       ZSET  member=slot  score=the moment the lease lapses, ms
  KEYS[6]  flushes      ZSET  "place_id \0 user_id \0 session_id" -> when its waiting state is
                              due to be announced, ms
  ARGV[1]  place_id     string
  ARGV[2]  user_id      string
  ARGV[3]  session_id   string
  ARGV[4]  state        string: JSON object
  ARGV[5]  channel      string: the place's events channel
  ARGV[6]  shard  packed once per shard by the store (Shard.options, includes/options.lua): the
                  deployment's options and the shard's names that this script reads: publish, and
                  the names of a lease's keys (includes/connections.lua) (a name ending in ':' is
                  followed by a user id, in the hash tag of KEYS)
  ARGV[7]  interval_ms  int ms: the least time between two UPDATED of one session
  Returns  {joined_ms, flush_in_ms}: the moment the session joined; and, when this call left
           its state waiting where none waited, in how many ms the caller announces it
           (lua/flush_place_state.lua), else 0
  Events   UPDATED with the state, unless it is the state already or the session's last
           UPDATED is less than interval_ms old: the state is written all the same, and waits
  Errors   "NOT_IN_PLACE" (the session is not held in the place now); nothing is written then
]]
--- @include "clock"
--- @include "connections"
--- @include "places"
--- @include "options"
local shard = shard_options(ARGV[6])
local place = {members = KEYS[1], holders = KEYS[2], states = KEYS[3], users = KEYS[4], id = ARGV[1],
  channel = ARGV[5], publish = shard.publish, flushes = KEYS[6]}
local leases = lease_book(KEYS[5], shard)
local user_id, session_id, state, interval_ms = ARGV[2], ARGV[3], ARGV[4], tonumber(ARGV[7])

local now = now_ms()
local member = member_of(user_id, session_id)
local holder = place_holder(place, member)
if not holder or not slot_live(leases, holder.slot, now) then return redis.error_reply('NOT_IN_PLACE') end
local joined_ms = -tonumber(redis.call('ZSCORE', place.members, member))
if redis.call('HGET', place.states, member) == state then return {joined_ms, 0} end
redis.call('HSET', place.states, member, state)
local last_ms, pending = last_update(place, member)
if last_ms and now < last_ms + interval_ms then
  if pending then return {joined_ms, 0} end  -- its announcement is planned already
  local due_ms = last_ms + interval_ms
  redis.call('HSET', place.states, updated_field(member), last_ms .. ' pending')
  redis.call('ZADD', place.flushes, due_ms, flush_entry(place, member))
  return {joined_ms, due_ms - now}
end
local events = {}
add_update(events, place, member, now, state)
if pending then redis.call('ZREM', place.flushes, flush_entry(place, member)) end
announce_place(place, events)
return {joined_ms, 0}
