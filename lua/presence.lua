--[[
  presence: the presence of each of several users, read at one moment.

  KEYS[1]        last_seen  ZSET  member=user_id     score=-(last activity, ms)
  KEYS[2..n+1]   sessions   ZSET  member=session_id  score=last activity, ms (user i's)
  ARGV[1]  window_ms     int ms
  ARGV[2]  retention_ms  int ms: a last activity older than this is no longer kept
  ARGV[3..n+2]  user_ids string
  Returns  {{last_seen_ms or -1, {session_id, last_activity_ms, ...}}, ...}: one entry per
           user, the live sessions in no particular order
]]
--- @include "clock"
local last_seen_key = KEYS[1]
local window_ms, retention_ms = tonumber(ARGV[1]), tonumber(ARGV[2])

local now = now_ms()
local reply = {}
for i = 3, #ARGV do
  local last_seen = redis.call('ZSCORE', last_seen_key, ARGV[i])
  last_seen = last_seen and -tonumber(last_seen) or -1
  if last_seen < now - retention_ms then last_seen = -1 end
  local live = redis.call('ZRANGEBYSCORE', KEYS[i - 1], now - window_ms, '+inf', 'WITHSCORES')
  reply[#reply + 1] = {last_seen, live}
end
return reply
