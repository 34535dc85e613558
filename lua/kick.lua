--[[
  kick: end every live session of a user, or one session, and revoke the ended ids.

  KEYS[1]  online    ZSET  member=user_id     score=newest live session's expiry, ms
  KEYS[2]  sessions  ZSET  member=session_id  score=last activity, ms (this user's; created
                         to hold a "default" session kept by the online entry alone)
  KEYS[3]  revoked   ZSET  member=session_id  score=end of revocation, ms (this user's)
  KEYS[4]  conn      HASH  session_id -> "generation score renewed_ms" of this user's
                         connection-bound sessions (includes/connections.lua): a kicked one's
                         entry goes, so that its holder's renewals stop
  ARGV[1]  user_id     string
  ARGV[2]  session_id  string, or "" for every live session
  ARGV[3]  window_ms   int ms
  ARGV[4]  revoke_ms   int ms: how long a kicked session id is refused (0: not at all)
  ARGV[5]  channel     string: the events channel of every user
  ARGV[6]  user_channel_prefix  string: a user's events channel is this followed by the user id (in the hash tag of KEYS)
  Returns  {kicked_sessions, online_after 0|1}
  Events   OFFLINE if the user's presence had expired unswept; KICKED if a live session ended
           (the process holding a connection-bound session ends its subscription on it)
  A named session is revoked even when it is no longer live, so that it cannot come back.
]]
--- @include "clock"
--- @include "activity"
local online_key, sessions_key, revoked_key, conn_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local user_id, session_id = ARGV[1], ARGV[2]
local window_ms, revoke_ms = tonumber(ARGV[3]), tonumber(ARGV[4])
local channel = {ARGV[5], ARGV[6]}

local now = now_ms()
settle_expiry(online_key, channel, user_id, now)
keep_default_in_key(online_key, sessions_key, user_id, window_ms, now)
local cutoff = now - window_ms
local revoke = {}
local kicked = 0

if session_id == '' then
  revoke = redis.call('ZRANGEBYSCORE', sessions_key, cutoff, '+inf')
  kicked = #revoke
  redis.call('DEL', sessions_key, conn_key)
else
  local last = tonumber(redis.call('ZSCORE', sessions_key, session_id))
  if last and is_live(last + window_ms, now) then kicked = 1 end
  redis.call('ZREM', sessions_key, session_id)
  redis.call('HDEL', conn_key, session_id)
  revoke = {session_id}
end

local online_after = 0
local newest = tonumber(redis.call('ZRANGE', sessions_key, -1, -1, 'WITHSCORES')[2])
if newest and is_live(newest + window_ms, now) then
  online_after = 1
  redis.call('ZADD', online_key, newest + window_ms, user_id)
  expire_with_newest(sessions_key, newest, window_ms)
else
  redis.call('ZREM', online_key, user_id)
end

if revoke_ms > 0 and #revoke > 0 then
  redis.call('ZREMRANGEBYSCORE', revoked_key, '-inf', now)
  for i = 1, #revoke do redis.call('ZADD', revoked_key, now + revoke_ms, revoke[i]) end
  local latest = tonumber(redis.call('ZRANGE', revoked_key, -1, -1, 'WITHSCORES')[2])
  redis.call('PEXPIREAT', revoked_key, latest)
end
if kicked > 0 then announce(channel, 'KICKED', user_id, now, session_id, online_after) end
return {kicked, online_after}
