--[[
  place_members: one page of the sessions in a place now, most recently joined first, ties by
  user id then session id.

  KEYS[1]  members  ZSET  "user_id \0 session_id" -> -(joined, ms) (includes/places.lua)
  KEYS[2]  holders  HASH  member -> "generation slot"
  KEYS[3]  states   HASH  member -> state, JSON
  KEYS[4]  users    HASH  user_id -> the user's sessions in the place; "" -> its events' count
  KEYS[5]  leases   ZSET  member=slot  score=the moment the lease lapses, ms; the leases' place
                          books are named from it (same hash tag)
  ARGV[1]  place_id      string
  ARGV[2]  first         int: page size, 0 to 1000
  ARGV[3]  after_score   the cursor's score, or "" for the first page
  ARGV[4]  after_member  the cursor's member
  Returns  {sessions, users, has_next 0|1, sequence, member, score, state or false, ...}:
           sequence is the number of the place's last event, which this page reflects
  Work     O(log n + page), and O(1) per lapsed lease: sessions held under a lease that lapsed
           are neither listed nor counted, before the sweep ends them; `users` counts a user
           all of whose sessions are so held until the sweep has (within a second).
]]
--- @include "clock"
--- @include "page"
--- @include "connections"
--- @include "places"
local place = {members = KEYS[1], holders = KEYS[2], states = KEYS[3], users = KEYS[4], id = ARGV[1]}
leases.key = KEYS[5]
local first = tonumber(ARGV[2])

local now = now_ms()
local sessions = redis.call('ZCARD', place.members)
for _, slot in ipairs(lapsed_slots(now)) do
  sessions = sessions - redis.call('SCARD', lease_members_key(slot, place.id))
end
local function live_member(member)
  local holder = place_holder(place, member)
  if holder and slot_live(holder.slot, now) then return 1 end
  return nil
end
local start = page_start(place.members, ARGV[3], ARGV[4])
local rows = collect(place.members, start, math.huge, first + 1, live_member)
local reply = {sessions, place_user_count(place), 0, place_sequence(place)}
if #rows > first * 3 then reply[3] = 1 end
for i = 1, math.min(#rows, first * 3), 3 do
  reply[#reply + 1] = rows[i]
  reply[#reply + 1] = rows[i + 1]
  reply[#reply + 1] = redis.call('HGET', place.states, rows[i]) or false
end
return reply
