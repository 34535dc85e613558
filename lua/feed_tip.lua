--[[
  feed_tip: the newest entry of one shard's feed (includes/feed.lua), which webhooks' deliveries
  look at to learn, in one cheap read, whether anything came after their position.

  KEYS[1]  feed   STREAM  the shard's announced changes: id -> "u" or "p", the event's JSON
  Returns  the newest entry's id, or "" when the feed holds none
]]
local feed_key = KEYS[1]

local newest = redis.call('XREVRANGE', feed_key, '+', '-', 'COUNT', 1)[1]
return newest and newest[1] or ''
