--[[
  webhook_leases: take, keep or give up a process's leases of webhooks' deliveries, one lease
  per webhook and shard of the feed, so that no two processes send one webhook's batches of
  one shard at once. A process takes free leases only up to its fair share (every lease
  divided among the live deliverers, rounded up), so that the deliveries spread over the
  deployment's processes.

  KEYS[1]     deliverers  ZSET  member=a process's token  score=when it lapses, ms
  KEYS[2]     changes     STRING int: changes made to the webhooks (their scripts count each),
                          returned, so that a tick reads the webhooks again only when it moved
  KEYS[3..n]  leases      STRING each, with a TTL: the token of the process holding it
  ARGV[1]     token       string: the calling process's, unique to it
  ARGV[2]     ttl_ms      int ms: a lease (and the process's place among the deliverers)
                          lapses this long after its last renewal
  ARGV[3..n]  wanted      one per lease, in the order of KEYS[3..]: 1 to keep or take it,
                          0 to give it up if held
  Returns  {fair share, changes as kept ("" for none yet), held 0|1 for each lease in order}
]]
--- @include "clock"
local deliverers_key, changes_key = KEYS[1], KEYS[2]
local token, ttl_ms = ARGV[1], tonumber(ARGV[2])

local now = now_ms()
redis.call('ZREMRANGEBYSCORE', deliverers_key, '-inf', now)
redis.call('ZADD', deliverers_key, now + ttl_ms, token)
local processes = redis.call('ZCARD', deliverers_key)
local leases = #KEYS - 2
local fair = math.ceil(leases / processes)

-- Those held are kept (or given up) first, so that the count of held ones is known before
-- any free one is taken.
local held, count, free = {}, 0, {}
for i = 1, leases do
  local key, wanted = KEYS[i + 2], ARGV[i + 2] == '1'
  local owner = redis.call('GET', key)
  held[i] = 0
  if owner == token then
    if wanted then
      redis.call('PEXPIRE', key, ttl_ms)
      held[i], count = 1, count + 1
    else
      redis.call('DEL', key)
    end
  elseif not owner and wanted then
    free[#free + 1] = i
  end
end
for _, i in ipairs(free) do
  if count >= fair then break end
  redis.call('SET', KEYS[i + 2], token, 'PX', ttl_ms)
  held[i], count = 1, count + 1
end
local reply = {fair, redis.call('GET', changes_key) or ''}
for i = 1, leases do reply[i + 2] = held[i] end
return reply
