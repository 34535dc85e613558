--[[
  refresh_documents: mark persisted documents as just used, for uses that a process answered
  from its own copy of them (see persist_document), so that the deployment forgets first the
  documents that no process uses. A document no longer kept is not brought back.

  KEYS[1]  used        ZSET  member=sha256 hex  score=last registration or use, ms
  ARGV[1..n]  sha256   string: lowercase hex SHA-256 of a document; n at most the caller's
                       batch (1,000), so one call is at most 2,000 cheap commands
  Returns  how many of them were still kept, and so refreshed
]]
--- @include "clock"
local used_key = KEYS[1]

local now, refreshed = now_ms(), 0
for i = 1, #ARGV do
  if redis.call('ZSCORE', used_key, ARGV[i]) then
    redis.call('ZADD', used_key, now, ARGV[i])
    refreshed = refreshed + 1
  end
end
return refreshed
