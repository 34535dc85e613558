--[[
  sweep: remove presence that has expired, end the sessions of lapsed leases, and forget
  activity past the retention, a batch at a time.

  KEYS[1]  online        ZSET  member=user_id  score=newest live session's expiry, ms, or a
                               held score (includes/live.lua)
  KEYS[2]  last_seen     ZSET  member=user_id  score=-(last activity, ms), or -(held score)
  KEYS[3]  user_index    HASH  user_id -> bit index in the day bitmaps
  KEYS[4]  free_indexes  LIST  bit indexes of purged users
  KEYS[5]  leases        ZSET  member=slot  score=the moment the lease lapses, ms; a lease's
                               owners, users and bits keys are named from it (same hash tag)
  KEYS[6]  flushes       ZSET  "place_id \0 user_id \0 session_id" -> when a place session's
                               waiting state is due to be announced, ms (includes/places.lua)
  KEYS[7..9]  days       bitmaps of three consecutive days, oldest first: a lapsed lease's
                         users' bits go into the bitmap of the day it lapsed, if given (and
                         of its hour, week and month: includes/activity.lua)
  KEYS[10] cooling       ZSET  member=bit index of a forgotten user  score=when it may be
                               handed out again, ms
  KEYS[11] index_scan    STRING  the ZSCAN cursor over `online` of the pass that indexes the
                               users online with no index entry, "done" once a pass has ended
                               (none kept while nobody is online)
  ARGV[1]  batch          int: at most this many users of each kind per call (expired, past
                          the retention), and about this many users' versions looked at for
                          their expiry (includes/feed.lua, sweep_versions)
  ARGV[2]  purge_after_ms int ms: a user whose last activity is older than this is forgotten,
                          and their bit index set cooling. It must exceed the retention by more
                          than a day, so that no day bitmap still kept holds their bit.
  ARGV[3]  shard  packed once per shard by the store (Shard.options, includes/options.lua): the
                  deployment's options and the shard's names that this script reads: hourly_ms,
                  analytics_ms, the names of includes/activity.lua's bitmaps, channel,
                  user_channel_prefix, sessions_prefix, conn_prefix, window_ms, retention_ms,
                  empty_place_ttl_ms (how long a place emptied here keeps its users key, its
                  events' sequence, before it expires), the
                  names of includes/status.lua (status_prefix, extras_prefix, since, invisible,
                  hidden, status_expiries, away_expiries), publish, the names of a lease's keys
                  (includes/connections.lua), and a place's members, holders, states and users
                  keys and events channel (place_members_prefix, place_holders_prefix,
                  place_states_prefix, place_users_prefix, place_channel_prefix; includes/
                  places.lua), and the online time's (includes/online_time.lua: a forgotten
                  user's counters are cleared in the keys named from online_time_prefix and
                  their index) (a name ending in ':' is followed by a user id, or a place's by
                  its id, in the hash tag of KEYS)
  ARGV[4..7]  boundaries   int ms: the start of each of the three days, then the end of the last
  ARGV[8]  lapsed_batch     int: at most this many users and place sessions of lapsed leases
                            per call: ending one takes about a dozen commands, so a call ends
                            far fewer of them than it removes expired entries
  ARGV[9]  overdue_ms       int ms: a waiting place state due more than this long ago is
                            announced here (its process died or stalled before it did): at most
                            lapsed_batch of them per call; the interval of set_place_state
  ARGV[10] cooling_ms       int ms: a forgotten user's bit index is handed out again this long
                            after (its first day cleared then), once every bitmap of a week,
                            month or first day that could hold its bit has expired
  ARGV[11] index_batch      int: at most this many users online are looked at per call by the
                            pass that indexes those online since before the online list's
                            indexes were kept (KEYS[11])
  Returns  {offline_count, purged_count, online_count, lapsed_count, ended_statuses,
           flushed_count}: online_count is of users online now; lapsed_count of the users and
           place sessions of lapsed leases whose sessions under them were ended; ended_statuses
           the most of custom statuses ended and of users turned AWAY by time, each at most
           `batch`; flushed_count of the waiting place states taken, announced or not (their
           session had left)
  Events   OFFLINE for each user whose presence expired, at the moment it expired, or whose
           last live sessions were held under a lease that lapsed, at its lapse; STATUS for
           each custom status that ended, and for each user turned AWAY when their last active
           session expired while an idle one stays live; all in one message. LEFT, on its
           place's channel, for each place session of a lapsed lease; UPDATED for each overdue
           waiting place state. As the same script removes what it announces, two processes
           sweeping at once never both announce it.
  Sessions and revocations need no sweep: their keys expire with their newest entry.
  Feed     each change of a kind the feed keeps goes in the shard's feed, with the user's
           or the place's version, in this call (includes/feed.lua: its names and options
           are in `shard`)
  Indexes  the online list's, kept for each user changed (includes/online_index.lua: its keys
           are named from index_prefix and last_seen in `shard`, in the hash tag of KEYS)
]]
--- @include "clock"
--- @include "activity"
--- @include "places"
--- @include "status"
--- @include "options"
local shard = shard_options(ARGV[3])
local online_key, last_seen_key, index_key, free_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local leases = lease_book(KEYS[5], shard)
local batch, purge_after_ms = tonumber(ARGV[1]), tonumber(ARGV[2])
local channel = {shard.channel, shard.user_channel_prefix, shard.publish, feed_of(shard)}
local sessions_prefix, conn_prefix = shard.sessions_prefix, shard.conn_prefix
local window_ms, retention_ms = tonumber(shard.window_ms), tonumber(shard.retention_ms)
local boundaries = {tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])}
local place_prefixes = {members = shard.place_members_prefix, holders = shard.place_holders_prefix,
  states = shard.place_states_prefix, users = shard.place_users_prefix,
  channel = shard.place_channel_prefix}
local lapsed_batch, overdue_ms = tonumber(ARGV[8]), tonumber(ARGV[9])
local flushes_key = KEYS[6]

local function place_of(place_id)
  local place = {id = place_id, flushes = flushes_key, publish = channel[3], feed = channel[4],
    empty_ttl_ms = shard.empty_place_ttl_ms}
  for name, prefix in pairs(place_prefixes) do place[name] = prefix .. place_id end
  return place
end

local now = now_ms()
local statuses = statuses_of(shard, online_key, window_ms, now, leases)
local expired = redis.call('ZRANGEBYSCORE', online_key, '-inf', '(' .. now, 'WITHSCORES', 'LIMIT', 0, batch)
local offline = {}
for i = 1, #expired, 2 do
  redis.call('ZREM', online_key, expired[i])
  online_written(online_key, expired[i], false)
  went_offline(statuses, expired[i])
  sync_hidden(statuses, expired[i])
  add_event(offline, 'OFFLINE', expired[i], tonumber(expired[i + 1]), '', 0, look_of(statuses, 'OFFLINE', expired[i], 0))
end

-- Lapsed leases, oldest first: their users' sessions under them end, at their lapse, up to
-- `lapsed_batch` users and place sessions in all.
local ended = 0
local lapsed = redis.call('ZRANGEBYSCORE', leases.key, '-inf', '(' .. now, 'WITHSCORES', 'LIMIT', 0, 100)
for i = 1, #lapsed, 2 do
  if ended >= lapsed_batch then break end
  local slot, lapse = tonumber(lapsed[i]), tonumber(lapsed[i + 1])
  local users_key = lease_users_key(leases, slot)
  local users = redis.call('SPOP', users_key, lapsed_batch - ended)
  for _, user_id in ipairs(users) do
    local user = {online = online_key, last_seen = last_seen_key, sessions = sessions_prefix .. user_id,
      conn = conn_prefix .. user_id, index = index_key, statuses = statuses}
    end_lapsed(leases, user, user_id, now, window_ms, offline)
  end
  ended = ended + #users
  local places_key = lease_places_key(leases, slot)
  for _, place_id in ipairs(redis.call('SRANDMEMBER', places_key, 100)) do
    if ended >= lapsed_batch then break end
    local place = place_of(place_id)
    local left = {}
    ended = ended + end_lapsed_members(leases, place, slot, lapsed_batch - ended, left)
    announce_place(place, left)
  end
  if redis.call('EXISTS', users_key) == 0 and redis.call('EXISTS', places_key) == 0 then
    -- Every user it held was active until it lapsed: on that day too.
    local bits_key = lease_bits_key(leases, slot)
    if day_of(lapse, boundaries) and redis.call('EXISTS', bits_key) == 1 then
      mark_bitmap(periods_of(shard, {KEYS[7], KEYS[8], KEYS[9]}, boundaries, lapse), bits_key)
    end
    redis.call('DEL', bits_key)
    redis.call('ZREM', leases.key, slot)
    redis.call('HDEL', lease_owners_key(leases), slot)
  end
end

-- Custom statuses whose end has come: gone from every read already, announced here once.
local ended_statuses = redis.call('ZRANGEBYSCORE', status_expiry_key(statuses), '-inf', now, 'LIMIT', 0, batch)
for _, user_id in ipairs(ended_statuses) do
  redis.call('ZREM', status_expiry_key(statuses), user_id)
  local key = status_key(statuses, user_id)
  local expires = tonumber(redis.call('HGET', key, 'expires'))
  if expires and expires <= now then
    redis.call('HDEL', key, 'text', 'emoji', 'expires')
    local online = #live_of(statuses, user_id, online_key, now) > 0 and 1 or 0
    add_event(offline, 'STATUS', user_id, now, '', online, look_of(statuses, 'STATUS', user_id, online))
  end
end

-- Users whose last active session expired by time while an idle one stays live: AWAY since.
local turned_away = redis.call('ZRANGEBYSCORE', away_expiry_key(statuses), '-inf', '(' .. now, 'LIMIT', 0, batch)
for _, user_id in ipairs(turned_away) do
  away_written(statuses, user_id, false)
  index_mark(statuses, user_id)
  local status, choices = status_of(statuses, user_id, online_key, now)
  if status == 'AWAY' and choices.chosen == 'AUTO' then
    add_event(offline, 'STATUS', user_id, now, '', 1, look_of(statuses, 'STATUS', user_id, 1))
  end
end
announce_all(channel, offline, statuses)
-- Users online since before the indexes were kept are in none until they next change: one pass
-- over `online` indexes those it finds in none (ZSCAN returns every user online all along at
-- least once; those who came online since were indexed as they did).
local scan_at = redis.call('GET', KEYS[11]) or '0'
if scan_at ~= 'done' then
  local found = redis.call('ZSCAN', online_key, scan_at, 'COUNT', tonumber(ARGV[11]))
  local users = found[2]
  for i = 1, #users, 2 do
    local user_id = users[i]
    if redis.call('HEXISTS', index_users_key(statuses), user_id) == 0
      and not redis.call('ZSCORE', index_ids_key(statuses, 'v'), user_id) then
      index_mark(statuses, user_id)
    end
  end
  -- With nobody online the pass has nothing to do, and keeps nothing: it runs again, as
  -- cheaply, until someone is.
  if scan_at ~= '0' or found[1] ~= '0' or #users > 0 then
    redis.call('SET', KEYS[11], found[1] == '0' and 'done' or found[1])
  end
end
-- Users one of whose several sessions expired: their devices may have changed.
for _, user_id in ipairs(redis.call('ZRANGEBYSCORE', index_due_key(statuses), '-inf', '(' .. now, 'LIMIT', 0, batch)) do
  redis.call('ZREM', index_due_key(statuses), user_id)
  index_mark(statuses, user_id)
end
index_flush(statuses)

-- Waiting states whose process did not announce them in time, oldest first.
local overdue = redis.call('ZRANGEBYSCORE', flushes_key, '-inf', '(' .. (now - overdue_ms), 'LIMIT', 0, lapsed_batch)
for _, entry in ipairs(overdue) do
  local at = string.find(entry, '\0', 1, true)
  local place = place_of(string.sub(entry, 1, at - 1))
  local events = {}
  flush_state(leases, place, string.sub(entry, at + 1), now, overdue_ms, events)
  announce_place(place, events)
end

local forgotten = redis.call('ZRANGEBYSCORE', last_seen_key, '(' .. -(now - purge_after_ms), '+inf', 'LIMIT', 0, batch)
local online_time = #forgotten > 0 and online_time_of()
for i = 1, #forgotten do
  local user_id = forgotten[i]
  local index = redis.call('HGET', index_key, user_id)
  if index then
    redis.call('HDEL', index_key, user_id)
    online_time.forget_online_time(shard, tonumber(index), now)
    redis.call('ZADD', KEYS[10], now + tonumber(ARGV[10]), index)
  end
  redis.call('ZREM', last_seen_key, user_id)
  forget_version(channel[4], user_id)
end
-- Bit indexes that no kept bitmap can hold any more: handed out again, never active yet.
local cooled = redis.call('ZRANGEBYSCORE', KEYS[10], '-inf', now, 'LIMIT', 0, batch)
for _, index in ipairs(cooled) do
  redis.call('BITFIELD', shard.first_days, 'SET', 'u16', '#' .. index, 0)
  redis.call('ZREM', KEYS[10], index)
  redis.call('RPUSH', free_key, index)
end
feed_trim(channel[4], now)
sweep_versions(channel[4], now, batch)
return {#expired / 2, #forgotten, online_count(leases, online_key, now), ended, math.max(#ended_statuses, #turned_away), #overdue}
