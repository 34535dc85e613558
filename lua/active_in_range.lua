--[[
  active_in_range: one page of the users whose last activity lies in [from, to], newest first.

  KEYS[1]  last_seen  ZSET  member=user_id  score=-(last activity, ms), or -(held score)
  KEYS[2]  online     ZSET  member=user_id  score=newest live session's expiry, ms, or a held
                            score (includes/live.lua)
  KEYS[3]  leases     ZSET  member=slot  score=the moment the lease lapses, ms
  ARGV[1]  from_ms       int ms, inclusive
  ARGV[2]  to_ms         int ms, inclusive
  ARGV[3]  shard  packed once per shard by the store (Shard.options, includes/options.lua): the
                  deployment's options and the shard's names that this script reads: retention_ms,
                  sessions_prefix, window_ms, the names of includes/status.lua (status_prefix,
                  extras_prefix, since, invisible, hidden, status_expiries, away_expiries), and the
                  names of a lease's keys (includes/connections.lua) (a name ending in ':' is
                  followed by a user id, in the hash tag of KEYS)
  ARGV[4]  first         int: page size, 0 to 1000
  ARGV[5]  after_score   the cursor's last_seen score, or "" for the first page
  ARGV[6]  after_member  the cursor's user_id
  ARGV[7]  held_slack_ms int ms: a held user's last activity is the present to within this
                         (half the connection TTL), so a range that ends this long before now
                         still holds them
  ARGV[8] hide_invisible  0|1: 1 shows users who chose INVISIBLE as offline (for an end
                         user); they are listed all the same: their activity counts as any other
  Returns  {total, has_next 0|1, user_id, score, last_seen_ms, online 0|1, ...}: held users
           first, their last activity shown as the present (or `to`, if earlier)
  Work     O(log n + page), and O(log n) per lapsed lease. Users held under a lease that
           lapsed, whose sessions the sweep has not ended yet, are left out until it has (and
           one held under several such leases counted and listed as held).
]]
--- @include "clock"
--- @include "page"
--- @include "status"
--- @include "options"
local shard = shard_options(ARGV[3])
local last_seen_key, online_key = KEYS[1], KEYS[2]
local leases = lease_book(KEYS[3], shard, shard.sessions_prefix, tonumber(shard.window_ms))
local from_ms, to_ms, retention_ms = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(shard.retention_ms)
local first, held_slack_ms = tonumber(ARGV[4]), tonumber(ARGV[7])

local hide_invisible = ARGV[8] == '1'

local now = now_ms()
local statuses = statuses_of(shard, online_key, tonumber(shard.window_ms), now, leases)
from_ms = math.max(from_ms, now - retention_ms)
if from_ms > to_ms then return {0, 0} end
local with_held = from_ms <= now and to_ms >= now - held_slack_ms
-- Where the times in range begin: every held score sorts before them.
local in_range = redis.call('ZCOUNT', last_seen_key, '-inf', '(' .. -to_ms)
local total = redis.call('ZCOUNT', last_seen_key, -to_ms, -from_ms)
local held_end = redis.call('ZCOUNT', last_seen_key, '-inf', string.format('%d', -HELD))
if with_held then
  total = total + held_end
  for _, slot in ipairs(lapsed_slots(leases, now)) do
    local score = string.format('%d', -(HELD + slot))
    total = total - redis.call('ZCOUNT', last_seen_key, score, score)
  end
end
local function online_of(user_id)
  return listed_online(statuses, online_key, user_id, now, hide_invisible) or 0
end
local function jump(score)
  if held_slot(-score) then return past_lapsed(leases, last_seen_key, score, now) end
  if score < -to_ms then return in_range end
  return nil
end
local start = page_start(last_seen_key, ARGV[5], ARGV[6])
if not with_held then start = math.max(start, in_range) end
local rows = collect(last_seen_key, start, -from_ms, first + 1, online_of, jump)
return page_reply(total, first, rows, math.min(now, to_ms))
