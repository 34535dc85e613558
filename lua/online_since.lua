--[[
  online_since: one page of the users online now, most recently come online first (their
  onlineSince), ties by id.

  KEYS[1]  since      ZSET  member=user_id  score=-(when their online period began, ms), of
                            the users online (includes/status.lua)
  KEYS[2]  online     ZSET  member=user_id  score=newest live session's expiry, ms, or a held
                            score (includes/live.lua)
  KEYS[3]  last_seen  ZSET  member=user_id  score=-(last activity, ms), or -(held score)
  KEYS[4]  leases     ZSET  member=slot  score=the moment the lease lapses, ms
  ARGV[1]  shard  packed once per shard by the store (Shard.options, includes/options.lua): the
                  deployment's options and the shard's names that this script reads: window_ms,
                  sessions_prefix, the names of includes/status.lua (status_prefix, extras_prefix,
                  since, invisible, hidden, status_expiries, away_expiries), and the names of a
                  lease's keys (includes/connections.lua) (a name ending in ':' is followed by a
                  user id, in the hash tag of KEYS)
  ARGV[2]  first         int: page size, 0 to 1000
  ARGV[3]  after_score   the cursor's since score, or "" for the first page
  ARGV[4]  after_member  the cursor's user_id
  ARGV[5]  hide_invisible  0|1: 1 leaves out users who chose INVISIBLE (for an end user)
  Returns  {total, has_next 0|1, user_id, since_score, last_seen_ms, online=1, ...}: total as
           online_users counts it
  Work     O(log n + page), as online_users: an entry of `since` whose user is offline and
           not swept yet (their sessions lapsed or expired within the last second) is skipped.
]]
--- @include "clock"
--- @include "page"
--- @include "status"
--- @include "options"
local shard = shard_options(ARGV[1])
local since_key, online_key, last_seen_key = KEYS[1], KEYS[2], KEYS[3]
local leases = lease_book(KEYS[4], shard, shard.sessions_prefix, tonumber(shard.window_ms))
local window_ms, first = tonumber(shard.window_ms), tonumber(ARGV[2])
local hide_invisible = ARGV[5] == '1'

local now = now_ms()
local statuses = statuses_of(shard, online_key, window_ms, now, leases)
local total = listed_online_count(statuses, online_key, now, hide_invisible)
local function online_of(user_id) return listed_online(statuses, online_key, user_id, now, hide_invisible) end
local start = page_start(since_key, ARGV[3], ARGV[4])
local rows = collect(since_key, start, math.huge, first + 1, online_of)
local reply = {total, #rows > first * 3 and 1 or 0}
for i = 1, math.min(#rows, first * 3), 3 do
  local user_id = rows[i]
  local score = tonumber(redis.call('ZSCORE', last_seen_key, user_id))
  reply[#reply + 1] = user_id
  reply[#reply + 1] = rows[i + 1]
  reply[#reply + 1] = score and shown_last_seen(leases, score, now) or now
  reply[#reply + 1] = 1
end
return reply
