--[[
  open_session: hold one session of one user under this process's lease: live while the lease
  is (lua/renew_lease.lua), until it is closed (lua/close_session.lua) or kicked.

  KEYS[1]  last_seen     ZSET    member=user_id     score=-(last activity, ms), or -(held score)
  KEYS[2]  online        ZSET    member=user_id     score=newest live session's expiry, ms,
                                 or a held score (includes/live.lua)
  KEYS[3]  sessions      ZSET    member=session_id  score=last activity, ms, or a held score
                                 (this user's; includes/connections.lua)
  KEYS[4]  revoked       ZSET    member=session_id  score=end of revocation, ms (this user's)
  KEYS[5]  conn          HASH    session_id -> "generation slot" (this user's)
  KEYS[6]  generations   STRING  counter: the last holder generation handed out in the shard
  KEYS[7]  user_index    HASH    user_id -> bit index in the day bitmaps
  KEYS[8]  next_index    STRING  the next never-used bit index
  KEYS[9]  free_indexes  LIST    bit indexes of purged users
  KEYS[10..12]  days     bitmaps of three consecutive days, oldest first
  KEYS[13] leases        ZSET    member=slot  score=the moment the lease lapses, ms; the lease's
                                 owners, users and bits keys are named from it (same hash tag)
  ARGV[1]  user_id        string
  ARGV[2]  session_id     string
  ARGV[3]  slot           int: the holding process's lease in this shard (lua/acquire_lease.lua)
  ARGV[4]  token          string: the holding process's, which owns the lease
  ARGV[5]  shard  packed once per shard by the store (Shard.options, includes/options.lua): the
                  deployment's options and the shard's names that this script reads: window_ms,
                  retention_ms, max_sessions (the most live sessions the user may have; a
                  session not live yet beyond them is refused), channel, user_channel_prefix, the names of includes/status.lua
                  (status_prefix, extras_prefix, since, invisible, hidden, status_expiries,
                  away_expiries), publish, and the names of a lease's keys
                  (includes/connections.lua) (a name ending in ':' is followed by a user id, in the
                  hash tag of KEYS)
  ARGV[6..9]  boundaries int ms: the start of each of the three days, then the end of the last
  ARGV[10] device         string: what the session's client says it is, or ""
  Returns  {generation, opened_ms}: the new holder's generation
  Events   OFFLINE if the user's presence had expired or lapsed unswept, or STATUS if a lapse
           or time had turned them AWAY unannounced (first, as the sweep would); ONLINE if they come
           online; REPLACED (its last field the new generation) when the session was held
  Errors   "LEASE_LOST" (the lease has lapsed or is not this process's), "SESSION_REVOKED",
           "DAY_NOT_GIVEN", "TOO_MANY_SESSIONS"; nothing is written when one is returned
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
local shard = shard_options(ARGV[5])
local last_seen_key, online_key, sessions_key, revoked_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local generations_key = KEYS[6]
local activity_keys = {last_seen = last_seen_key, revoked = revoked_key, index = KEYS[7],
  next = KEYS[8], free = KEYS[9], days = {KEYS[10], KEYS[11], KEYS[12]}}
local user = {online = online_key, last_seen = last_seen_key, sessions = sessions_key,
  conn = KEYS[5], index = KEYS[7]}
local leases = lease_book(KEYS[13], shard)
local user_id, session_id, slot, token = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4]
local window_ms, retention_ms = tonumber(shard.window_ms), tonumber(shard.retention_ms)
local boundaries = {tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8]), tonumber(ARGV[9])}
local channel = {shard.channel, shard.user_channel_prefix, shard.publish, feed_of(shard)}

local now = now_ms()
local statuses = statuses_of(shard, online_key, window_ms, now, leases, true)
user.statuses = statuses
if redis.call('HGET', lease_owners_key(leases), slot) ~= token or not slot_live(leases, slot, now) then
  return redis.error_reply('LEASE_LOST')
end
local refused = activity_refused(activity_keys, session_id, now, now, boundaries)
if refused then return refused end
if sessions_full(leases, user, user_id, session_id, now, window_ms, shard.max_sessions) then
  return redis.error_reply('TOO_MANY_SESSIONS')
end
local events = {}
local online_before = settle(leases, user, channel, user_id, now, window_ms, events)
settle_away(statuses, user_id, events)
local status_before = online_before == 1 and status_of(statuses, user_id, online_key, now)
-- The held session's score is the user's lastSeen once refresh_last has run.
mark_activity(activity_keys, user_id, now, boundaries, shard, true)
keep_default_in_key(leases, online_key, sessions_key, user_id, window_ms, now)

local replaced = live_conn_entry(leases, user, session_id, now)
local before = tonumber(redis.call('ZSCORE', sessions_key, session_id))
-- A session opened again while live keeps its start; it starts active.
local extras = {started = now, idle = false, device = ARGV[10] ~= '' and ARGV[10] or nil}
if before and session_live(leases, before, now, window_ms) then
  extras.started = parse_extras(redis.call('HGET', extras_key(statuses, user_id), session_id)).started or now
end
redis.call('HSET', extras_key(statuses, user_id), session_id, format_extras(extras))
redis.call('ZADD', sessions_key, string.format('%d', HELD + slot), session_id)
if replaced and replaced.slot ~= slot then forget_if_last(leases, user, user_id, replaced.slot, false) end
local generation = redis.call('INCR', generations_key)
redis.call('HSET', user.conn, session_id, string.format('%d %d', generation, slot))
hold_in_slot(leases, user, user_id, slot)
redis.call('ZREMRANGEBYSCORE', revoked_key, '-inf', string.format('%d', now))
refresh_last(statuses, user, user_id, now, window_ms, nil)

if online_before == 0 then
  came_online(statuses, user_id, now)
  add_event(events, 'ONLINE', user_id, now, '', 1)
elseif status_of(statuses, user_id, online_key, now) ~= status_before then
  add_event(events, 'STATUS', user_id, now, '', 1)
end
if replaced then add_event(events, 'REPLACED', user_id, now, session_id, generation) end
announce_all(channel, events, statuses)
index_mark(statuses, user_id)
index_flush(statuses)
return {generation, now}
