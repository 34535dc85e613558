--[[
  change_friend_links: add or remove friend links of several users, all of them kept in one
  shard.

  KEYS[1..k]  friends  SET  owner i's friends' ids (those who live in this key's shard)
  ARGV[1]     change   string: "SADD" to add the links, "SREM" to remove them
  ARGV[2]  shard  packed once per shard by the store (Shard.options, includes/options.lua): the
                  deployment's options and the shard's names that this script reads: channel,
                  publish (a name ending in ':' is followed by a user id, in the hash tag of KEYS)
  ARGV[3..]   owners   for each owner i, in the order of KEYS: owner_id, owner_channel_prefix
                       (the channel of the owner's FRIENDS events is this followed by
                       owner_id: with PUBLISH the owner's own channel, in the owner's shard,
                       which may not be this one; with SPUBLISH the owner's channel in this
                       shard), n_i, then n_i friend ids, distinct and none equal to owner_id
  Events   FRIENDS (for subscribers of friendsOf) for each owner whose friend set changed, on
           the owner's channel
  Returns  {changed_1, ..., changed_k}: how many links each owner's set gained (SADD) or
           lost (SREM)
  Errors   "BAD_CHANGE" for any other ARGV[1]; nothing is written when it is returned
  Work     O(links): the store sends at most 10,000 friend ids per owner and 10,001 owners
]]
--- @include "chunks"
--- @include "events"
--- @include "options"
local shard = shard_options(ARGV[2])
local change, every_user_channel, publish = ARGV[1], shard.channel, shard.publish
if change ~= 'SADD' and change ~= 'SREM' then return redis.error_reply('BAD_CHANGE') end
local reply = {}
local at = 3
for i = 1, #KEYS do
  local owner_id, owner_channel_prefix, n = ARGV[at], ARGV[at + 1], tonumber(ARGV[at + 2])
  local friend_ids = {}
  for j = 1, n do friend_ids[j] = ARGV[at + 2 + j] end
  at = at + 3 + n
  reply[i] = call_in_chunks(change, KEYS[i], friend_ids)
  if reply[i] > 0 then
    announce({every_user_channel, owner_channel_prefix, publish}, 'FRIENDS', owner_id, 0, '', 0)
  end
end
return reply
