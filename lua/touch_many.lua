--[[
  touch_many: record activity, now, of the "default" session of many users at once; or, at a
  backfilled time, their activity alone.

  KEYS[1]  last_seen     ZSET    member=user_id     score=-(last activity, ms)
  KEYS[2]  online        ZSET    member=user_id     score=newest live session's expiry, ms,
                                 or a held score (includes/live.lua)
  KEYS[3]  user_index    HASH    user_id -> bit index in the day bitmaps
  KEYS[4]  next_index    STRING  the next never-used bit index
  KEYS[5]  free_indexes  LIST    bit indexes of purged users
  KEYS[6..8]  days       bitmaps of three consecutive days, oldest first
  KEYS[9]  leases        ZSET    member=slot  score=the moment the lease lapses, ms; the
                                 leases' users keys are named from it (same hash tag)
  ARGV[1]  shard  packed once per shard by the store (Shard.options, includes/options.lua): the
                  deployment's options and the shard's names that this script reads: window_ms,
                  retention_ms, channel, sessions_prefix, revoked_prefix, conn_prefix,
                  user_channel_prefix, the names of includes/status.lua (status_prefix,
                  extras_prefix, since, invisible, hidden, status_expiries, away_expiries), publish,
                  and the names of a lease's keys (includes/connections.lua) (a name ending in ':'
                  is followed by a user id, in the hash tag of KEYS)
  ARGV[2..5]  boundaries    int ms: the start of each of the three days, then the end of the last
  ARGV[6] user_ids         string: distinct user ids, joined by "\n" (ids hold no control
                            characters); sorted, for speed only. A few hundred at most: Redis
                            6.2's Lua makes each id a string by a hash of about 32 of its
                            bytes, so ids alike in those bytes cost it time quadratic in their
                            number (the store sends 250 per call). Each user's session and
                            revocation keys are derived from the prefixes, which hold the
                            hash tag of KEYS: one slot.
  ARGV[7] at_ms            int ms, or "" for now: a backfilled time, not after now and
                            within the retention: only the users' activity then is recorded
                            (the bitmaps of includes/activity.lua, named from `shard`, and
                            lastSeen), and nothing of their presence; nothing is announced
  Returns  the number of users recorded: all but those whose default session is revoked
  Events   per user, OFFLINE if their presence had expired or lapsed unswept (or STATUS if a
           lapse left them AWAY), then ONLINE if they come online, or STATUS if the touch made
           their default session active again and so them ONLINE; all in one message on the
           channel of every user, and each user's in one message on their own channel
           (lua/includes/events.lua), in the order of user_ids
  Errors   "DAY_NOT_GIVEN", "AT_IN_FUTURE", "AT_BEFORE_RETENTION"; nothing is written when it is returned
  Work     a few commands per 1,000 users: every structure is read and written with variadic
           commands. A user with a session key (sessions besides "default") is recorded with
           its own few commands; the others need no key of their own (includes/activity.lua).
  Feed     each change of a kind the feed keeps goes in the shard's feed, with the user's
           or the place's version, in this call (includes/feed.lua: its names and options
           are in `shard`)
  Indexes  the online list's, kept for each user changed (includes/online_index.lua: its keys
           are named from index_prefix and last_seen in `shard`, in the hash tag of KEYS)
]]
--- @include "clock"
--- @include "chunks"
--- @include "activity"
--- @include "status"
--- @include "options"
local shard = shard_options(ARGV[1])
local last_seen_key, online_key = KEYS[1], KEYS[2]
local index_key, next_key, free_key = KEYS[3], KEYS[4], KEYS[5]
local window_ms, retention_ms = tonumber(shard.window_ms), tonumber(shard.retention_ms)
local boundaries = {tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])}
local channel, sessions_prefix, revoked_prefix = {shard.channel, shard.user_channel_prefix, shard.publish, feed_of(shard)}, shard.sessions_prefix, shard.revoked_prefix
local conn_prefix = shard.conn_prefix
local leases = lease_book(KEYS[9], shard)

local now = now_ms()
local statuses = statuses_of(shard, KEYS[2], window_ms, now, leases)
-- Scores given to every user, written out once (includes/chunks.lua).
local minus_now, online_until = string.format('%d', -now), string.format('%d', now + window_ms)
local t_ms = tonumber(ARGV[7]) or now
if t_ms > now then return redis.error_reply('AT_IN_FUTURE') end
if t_ms < now - retention_ms then return redis.error_reply('AT_BEFORE_RETENTION') end
if not day_of(t_ms, boundaries) then return redis.error_reply('DAY_NOT_GIVEN') end

-- Marks in `found` which of keys[first..last] exist: one EXISTS over the whole range, then
-- halves of it only where some but not all exist (they are few): O(existing * log CHUNK).
local function find_existing(keys, first, last, found)
  local count = redis.call('EXISTS', unpack(keys, first, last))
  if count == 0 then return end
  if count == last - first + 1 then
    for i = first, last do found[i] = true end
    return
  end
  local middle = math.floor((first + last) / 2)
  find_existing(keys, first, middle, found)
  find_existing(keys, middle + 1, last, found)
end

-- The ids of `ids` whose key (the prefix followed by the id) exists.
local function with_key(prefix, ids)
  local keys = {}
  for i = 1, #ids do keys[i] = prefix .. ids[i] end
  local found, having = {}, {}
  for first, last in chunks(#keys) do find_existing(keys, first, last, found) end
  for i in pairs(found) do having[ids[i]] = true end
  return having
end

-- The users to record: those whose default session is not revoked now.
-- A plain find, not a pattern: a pattern match steps through the ids a byte at a time.
local given, ids, at = {}, ARGV[6], 1
while at <= #ids do
  local stop = string.find(ids, '\n', at, true) or #ids + 1
  given[#given + 1] = string.sub(ids, at, stop - 1)
  at = stop + 1
end
local revoked, own_key = with_key(revoked_prefix, given), with_key(sessions_prefix, given)
local users, n = {}, 0
for _, id in ipairs(given) do
  local until_ms = revoked[id] and redis.call('ZSCORE', revoked_prefix .. id, DEFAULT_SESSION)
  if not (until_ms and tonumber(until_ms) > now) then n = n + 1; users[n] = id end
end
if n == 0 then return 0 end

-- Their bit indexes, handing out free ones, then new ones, to users seen first, in order.
local indexes = read_in_chunks('HMGET', index_key, users)
local missing, assigned = {}, {}
for i = 1, n do
  if not indexes[i] then missing[#missing + 1] = i end
end
if #missing > 0 then
  local given_back = redis.call('LPOP', free_key, #missing) or {}
  local fresh = #missing - #given_back
  local next_index = fresh > 0 and redis.call('INCRBY', next_key, fresh) - fresh or 0
  for j, i in ipairs(missing) do
    if j <= #given_back then
      indexes[i] = given_back[j]
    else
      indexes[i] = string.format('%d', next_index)
      next_index = next_index + 1
    end
  end
  for _, i in ipairs(missing) do assigned[indexes[i]] = true end
  call_chunked('HSET', index_key, nil, #missing, function(args, k, j)
    args[k + 1], args[k + 2] = users[missing[j]], indexes[missing[j]]
    return k + 2
  end)
end
mark_periods(shard, periods_of(shard, {KEYS[6], KEYS[7], KEYS[8]}, boundaries, t_ms), indexes, assigned)
if ARGV[7] ~= '' then
  call_chunked('ZADD', last_seen_key, 'LT', n, function(args, k, i)
    args[k + 1], args[k + 2] = -t_ms, users[i]
    return k + 2
  end)
  return n
end

-- Presence: settle expired entries, then record the default session of each user. A user
-- with a session key (their held sessions too) is settled and recorded on their own.
local function user_keys(user_id)
  return {online = online_key, last_seen = last_seen_key, sessions = sessions_prefix .. user_id,
    conn = conn_prefix .. user_id, index = index_key, statuses = statuses}
end
local expiries = read_in_chunks('ZMSCORE', online_key, users)
-- A keyless user who never chose anything looks plain in every event (one active session, no
-- choice): their look is known here, with no reads of their own at announce time.
local chose = with_key(status_key(statuses, ''), users)
local PLAIN_OFFLINE = {'OFFLINE', false, 'OFFLINE', 'EVERYONE', 0}
local PLAIN_ONLINE = {'ONLINE', false, 'ONLINE', 'EVERYONE', 0}
local events, expired, arrived, was_online = {}, {}, {}, {}
for i = 1, n do
  local user_id, expiry = users[i], tonumber(expiries[i])
  local plain = not own_key[user_id] and not chose[user_id]
  local online
  if own_key[user_id] then
    online = settle(leases, user_keys(user_id), channel, user_id, now, window_ms, events)
    settle_away(statuses, user_id, events)
  else
    online = expiry and 1 or 0
    if expiry and expiry < now then
      expired[#expired + 1] = user_id
      went_offline(statuses, user_id)
      add_event(events, 'OFFLINE', user_id, expiry, '', 0, plain and PLAIN_OFFLINE or look_of(statuses, 'OFFLINE', user_id, 0))
      online = 0
    end
  end
  if online == 0 then
    arrived[#arrived + 1] = user_id
    add_event(events, 'ONLINE', user_id, now, '', 1, plain and PLAIN_ONLINE or nil)
  end
  was_online[user_id] = online == 1
end
-- Their onlineSince (came_online, includes/status.lua), for all of them at once.
call_chunked('ZADD', since_key(statuses), nil, #arrived, function(args, k, j)
  args[k + 1], args[k + 2] = minus_now, arrived[j]
  return k + 2
end)
if #expired > 0 then
  call_chunked('ZREM', online_key, nil, #expired, function(args, k, j)
    args[k + 1] = expired[j]
    return k + 1
  end)
  online_forget()
end
call_chunked('ZADD', last_seen_key, 'LT', n, function(args, k, i)
  args[k + 1], args[k + 2] = minus_now, users[i]
  return k + 2
end)
local keyless = {}
for i = 1, n do
  local user_id = users[i]
  if own_key[user_id] then
    -- As a touch of the default session: activity, which makes it active again.
    local status_before = was_online[user_id] and status_of(statuses, user_id, KEYS[2], now)
    local before = tonumber(redis.call('ZSCORE', sessions_prefix .. user_id, DEFAULT_SESSION))
    local was_live = before and session_live(leases, before, now, window_ms)
    record_session(user_keys(user_id), user_id, DEFAULT_SESSION, now, now, window_ms)
    local extras = was_live and parse_extras(redis.call('HGET', extras_key(statuses, user_id), DEFAULT_SESSION)) or {}
    extras.started, extras.idle = extras.started or now, false
    redis.call('HSET', extras_key(statuses, user_id), DEFAULT_SESSION, format_extras(extras))
    tidy_extras(statuses, user_id)
    track_activity(statuses, user_id)
    if status_before and status_of(statuses, user_id, KEYS[2], now) ~= status_before then
      add_event(events, 'STATUS', user_id, now, '', 1)
    end
  else
    keyless[#keyless + 1] = user_id
  end
end
-- GT: a default session backfilled a little into the future stays as it is.
call_chunked('ZADD', online_key, 'GT', #keyless, function(args, k, j)
  args[k + 1], args[k + 2] = online_until, keyless[j]
  return k + 2
end)
online_forget()
-- Those who chose INVISIBLE keep their online entry in `hidden` too (includes/status.lua).
local invisible = read_in_chunks('SMISMEMBER', shard.invisible, keyless)
for j = 1, #keyless do
  if invisible[j] == 1 then sync_hidden(statuses, keyless[j]) end
end

-- The online list's indexes (includes/online_index.lua): a user with a session key or a
-- choice is indexed on their own, and so is one whose online entry had expired unswept (their
-- entries may say more); the others are ONLINE with no device, in group v, written for all at
-- once: those online already only move in order l (XX: nothing is added for a user the
-- indexes do not hold), those who had no online entry are added.
local plain_arrived, staying = {}, {}
for i = 1, n do
  local user_id, expiry = users[i], tonumber(expiries[i])
  if own_key[user_id] or chose[user_id] or (expiry and expiry < now) then
    index_mark(statuses, user_id)
  elseif expiry then
    staying[#staying + 1] = user_id
  else
    plain_arrived[#plain_arrived + 1] = user_id
  end
end
local online_by_last_seen = ix_key(statuses, 'v', 'l', 'st', 'ONLINE')
call_chunked('ZADD', online_by_last_seen, {'XX', 'LT'}, #staying, function(args, k, j)
  args[k + 1], args[k + 2] = minus_now, staying[j]
  return k + 2
end)
for _, key in ipairs({online_by_last_seen, ix_key(statuses, 'v', 's', 'st', 'ONLINE'), index_ids_key(statuses, 'v')}) do
  local score = key == index_ids_key(statuses, 'v') and '0' or minus_now
  call_chunked('ZADD', key, nil, #plain_arrived, function(args, k, j)
    args[k + 1], args[k + 2] = score, plain_arrived[j]
    return k + 2
  end)
end
announce_all(channel, events, statuses)
index_flush(statuses)
return n
