--[[
  renew_sessions: renew many connection-bound sessions at once, each held by its generation:
  each is live again for conn_ttl_ms from now, and its user's lastSeen moves to now.

  KEYS[1]  last_seen     ZSET    member=user_id     score=-(last activity, ms)
  KEYS[2]  online        ZSET    member=user_id     score=newest live session's expiry, ms
  KEYS[3]  user_index    HASH    user_id -> bit index in the day bitmaps
  KEYS[4]  next_index    STRING  the next never-used bit index
  KEYS[5]  free_indexes  LIST    bit indexes of purged users
  KEYS[6..8]  days       bitmaps of three consecutive days, oldest first: the renewal's
                         day gets the bit of each user renewed
  ARGV[1]  window_ms        int ms: a session's score is its expiry minus this
                            (includes/connections.lua)
  ARGV[2]  conn_ttl_ms      int ms: each session expires this long after its renewal
  ARGV[3]  retention_ms     int ms: how long a day bitmap is kept after the day
  ARGV[4..7]  boundaries    int ms: the start of each of the three days, then the end of the last
  ARGV[8]  sessions_prefix  string: a user's sessions key is this followed by the user id
  ARGV[9]  conn_prefix      string: a user's conn key (includes/connections.lua) is this
                            followed by the user id. Both hold the hash tag of KEYS: one slot.
  ARGV[10] at_ms            int ms, or "" for now: a backfilled renewal (never after now; a
                            renewal never moves an expiry backwards)
  ARGV[11..] held           string triples: user_id, session_id, generation; at most a batch
                            (the store's RENEW_BATCH) per call
  Returns  {position, ...}: the 1-based positions of the triples not renewed, as their
           session is no longer live with that generation (kicked, replaced, closed, expired)
  Errors   "DAY_NOT_GIVEN"; nothing is written when it is returned
  Work     about ten commands per session
]]
--- @include "clock"
--- @include "activity"
local last_seen_key, online_key = KEYS[1], KEYS[2]
local index_key, next_key, free_key = KEYS[3], KEYS[4], KEYS[5]
local window_ms, conn_ttl_ms, retention_ms = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local boundaries = {tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])}
local sessions_prefix, conn_prefix, at_ms = ARGV[8], ARGV[9], tonumber(ARGV[10])

local now = now_ms()
local t_ms = math.min(at_ms or now, now)
local day = day_of(t_ms, boundaries)
if not day then return redis.error_reply('DAY_NOT_GIVEN') end
local day_key = KEYS[5 + day]
local cutoff = now - window_ms
local score = t_ms + conn_ttl_ms - window_ms

local lost = {}
for i = 11, #ARGV, 3 do
  local user_id, session_id, generation = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  local sessions_key, conn_key = sessions_prefix .. user_id, conn_prefix .. user_id
  local entry = live_conn_entry(sessions_key, conn_key, session_id, cutoff)
  if entry and entry.generation == generation then
    if score > entry.score then
      redis.call('ZADD', sessions_key, score, session_id)
      write_conn_entry(conn_key, session_id, generation, score, t_ms)
    end
    local newest = tonumber(redis.call('ZRANGE', sessions_key, -1, -1, 'WITHSCORES')[2])
    redis.call('ZADD', online_key, newest + window_ms, user_id)
    mark_active(last_seen_key, day_key, index_key, next_key, free_key, user_id, t_ms)
    expire_with_newest(sessions_key, newest, window_ms)
    redis.call('PEXPIREAT', conn_key, newest + window_ms + 1)
  else
    lost[#lost + 1] = (i - 8) / 3
  end
end
keep_day(day_key, day, boundaries, retention_ms)
return lost
