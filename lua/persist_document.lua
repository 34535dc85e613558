--[[
  persist_document: keep a persisted GraphQL document (automatic persisted queries) for every
  process of the deployment, forgetting the least recently used beyond a cap. A registration
  counts as a use registered_age_ms ago, so that a flood of registrations (which any caller
  may send) forgets the documents registered and never used since before those in use.

  KEYS[1]  documents   HASH  sha256 hex -> document text
  KEYS[2]  used        ZSET  member=sha256 hex  score=last use, ms, or last registration
                             less registered_age_ms, whichever is later
  ARGV[1]  sha256      string: lowercase hex SHA-256 of the document (checked by the caller)
  ARGV[2]  document    string: the document, UTF-8 (checked by the caller)
  ARGV[3]  max_count   int: how many documents are kept at most
  ARGV[4]  max_bytes   int: the most bytes one document may take
  ARGV[5]  registered_age_ms  int: how long ago a registration counts as a use, ms
  Returns  how many documents were forgotten to make room (0 or more)
  Errors   "DOCUMENT_TOO_LARGE"  (mirrored by the store's error mapping): nothing is written
]]
--- @include "clock"
local documents_key, used_key = KEYS[1], KEYS[2]
local sha256, document = ARGV[1], ARGV[2]
local max_count, max_bytes = tonumber(ARGV[3]), tonumber(ARGV[4])
local registered_age_ms = tonumber(ARGV[5])

-- The store checks it first; here it holds whoever calls, so that Redis holds at most
-- max_count * max_bytes of documents.
if #document > max_bytes then return redis.error_reply('DOCUMENT_TOO_LARGE') end
redis.call('HSET', documents_key, sha256, document)
-- GT: registering a document again never makes it look less recently used than its last use.
redis.call('ZADD', used_key, 'GT', now_ms() - registered_age_ms, sha256)
-- One registration adds one document, so at most one is over the cap (a few if the cap was
-- lowered): the loop is bounded by that difference.
local over = redis.call('ZCARD', used_key) - max_count
if over <= 0 then return 0 end
local oldest = redis.call('ZPOPMIN', used_key, over)
for i = 1, #oldest, 2 do
  redis.call('HDEL', documents_key, oldest[i])
end
return over
