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
-- Trimmed to about feed_max_changes by each script call that appends (by its last append:
-- feed_append's `cap`), and to the retention (entries older than
-- feed_retention_ms) by the sweep (lua/sweep.lua, every process's sweep interval): both
-- approximately (whole nodes of the stream), which bounds the work. A read of the feed skips
-- what is older than the retention, so the sweep's lag shows only in memory.

local FEED_KINDS = {ONLINE = true, OFFLINE = true, KICKED = true, STATUS = true,
  JOINED = true, UPDATED = true, LEFT = true}

-- The feed of a script's shard options (includes/options.lua): its key, the hash of users'
-- versions and where earlier releases kept them, its retention and length (a string, as XADD
-- takes it), and how long a version outlives its user's last change (the user's retention or
-- the feed's, whichever is longer).
local function feed_of(shard)
  return {key = shard.feed, versions = shard.versions, version_prefix = shard.version_prefix,
    retention_ms = shard.feed_retention_ms, max_changes = string.format('%d', shard.feed_max_changes),
    version_ms = math.max(shard.retention_ms, shard.feed_retention_ms)}
end

-- Appends an entry of `field` ("u" or "p") with `entry`, its values as JSON; returns its id.
-- The last append of a script call passes `cap`: it trims the feed to about its length, so
-- that the trim's check is paid once per call, not once per change, and costs no command of
-- its own.
local function feed_append(feed, field, entry, cap)
  if cap then
    return redis.call('XADD', feed.key, 'MAXLEN', '~', feed.max_changes, '*', field, entry)
  end
  return redis.call('XADD', feed.key, '*', field, entry)
end

-- Trims the feed to its retention before `now`, approximately (the sweep's).
local function feed_trim(feed, now)
  redis.call('XTRIM', feed.key, 'MINID', '~', math.max(0, now - feed.retention_ms))
end

-- Users' versions are fields of one hash (store/keys.py Keys.versions), so that a call that
-- changes hundreds of users writes them with one HSET, where a key of each with its own expiry
-- took a SET each. A field's value is "<version> <expiry, ms>": it counts as gone after its
-- expiry, as the key did, and the sweep removes it then (sweep_versions) or when it forgets
-- the user. Its field LEGACY says until when keys of earlier releases (version_prefix ..
-- user_id, each expiring version_ms after its last write) may be left:
-- until then a user the hash does not hold is looked up there.
local LEGACY = '\tlegacy'

-- The version in a field's value (not nil), or 0 if it has expired.
local function version_in(value, now)
  local version, expiry = string.match(value, '(%d+) (%d+)')
  if tonumber(expiry) < now then return 0 end
  return tonumber(version)
end

-- The version now of one user (0 if none is kept), for a read; `shard` is the script's shard
-- options (includes/options.lua).
local function version_of(shard, user_id, now)
  local kept = redis.call('HMGET', shard.versions, user_id, LEGACY)
  if kept[1] then return version_in(kept[1], now) end
  if tonumber(kept[2]) and tonumber(kept[2]) < now then return 0 end
  return tonumber(redis.call('GET', shard.version_prefix .. user_id)) or 0
end

-- The versions now of the users `user_ids` (user_id -> version, 0 if none is kept), read
-- together: HMGET, a chunk at a time (touchMany announces hundreds at once). The first call
-- that writes a shard's versions here sets LEGACY: as far as the longest-lived key of an
-- earlier release could reach if the shard's feed exists (they were written with its
-- entries), else 0.
local function versions_of(feed, user_ids, now)
  local versions, missing = {}, {}
  for first, last in chunks(#user_ids) do
    local values = redis.call('HMGET', feed.versions, LEGACY, unpack(user_ids, first, last))
    if first == 1 then
      feed.legacy = tonumber(values[1])
      if not feed.legacy then
        feed.legacy = redis.call('EXISTS', feed.key) == 1 and now + feed.version_ms or 0
        feed.new_legacy = true
      end
    end
    local legacy = feed.legacy >= now
    for i = first, last do
      local value = values[i - first + 2]
      if value then
        versions[user_ids[i]] = version_in(value, now)
      else
        versions[user_ids[i]] = 0
        if legacy then missing[#missing + 1] = user_ids[i] end
      end
    end
  end
  for first, last in chunks(#missing) do
    local keys = {}
    for i = first, last do keys[#keys + 1] = feed.version_prefix .. missing[i] end
    local values = redis.call('MGET', unpack(keys))
    for i = first, last do versions[missing[i]] = tonumber(values[i - first + 1]) or 0 end
  end
  return versions
end

-- Keeps the version of each user of `changed` (versions_of's, counted up; a user may be
-- there more than once, as HSET keeps the last of a field's values) until version_ms after
-- `now`, and LEGACY if versions_of found none: one HSET a chunk of them.
local function keep_versions(feed, versions, changed, now)
  local expiry = ' ' .. string.format('%d', now + feed.version_ms)
  local args, n = {}, 0
  if feed.new_legacy then
    args[1], args[2], n = LEGACY, feed.legacy, 2
    feed.new_legacy = nil
  end
  -- Each version's value made once a call: a call of many new users gives all of them 1.
  local texts = {}
  for i = 1, #changed do
    local user_id = changed[i]
    local version = versions[user_id]
    local text = texts[version]
    if not text then
      text = string.format('%d', version) .. expiry
      texts[version] = text
    end
    args[n + 1], args[n + 2] = user_id, text
    n = n + 2
    if n >= 2 * CHUNK then
      redis.call('HSET', feed.versions, unpack(args, 1, n))
      n = 0
    end
  end
  if n > 0 then redis.call('HSET', feed.versions, unpack(args, 1, n)) end
end

-- A field of the versions hash besides the users': LEGACY, and SCAN, where sweep_versions
-- left off (HSCAN's cursor). No user id holds a control character.
local SCAN = '\tscan'

-- Removes the versions that have expired (the sweep's), `count` fields at a time from where
-- its last call left off, round the hash and again.
local function sweep_versions(feed, now, count)
  local found = redis.call('HSCAN', feed.versions, redis.call('HGET', feed.versions, SCAN) or '0', 'COUNT', count)
  local fields, gone = found[2], {}
  for i = 1, #fields, 2 do
    if string.byte(fields[i]) ~= 9 and tonumber(string.match(fields[i + 1], ' (%d+)$')) < now then
      gone[#gone + 1] = fields[i]
    end
  end
  if #gone > 0 then redis.call('HDEL', feed.versions, unpack(gone)) end
  -- Back at the start the field goes, so that a shard with no versions keeps no key.
  if found[1] == '0' then
    redis.call('HDEL', feed.versions, SCAN)
  else
    redis.call('HSET', feed.versions, SCAN, found[1])
  end
end

-- Forgets the user's version (the sweep's, when it forgets the user), wherever it is kept.
local function forget_version(feed, user_id)
  redis.call('HDEL', feed.versions, user_id)
  redis.call('DEL', feed.version_prefix .. user_id)
end
