--[[
  persisted_document: the text of a persisted GraphQL document, marking it as just used so
  that the least recently used are forgotten first (see persist_document).

  KEYS[1]  documents   HASH  sha256 hex -> document text
  KEYS[2]  used        ZSET  member=sha256 hex  score=last use, ms (see persist_document)
  ARGV[1]  sha256      string: lowercase hex SHA-256 of the document
  Returns  the document, or false (nil in Python) when it is not kept
]]
--- @include "clock"
local documents_key, used_key = KEYS[1], KEYS[2]
local sha256 = ARGV[1]

local document = redis.call('HGET', documents_key, sha256)
if document then
  redis.call('ZADD', used_key, 'XX', now_ms(), sha256)
end
return document
