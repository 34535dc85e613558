--[[
  webhooks: the deployment's webhooks (or one of them), oldest first, each with its fields
  and its most recent attempts. A webhook's HASH and LIST are named from their prefixes and
  its id, inside this call's hash tag.

  KEYS[1]  webhooks          ZSET  member=webhook id  score=when it was made, ms
  KEYS[2]  changes           STRING int: changes made to the webhooks (their scripts count
                             each), returned with them
  ARGV[1]  webhook_prefix    string: a webhook's HASH is this followed by its id
  ARGV[2]  attempts_prefix   string: a webhook's attempts LIST is this followed by its id
  ARGV[3]  webhook_id        string: only this webhook; "" for all
  ARGV[4]  max_webhooks      int: how many are read at most
  ARGV[5]  max_attempts      int: how many attempts of each are read at most (0: none, for a
                             delivery, which needs none of them)
  Returns  {changes, {{id, {field, value, ...}, {attempt, ...}}, ...}}: changes as kept (""
           for none yet), then the webhooks, attempts newest first
]]
local webhooks_key, changes_key = KEYS[1], KEYS[2]
local webhook_prefix, attempts_prefix, webhook_id = ARGV[1], ARGV[2], ARGV[3]
local max_webhooks, max_attempts = tonumber(ARGV[4]), tonumber(ARGV[5])

local ids
if webhook_id ~= '' then
  ids = redis.call('ZSCORE', webhooks_key, webhook_id) and {webhook_id} or {}
else
  ids = redis.call('ZRANGE', webhooks_key, 0, max_webhooks - 1)
end
local found = {}
for _, id in ipairs(ids) do
  found[#found + 1] = {
    id,
    redis.call('HGETALL', webhook_prefix .. id),
    max_attempts > 0 and redis.call('LRANGE', attempts_prefix .. id, 0, max_attempts - 1) or {},
  }
end
return {redis.call('GET', changes_key) or '', found}
