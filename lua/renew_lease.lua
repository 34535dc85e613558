--[[
  renew_lease: keep every session a process holds in this shard live for ttl_ms more, in one
  call whatever their number: the sessions are not touched, only their lease.

  KEYS[1]  leases  ZSET    member=slot  score=the moment the lease lapses, ms; the owners and
                           bits keys are named from it (same hash tag)
  KEYS[2..4]  days  bitmaps of three consecutive days, oldest first: the lease's users' bits
                    go into the renewal's day's, and its hour's, week's and month's (named
                    from `shard`, includes/activity.lua), so that a session held across
                    midnight counts on both days
  ARGV[1]  slot        int: the lease
  ARGV[2]  token       string: the renewing process's
  ARGV[3]  ttl_ms      int ms: the lease lapses this long after the renewal; 0 to give it up
                       (its sessions, if any are left, are then ended by the sweep)
  ARGV[4]  at_ms       int ms, or "" for now: a backfilled renewal (never after now)
  ARGV[5]  shard  packed once per shard by the store (Shard.options, includes/options.lua): the
                  deployment's options and the shard's names that this script reads: retention_ms,
                  hourly_ms, analytics_ms, the names of includes/activity.lua's bitmaps, and the names of a lease's keys (includes/connections.lua) (a name ending in ':'
                  is followed by a user id, in the hash tag of KEYS)
  ARGV[6..9]  boundaries int ms: the start of each of the three days, then the end of the last
  Errors   "DAY_NOT_GIVEN"; nothing is written when it is returned
  Returns  1 if renewed; 0 if the lease had lapsed, or is not this process's: the sweep ends
           (or has ended) its sessions, so the process must no longer hold them
]]
--- @include "clock"
--- @include "activity"
--- @include "options"
local shard = shard_options(ARGV[5])
local leases = lease_book(KEYS[1], shard)
local slot, token, ttl_ms, at_ms = tonumber(ARGV[1]), ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
local retention_ms = tonumber(shard.retention_ms)
local boundaries = {tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8]), tonumber(ARGV[9])}

local now = now_ms()
local t_ms = math.min(at_ms or now, now)
local day = day_of(t_ms, boundaries)
if not day then return redis.error_reply('DAY_NOT_GIVEN') end
if redis.call('HGET', lease_owners_key(leases), slot) ~= token or not slot_live(leases, slot, now) then return 0 end
if ttl_ms == 0 and redis.call('EXISTS', lease_users_key(leases, slot), leases.names.lease_places_prefix .. slot) == 0 then
  redis.call('ZREM', leases.key, slot)
  redis.call('HDEL', lease_owners_key(leases), slot)
  redis.call('DEL', lease_bits_key(leases, slot))
  return 1
end
redis.call('ZADD', leases.key, t_ms + ttl_ms - (ttl_ms == 0 and 1 or 0), slot)
if redis.call('EXISTS', lease_bits_key(leases, slot)) == 1 then
  mark_bitmap(periods_of(shard, {KEYS[2], KEYS[3], KEYS[4]}, boundaries, t_ms), lease_bits_key(leases, slot))
end
return 1
