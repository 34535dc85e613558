--[[
  touch_many: record activity, now, of the "default" session of many users at once.

  KEYS[1]  last_seen     ZSET    member=user_id     score=-(last activity, ms)
  KEYS[2]  online        ZSET    member=user_id     score=newest live session's expiry, ms
  KEYS[3]  user_index    HASH    user_id -> bit index in the day bitmaps
  KEYS[4]  next_index    STRING  the next never-used bit index
  KEYS[5]  free_indexes  LIST    bit indexes of purged users
  KEYS[6..8]  days       bitmaps of three consecutive days, oldest first
  KEYS[9..8+n]       sessions of user i   ZSET member=session_id score=last activity, ms
  KEYS[9+n..8+2n]    revoked of user i    ZSET member=session_id score=end of revocation, ms
  ARGV[1]  window_ms        int ms
  ARGV[2]  retention_ms     int ms: how long a day bitmap is kept after the day
  ARGV[3..6]  boundaries    int ms: the start of each of the three days, then the end of the last
  ARGV[7]  session_id       string: the session every touch belongs to ("default")
  ARGV[8]  channel          string: the events channel
  ARGV[9..8+n]  user_ids    string, distinct
  Returns  the number of users recorded: all but those whose session is revoked
  Events   per user, OFFLINE if their presence had expired unswept; ONLINE if they come online
  Errors   "DAY_NOT_GIVEN"; nothing is written when it is returned
]]
--- @include "clock"
--- @include "activity"
--- @include "events"
local last_seen_key, online_key = KEYS[1], KEYS[2]
local index_key, next_key, free_key = KEYS[3], KEYS[4], KEYS[5]
local window_ms, retention_ms = tonumber(ARGV[1]), tonumber(ARGV[2])
local boundaries = {tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])}
local session_id, channel = ARGV[7], ARGV[8]
local n = #ARGV - 8

local now = now_ms()
local day = day_of(now, boundaries)
if not day then return redis.error_reply('DAY_NOT_GIVEN') end
local day_key = KEYS[5 + day]
local cutoff = now - window_ms

local recorded = 0
for i = 1, n do
  local user_id, sessions_key, revoked_key = ARGV[8 + i], KEYS[8 + i], KEYS[8 + n + i]
  local revoked_until = redis.call('ZSCORE', revoked_key, session_id)
  if not (revoked_until and tonumber(revoked_until) > now) then
    redis.call('SETBIT', day_key, user_index(index_key, next_key, free_key, user_id), 1)
    local online_before = settle_expiry(online_key, channel, user_id, now)
    redis.call('ZADD', last_seen_key, 'LT', -now, user_id)
    record_session(online_key, sessions_key, user_id, session_id, now, cutoff, window_ms)
    if online_before == 0 then announce(channel, 'ONLINE', user_id, now, '', 1) end
    recorded = recorded + 1
  end
end
if recorded > 0 then redis.call('PEXPIREAT', day_key, boundaries[day + 1] + retention_ms) end
return recorded
