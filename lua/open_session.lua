--[[
  open_session: make one session of one user connection-bound: live until conn_ttl_ms after
  its last renewal (lua/renew_sessions.lua), or until it is closed (lua/close_session.lua).

  KEYS[1]  last_seen     ZSET    member=user_id     score=-(last activity, ms)
  KEYS[2]  online        ZSET    member=user_id     score=newest live session's expiry, ms
  KEYS[3]  sessions      ZSET    member=session_id  score=last activity, ms, or for a
                                 connection-bound session its expiry minus the window
                                 (this user's; includes/connections.lua)
  KEYS[4]  revoked       ZSET    member=session_id  score=end of revocation, ms (this user's)
  KEYS[5]  conn          HASH    session_id -> "generation score renewed_ms" (this user's)
  KEYS[6]  generations   STRING  counter: the last holder generation handed out in the shard
  KEYS[7]  user_index    HASH    user_id -> bit index in the day bitmaps
  KEYS[8]  next_index    STRING  the next never-used bit index
  KEYS[9]  free_indexes  LIST    bit indexes of purged users
  KEYS[10..12]  days     bitmaps of three consecutive days, oldest first
  ARGV[1]  user_id        string
  ARGV[2]  session_id     string
  ARGV[3]  at_ms          int ms, or "" for now: a backfilled opening (never after now)
  ARGV[4]  window_ms      int ms
  ARGV[5]  conn_ttl_ms    int ms: the session expires this long after its last renewal
  ARGV[6]  retention_ms   int ms: how long a day bitmap is kept after the day
  ARGV[7..10]  boundaries int ms: the start of each of the three days, then the end of the last
  ARGV[11] channel        string: the events channel of every user
  ARGV[12] user_channel_prefix  string: a user's events channel is this followed by the user id (in the hash tag of KEYS)
  Returns  {generation, at_ms}: the new holder's generation (0 when a backfilled opening
           had expired already: then only lastSeen and the day's activity are recorded)
  Events   OFFLINE if the user's presence had expired unswept; ONLINE if they come online;
           REPLACED (its last field the new generation) when the session was already held
  Errors   "SESSION_REVOKED", "DAY_NOT_GIVEN"; nothing is written when one is returned
]]
--- @include "clock"
--- @include "activity"
local last_seen_key, online_key, sessions_key, revoked_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local conn_key, generations_key = KEYS[5], KEYS[6]
local activity_keys = {last_seen = last_seen_key, revoked = revoked_key, index = KEYS[7],
  next = KEYS[8], free = KEYS[9], days = {KEYS[10], KEYS[11], KEYS[12]}}
local user_id, session_id, at_ms = ARGV[1], ARGV[2], tonumber(ARGV[3])
local window_ms, conn_ttl_ms, retention_ms = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local boundaries = {tonumber(ARGV[7]), tonumber(ARGV[8]), tonumber(ARGV[9]), tonumber(ARGV[10])}
local channel = {ARGV[11], ARGV[12]}

local now = now_ms()
local t_ms = math.min(at_ms or now, now)
local refused = record_activity(activity_keys, user_id, session_id, t_ms, now, boundaries, retention_ms)
if refused then return refused end
local online_before = settle_expiry(online_key, channel, user_id, now)

local cutoff = now - window_ms
local score = t_ms + conn_ttl_ms - window_ms
if score < cutoff then return {0, t_ms} end

keep_default_in_key(online_key, sessions_key, user_id, window_ms, now)
local replaced = live_conn_entry(sessions_key, conn_key, session_id, cutoff) ~= nil
-- Not GT: a session touched until now is bound to the connection from now on.
redis.call('ZADD', sessions_key, score, session_id)
redis.call('ZREMRANGEBYSCORE', sessions_key, '-inf', '(' .. cutoff)
local newest = tonumber(redis.call('ZRANGE', sessions_key, -1, -1, 'WITHSCORES')[2])
redis.call('ZADD', online_key, newest + window_ms, user_id)
local generation = redis.call('INCR', generations_key)
write_conn_entry(conn_key, session_id, generation, score, t_ms)
redis.call('ZREMRANGEBYSCORE', revoked_key, '-inf', now)

if online_before == 0 then announce(channel, 'ONLINE', user_id, now, '', 1) end
if replaced then announce(channel, 'REPLACED', user_id, now, session_id, generation) end
expire_with_newest(sessions_key, newest, window_ms)
redis.call('PEXPIREAT', conn_key, newest + window_ms + 1)
return {generation, t_ms}
