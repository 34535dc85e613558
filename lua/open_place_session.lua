--[[
  open_place_session: hold one session of a user in a place under this process's lease: in
  the place while the lease is (includes/live.lua), until closed (lua/close_place_session.lua).

  KEYS[1]  members      ZSET    "user_id \0 session_id" -> -(joined, ms) (includes/places.lua)
  KEYS[2]  holders      HASH    member -> "generation slot"
  KEYS[3]  states       HASH    member -> state, JSON; member .. "\0" -> its last UPDATED, ms
  KEYS[4]  users        HASH    user_id -> the user's sessions in the place; "" -> its
                                events' count (an emptied place's expires: it is kept again)
  KEYS[5]  generations  STRING  counter: the last holder generation handed out in the shard
  KEYS[6]  leases       ZSET    member=slot  score=the moment the lease lapses, ms; the lease's
                                owners and place books are named from it (same hash tag)
  ARGV[1]  place_id     string
  ARGV[2]  user_id      string
  ARGV[3]  session_id   string
  ARGV[4]  slot         int: the holding process's lease in this shard
  ARGV[5]  token        string: the holding process's, which owns the lease
  ARGV[6]  state        string: JSON object, or "" for none
  ARGV[7]  channel      string: the place's events channel
  ARGV[8]  shard  packed once per shard by the store (Shard.options, includes/options.lua): the
                  deployment's options and the shard's names that this script reads: max_sessions
                  (the most sessions one user may have in the place; a new one beyond them is
                  refused), publish, and
                  the names of a lease's keys (includes/connections.lua) (a name ending in ':' is
                  followed by a user id, in the hash tag of KEYS)
  Returns  {generation, joined_ms}: a replaced session keeps the moment it joined
  Events   LEFT for a session held there under a lease that lapsed, at the lapse; JOINED with
           the state; or for a session held already, REPLACED (its state field the new
           generation) and UPDATED if the state differs (a state that waited to be announced
           waits no more: lua/flush_place_state.lua finds nothing to do)
  Errors   "LEASE_LOST" (the lease has lapsed or is not this process's), "TOO_MANY_SESSIONS";
           nothing is written then
]]
--- @include "clock"
--- @include "connections"
--- @include "places"
--- @include "options"
local shard = shard_options(ARGV[8])
local place = {members = KEYS[1], holders = KEYS[2], states = KEYS[3], users = KEYS[4], id = ARGV[1],
  channel = ARGV[7], publish = shard.publish}
local generations_key = KEYS[5]
local leases = lease_book(KEYS[6], shard)
local user_id, session_id, slot, token = ARGV[2], ARGV[3], tonumber(ARGV[4]), ARGV[5]
local state = ARGV[6] ~= '' and ARGV[6] or nil

local now = now_ms()
if redis.call('HGET', lease_owners_key(leases), slot) ~= token or not slot_live(leases, slot, now) then
  return redis.error_reply('LEASE_LOST')
end
local member = member_of(user_id, session_id)
local events = {}
local holder = place_holder(place, member)
if not holder and (tonumber(redis.call('HGET', place.users, user_id)) or 0) >= shard.max_sessions then
  return redis.error_reply('TOO_MANY_SESSIONS')
end
if holder and not slot_live(leases, holder.slot, now) then
  remove_member(leases, place, member, holder, lapse_of(leases, holder.slot) or now, events)
  holder = nil
end

local generation = redis.call('INCR', generations_key)
redis.call('HSET', place.holders, member, generation .. ' ' .. slot)
redis.call('SADD', lease_members_key(leases, slot, place.id), member)
redis.call('SADD', lease_places_key(leases, slot), place.id)
local joined_ms = now
if holder then
  joined_ms = -tonumber(redis.call('ZSCORE', place.members, member))
  if holder.slot ~= slot then
    local old = lease_members_key(leases, holder.slot, place.id)
    redis.call('SREM', old, member)
    if redis.call('EXISTS', old) == 0 then redis.call('SREM', lease_places_key(leases, holder.slot), place.id) end
  end
  add_place_event(events, place, 'REPLACED', user_id, session_id, now, tostring(generation))
  if redis.call('HGET', place.states, member) ~= (state or false) then
    if state then redis.call('HSET', place.states, member, state) else redis.call('HDEL', place.states, member) end
    add_update(events, place, member, now, state)
  end
else
  redis.call('ZADD', place.members, -now, member)
  redis.call('HINCRBY', place.users, user_id, 1)
  redis.call('PERSIST', place.users)
  if state then redis.call('HSET', place.states, member, state) end
  add_place_event(events, place, 'JOINED', user_id, session_id, now, state)
end
announce_place(place, events)
return {generation, joined_ms}
