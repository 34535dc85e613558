--[[
  online_friends: one page of a user's friends who are online now, newest last activity first.

  KEYS[1]  friends    SET   the user's friends' ids
  KEYS[2]  online     ZSET  member=user_id  score=newest live session's expiry, ms
  KEYS[3]  last_seen  ZSET  member=user_id  score=-(last activity, ms)
  KEYS[4]  scratch    ZSET  deleted before returning
  ARGV[1]  first         int: page size, 0 to 1000
  ARGV[2]  after_score   the cursor's last_seen score, or "" for the first page
  ARGV[3]  after_member  the cursor's user_id
  Returns  {total, has_next 0|1, user_id, last_seen_ms, online=1, ...}
  Work     O(friends log friends + page): ZINTERSTORE walks the smaller of its inputs, so
           the number of users online does not matter.
]]
--- @include "clock"
--- @include "page"
local friends_key, online_key, last_seen_key, scratch_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local first = tonumber(ARGV[1])

local now = now_ms()
redis.call('ZINTERSTORE', scratch_key, 2, friends_key, online_key, 'WEIGHTS', 0, 1)
redis.call('ZREMRANGEBYSCORE', scratch_key, '-inf', '(' .. now)
local total = redis.call('ZCARD', scratch_key)
local rows = {}
if total > 0 then
  redis.call('ZINTERSTORE', scratch_key, 2, scratch_key, last_seen_key, 'WEIGHTS', 0, 1)
  local start = page_start(scratch_key, ARGV[2], ARGV[3])
  rows = collect(scratch_key, start, math.huge, first + 1, function() return 1 end)
  redis.call('DEL', scratch_key)
end
return page_reply(total, first, rows)
