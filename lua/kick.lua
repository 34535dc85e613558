--[[
  kick: end every live session of a user, or one session, and revoke the ended ids.

  KEYS[1]  online     ZSET  member=user_id     score=newest live session's expiry, ms, or a
                            held score (includes/live.lua)
  KEYS[2]  sessions   ZSET  member=session_id  score=last activity, ms, or a held score (this
                            user's; created to hold a "default" session kept by the online
                            entry alone)
  KEYS[3]  revoked    ZSET  member=session_id  score=end of revocation, ms (this user's)
  KEYS[4]  conn       HASH  session_id -> "generation slot" of this user's held sessions
                            (includes/connections.lua): a kicked one's entry goes
  KEYS[5]  last_seen  ZSET  member=user_id     score=-(last activity, ms), or -(held score)
  KEYS[6]  user_index HASH  user_id -> bit index in the day bitmaps
  KEYS[7]  leases     ZSET  member=slot  score=the moment the lease lapses, ms; the leases'
                            users and bits keys are named from it (same hash tag)
  ARGV[1]  user_id     string
  ARGV[2]  session_id  string, or "" for every live session
  ARGV[3]  shard  packed once per shard by the store (Shard.options, includes/options.lua): the
                  deployment's options and the shard's names that this script reads: window_ms,
                  revoke_ms, channel, user_channel_prefix, the names of includes/status.lua
                  (status_prefix, extras_prefix, since, invisible, hidden, status_expiries,
                  away_expiries), publish, and the names of a lease's keys
                  (includes/connections.lua) (a name ending in ':' is followed by a user id, in the
                  hash tag of KEYS)
  Returns  {kicked_sessions, online_after 0|1}
  Events   OFFLINE if the user's presence had expired or lapsed unswept; KICKED if a live
           session ended (the process holding a held session ends its subscription on it),
           else REVOKED, for the processes holding place sessions of the ids alone
  A named session is revoked even when it is no longer live, so that it cannot come back.
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
local shard = shard_options(ARGV[3])
local online_key, sessions_key, revoked_key = KEYS[1], KEYS[2], KEYS[3]
local user = {online = online_key, last_seen = KEYS[5], sessions = sessions_key,
  conn = KEYS[4], index = KEYS[6]}
local leases = lease_book(KEYS[7], shard)
local user_id, session_id = ARGV[1], ARGV[2]
local window_ms, revoke_ms = tonumber(shard.window_ms), tonumber(shard.revoke_ms)
local channel = {shard.channel, shard.user_channel_prefix, shard.publish, feed_of(shard)}

local now = now_ms()
local statuses = statuses_of(shard, online_key, window_ms, now, leases, true)
user.statuses = statuses
local events = {}
settle(leases, user, channel, user_id, now, window_ms, events)
keep_default_in_key(leases, online_key, sessions_key, user_id, window_ms, now)
local cutoff = now - window_ms
local revoke = {}
local kicked = 0

-- The sessions that go: their ids, and the leases that held some of them.
local going
if session_id == '' then
  going = redis.call('ZRANGEBYSCORE', sessions_key, cutoff, '+inf', 'WITHSCORES')
else
  local score = redis.call('ZSCORE', sessions_key, session_id)
  going = score and {session_id, score} or {}
  revoke = {session_id}
end
local slots = {}
for i = 1, #going, 2 do
  local score = tonumber(going[i + 1])
  if session_live(leases, score, now, window_ms) then kicked = kicked + 1 end
  if session_id == '' then revoke[#revoke + 1] = going[i] end
  local slot = held_slot(score)
  if slot then slots[slot] = true end
  redis.call('ZREM', sessions_key, going[i])
  redis.call('HDEL', user.conn, going[i])
end
for slot in pairs(slots) do forget_if_last(leases, user, user_id, slot, false) end
local online_after = refresh_last(statuses, user, user_id, now, window_ms, now)

if revoke_ms > 0 and #revoke > 0 then
  redis.call('ZREMRANGEBYSCORE', revoked_key, '-inf', now)
  for i = 1, #revoke do redis.call('ZADD', revoked_key, now + revoke_ms, revoke[i]) end
  local latest = tonumber(redis.call('ZRANGE', revoked_key, -1, -1, 'WITHSCORES')[2])
  redis.call('PEXPIREAT', revoked_key, latest)
end
if kicked > 0 then
  add_event(events, 'KICKED', user_id, now, session_id, online_after)
else
  add_event(events, 'REVOKED', user_id, now, session_id, online_after)
end
announce_all(channel, events, statuses)
index_mark(statuses, user_id)
index_flush(statuses)
return {kicked, online_after}
