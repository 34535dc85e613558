--- @include "chunks"
-- The feed: every announced change kept for a while in its shard's STREAM (store/keys.py
-- Keys.feed), appended by the script that makes and announces the change, so that no entry
-- goes without its change nor a change without its entry. An entry is one field: "u" for a
-- user's event, its values as published (lua/includes/events.lua) up to its version; "p" for
-- a place's, its values as published (lua/includes/places.lua) up to its sequence, which is
-- the place's version. The entry's id is the event's place in the feed: the script publishes
-- it with the event, so a live event says where a replay of the feed would have found it.
-- The feed keeps the kinds of FEED_KINDS, and the events of kind "" too (a change only other
-- end users see, such as a custom status hidden from them or shown again): a backend's read
-- of the feed skips them, while an end user's replay shows them as the live event would.
-- Events that are no change of presence (REPLACED, REVOKED, FRIENDS) are not kept.
-- Trimmed to about feed_max_changes by each script call that appends (feed_cap, once after
-- its appends: the trim's check is then paid once per call, not once per change), and to the retention (entries older than
-- feed_retention_ms) by the sweep (lua/sweep.lua, every process's sweep interval): both
-- approximately (whole nodes of the stream), which bounds the work. A read of the feed skips
-- what is older than the retention, so the sweep's lag shows only in memory.

local FEED_KINDS = {ONLINE = true, OFFLINE = true, KICKED = true, STATUS = true,
  JOINED = true, UPDATED = true, LEFT = true}

-- The feed of a script's shard options (includes/options.lua): its key, where users'
-- versions are kept, its retention and length, and how long a version outlives its user's
-- last change (the user's retention or the feed's, whichever is longer).
local function feed_of(shard)
  return {key = shard.feed, version_prefix = shard.version_prefix,
    retention_ms = shard.feed_retention_ms, max_changes = shard.feed_max_changes,
    version_ms = math.max(shard.retention_ms, shard.feed_retention_ms)}
end

-- Appends an entry of `field` ("u" or "p") with `entry`, its values as JSON; returns its id.
-- The script then calls feed_cap.
local function feed_append(feed, field, entry)
  return redis.call('XADD', feed.key, '*', field, entry)
end

-- Trims the feed to about its length, once after a script call's appends.
local function feed_cap(feed)
  redis.call('XTRIM', feed.key, 'MAXLEN', '~', feed.max_changes)
end

-- Trims the feed to its retention before `now`, approximately (the sweep's).
local function feed_trim(feed, now)
  redis.call('XTRIM', feed.key, 'MINID', '~', math.max(0, now - feed.retention_ms))
end

-- The versions now of the users `user_ids` (user_id -> version, 0 if none is kept), read
-- together: MGET, a chunk at a time (touchMany announces hundreds at once).
local function versions_of(feed, user_ids)
  local versions = {}
  for first, last in chunks(#user_ids) do
    local keys = {}
    for i = first, last do keys[#keys + 1] = feed.version_prefix .. user_ids[i] end
    local values = redis.call('MGET', unpack(keys))
    for i = first, last do versions[user_ids[i]] = tonumber(values[i - first + 1]) or 0 end
  end
  return versions
end

-- Keeps the version of each user of `changed` (versions_of's, counted up), for version_ms
-- after this change: one SET a user.
local function keep_versions(feed, versions, changed)
  for _, user_id in ipairs(changed) do
    redis.call('SET', feed.version_prefix .. user_id, string.format('%d', versions[user_id]), 'PX', feed.version_ms)
  end
end
