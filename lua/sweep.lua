--[[
  sweep: remove presence that has expired and activity past the retention, a batch at a time.

  KEYS[1]  online        ZSET  member=user_id  score=newest live session's expiry, ms
  KEYS[2]  last_seen     ZSET  member=user_id  score=-(last activity, ms)
  KEYS[3]  user_index    HASH  user_id -> bit index in the day bitmaps
  KEYS[4]  free_indexes  LIST  bit indexes of purged users
  ARGV[1]  batch          int: at most this many users of each kind per call
  ARGV[2]  purge_after_ms int ms: a user whose last activity is older than this is forgotten,
                          and their bit index handed out again. It must exceed the retention
                          by more than a day, so that no day bitmap still kept holds their bit.
  ARGV[3]  channel        string: the events channel of every user
  ARGV[4]  user_channel_prefix  string: a user's events channel is this followed by the user id (in the hash tag of KEYS)
  Returns  {offline_count, purged_count, online_count}: online_count is of users online now
  Events   OFFLINE for each user whose presence expired, at the moment it expired, all in one
           message; as the same script removes the entry, two processes sweeping at once
           never both announce it
  Sessions and revocations need no sweep: their keys expire with their newest entry.
]]
--- @include "clock"
--- @include "events"
local online_key, last_seen_key, index_key, free_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local batch, purge_after_ms = tonumber(ARGV[1]), tonumber(ARGV[2])
local channel = {ARGV[3], ARGV[4]}

local now = now_ms()
local expired = redis.call('ZRANGEBYSCORE', online_key, '-inf', '(' .. now, 'WITHSCORES', 'LIMIT', 0, batch)
local offline = {}
for i = 1, #expired, 2 do
  redis.call('ZREM', online_key, expired[i])
  add_event(offline, 'OFFLINE', expired[i], tonumber(expired[i + 1]), '', 0)
end
announce_all(channel, offline)

local forgotten = redis.call('ZRANGEBYSCORE', last_seen_key, '(' .. -(now - purge_after_ms), '+inf', 'LIMIT', 0, batch)
for i = 1, #forgotten do
  local user_id = forgotten[i]
  local index = redis.call('HGET', index_key, user_id)
  if index then
    redis.call('HDEL', index_key, user_id)
    redis.call('RPUSH', free_key, index)
  end
  redis.call('ZREM', last_seen_key, user_id)
end
return {#expired / 2, #forgotten, redis.call('ZCOUNT', online_key, now, '+inf')}
