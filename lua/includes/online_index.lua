-- The online list's indexes, which onlineUsers(filter:) pages (lua/online_filtered.lua): what
-- each online user is found by, in keys named from `index_prefix` (includes/options.lua; in the
-- hash tag of every script's KEYS), for a user in group g and order o:
--   ix:users           HASH  user_id -> "g\tstatus\tsince_ms\tdevice\tdevice...": what the
--                            user is indexed under (their devices sorted, each once), for
--                            every user but the plain ones: group v, ONLINE, no device, who
--                            are most users and need no entry here
--   ix:g:o:st:STATUS   ZSET  the users of that status (as backends see it)
--   ix:g:o:dev:DEVICE  ZSET  the users with a live session that says that device
--   ix:g:ids           ZSET  score 0: the users' ids, for ZRANGEBYLEX by prefix
--   ix:rh:since        ZSET  score=-(onlineSince, ms): the users of groups r and h, whom an
--                            end user does not find by onlineSince (the since ZSET less them)
--   ix:due             ZSET  score=when the first of the user's live sessions that live by
--                            time expires, ms, for users with several live sessions: their
--                            devices may change then, with nothing written; the sweep indexes
--                            them anew (lua/sweep.lua)
-- Groups: v, visible to end users with their onlineSince; r, visible without it (lastSeen
-- shown to FRIENDS or NOBODY); h, invisible (to end users, offline). An end user's filter
-- reads v and r (and v alone for onlineSince), a backend's all three, so that neither walks
-- past users it may not find. Orders: l, scored as the last_seen ZSET (-(last activity), or a
-- held score), moved by every touch; s, scored as the since ZSET, written only when what the
-- user is indexed under changes. A user offline has no entry anywhere.
--
-- A script that changes a user's presence, status, sessions or devices marks them (online_moved
-- and went_offline do, includes/status.lua; statuses.dirty) and calls index_flush(statuses)
-- before it returns: each marked user is indexed anew from their state then.

local function ix_key(statuses, g, o, kind, value)
  return statuses.names.index_prefix .. g .. ':' .. o .. ':' .. kind .. ':' .. value
end
local function index_users_key(statuses) return statuses.names.index_prefix .. 'users' end
local function index_ids_key(statuses, g) return statuses.names.index_prefix .. g .. ':ids' end
local function index_hidden_since_key(statuses) return statuses.names.index_prefix .. 'rh:since' end
local PLAIN = {'v', 'ONLINE'}
local function index_due_key(statuses) return statuses.names.index_prefix .. 'due' end

-- Notes when the first of the user's several live sessions that live by time expires (the
-- sweep takes the entry out when it comes; one left by a user who went offline is removed).
local function note_due(statuses, user_id, live)
  if #live == 0 then
    redis.call('ZREM', index_due_key(statuses), user_id)
    return
  end
  local due
  if #live > 2 then
    for i = 2, #live, 2 do
      local expiry = live[i] + statuses.window_ms
      if live[i] ~= statuses.now and (due == nil or expiry < due) then due = expiry end
    end
  end
  if due then redis.call('ZADD', index_due_key(statuses), due, user_id) end
end

-- A record from the user's status, lastSeen visibility, onlineSince (ms) and devices.
local function record_of(status, visible, since, devices)
  table.sort(devices)
  local group = 'v'
  if status == 'INVISIBLE' then group = 'h' elseif visible ~= 'EVERYONE' then group = 'r' end
  local record = group .. '\t' .. status .. '\t' .. string.format('%d', since)
  for _, device in ipairs(devices) do record = record .. '\t' .. device end
  return record
end

-- What the user is to be indexed under now: their record (see above), or nil when offline.
local function index_record(statuses, user_id)
  local now = statuses.now
  local live = live_of(statuses, user_id, statuses.online_key, now)
  note_due(statuses, user_id, live)
  if #live == 0 then return nil end
  local choices = choices_of(statuses, user_id, now)
  local ids = {}
  for i = 1, #live, 2 do ids[#ids + 1] = live[i] end
  local idle, devices, seen = true, {}, {}
  for _, extras in ipairs(extras_of(statuses, user_id, ids)) do
    if not extras.idle then idle = false end
    if extras.device and not seen[extras.device] then
      seen[extras.device] = true
      devices[#devices + 1] = extras.device
    end
  end
  return record_of(status_from(true, choices.chosen, idle), choices.visible, choices.since or now, devices)
end

-- The same from the user's presence_entry (includes/status.lua) read at the script's end, so
-- that a script that reads it anyway reads nothing more.
local function index_record_of_entry(statuses, user_id, entry)
  local sessions, live, devices, seen = entry[2], {}, {}, {}
  for i = 1, #sessions, 5 do
    live[#live + 1], live[#live + 2] = sessions[i], sessions[i + 1]
    local device = sessions[i + 4]
    if device ~= '' and not seen[device] then
      seen[device] = true
      devices[#devices + 1] = device
    end
  end
  note_due(statuses, user_id, live)
  if #live == 0 then return nil end
  return record_of(entry[3], entry[6], entry[8] >= 0 and entry[8] or statuses.now, devices)
end

-- A record's fields: group, status, since_ms, then the devices.
local function record_fields(record)
  local fields, at = {}, 1
  while at <= #record + 1 do
    local stop = string.find(record, '\t', at, true) or #record + 1
    fields[#fields + 1] = string.sub(record, at, stop - 1)
    at = stop + 1
  end
  return fields
end

-- The ZSETs of order o that a record's user is in: their status's, then each device's.
local function record_keys(statuses, fields, o)
  local keys = {ix_key(statuses, fields[1], o, 'st', fields[2])}
  for i = 4, #fields do keys[#keys + 1] = ix_key(statuses, fields[1], o, 'dev', fields[i]) end
  return keys
end

local function index_remove(statuses, user_id, record)
  local fields = record_fields(record)
  for _, o in ipairs({'l', 's'}) do
    for _, key in ipairs(record_keys(statuses, fields, o)) do redis.call('ZREM', key, user_id) end
  end
  redis.call('ZREM', index_ids_key(statuses, fields[1]), user_id)
  if fields[1] ~= 'v' then redis.call('ZREM', index_hidden_since_key(statuses), user_id) end
end

-- Whether a record's fields are a plain user's, kept with no entry in ix:users.
local function is_plain(fields) return #fields == 3 and fields[1] == 'v' and fields[2] == 'ONLINE' end

-- `fields`: the user's record's (record_fields).
local function index_add(statuses, user_id, fields, last_seen)
  local since = string.format('%d', -tonumber(fields[3]))
  for _, key in ipairs(record_keys(statuses, fields, 'l')) do redis.call('ZADD', key, last_seen, user_id) end
  for _, key in ipairs(record_keys(statuses, fields, 's')) do redis.call('ZADD', key, since, user_id) end
  redis.call('ZADD', index_ids_key(statuses, fields[1]), '0', user_id)
  if fields[1] ~= 'v' then redis.call('ZADD', index_hidden_since_key(statuses), since, user_id) end
end

-- Indexes the user anew: out of what they are no longer under, into what they are under now,
-- and their entries of order l moved to their lastSeen score.
local function index_sync(statuses, user_id, entry)
  local users_key = index_users_key(statuses)
  local old = redis.call('HGET', users_key, user_id)
  local new
  if entry then new = index_record_of_entry(statuses, user_id, entry) else new = index_record(statuses, user_id) end
  local last_seen = new and entry and statuses.seen_scores[user_id]
  if new and last_seen == nil then last_seen = redis.call('ZSCORE', statuses.names.last_seen, user_id) end
  if new and not last_seen then new = nil end
  local fields = new and record_fields(new)
  if new and is_plain(fields) then
    -- No entry of their own: written whole (it may be new), and as is if it was.
    if old then
      index_remove(statuses, user_id, old)
      redis.call('HDEL', users_key, user_id)
    end
    local since = string.format('%d', -tonumber(fields[3]))
    redis.call('ZADD', ix_key(statuses, 'v', 's', 'st', 'ONLINE'), since, user_id)
    if redis.call('ZADD', ix_key(statuses, 'v', 'l', 'st', 'ONLINE'), last_seen, user_id) == 1 then
      redis.call('ZADD', index_ids_key(statuses, 'v'), '0', user_id)
    end
    return
  end
  -- A user with no entry was plain, or not indexed: out of what a plain user is in (their
  -- id first, which tells whether they were).
  if not old and redis.call('ZREM', index_ids_key(statuses, 'v'), user_id) == 1 then
    redis.call('ZREM', ix_key(statuses, 'v', 'l', 'st', 'ONLINE'), user_id)
    redis.call('ZREM', ix_key(statuses, 'v', 's', 'st', 'ONLINE'), user_id)
  end
  if old and old == new then
    for _, key in ipairs(record_keys(statuses, fields, 'l')) do
      redis.call('ZADD', key, last_seen, user_id)
    end
    return
  end
  if old then index_remove(statuses, user_id, old) end
  if new then
    index_add(statuses, user_id, fields, last_seen)
    redis.call('HSET', users_key, user_id, new)
  elseif old then
    redis.call('HDEL', users_key, user_id)
  end
end

-- Indexes anew every user the script marked; `entries` (optional): user_id -> their
-- presence_entry read after every change of the script.
local function index_flush(statuses, entries)
  for _, user_id in ipairs(statuses.dirty) do index_sync(statuses, user_id, entries and entries[user_id]) end
  statuses.dirty, statuses.marked = {}, {}
end
