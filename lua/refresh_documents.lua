--[[
  refresh_documents: mark persisted documents as just used, for uses that a process answered
  from its own copy of them (see persist_document), so that the deployment forgets first the
  documents that no process uses. A document no longer kept is not brought back.

  KEYS[1]  used        ZSET  member=sha256 hex  score=last use, ms (see persist_document)
  ARGV[1..n]  sha256   string: lowercase hex SHA-256 of a document; n at least 1 and at most
                       the caller's batch (250): one ZMSCORE and one ZADD of n members
  Returns  how many of them were still kept, and so refreshed
]]
--- @include "clock"
--- @include "chunks"
local used_key = KEYS[1]

local now, kept = now_ms(), 0
for _, score in ipairs(read_in_chunks('ZMSCORE', used_key, ARGV)) do
  if score then kept = kept + 1 end
end
call_chunked('ZADD', used_key, 'XX', #ARGV, function(args, k, i)
  args[k + 1], args[k + 2] = now, ARGV[i]
  return k + 2
end)
return kept
