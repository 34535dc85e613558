-- Announces a change on the events channel, from the script that makes it, so that no event
-- goes without its change nor a change without its event. A message is a JSON array of one or
-- more events in order, five values each: kind, user_id, at_ms, session_id or "", online 0|1.
local function announce(channel, kind, user_id, at_ms, session_id, online)
  redis.call('PUBLISH', channel, cjson.encode({kind, user_id, at_ms, session_id, online}))
end

-- Adds an event to `events` (a flat list, as in a message), for announce_all.
local function add_event(events, kind, user_id, at_ms, session_id, online)
  local n = #events
  events[n + 1], events[n + 2], events[n + 3] = kind, user_id, at_ms
  events[n + 4], events[n + 5] = session_id, online
end

-- Announces many changes, in order, in one message: for scripts that change many users.
local function announce_all(channel, events)
  if #events > 0 then redis.call('PUBLISH', channel, cjson.encode(events)) end
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
