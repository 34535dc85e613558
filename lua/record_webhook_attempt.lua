--[[
  record_webhook_attempt: keep one attempt to deliver to a webhook, among its most recent;
  an acknowledged one also moves what it has delivered up to its batch's end.

  KEYS[1]  webhook          HASH  fields delivered_up_to, failing_since_ms, ...
  KEYS[2]  attempts         LIST  "<at ms> <attempt>" each, newest first
  ARGV[1]  attempt          string: the attempt as JSON, without its time
  ARGV[2]  max_attempts     int: how many attempts are kept
  ARGV[3]  acknowledged     0 or 1: whether the receiver acknowledged it
  ARGV[4]  delivered_up_to  string: the batch's end cursor, kept when acknowledged; "": none
  Returns  when it was recorded, ms (the server's clock), or 0 when the webhook is gone
           (nothing is written)
]]
--- @include "clock"
local webhook_key, attempts_key = KEYS[1], KEYS[2]
local attempt, max_attempts = ARGV[1], tonumber(ARGV[2])
local acknowledged, delivered_up_to = ARGV[3] == '1', ARGV[4]

if redis.call('EXISTS', webhook_key) == 0 then return 0 end
local at_ms = now_ms()
redis.call('LPUSH', attempts_key, at_ms .. ' ' .. attempt)
redis.call('LTRIM', attempts_key, 0, max_attempts - 1)
if acknowledged then
  redis.call('HDEL', webhook_key, 'failing_since_ms')
  if delivered_up_to ~= '' then
    redis.call('HSET', webhook_key, 'delivered_up_to', delivered_up_to)
  end
else
  -- Since when it has failed without a success: what disabling after a while is counted from.
  redis.call('HSETNX', webhook_key, 'failing_since_ms', at_ms)
end
return at_ms
