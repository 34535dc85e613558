--[[
  pass_webhooks: move the positions of waiting webhook deliveries of one shard past entries of
  the feed that none of them wants (or to the present, when the feed had none), in one call
  for all of them: each only while the caller holds its lease, only from the position the
  caller read, with nothing pending, decided or missed, and with the filters the caller judged
  the entries by (a delivery that has moved since, took a replay, or whose webhook's kinds,
  places or debounce have changed, is left as it is).

  KEYS[1..n]  deliveries  HASH and STRING in turn, for each delivery: the webhook's fields
                          (store/webhooks.py names them), then its lease of this shard (the
                          token of the process holding it)
  ARGV[1]     token       string: the caller's
  ARGV[2..5]  fields      the names of the shard's progress fields (store/webhooks.py):
                          position, pending, decided, gap
  ARGV[6..n]  moves       from, to, filters in turn, for each delivery: the position read (""
                          for one never moved), where it passes to (an entry id), and its
                          kinds, places and debounce_seconds fields as read, joined by "\n"
                          ("" for one it has not)
  Returns  {1 or 0 for each delivery, in order: whether it moved}
]]
local token = ARGV[1]
local position_field, pending_field, decided_field, gap_field = ARGV[2], ARGV[3], ARGV[4], ARGV[5]

local moved = {}
for i = 1, #KEYS / 2 do
  local webhook_key, lease_key = KEYS[2 * i - 1], KEYS[2 * i]
  local from, to, filters = ARGV[3 * i + 3], ARGV[3 * i + 4], ARGV[3 * i + 5]
  moved[i] = 0
  if redis.call('GET', lease_key) == token then
    local now = redis.call('HMGET', webhook_key, 'created_ms', position_field, pending_field,
      decided_field, gap_field, 'kinds', 'places', 'debounce_seconds')
    local now_filters = (now[6] or '') .. '\n' .. (now[7] or '') .. '\n' .. (now[8] or '')
    if now[1] and (now[2] or '') == from and not now[3] and not now[4] and not now[5]
        and now_filters == filters then
      redis.call('HSET', webhook_key, position_field, to)
      moved[i] = 1
    end
  end
end
return moved
