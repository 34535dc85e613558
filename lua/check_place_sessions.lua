--[[
  check_place_sessions: which of a process's held place sessions it holds no more (replaced,
  closed, or their lease lapsed), for a holder that may have missed the announcement.

  KEYS[1]  leases          ZSET  member=slot  score=the moment the lease lapses, ms
  ARGV[1]  holders_prefix  string: a place's holders key (includes/places.lua) is this followed
                           by the place id, in the hash tag of KEYS: one slot
  ARGV[2..] held           string triples: place_id, "user_id \0 session_id", generation; at
                           most a batch (the store's CHECK_BATCH) per call
  Returns  {position, ...}: the 1-based positions of the triples whose session is no longer
           held in its place by that generation under a live lease
  Work     about two reads per session
]]
--- @include "clock"
--- @include "connections"
--- @include "places"
local leases = lease_book(KEYS[1])
local holders_prefix = ARGV[1]

local now = now_ms()
local lost = {}
for i = 2, #ARGV, 3 do
  local place_id, member, generation = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  local holder = place_holder({holders = holders_prefix .. place_id}, member)
  if not (holder and holder.generation == generation and slot_live(leases, holder.slot, now)) then
    lost[#lost + 1] = (i + 1) / 3
  end
end
return lost
