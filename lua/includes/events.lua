-- Announces changes, from the script that makes them, so that no event goes without its change
-- nor a change without its event. A message is a JSON array of one or more events in order,
-- EVENT_FIELDS values each (read by gql_presence/store/wire.py): kind (ONLINE, OFFLINE,
-- KICKED, STATUS, REPLACED, REVOKED or FRIENDS; "" for a change only other end users see), user_id, at_ms, session_id or "", online
-- 0|1, then what the user looks like after it: status (as backends and the user see it),
-- custom status ({text, emoji or false, expires_ms or false}, or false), the kind other end
-- users see ("" for nothing: the user is invisible to them), who may see lastSeen
-- (EVERYONE, FRIENDS or NOBODY), 1 if the user chose INVISIBLE (else 0), and the moment it
-- was announced (ms), which is the `at` shown to a reader who may not see lastSeen, then the
-- user's version after it (includes/feed.lua: counted by the kinds the feed keeps; for "" the
-- version unchanged; 0 for the kinds it does not keep), and the id of its entry in the feed
-- ("" for an event not kept there).
-- `channel` is {every_user, user_prefix, publish, feed (includes/feed.lua feed_of; nil for a
-- script that announces no change the feed keeps)}: each user's events go, in order, in one
-- message on their own channel (user_prefix .. user_id, which a process subscribes to while
-- someone there follows the user), then all of them in one message on the channel of every
-- user (for processes that follow everyone). Both in one script: a subscriber of both channels
-- sees an event's two messages next to each other, never a subscription's start between them.
-- `publish` is PUBLISH, or SPUBLISH (sharded pub/sub, on a Redis Cluster that has it): then
-- both channels are the script's shard's, in the hash tag of its KEYS, as a sharded channel
-- must hash to the script's slot, and the message stays on that shard's nodes.

--- @include "feed"

local EVENT_FIELDS = 13

-- Adds an event to `events` (a flat list, as in a message), for announce_all; `look`, if
-- given, is {status, custom, others_kind, visible, invisible}, else announce_all works it out.
local function add_event(events, kind, user_id, at_ms, session_id, online, look)
  local n = #events
  events[n + 1], events[n + 2], events[n + 3] = kind, user_id, at_ms
  events[n + 4], events[n + 5] = session_id, online
  look = look or {}
  events[n + 6], events[n + 7] = look[1] or '', look[2] or false
  events[n + 8], events[n + 9] = look[3] or kind, look[4] or 'EVERYONE'
  events[n + 10], events[n + 11] = look[5] or 0, at_ms
  events[n + 12], events[n + 13] = 0, ''
end

-- Gives each event added without a look the user's look after the script's changes. `looks`
-- is given by a script that knows statuses (includes/status.lua, statuses_of): looks.fill(events,
-- i) sets fields i + 5 to i + 9 of the event at i, and looks.now is its announcement time.
-- Without it, the look follows `online`, and the announcement is at the event.
local function fill_looks(events, looks)
  for i = 1, #events, EVENT_FIELDS do
    if events[i + 5] == '' then
      if looks then
        looks.fill(events, i)
      else
        events[i + 5] = events[i + 4] == 1 and 'ONLINE' or 'OFFLINE'
      end
    end
    if looks then events[i + 10] = looks.now end
  end
end

-- Gives each event its user's version and keeps it in the feed, as includes/feed.lua says,
-- at `now`. Returns, by the index of each event kept, its entry's JSON without its brackets,
-- from which its messages are made (one_of, all_of) with the entry's id (digits and a dash,
-- nothing to escape) added, so that it is encoded once; and the versions of the users of
-- those events after them (user_id -> version), so that the script need not read them again.
local function keep_in_feed(feed, events, now)
  local inner, users, last = {}, {}, 0
  for i = 1, #events, EVENT_FIELDS do
    local kind = events[i]
    if FEED_KINDS[kind] or kind == '' then
      last = i
      users[#users + 1] = events[i + 1]
    end
  end
  if last == 0 then return inner, {} end
  local versions = versions_of(feed, users, now)
  -- A user once per change: keep_versions writes each their last version.
  local changed = {}
  -- An entry's values, in one table for all the entries (no table made per entry).
  local values = {}
  for i = 1, last, EVENT_FIELDS do
    local kind, user_id = events[i], events[i + 1]
    if FEED_KINDS[kind] or kind == '' then
      if kind ~= '' then
        versions[user_id] = versions[user_id] + 1
        changed[#changed + 1] = user_id
      end
      events[i + 11] = versions[user_id]
      values[1], values[2], values[3], values[4], values[5], values[6], values[7], values[8],
        values[9], values[10], values[11], values[12] = unpack(events, i, i + 11)
      local entry = cjson.encode(values)
      events[i + 12] = feed_append(feed, 'u', entry, i == last)
      inner[i] = string.sub(entry, 2, -2)
    end
  end
  keep_versions(feed, versions, changed, now)
  return inner, versions
end

-- The message of the one event at i, kept in the feed (keep_in_feed's `inner`).
local function one_of(events, inner, i)
  return '[' .. inner[i] .. ',"' .. events[i + 12] .. '"]'
end

-- The message of all `events`: made from their entries (keep_in_feed's `inner`) when each is
-- kept in the feed, else encoded.
local function all_of(events, inner)
  if #events == EVENT_FIELDS and inner[1] then return one_of(events, inner, 1) end
  local parts, n = {'['}, 1
  for i = 1, #events, EVENT_FIELDS do
    if not inner[i] then return cjson.encode(events) end
    parts[n + 1], parts[n + 2], parts[n + 3], parts[n + 4] = inner[i], ',"', events[i + 12], '",'
    n = n + 4
  end
  parts[n] = '"]'
  return table.concat(parts)
end

-- Announces many changes, in order: for scripts that change many users. A user's events are
-- one message on their channel when they are next to each other in `events` (as the scripts
-- that change many users add them), else one per run of them; then every event in one message
-- on the channel of every user. One PUBLISH (or SPUBLISH) per user besides: to a channel
-- nobody follows, it is a lookup.
local function announce_all(channel, events, looks)
  local n = #events
  if n == 0 then return end
  fill_looks(events, looks)
  -- A script that knows statuses keeps the online periods its events end (includes/status.lua).
  if looks then looks.end_periods(events, EVENT_FIELDS) end
  -- A script with a feed announces with `looks`, whose moment is the script's now.
  local inner = {}
  if channel[4] then inner, looks.versions = keep_in_feed(channel[4], events, looks.now) end
  local message = all_of(events, inner)
  local user_prefix, publish = channel[2], channel[3]
  if n == EVENT_FIELDS then
    redis.call(publish, user_prefix .. events[2], message)
  else
    local first = 1
    for i = 1, n, EVENT_FIELDS do
      local user_id = events[i + 1]
      if events[i + EVENT_FIELDS + 1] ~= user_id then
        local own = first == i and inner[i] and one_of(events, inner, i)
          or cjson.encode({unpack(events, first, i + EVENT_FIELDS - 1)})
        redis.call(publish, user_prefix .. user_id, own)
        first = i + EVENT_FIELDS
      end
    end
  end
  redis.call(publish, channel[1], message)
end

-- Announces one change.
local function announce(channel, kind, user_id, at_ms, session_id, online, look, looks)
  local events = {}
  add_event(events, kind, user_id, at_ms, session_id, online, look)
  announce_all(channel, events, looks)
end
