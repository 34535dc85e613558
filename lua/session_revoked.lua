--[[
  session_revoked: whether a session id is revoked now (it was kicked, and its revocation has
  not run out).

  KEYS[1]  revoked     ZSET  member=session_id  score=end of revocation, ms (this user's)
  ARGV[1]  session_id  string
  Returns  1 when revoked, else 0
]]
--- @include "clock"
local revoked_key = KEYS[1]
local session_id = ARGV[1]

local until_ms = tonumber(redis.call('ZSCORE', revoked_key, session_id))
if until_ms and until_ms > now_ms() then return 1 end
return 0
