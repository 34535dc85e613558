--[[
  presence: the presence of each of several users, read at one moment.

  KEYS[1]        last_seen  ZSET  member=user_id     score=-(last activity, ms), or -(held score)
  KEYS[2]        online     ZSET  member=user_id     score=newest live session's expiry, ms, or
                                  a held score (includes/live.lua)
  KEYS[3]        leases     ZSET  member=slot  score=the moment the lease lapses, ms
  ARGV[1]  window_ms     int ms
  ARGV[2]  retention_ms  int ms: a last activity older than this is no longer kept
  ARGV[3]  key_prefix    string: the shard's key prefix (the hash tag of KEYS), from which a
                         user's sessions and status keys are named (includes/status.lua)
  ARGV[4..]  user_ids    string
  Returns  {entry, ...}: one presence_entry (includes/status.lua) per user, in order: a held
           session's activity, and its user's lastSeen, is the present; a session whose lease
           lapsed is not live, and its user was last seen when it lapsed
]]
--- @include "clock"
--- @include "activity"
--- @include "status"
local last_seen_key, online_key = KEYS[1], KEYS[2]
leases.key = KEYS[3]
local window_ms, retention_ms = tonumber(ARGV[1]), tonumber(ARGV[2])

local now = now_ms()
use_statuses(ARGV[3], online_key, window_ms, now)
local reply = {}
for i = 4, #ARGV do
  reply[#reply + 1] = presence_entry(ARGV[i], last_seen_key, now, retention_ms)
end
return reply
