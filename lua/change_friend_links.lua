--[[
  change_friend_links: add or remove friend links of several users, all of them kept in one
  shard.

  KEYS[1..k]  friends  SET  owner i's friends' ids (those who live in this key's shard)
  ARGV[1]     change   string: "SADD" to add the links, "SREM" to remove them, "CHECK" to
                       write nothing and count what SADD would make of each set (when the
                       links span several shards, the store counts them all first)
  ARGV[2]  shard  packed once per shard by the store (Shard.options, includes/options.lua): the
                  deployment's options and the shard's names that this script reads: channel,
                  publish (a name ending in ':' is followed by a user id, in the hash tag of KEYS)
  ARGV[3..]   owners   for each owner i, in the order of KEYS: owner_id, owner_channel_prefix
                       (the channel of the owner's FRIENDS events is this followed by
                       owner_id: with PUBLISH the owner's own channel, in the owner's shard,
                       which may not be this one; with SPUBLISH the owner's channel in this
                       shard), room_i (int: how many friends the owner's set in this shard
                       may hold at most, the deployment's maximum less their friends kept in
                       other shards; read only by SADD), n_i, then n_i friend ids, distinct
                       and none equal to owner_id
  Events   FRIENDS (for subscribers of friendsOf) for each owner whose friend set changed, on
           the owner's channel
  Returns  {changed_1, ..., changed_k}: how many links each owner's set gained (SADD) or
           lost (SREM); for CHECK, {size_1, ..., size_k}: each set's size after SADD
  Errors   "BAD_CHANGE" for any other ARGV[1]; "TOO_MANY_FRIENDS" when SADD would take an
           owner's set past room_i; nothing is written when either is returned
  Work     O(links): the store sends at most 10,000 friend ids per owner and 10,001 owners
]]
--- @include "chunks"
--- @include "events"
--- @include "options"
local shard = shard_options(ARGV[2])
local change, every_user_channel, publish = ARGV[1], shard.channel, shard.publish
if change ~= 'SADD' and change ~= 'SREM' and change ~= 'CHECK' then
  return redis.error_reply('BAD_CHANGE')
end
local owners = {}
local at = 3
for i = 1, #KEYS do
  local owner = {id = ARGV[at], channel_prefix = ARGV[at + 1], room = tonumber(ARGV[at + 2])}
  local n = tonumber(ARGV[at + 3])
  owner.friend_ids = {}
  for j = 1, n do owner.friend_ids[j] = ARGV[at + 3 + j] end
  at = at + 4 + n
  owners[i] = owner
end
-- Every set checked before any is written: a change refused is refused whole.
if change ~= 'SREM' then
  local sizes = {}
  for i, owner in ipairs(owners) do
    local size = redis.call('SCARD', KEYS[i])
    if change == 'CHECK' or size + #owner.friend_ids > owner.room then
      for _, member in ipairs(read_in_chunks('SMISMEMBER', KEYS[i], owner.friend_ids)) do
        if member == 0 then size = size + 1 end
      end
    end
    if change == 'SADD' and size > owner.room then return redis.error_reply('TOO_MANY_FRIENDS') end
    sizes[i] = size
  end
  if change == 'CHECK' then return sizes end
end
local reply = {}
for i, owner in ipairs(owners) do
  reply[i] = call_in_chunks(change, KEYS[i], owner.friend_ids)
  if reply[i] > 0 then
    announce({every_user_channel, owner.channel_prefix, publish}, 'FRIENDS', owner.id, 0, '', 0)
  end
end
return reply
