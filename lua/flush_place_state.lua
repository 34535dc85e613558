--[[
  flush_place_state: announce the state of a place session that set_place_state left waiting,
  if it still waits: called by the process that left it, at the end of the session's interval.

  KEYS[1]  members     ZSET  "user_id \0 session_id" -> -(joined, ms) (includes/places.lua)
  KEYS[2]  holders     HASH  member -> "generation slot"
  KEYS[3]  states      HASH  member -> state, JSON; member .. "\0" -> its last UPDATED, ms,
                             and whether a state waits ("<ms>" or "<ms> pending")
  KEYS[4]  users       HASH  user_id -> the user's sessions in the place; "" -> its events' count
  KEYS[5]  leases      ZSET  member=slot  score=the moment the lease lapses, ms
  KEYS[6]  flushes     ZSET  "place_id \0 user_id \0 session_id" -> when its waiting state is
                             due to be announced, ms
  ARGV[1]  place_id    string
  ARGV[2]  user_id     string
  ARGV[3]  session_id  string
  ARGV[4]  channel     string: the place's events channel
  ARGV[5]  shard  packed once per shard by the store (Shard.options, includes/options.lua): the
                  deployment's options and the shard's names that this script reads: publish, and
                  the names of a lease's keys (includes/connections.lua) (a name ending in ':' is
                  followed by a user id, in the hash tag of KEYS)
  ARGV[6]  interval_ms int ms: the least time between two UPDATED of one session
  Returns  {announced, due_in_ms}: announced is 1 if it announced the state, else 0 (a later
           call or the sweep did, or the session left); due_in_ms > 0 when the state waits
           for a later moment (its interval has not passed), for the caller to call again then
  Events   UPDATED with the session's state now
]]
--- @include "clock"
--- @include "connections"
--- @include "places"
--- @include "options"
local shard = shard_options(ARGV[5])
local place = {members = KEYS[1], holders = KEYS[2], states = KEYS[3], users = KEYS[4], id = ARGV[1],
  channel = ARGV[4], publish = shard.publish, flushes = KEYS[6]}
local leases = lease_book(KEYS[5], shard)
local user_id, session_id, interval_ms = ARGV[2], ARGV[3], tonumber(ARGV[6])

local events = {}
local flushed = flush_state(leases, place, member_of(user_id, session_id), now_ms(), interval_ms, events)
announce_place(place, events)
return flushed
