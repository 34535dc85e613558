--[[
  choose_publish: how the deployment publishes events, chosen once, by its first process.

  KEYS[1]  publish    STRING  "PUBLISH" or "SPUBLISH", kept without expiry (shard 0 only)
  ARGV[1]  candidate  string: "SPUBLISH" when every master of the Redis Cluster has sharded
                      pub/sub, else "PUBLISH"
  Returns  the command every process of the deployment publishes with: the one kept, or else
           the candidate, kept now. Processes that published and subscribed differently would
           miss each other's events; a later process follows the first's choice whatever it
           would choose itself.
]]
local publish_key = KEYS[1]
local candidate = ARGV[1]

local chosen = redis.call('GET', publish_key)
if chosen then return chosen end
redis.call('SET', publish_key, candidate)
return candidate
