--[[
  cursor_secret: the deployment's secret that keys the tags of page cursors, made once.

  KEYS[1]  secret     STRING  the secret, kept without expiry
  ARGV[1]  candidate  string: a fresh random secret, kept if there is none yet; "" to only read
  Returns  the secret, the same for every process of the deployment ("" when there is none and
           the candidate is "")
  Reads first, so that a read-only replica that holds the secret answers with it.
]]
local secret_key = KEYS[1]
local candidate = ARGV[1]

local secret = redis.call('GET', secret_key)
if secret then return secret end
if candidate == '' then return '' end
redis.call('SET', secret_key, candidate)
return candidate
