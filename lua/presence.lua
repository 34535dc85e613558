--[[
  presence: the presence of each of several users, read at one moment.

  KEYS[1]        last_seen  ZSET  member=user_id     score=-(last activity, ms), or -(held score)
  KEYS[2]        online     ZSET  member=user_id     score=newest live session's expiry, ms, or
                                  a held score (includes/live.lua)
  KEYS[3]        leases     ZSET  member=slot  score=the moment the lease lapses, ms
  ARGV[1]  shard  packed once per shard by the store (Shard.options, includes/options.lua): the
                  deployment's options and the shard's names that this script reads: window_ms,
                  retention_ms, the names of includes/status.lua (status_prefix, extras_prefix,
                  since, invisible, hidden, status_expiries, away_expiries), and the names of a
                  lease's keys (includes/connections.lua) (a name ending in ':' is followed by a
                  user id, in the hash tag of KEYS)
  ARGV[2..]  user_ids    string
  Returns  {entry, ...}: one presence_entry (includes/status.lua) per user, in order: a held
           session's activity, and its user's lastSeen, is the present; a session whose lease
           lapsed is not live, and its user was last seen when it lapsed
]]
--- @include "clock"
--- @include "activity"
--- @include "status"
--- @include "options"
local shard = shard_options(ARGV[1])
local last_seen_key, online_key = KEYS[1], KEYS[2]
local leases = lease_book(KEYS[3], shard)
local window_ms, retention_ms = tonumber(shard.window_ms), tonumber(shard.retention_ms)

local now = now_ms()
local statuses = statuses_of(shard, online_key, window_ms, now, leases)
local reply = {}
for i = 2, #ARGV do
  reply[#reply + 1] = presence_entry(statuses, ARGV[i], last_seen_key, now, retention_ms)
end
return reply
