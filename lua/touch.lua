--[[
  touch: record activity of one session of one user, at the server's time or a backfilled one.

  KEYS[1]  last_seen     ZSET    member=user_id     score=-(last activity, ms)
  KEYS[2]  online        ZSET    member=user_id     score=newest live session's expiry, ms,
                                 or a held score (includes/live.lua)
  KEYS[3]  sessions      ZSET    member=session_id  score=last activity, ms, or a held
                                 session's held score (this user's; a user whose only
                                 session is "default" may have none, see includes/activity.lua)
  KEYS[4]  revoked       ZSET    member=session_id  score=end of revocation, ms (this user's)
  KEYS[5]  user_index    HASH    user_id -> bit index in the day bitmaps
  KEYS[6]  next_index    STRING  the next never-used bit index
  KEYS[7]  free_indexes  LIST    bit indexes of purged users
  KEYS[8..10]  days      bitmaps of three consecutive days, oldest first
  KEYS[11] conn          HASH    session_id -> "generation slot" of this user's
                                 connection-bound sessions (includes/connections.lua)
  KEYS[12] leases        ZSET    member=slot  score=the moment the lease lapses, ms
                                 (includes/live.lua)
  ARGV[1]  user_id          string
  ARGV[2]  session_id       string
  ARGV[3]  at_ms            int ms, or "" for now
  ARGV[4]  shard  packed once per shard by the store (Shard.options, includes/options.lua): the
                  deployment's options and the shard's names that this script reads: window_ms,
                  retention_ms, max_sessions (the most live sessions the user may have; a
                  session not live yet beyond them is refused), channel, user_channel_prefix, the names of includes/status.lua
                  (status_prefix, extras_prefix, since, invisible, hidden, status_expiries,
                  away_expiries), publish, and the names of a lease's keys
                  (includes/connections.lua) (a name ending in ':' is followed by a user id, in the
                  hash tag of KEYS)
  ARGV[5]  max_future_ms    int ms: how far ahead of now `at` may lie
  ARGV[6..9]  boundaries   int ms: the start of each of the three days, then the end of the last
  ARGV[10] device        string: what the session's client says it is, or "" to keep it
  ARGV[11] idle          0|1: 1 if the client says its user is away from the session
  Returns  {online_before 0|1, entry}: the user's presence_entry (includes/status.lua) after
           the touch (a held session's activity is now). A held session stays held:
           touching it moves lastSeen only.
  Events   OFFLINE if the user's presence had expired or lapsed unswept, or STATUS if a lapse
           or time had turned them AWAY unannounced (first, as the sweep would); ONLINE if they come
           online (the touched session's start, and the user's onlineSince, are then t_ms);
           STATUS if the touch made them AWAY or active again
  Errors   "AT_IN_FUTURE", "AT_BEFORE_RETENTION", "SESSION_REVOKED", "DAY_NOT_GIVEN",
           "TOO_MANY_SESSIONS" (mirrored by the store's error mapping); nothing is written when one is returned
  Feed     each change of a kind the feed keeps goes in the shard's feed, with the user's
           or the place's version, in this call (includes/feed.lua: its names and options
           are in `shard`)
  Indexes  the online list's, kept for each user changed (includes/online_index.lua: its keys
           are named from index_prefix and last_seen in `shard`, in the hash tag of KEYS)
]]
--- @include "clock"
--- @include "activity"
--- @include "status"
--- @include "options"
local shard = shard_options(ARGV[4])
local last_seen_key, online_key, sessions_key, revoked_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local activity_keys = {last_seen = last_seen_key, revoked = revoked_key, index = KEYS[5],
  next = KEYS[6], free = KEYS[7], days = {KEYS[8], KEYS[9], KEYS[10]}}
local user = {online = online_key, last_seen = last_seen_key, sessions = sessions_key,
  conn = KEYS[11], index = KEYS[5], defer_expiry = true}
local leases = lease_book(KEYS[12], shard)
local user_id, session_id, at_ms = ARGV[1], ARGV[2], tonumber(ARGV[3])
local window_ms, retention_ms, max_future_ms = tonumber(shard.window_ms), tonumber(shard.retention_ms), tonumber(ARGV[5])
local boundaries = {tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8]), tonumber(ARGV[9])}
local channel = {shard.channel, shard.user_channel_prefix, shard.publish, feed_of(shard)}
local device, idle = ARGV[10], ARGV[11] == '1'

local now = now_ms()
local statuses = statuses_of(shard, online_key, window_ms, now, leases, true)
user.statuses = statuses
local t_ms = at_ms or now
if t_ms > now + max_future_ms then return redis.error_reply('AT_IN_FUTURE') end
if t_ms < now - retention_ms then return redis.error_reply('AT_BEFORE_RETENTION') end
local refused = activity_refused(activity_keys, session_id, t_ms, now, boundaries)
if refused then return refused end
if t_ms >= now - window_ms
    and sessions_full(leases, user, user_id, session_id, now, window_ms, shard.max_sessions) then
  return redis.error_reply('TOO_MANY_SESSIONS')
end
local events = {}
local online_before = settle(leases, user, channel, user_id, now, window_ms, events)
settle_away(statuses, user_id, events)
local status_before = online_before == 1 and status_of(statuses, user_id, online_key, now)
mark_activity(activity_keys, user_id, t_ms, boundaries, shard)
local cutoff = now - window_ms
local online_after, tracked, rows
-- A keyless default session has no extras: one that says more is kept in the key.
local keyless = session_id == DEFAULT_SESSION and device == '' and not idle
  and redis.call('EXISTS', sessions_key) == 0
if keyless then
  online_after = record_default(online_key, user_id, t_ms, cutoff, window_ms, statuses) and 1 or 0
else
  keep_default_in_key(leases, online_key, sessions_key, user_id, window_ms, now)
  local before = tonumber(redis.call('ZSCORE', sessions_key, session_id))
  local was_live = before and session_live(leases, before, now, window_ms)
  tracked = t_ms >= cutoff or was_live
  -- The session's extras are written below, then track_activity reads them: what it would
  -- read while record_session writes the online entry is not the touch's outcome.
  statuses.track_later = tracked
  online_after, rows = record_session(user, user_id, session_id, t_ms, now, window_ms)
  statuses.track_later = false
  if tracked then
    local extras = was_live and parse_extras(redis.call('HGET', extras_key(statuses, user_id), session_id)) or {}
    extras.started = extras.started or t_ms
    extras.idle = idle
    if device ~= '' then extras.device = device end
    redis.call('HSET', extras_key(statuses, user_id), session_id, format_extras(extras))
  end
end
live_written(statuses)
if not keyless then live_refreshed(statuses, user, user_id, now, window_ms, online_after, rows) end
if tracked then track_activity(statuses, user_id) end
-- The user's entry after the touch tells their status now; it is read again only after an
-- announcement, which may change what it shows (a custom status that ended, the version).
local entry
if online_after == 1 and online_before == 0 then
  came_online(statuses, user_id, t_ms)
  add_event(events, 'ONLINE', user_id, now, '', 1)
elseif online_after == 1 then
  entry = presence_entry(statuses, user_id, last_seen_key, now, retention_ms)
  if entry[3] ~= status_before then add_event(events, 'STATUS', user_id, now, '', 1) end
end
redis.call('ZREMRANGEBYSCORE', revoked_key, '-inf', string.format('%d', now))
if #events > 0 then
  announce_all(channel, events, statuses)
  entry = nil
end

entry = entry or presence_entry(statuses, user_id, last_seen_key, now, retention_ms)
if user.expire_at then redis.call('PEXPIREAT', sessions_key, user.expire_at) end
tidy_extras(statuses, user_id, user.expire_at)
index_mark(statuses, user_id)
index_flush(statuses, {[user_id] = entry})
return {online_before, entry}
