-- Announces changes on the events channel, from the script that makes them, so that no event
-- goes without its change nor a change without its event. A message is a JSON array of one or
-- more events in order, five values each (read by gql_presence/store/wire.py): kind (ONLINE,
-- OFFLINE, KICKED or FRIENDS), user_id, at_ms, session_id or "", online 0|1.

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

-- Announces one change.
local function announce(channel, kind, user_id, at_ms, session_id, online)
  local events = {}
  add_event(events, kind, user_id, at_ms, session_id, online)
  announce_all(channel, events)
end
