--[[
  record_peak: records how many users are online now (or at a backfilled moment) into the
  peak of the hour.

  KEYS[1]  peaks  HASH  hour start (ms) -> "count at_ms": the most users online at once in each
                        hour of one day of the stats time zone, and when it was first reached
  ARGV[1]  hour_ms        int ms: where the hour holding the caller's clock starts
  ARGV[2]  hour_end_ms    int ms: where it ends
  ARGV[3]  online         int: users online now, as the sweep of every shard counted them
  ARGV[4]  keep_until_ms  int ms: when the day's peaks expire
  ARGV[5]  at_ms          int ms, or "" for the server's clock: the moment `online` was counted,
                          when it is backfilled (sample data)
  Returns  1 if the hour's peak rose, else 0 (also when the moment lies outside the hour: the
           next call, a second later, records it)
]]
--- @include "clock"
local peaks_key = KEYS[1]
local hour_ms, hour_end_ms = tonumber(ARGV[1]), tonumber(ARGV[2])
local online, keep_until_ms = tonumber(ARGV[3]), tonumber(ARGV[4])

local now = tonumber(ARGV[5]) or now_ms()
if now < hour_ms or now >= hour_end_ms then return 0 end
local field = ARGV[1]
local peak = redis.call('HGET', peaks_key, field)
if peak and tonumber(string.match(peak, '^%d+')) >= online then return 0 end
redis.call('HSET', peaks_key, field, string.format('%d %d', online, now))
redis.call('PEXPIREAT', peaks_key, keep_until_ms)
return 1
