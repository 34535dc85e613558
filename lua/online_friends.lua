--[[
  online_friends: one page of a user's friends who are online now, newest last activity first.

  KEYS[1]  friends    SET   the user's friends' ids
  KEYS[2]  online     ZSET  member=user_id  score=newest live session's expiry, ms, or a held
                            score (includes/live.lua)
  KEYS[3]  last_seen  ZSET  member=user_id  score=-(last activity, ms), or -(held score)
  KEYS[4]  scratch    ZSET  deleted before returning
  KEYS[5]  leases     ZSET  member=slot  score=the moment the lease lapses, ms
  KEYS[6]  invisible  SET   the users who chose INVISIBLE (includes/status.lua)
  ARGV[1]  first         int: page size, 0 to 1000
  ARGV[2]  after_score   the cursor's last_seen score, or "" for the first page
  ARGV[3]  after_member  the cursor's user_id
  ARGV[4]  shard  packed once per shard by the store (Shard.options, includes/options.lua): the
                  deployment's options and the shard's names that this script reads:
                  sessions_prefix, window_ms, and the names of a lease's keys
                  (includes/connections.lua) (a name ending in ':' is followed by a user id, in the
                  hash tag of KEYS)
  ARGV[5]  hide_invisible  0|1: 1 leaves out friends who chose INVISIBLE (for an end user,
                         to whom they are offline)
  Returns  {total, has_next 0|1, user_id, score, last_seen_ms, online=1, ...}: held users
           first, their last seen the present
  Work     O(friends log friends + page): one ZINTERSTORE of the three walks the friends (the
           smallest input) and looks each up in the others, so the number of users online
           does not matter. Entries of `online` that expired and are not swept yet (a second's
           worth, usually few) are taken out afterwards: O(log n + expired), or, should the
           sweep be far behind, O(friends) by checking each friend's expiry instead. Friends
           held under a lease that lapsed are taken out by their score: O(log n) per lease.
           Invisible friends, for an end user: one ZINTER of the online friends with the
           invisible users, which walks the smaller of the two in Redis (a look-up per friend
           from the script cost an end user's page 3-4x a backend's), and their ZREM.
]]
--- @include "clock"
--- @include "page"
--- @include "chunks"
--- @include "live"
--- @include "options"
local shard = shard_options(ARGV[4])
local friends_key, online_key, last_seen_key, scratch_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local invisible_key = KEYS[6]
local leases = lease_book(KEYS[5], shard, shard.sessions_prefix, tonumber(shard.window_ms))
local first = tonumber(ARGV[1])
local hide_invisible = ARGV[5] == '1'
local EXPIRED_LIST_MAX = 1000

local now = now_ms()
-- Friends who have an online entry, scored by their last_seen score.
local total = redis.call(
  'ZINTERSTORE', scratch_key, 3, friends_key, online_key, last_seen_key, 'WEIGHTS', 0, 0, 1)
if total > 0 then
  local expired = redis.call('ZCOUNT', online_key, '-inf', '(' .. now)
  local gone = {}
  if expired > 0 and expired <= EXPIRED_LIST_MAX then
    gone = redis.call('ZRANGEBYSCORE', online_key, '-inf', '(' .. now)
  elseif expired > 0 then
    local members = redis.call('ZRANGE', scratch_key, 0, -1)
    local expiries = read_in_chunks('ZMSCORE', online_key, members)
    for i = 1, #members do
      if not is_live(leases, tonumber(expiries[i]), now) then gone[#gone + 1] = members[i] end
    end
  end
  total = total - call_in_chunks('ZREM', scratch_key, gone)
  for _, slot in ipairs(lapsed_slots(leases, now)) do
    local score = string.format('%d', -(HELD + slot))
    total = total - redis.call('ZREMRANGEBYSCORE', scratch_key, score, score)
  end
  if some_lapsed(leases, now) then
    local several = string.format('%d', -HELD)
    for _, friend in ipairs(redis.call('ZRANGEBYSCORE', scratch_key, several, several)) do
      if not several_live(leases, friend, now) then total = total - redis.call('ZREM', scratch_key, friend) end
    end
  end
end
if total > 0 and hide_invisible then
  total = total - call_in_chunks('ZREM', scratch_key, redis.call('ZINTER', 2, scratch_key, invisible_key))
end
local rows = {}
if total > 0 then
  local start = page_start(scratch_key, ARGV[2], ARGV[3])
  rows = collect(scratch_key, start, math.huge, first + 1, function() return 1 end)
end
redis.call('DEL', scratch_key)
return page_reply(total, first, rows, now)
