--[[
  feed_tip: what one shard's feed holds after a position, and where it ends, in one cheap read
  (includes/feed.lua): the look of webhooks' deliveries that wait for new entries, which wakes
  only those that want one of them and lets the others pass over the rest.

  KEYS[1]  feed   STREAM  the shard's announced changes: id -> "u" or "p", the event's JSON
  ARGV[1]  after  string: an entry id; the entries after it are returned
  ARGV[2]  count  int: at most this many entries
  ARGV[3]  shard  packed once per shard by the store (Shard.options, includes/options.lua): the
                  deployment's options that this script reads: feed_retention_ms,
                  feed_max_changes
  Returns  {trimmed 0|1, bound, id1, field1, json1, ...}: trimmed when entries after `after`
           may be gone (the oldest kept is later than it, and it is older than the retention or
           the feed is at its length), and nothing else then; bound is the id of the last entry
           returned when there are `count` of them, else the feed's present: just before now
           (or its newest entry, if that is later), so that every entry added after this call
           comes after it and nothing is between `after` and it but the entries returned.
           An `after` older than the retention with nothing after it is not trimmed: its
           delivery missed nothing.
]]
--- @include "clock"
--- @include "options"
--- @include "stream_ids"
local feed_key = KEYS[1]
local after, count = ARGV[1], tonumber(ARGV[2])
local shard = shard_options(ARGV[3])

local now = now_ms()
local first = redis.call('XRANGE', feed_key, '-', '+', 'COUNT', 1)[1]
if first and stream_id_before(after, first[1])
    and (stream_id_parts(after) < now - shard.feed_retention_ms
    or redis.call('XLEN', feed_key) >= shard.feed_max_changes) then
  return {1, after}
end

local entries = redis.call('XRANGE', feed_key, '(' .. after, '+', 'COUNT', count)
local out = {0, ''}
for _, entry in ipairs(entries) do
  out[#out + 1], out[#out + 2], out[#out + 3] = entry[1], entry[2][1], entry[2][2]
end
if #entries == count then
  out[2] = entries[#entries][1]
else
  -- As lua/feed_page.lua's present.
  out[2] = (now - 1) .. '-18446744073709551615'
  local newest = entries[#entries] or redis.call('XREVRANGE', feed_key, '+', '-', 'COUNT', 1)[1]
  if newest and stream_id_before(out[2], newest[1]) then out[2] = newest[1] end
end
return out
