--[[
  close_session: end a held session at once, when its connection ends.

  KEYS[1]  last_seen     ZSET  member=user_id     score=-(last activity, ms), or -(held score)
  KEYS[2]  online        ZSET  member=user_id     score=newest live session's expiry, ms, or a
                               held score (includes/live.lua)
  KEYS[3]  sessions      ZSET  member=session_id  score=last activity, ms, or a held score
                               (this user's; includes/connections.lua)
  KEYS[4]  conn          HASH  session_id -> "generation slot" (this user's)
  KEYS[5]  user_index    HASH  user_id -> bit index in the day bitmaps
  KEYS[6]  next_index    STRING  the next never-used bit index
  KEYS[7]  free_indexes  LIST  bit indexes of purged users
  KEYS[8..10]  days      bitmaps of three consecutive days, oldest first: the close's day gets
                         the user's bit, as they were active until now
  KEYS[11] leases        ZSET  member=slot  score=the moment the lease lapses, ms; the lease's
                               users and bits keys are named from it (same hash tag)
  ARGV[1]  user_id      string
  ARGV[2]  session_id   string
  ARGV[3]  generation   int: the holder's; a session held by another generation (it was
                        replaced) or no longer held (kicked, lapsed) is left as it is
  ARGV[4]  shard  packed once per shard by the store (Shard.options, includes/options.lua): the
                  deployment's options and the shard's names that this script reads: window_ms,
                  retention_ms, channel, user_channel_prefix, the names of includes/status.lua
                  (status_prefix, extras_prefix, since, invisible, hidden, status_expiries,
                  away_expiries), publish, and the names of a lease's keys
                  (includes/connections.lua) (a name ending in ':' is followed by a user id, in the
                  hash tag of KEYS)
  ARGV[5..8]  boundaries int ms: the start of each of the three days, then the end of the last
  Returns  {closed 0|1, online_after 0|1}: closed is 1 when a live session of this holder ended
  Events   OFFLINE if the user's presence had expired or lapsed unswept (at that moment);
           OFFLINE, now, when the closed session was the user's last live one; STATUS, now,
           when it was their last active one and an idle one stays live (AWAY)
  Errors   "DAY_NOT_GIVEN"; nothing is written when it is returned
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
local last_seen_key, online_key, sessions_key = KEYS[1], KEYS[2], KEYS[3]
local activity_keys = {last_seen = last_seen_key, index = KEYS[5], next = KEYS[6],
  free = KEYS[7], days = {KEYS[8], KEYS[9], KEYS[10]}}
local user = {online = online_key, last_seen = last_seen_key, sessions = sessions_key,
  conn = KEYS[4], index = KEYS[5]}
local leases = lease_book(KEYS[11], shard)
local user_id, session_id, generation = ARGV[1], ARGV[2], ARGV[3]
local window_ms, retention_ms = tonumber(shard.window_ms), tonumber(shard.retention_ms)
local boundaries = {tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8])}
local channel = {shard.channel, shard.user_channel_prefix, shard.publish, feed_of(shard)}

local now = now_ms()
local statuses = statuses_of(shard, online_key, window_ms, now, leases, true)
user.statuses = statuses
if not day_of(now, boundaries) then return redis.error_reply('DAY_NOT_GIVEN') end
local events = {}
local online = settle(leases, user, channel, user_id, now, window_ms, events)
settle_away(statuses, user_id, events)
local entry = conn_entry(user, session_id)
if not entry or entry.generation ~= generation then
  announce_all(channel, events, statuses)
  index_flush(statuses)
  return {0, online}
end

local status_before = status_with(statuses, user_id, {})
redis.call('ZREM', sessions_key, session_id)
redis.call('HDEL', user.conn, session_id)
forget_if_last(leases, user, user_id, entry.slot, false)
mark_activity(activity_keys, user_id, now, boundaries, shard)
local online_after = refresh_last(statuses, user, user_id, now, window_ms, now)
if online_after == 0 then
  add_event(events, 'OFFLINE', user_id, now, '', 0)
elseif status_with(statuses, user_id, {}) ~= status_before then
  -- Its user's last active session: AWAY now, with an idle one left.
  add_event(events, 'STATUS', user_id, now, '', 1)
end
announce_all(channel, events, statuses)
index_mark(statuses, user_id)
index_flush(statuses)
return {1, online_after}
