--[[
  remove_friends: remove ids from a user's friend set, and with mutual the user from theirs.

  KEYS[1]        friends  SET  the user's friends' ids
  KEYS[2..n+1]   friends  SET  friend i's friends' ids (only written when mutual)
  ARGV[1]  user_id     string
  ARGV[2]  mutual      "1" or "0"
  ARGV[3]  channel     string: the events channel
  ARGV[4..n+3]  friend_ids  string, none equal to user_id
  Events   FRIENDS (for subscribers of friendsOf) for each user whose friend set changed
  Returns  how many of friend_ids were removed from the user's own set
]]
--- @include "chunks"
--- @include "events"
local user_id, mutual, channel = ARGV[1], ARGV[2] == '1', ARGV[3]
local friend_ids = {}
for i = 4, #ARGV do friend_ids[#friend_ids + 1] = ARGV[i] end
local changed = call_in_chunks('SREM', KEYS[1], friend_ids)
if mutual then
  for i = 1, #friend_ids do
    if redis.call('SREM', KEYS[i + 1], user_id) == 1 then
      announce(channel, 'FRIENDS', friend_ids[i], 0, '', 0)
    end
  end
end
if changed > 0 then announce(channel, 'FRIENDS', user_id, 0, '', 0) end
return changed
