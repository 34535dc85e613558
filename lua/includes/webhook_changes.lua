--- @include "clock"
-- Counts a change made to the webhooks (their settings, secrets, or their set), read back by
-- every delivering process's tick, which reads the webhooks again only when it has moved. A
-- count begun afresh (the key lost with a Redis without persistence, or FLUSHALL) starts from
-- the clock, so that it never comes back to a value a process read before the loss.
local function count_webhook_change(changes_key)
  if redis.call('INCR', changes_key) == 1 then
    redis.call('SET', changes_key, now_ms())
  end
end
