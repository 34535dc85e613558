--[[
  pass_webhooks: move the positions of waiting webhook deliveries of one shard past entries of
  the feed that none of them wants (or past the present, when the feed had none), in one call
  for all of them: each only while the caller holds its lease, and only from the position the
  caller read, with nothing pending, decided or missed (a delivery that has moved since, or
  took a replay, is left as it is).

  KEYS[1..n]  deliveries  HASH and STRING in turn, for each delivery: the webhook's fields
                          (store/webhooks.py names them), then its lease of this shard (the
                          token of the process holding it)
  ARGV[1]     token       string: the caller's
  ARGV[2..5]  fields      the names of the shard's progress fields (store/webhooks.py):
                          position, pending, decided, gap
  ARGV[6..n]  moves       from, to in turn, for each delivery: the position read ("" for one
                          never moved), and where it passes to (an entry id)
  Returns  {1 or 0 for each delivery, in order: whether it moved}
]]
local token = ARGV[1]
local position_field, pending_field, decided_field, gap_field = ARGV[2], ARGV[3], ARGV[4], ARGV[5]

local moved = {}
for i = 1, #KEYS / 2 do
  local webhook_key, lease_key = KEYS[2 * i - 1], KEYS[2 * i]
  local from, to = ARGV[2 * i + 4], ARGV[2 * i + 5]
  moved[i] = 0
  if redis.call('GET', lease_key) == token then
    local now = redis.call('HMGET', webhook_key, 'created_ms', position_field, pending_field,
      decided_field, gap_field)
    if now[1] and (now[2] or '') == from and not now[3] and not now[4] and not now[5] then
      redis.call('HSET', webhook_key, position_field, to)
      moved[i] = 1
    end
  end
end
return moved
