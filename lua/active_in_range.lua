--[[
  active_in_range: one page of the users whose last activity lies in [from, to], newest first.

  KEYS[1]  last_seen  ZSET  member=user_id  score=-(last activity, ms)
  KEYS[2]  online     ZSET  member=user_id  score=newest live session's expiry, ms
  ARGV[1]  from_ms       int ms, inclusive
  ARGV[2]  to_ms         int ms, inclusive
  ARGV[3]  retention_ms  int ms: last activity older than this is no longer kept
  ARGV[4]  first         int: page size, 0 to 1000
  ARGV[5]  after_score   the cursor's last_seen score, or "" for the first page
  ARGV[6]  after_member  the cursor's user_id
  Returns  {total, has_next 0|1, user_id, last_seen_ms, online 0|1, ...}
  Work     O(log n + page)
]]
--- @include "clock"
--- @include "page"
--- @include "live"
local last_seen_key, online_key = KEYS[1], KEYS[2]
local from_ms, to_ms, retention_ms = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local first = tonumber(ARGV[4])

local now = now_ms()
from_ms = math.max(from_ms, now - retention_ms)
if from_ms > to_ms then return {0, 0} end
local total = redis.call('ZCOUNT', last_seen_key, -to_ms, -from_ms)
local function online_of(user_id)
  if live_expiry(online_key, user_id, now) then return 1 end
  return 0
end
local start = math.max(
  redis.call('ZCOUNT', last_seen_key, '-inf', '(' .. -to_ms),
  page_start(last_seen_key, ARGV[5], ARGV[6]))
local rows = collect(last_seen_key, start, -from_ms, first + 1, online_of)
return page_reply(total, first, rows)
