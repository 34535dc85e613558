--[[
  feed_page: a page of one shard's feed (includes/feed.lua) after a position, oldest first.

  KEYS[1]  feed   STREAM  the shard's announced changes: id -> "u" or "p", the event's JSON
  ARGV[1]  after  string: an entry id, the page starts after it; "" for the oldest retained
  ARGV[2]  count  int: at most this many entries; 0 for none (the position alone)
  ARGV[3]  shard  packed once per shard by the store (Shard.options, includes/options.lua): the
                  deployment's options that this script reads: feed_retention_ms,
                  feed_max_changes
  Returns  {expired 0|1, position, id1, field1, json1, ...}: expired when `after` is older than
           what the feed keeps (older than the retention, or trimmed by the feed's length:
           changes after it may be gone), and nothing else then;
           position is the id of the last entry returned; when none is (with count > 0, or
           for "") the feed's present: just before now (or its newest entry, if that is
           later); with count 0, `after` itself.
           Entries older than the retention, which a trim may have left, are not returned.
]]
--- @include "clock"
--- @include "options"
--- @include "stream_ids"
local feed_key = KEYS[1]
local after, count = ARGV[1], tonumber(ARGV[2])
local shard = shard_options(ARGV[3])

local now = now_ms()
local oldest_ms = now - shard.feed_retention_ms
if after ~= '' then
  local first = redis.call('XRANGE', feed_key, '-', '+', 'COUNT', 1)[1]
  local trimmed = first and stream_id_before(after, first[1])
    and redis.call('XLEN', feed_key) >= shard.feed_max_changes
  if stream_id_parts(after) < oldest_ms or trimmed then return {1, after} end
end

local out = {0, after}
if count > 0 then
  local start = after == '' and tostring(math.max(0, oldest_ms)) or '(' .. after
  local entries = redis.call('XRANGE', feed_key, start, '+', 'COUNT', count)
  for _, entry in ipairs(entries) do
    out[#out + 1], out[#out + 2], out[#out + 3] = entry[1], entry[2][1], entry[2][2]
  end
  if #entries > 0 then out[2] = entries[#entries][1] end
  -- Nothing after it: the present, so that a cursor of a quiet feed does not grow old.
  if #entries == 0 then out[2] = '' end
end
if out[2] == '' then
  -- Just before now, past every id of the millisecond before it, or the newest entry if it
  -- is later: every entry added from now on comes after it, and it grows old only with time.
  local present = (now - 1) .. '-18446744073709551615'
  local newest = redis.call('XREVRANGE', feed_key, '+', '-', 'COUNT', 1)[1]
  out[2] = (newest and stream_id_before(present, newest[1])) and newest[1] or present
end
return out
