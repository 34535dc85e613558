--[[
  presence: the presence of each of several users, read at one moment.

  KEYS[1]        last_seen  ZSET  member=user_id     score=-(last activity, ms)
  KEYS[2]        online     ZSET  member=user_id     score=newest live session's expiry, ms
  KEYS[3..n+2]   sessions   ZSET  member=session_id  score=last activity, ms (user i's; a user
                                  whose only session is "default" may have none, see
                                  includes/activity.lua)
  KEYS[n+3..2n+2] conn    HASH  session_id -> "generation score renewed_ms" (user i's
                                  connection-bound sessions, includes/connections.lua)
  ARGV[1]  window_ms     int ms
  ARGV[2]  retention_ms  int ms: a last activity older than this is no longer kept
  ARGV[3..n+2]  user_ids string
  Returns  {{last_seen_ms or -1, {session_id, last_activity_ms, ...}}, ...}: one entry per
           user, the live sessions in no particular order; a connection-bound session's
           activity is its last renewal
]]
--- @include "clock"
--- @include "activity"
local last_seen_key, online_key = KEYS[1], KEYS[2]
local window_ms, retention_ms = tonumber(ARGV[1]), tonumber(ARGV[2])

local now = now_ms()
local reply = {}
local n = #ARGV - 2
for i = 3, #ARGV do
  local user_id, sessions_key, conn_key = ARGV[i], KEYS[i], KEYS[i + n]
  local last_seen = redis.call('ZSCORE', last_seen_key, user_id)
  last_seen = last_seen and -tonumber(last_seen) or -1
  if last_seen < now - retention_ms then last_seen = -1 end
  local live = {}
  if redis.call('EXISTS', sessions_key) == 1 then
    live = redis.call('ZRANGEBYSCORE', sessions_key, now - window_ms, '+inf', 'WITHSCORES')
    live = with_renewals(live, conn_key)
  else
    local expiry = live_expiry(online_key, user_id, now)
    if expiry then live = {DEFAULT_SESSION, expiry - window_ms} end
  end
  reply[#reply + 1] = {last_seen, live}
end
return reply
