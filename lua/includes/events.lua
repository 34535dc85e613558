-- Announces changes, from the script that makes them, so that no event goes without its change
-- nor a change without its event. A message is a JSON array of one or more events in order,
-- five values each (read by gql_presence/store/wire.py): kind (ONLINE, OFFLINE, KICKED,
-- REPLACED, REVOKED or FRIENDS), user_id, at_ms, session_id or "", online 0|1.
-- `channel` is {every_user, user_prefix}: each user's events go, in order, in one message on
-- their own channel (user_prefix .. user_id, which a process subscribes to while someone there
-- follows the user), then all of them in one message on the channel of every user (for
-- processes that follow everyone). Both in one script: a subscriber of both channels sees an
-- event's two messages next to each other, never a subscription's start between them.

-- Adds an event to `events` (a flat list, as in a message), for announce_all.
local function add_event(events, kind, user_id, at_ms, session_id, online)
  local n = #events
  events[n + 1], events[n + 2], events[n + 3] = kind, user_id, at_ms
  events[n + 4], events[n + 5] = session_id, online
end

-- Announces many changes, in order: for scripts that change many users. A user's events are
-- one message on their channel when they are next to each other in `events` (as the scripts
-- that change many users add them), else one per run of them; then every event in one message
-- on the channel of every user. One PUBLISH per user besides: to a channel nobody follows, it
-- is a lookup.
local function announce_all(channel, events)
  local n = #events
  if n == 0 then return end
  local message = cjson.encode(events)
  local user_prefix = channel[2]
  if n == 5 then
    redis.call('PUBLISH', user_prefix .. events[2], message)
  else
    local first = 1
    for i = 1, n, 5 do
      local user_id = events[i + 1]
      if events[i + 6] ~= user_id then
        local own = {unpack(events, first, i + 4)}
        redis.call('PUBLISH', user_prefix .. user_id, cjson.encode(own))
        first = i + 5
      end
    end
  end
  redis.call('PUBLISH', channel[1], message)
end

-- Announces one change.
local function announce(channel, kind, user_id, at_ms, session_id, online)
  local events = {}
  add_event(events, kind, user_id, at_ms, session_id, online)
  announce_all(channel, events)
end
