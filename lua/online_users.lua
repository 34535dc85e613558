--[[
  online_users: one page of the users online now, newest last activity first, ties by id.

  KEYS[1]  last_seen  ZSET  member=user_id  score=-(last activity, ms)
  KEYS[2]  online     ZSET  member=user_id  score=newest live session's expiry, ms
  ARGV[1]  window_ms     int ms
  ARGV[2]  first         int: page size, 0 to 1000
  ARGV[3]  after_score   the cursor's last_seen score, or "" for the first page
  ARGV[4]  after_member  the cursor's user_id
  Returns  {total, has_next 0|1, user_id, last_seen_ms, online=1, ...}
  Work     O(log n + page); users whose newest session was kicked while an older one stays
           live until it expires are skipped over too.
]]
--- @include "clock"
--- @include "page"
--- @include "live"
local last_seen_key, online_key = KEYS[1], KEYS[2]
local window_ms, first = tonumber(ARGV[1]), tonumber(ARGV[2])

local now = now_ms()
local total = redis.call('ZCOUNT', online_key, now, '+inf')
local function online_of(user_id)
  if live_expiry(online_key, user_id, now) then return 1 end
  return nil
end
local start = page_start(last_seen_key, ARGV[3], ARGV[4])
-- A live user's last activity is at least as recent as their newest live session.
local rows = collect(last_seen_key, start, -(now - window_ms), first + 1, online_of)
return page_reply(total, first, rows)
