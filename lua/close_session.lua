--[[
  close_session: end a connection-bound session at once, when its connection ends.

  KEYS[1]  online    ZSET  member=user_id     score=newest live session's expiry, ms
  KEYS[2]  sessions  ZSET  member=session_id  score=last activity, ms, or expiry minus the
                           window (this user's; includes/connections.lua)
  KEYS[3]  conn      HASH  session_id -> "generation score renewed_ms" (this user's)
  ARGV[1]  user_id     string
  ARGV[2]  session_id  string
  ARGV[3]  generation  int: the holder's; a session held by another generation (it was
                       replaced) or no longer held (kicked) is left as it is
  ARGV[4]  window_ms   int ms
  ARGV[5]  channel     string: the events channel of every user
  ARGV[6]  user_channel_prefix  string: a user's events channel is this followed by the user id (in the hash tag of KEYS)
  Returns  {closed 0|1, online_after 0|1}: closed is 1 when a live session of this holder ended
  Events   OFFLINE if the user's presence had expired unswept (at its expiry); OFFLINE, now,
           when the closed session was the user's last live one
]]
--- @include "clock"
--- @include "activity"
local online_key, sessions_key, conn_key = KEYS[1], KEYS[2], KEYS[3]
local user_id, session_id, generation = ARGV[1], ARGV[2], ARGV[3]
local window_ms, channel = tonumber(ARGV[4]), {ARGV[5], ARGV[6]}

local now = now_ms()
local online = settle_expiry(online_key, channel, user_id, now)
local entry = conn_entry(sessions_key, conn_key, session_id)
if not entry or entry.generation ~= generation then return {0, online} end

local cutoff = now - window_ms
local closed = entry.score >= cutoff and 1 or 0
redis.call('ZREM', sessions_key, session_id)
redis.call('HDEL', conn_key, session_id)
redis.call('ZREMRANGEBYSCORE', sessions_key, '-inf', '(' .. cutoff)
local newest = tonumber(redis.call('ZRANGE', sessions_key, -1, -1, 'WITHSCORES')[2])
if newest then
  redis.call('ZADD', online_key, newest + window_ms, user_id)
  expire_with_newest(sessions_key, newest, window_ms)
  return {closed, 1}
end
redis.call('ZREM', online_key, user_id)
if online == 1 then announce(channel, 'OFFLINE', user_id, now, '', 0) end
return {closed, 0}
