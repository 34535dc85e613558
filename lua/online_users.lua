--[[
  online_users: one page of the users online now, newest last activity first, ties by id.

  KEYS[1]  last_seen  ZSET  member=user_id  score=-(last activity, ms), or -(held score)
  KEYS[2]  online     ZSET  member=user_id  score=newest live session's expiry, ms, or a held
                            score (includes/live.lua)
  KEYS[3]  leases     ZSET  member=slot  score=the moment the lease lapses, ms
  ARGV[1]  shard  packed once per shard by the store (Shard.options, includes/options.lua): the
                  deployment's options and the shard's names that this script reads: window_ms,
                  sessions_prefix, the names of includes/status.lua (status_prefix, extras_prefix,
                  since, invisible, hidden, status_expiries, away_expiries), and the names of a
                  lease's keys (includes/connections.lua) (a name ending in ':' is followed by a
                  user id, in the hash tag of KEYS)
  ARGV[2]  first         int: page size, 0 to 1000
  ARGV[3]  after_score   the cursor's last_seen score, or "" for the first page
  ARGV[4]  after_member  the cursor's user_id
  ARGV[5]  hide_invisible  0|1: 1 leaves out users who chose INVISIBLE (for an end user, to
                         whom they are offline)
  Returns  {total, has_next 0|1, user_id, score, last_seen_ms, online=1, ...}: held users
           first, their last seen the present
  Work     O(log n + page), and O(log n) per lapsed lease; users whose newest session was
           kicked while an older one stays live until it expires are skipped over too.
           total counts a user held under several leases that have all lapsed until the
           sweep ends their sessions (within a second); the page never lists them.
           Hiding invisible users costs one look-up per user listed, and O(log n) for the
           total (the `hidden` set's count, includes/status.lua).
]]
--- @include "clock"
--- @include "page"
--- @include "status"
--- @include "options"
local shard = shard_options(ARGV[1])
local last_seen_key, online_key = KEYS[1], KEYS[2]
local leases = lease_book(KEYS[3], shard, shard.sessions_prefix, tonumber(shard.window_ms))
local window_ms, first = tonumber(shard.window_ms), tonumber(ARGV[2])

local hide_invisible = ARGV[5] == '1'

local now = now_ms()
local statuses = statuses_of(shard, online_key, window_ms, now, leases)
local total = listed_online_count(statuses, online_key, now, hide_invisible)
local function online_of(user_id) return listed_online(statuses, online_key, user_id, now, hide_invisible) end
local function jump(score) return past_lapsed(leases, last_seen_key, score, now) end
local start = page_start(last_seen_key, ARGV[3], ARGV[4])
-- A live user's last activity is at least as recent as their newest live session.
local rows = collect(last_seen_key, start, -(now - window_ms), first + 1, online_of, jump)
return page_reply(total, first, rows, now)
