-- Announces a change on the events channel, from the script that makes it, so that no event
-- goes without its change nor a change without its event. The message is a JSON array:
-- [kind, user_id, at_ms, session_id or "", online 0|1].
local function announce(channel, kind, user_id, at_ms, session_id, online)
  redis.call('PUBLISH', channel, cjson.encode({kind, user_id, at_ms, session_id, online}))
end

-- Removes the user's online entry if it has expired, announcing OFFLINE at the moment it
-- expired (the sweep would have, had it run yet). Returns 1 if the user is online now, else 0.
local function settle_expiry(online_key, channel, user_id, now)
  local expiry = redis.call('ZSCORE', online_key, user_id)
  if not expiry then return 0 end
  expiry = tonumber(expiry)
  if expiry >= now then return 1 end
  redis.call('ZREM', online_key, user_id)
  announce(channel, 'OFFLINE', user_id, expiry, '', 0)
  return 0
end
