--[[
  add_friend_links: add friend links of several users, all of them kept in one shard.

  KEYS[1..k]  friends  SET  owner i's friends' ids (those who live in this key's shard)
  ARGV[1]     channel  string: the events channel
  ARGV[2..]   for each owner i, in the order of KEYS: owner_id, n_i, then n_i friend ids,
              distinct and none equal to owner_id
  Events   FRIENDS (for subscribers of friendsOf) for each owner whose friend set changed
  Returns  {added_1, ..., added_k}: how many links each owner's set gained
  Work     O(links): the store sends at most 10,000 friend ids per owner and 10,001 owners
]]
--- @include "chunks"
--- @include "events"
local channel = ARGV[1]
local reply = {}
local at = 2
for i = 1, #KEYS do
  local owner_id, n = ARGV[at], tonumber(ARGV[at + 1])
  local friend_ids = {}
  for j = 1, n do friend_ids[j] = ARGV[at + 1 + j] end
  at = at + 2 + n
  reply[i] = call_in_chunks('SADD', KEYS[i], friend_ids)
  if reply[i] > 0 then announce(channel, 'FRIENDS', owner_id, 0, '', 0) end
end
return reply
