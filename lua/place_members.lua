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
  ARGV[5]  shard  packed once per shard by the store (Shard.options, includes/options.lua): the
                  names of a lease's keys (lease_owners, lease_next, lease_users_prefix, ...), each
                  followed by the lease's slot where it ends in ':'
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
--- @include "options"
local shard = shard_options(ARGV[5])
local place = {members = KEYS[1], holders = KEYS[2], states = KEYS[3], users = KEYS[4], id = ARGV[1]}
local leases = lease_book(KEYS[5], shard)
local first = tonumber(ARGV[2])

local now = now_ms()
local sessions = redis.call('ZCARD', place.members)
for _, slot in ipairs(lapsed_slots(leases, now)) do
  sessions = sessions - redis.call('SCARD', lease_members_key(leases, slot, place.id))
end
-- Walks the members from `start`, a batch at a time, their holders read with one HMGET per
-- batch: the page costs a few commands, not a few per member.
local function page_from(start, limit)
  local rows = {}
  while #rows < limit * 2 do
    local batch = redis.call('ZRANGE', place.members, start, start + limit, 'WITHSCORES')
    if #batch == 0 then break end
    local names = {}
    for i = 1, #batch, 2 do names[#names + 1] = batch[i] end
    local holders = redis.call('HMGET', place.holders, unpack(names))
    for j, value in ipairs(holders) do
      local slot = value and tonumber(string.match(value, ' (%d+)$'))
      if slot and slot_live(leases, slot, now) then
        rows[#rows + 1] = batch[2 * j - 1]
        rows[#rows + 1] = batch[2 * j]
        if #rows == limit * 2 then break end
      end
    end
    start = start + limit + 1
  end
  return rows
end

local rows = page_from(page_start(place.members, ARGV[3], ARGV[4]), first + 1)
local reply = {sessions, place_user_count(place), 0, place_sequence(place)}
local shown = math.min(#rows / 2, first)
if #rows / 2 > first then reply[3] = 1 end
if shown > 0 then
  local names = {}
  for i = 1, shown do names[i] = rows[2 * i - 1] end
  local states = redis.call('HMGET', place.states, unpack(names))
  for i = 1, shown do
    reply[#reply + 1] = rows[2 * i - 1]
    reply[#reply + 1] = rows[2 * i]
    reply[#reply + 1] = states[i] or false
  end
end
return reply
