--[[
  add_friends: add ids to a user's friend set, and with mutual the user to each of theirs.

  KEYS[1]        friends  SET  the user's friends' ids
  KEYS[2..n+1]   friends  SET  friend i's friends' ids (only written when mutual)
  ARGV[1]  user_id     string
  ARGV[2]  mutual      "1" or "0"
  ARGV[3..n+2]  friend_ids  string, none equal to user_id
  Returns  how many of friend_ids were newly added to the user's own set
]]
--- @include "chunks"
local user_id, mutual = ARGV[1], ARGV[2] == '1'
local friend_ids = {}
for i = 3, #ARGV do friend_ids[#friend_ids + 1] = ARGV[i] end
local added = call_in_chunks('SADD', KEYS[1], friend_ids)
if mutual then
  for i = 1, #friend_ids do redis.call('SADD', KEYS[i + 1], user_id) end
end
return added
