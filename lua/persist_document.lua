--[[
  persist_document: keep a persisted GraphQL document (automatic persisted queries) for every
  process of the deployment, forgetting the least recently used beyond a cap.

  KEYS[1]  documents   HASH  sha256 hex -> document text
  KEYS[2]  used        ZSET  member=sha256 hex  score=last registration or use, ms
  ARGV[1]  sha256      string: lowercase hex SHA-256 of the document (checked by the caller)
  ARGV[2]  document    string: the document, UTF-8 (checked by the caller)
  ARGV[3]  max_count   int: how many documents are kept at most
  ARGV[4]  max_bytes   int: the most bytes one document may take
  Returns  how many documents were forgotten to make room (0 or more)
  Errors   "DOCUMENT_TOO_LARGE"  (mirrored by the store's error mapping): nothing is written
]]
--- @include "clock"
local documents_key, used_key = KEYS[1], KEYS[2]
local sha256, document = ARGV[1], ARGV[2]
local max_count, max_bytes = tonumber(ARGV[3]), tonumber(ARGV[4])

-- The store checks it first; here it holds whoever calls, so that Redis holds at most
-- max_count * max_bytes of documents.
if #document > max_bytes then return redis.error_reply('DOCUMENT_TOO_LARGE') end
redis.call('HSET', documents_key, sha256, document)
redis.call('ZADD', used_key, now_ms(), sha256)
-- One registration adds one document, so at most one is over the cap (a few if the cap was
-- lowered): the loop is bounded by that difference.
local over = redis.call('ZCARD', used_key) - max_count
if over <= 0 then return 0 end
local oldest = redis.call('ZPOPMIN', used_key, over)
for i = 1, #oldest, 2 do
  redis.call('HDEL', documents_key, oldest[i])
end
return over
