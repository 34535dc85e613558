--- @include "chunks"
--- @include "connections"
-- The session of a touch without a session id (the store's DEFAULT_SESSION).
local DEFAULT_SESSION = 'default'

-- Where a user's sessions are kept: in their session key, except for a user whose only live
-- session is DEFAULT_SESSION and who has no session key: that session is then kept by the
-- user's online entry alone, its last activity being the entry's expiry minus the window. So
-- touching the default session of many users creates no key per user.

-- The user's bit index in the day bitmaps, handing out a free one to a user seen first;
-- and whether it was handed out now.
local function user_index(index_key, next_key, free_key, user_id)
  local index = index_of(index_key, user_id)
  if index then return index, false end
  index = redis.call('LPOP', free_key) or string.format('%d', redis.call('INCR', next_key) - 1)
  redis.call('HSET', index_key, user_id, index)
  indexes_read[user_id] = index
  return index, true
end

-- Which of the consecutive days whose boundaries (ms) are given holds `t_ms`; nil if none.
local function day_of(t_ms, boundaries)
  for i = 1, #boundaries - 1 do
    if t_ms >= boundaries[i] and t_ms < boundaries[i + 1] then return i end
  end
  return nil
end

-- The bitmaps of analytics (docs/design.md, "Who and when"). Beside each day's bitmap, whose
-- key the caller gives, bitmaps of the hour (named by its start, ms), of the week (by its
-- Monday, YYYY-MM-DD) and of the month (YYYY-MM), all in the stats time zone, named by the
-- prefixes of `shard` (hour_prefix, week_prefix, month_prefix: the hash tag of KEYS); and
-- each user's first active day: a u16 per bit index in `shard.first_days` (days since
-- 1970-01-01; 0: never active), with a bitmap per day, week and month of the users first
-- active in it (first_day_prefix, first_week_prefix, first_month_prefix). Each is kept until
-- its period's end plus hourly_ms (hours), retention_ms (days) or analytics_ms (weeks and
-- months), and an hour more for a DST change.
local HOUR_MS, DAY_MS = 3600000, 86400000

-- The periods holding t_ms, which lies in one of the days whose bitmaps (`days`) and
-- boundaries are given: its hour's bitmap, and its day's.
local function periods_of(shard, days, boundaries, t_ms)
  local day = day_of(t_ms, boundaries)
  local start = boundaries[day]
  -- Local hours are whole hours from local midnight, DST changes included.
  local hour = start + math.floor((t_ms - start) / HOUR_MS) * HOUR_MS
  -- With room for what more_periods (includes/new_day.lua) adds.
  return {shard = shard, hour = shard.hour_prefix .. string.format('%d', hour), hour_end = hour + HOUR_MS,
    day = days[day], day_end = boundaries[day + 1], number = false, kept = false, firsts = false,
    expiring = false}
end

-- Sets the bits `indexes` of the bitmap; returns those that were not set before. One index
-- (a touch) takes a SETBIT, cheaper than building a BITFIELD's arguments.
local function set_bits(key, indexes)
  if #indexes == 1 then
    return redis.call('SETBIT', key, indexes[1], '1') == 0 and indexes or {}
  end
  local fresh = {}
  for first, last in chunks(#indexes) do
    local args, n = {}, 0
    for i = first, last do
      args[n + 1], args[n + 2], args[n + 3], args[n + 4] = 'SET', 'u1', indexes[i], '1'
      n = n + 4
    end
    local old = redis.call('BITFIELD', key, unpack(args, 1, n))
    for i = first, last do
      if old[i - first + 1] == 0 then fresh[#fresh + 1] = indexes[i] end
    end
  end
  return fresh
end

-- includes/new_day.lua's functions {mark_new_day, more_periods}, made only when a call marks
-- a user's first activity of a day (or ORs a lease's users into the periods): most calls find
-- the user's bit in the hour's or the day's bitmap set already, and making these functions and
-- what they capture at every call would slow the making of each function after them (as
-- online_time_of in includes/status.lua).
local function new_day_of()
--- @include "new_day"
  return {mark_new_day = mark_new_day, more_periods = more_periods}
end

-- Marks the users whose bit indexes are given active in the periods p (periods_of): their
-- bits in its hour, day, week and month, and their first day (`assigned`: the indexes handed
-- out in this call, as includes/new_day.lua's mark_first_day). The hour's bits come first,
-- then the day's: one set already means the rest are set too (every write sets them together,
-- and a user active on a day has a first day no later), so a user active again within the
-- hour costs one command, and within the day two. The week's, month's and first bitmaps'
-- expiries are set only when one of them is missing (all_expiring): a first activity of the
-- day asks once instead.
local function mark_periods(shard, p, indexes, assigned)
  local fresh = set_bits(p.hour, indexes)
  if #fresh == 0 then return end
  redis.call('PEXPIREAT', p.hour, string.format('%d', p.hour_end + shard.hourly_ms + HOUR_MS))
  fresh = set_bits(p.day, fresh)
  if #fresh == 0 then return end
  new_day_of().mark_new_day(shard, p, fresh, assigned)
end

-- ORs a bitmap of users' bits into the periods p: a lease's users, active while it held
-- their sessions (their first day was marked when each session opened).
local function mark_bitmap(p, bits_key)
  for _, kept in ipairs(new_day_of().more_periods(p).kept) do
    redis.call('BITOP', 'OR', kept[1], kept[1], bits_key)
    redis.call('PEXPIREAT', kept[1], kept[2])
  end
end

-- Whether activity of the session at t_ms may be recorded: nil, or the error to return (and
-- nothing is to be written then): the session is revoked now, or no day holds t_ms. `keys`
-- names last_seen, revoked (the user's), index, next and free (the bit indexes), and days
-- (the bitmaps of the days whose boundaries are given).
local function activity_refused(keys, session_id, t_ms, now, boundaries)
  local revoked_until = redis.call('ZSCORE', keys.revoked, session_id)
  if revoked_until and tonumber(revoked_until) > now then return redis.error_reply('SESSION_REVOKED') end
  if not day_of(t_ms, boundaries) then return redis.error_reply('DAY_NOT_GIVEN') end
  return nil
end

-- Whether a session that is not live yet (session_id) would give the user more than
-- max_sessions live ones: checked before anything is written. A user with no sessions key may
-- have their default session live in their online entry alone (keep_default_in_key).
local function sessions_full(leases, user, user_id, session_id, now, window_ms, max_sessions)
  local score = tonumber(redis.call('ZSCORE', user.sessions, session_id))
  if score and session_live(leases, score, now, window_ms) then return false end
  local live = redis.call('ZCOUNT', user.sessions, string.format('%d', now - window_ms), '+inf')
  -- Counted again without the sessions of leases that lapsed unswept, only when it matters.
  if live >= max_sessions then live = #live_sessions(leases, user, now, window_ms) / 2 end
  if live == 0 and session_id ~= DEFAULT_SESSION and live_expiry(leases, user.online, user_id, now) then
    live = 1
  end
  return live >= max_sessions
end

-- Records that a session of the user was active at t_ms, which activity_refused allowed: the
-- user's bit in the bitmaps of the periods holding t_ms (mark_periods) and their lastSeen
-- (which never moves backwards), unless `seen_later`: the caller writes the lastSeen itself
-- afterwards (a held session's score), whatever this would have written.
local function mark_activity(keys, user_id, t_ms, boundaries, shard, seen_later)
  local index, assigned = user_index(keys.index, keys.next, keys.free, user_id)
  mark_periods(shard, periods_of(shard, keys.days, boundaries, t_ms), {index}, {[index] = assigned})
  if not seen_later then redis.call('ZADD', keys.last_seen, 'LT', string.format('%d', -t_ms), user_id) end
end

-- Gives a user whose default session is kept by their online entry alone a session key that
-- holds it, before a change that needs the key (another session, a kick). The key has no
-- expiry yet: the caller sets it with expire_with_newest once it is done reading the key.
local function keep_default_in_key(leases, online_key, sessions_key, user_id, window_ms, now)
  -- The online entry first: the call has read it (settle), so a user offline, whom an open or
  -- a touch brings online, costs no command here.
  local expiry = live_expiry(leases, online_key, user_id, now)
  if not expiry or redis.call('EXISTS', sessions_key) == 1 then return end
  redis.call('ZADD', sessions_key, expiry - window_ms, DEFAULT_SESSION)
end

-- Records activity of the default session of a user with no session key, at t_ms (never
-- moving a time backwards); returns the session's newest time if it is live, else nil.
-- An expired online entry must have been settled first.
local function record_default(online_key, user_id, t_ms, cutoff_ms, window_ms, statuses)
  if t_ms >= cutoff_ms then
    redis.call('ZADD', online_key, 'GT', t_ms + window_ms, user_id)
    online_written(online_key, user_id, nil)
    if statuses then statuses.online_moved(user_id) end
  end
  local expiry = online_score(online_key, user_id)
  if not expiry then return nil end
  return expiry - window_ms
end

-- Records activity of the session at t_ms (never moving a time backwards: a held session
-- keeps its held score, so activity moves only lastSeen), and returns 1 if the user is online
-- afterwards, else 0, and then the sessions key as refresh_online read it. Their lapsed
-- sessions must have been ended first (settle).
local function record_session(user, user_id, session_id, t_ms, now, window_ms)
  if t_ms >= now - window_ms then
    redis.call('ZADD', user.sessions, 'GT', string.format('%d', t_ms), session_id)
  end
  return refresh_online(user, user_id, now, window_ms, nil)
end

-- Brings the user's online entry up to date before a change: removes it if it expired, and
-- ends their sessions held under lapsed leases, announcing OFFLINE (into `events`, or at
-- once when it is nil) when they went offline then, at the moment they did, as the sweep
-- would have. Returns 1 if the user is online now, else 0.
local function settle(leases, user, channel, user_id, now, window_ms, events)
  local out = events or {}
  local expiry = online_score(user.online, user_id)
  if not expiry then return 0 end
  local online
  local slot = held_slot(expiry)
  if slot == nil then
    if expiry >= now then return 1 end
    redis.call('ZREM', user.online, user_id)
    online_written(user.online, user_id, false)
    if user.statuses then user.statuses.offline(user_id) end
    if user.statuses then user.statuses.online_moved(user_id) end
    add_event(out, 'OFFLINE', user_id, expiry, '', 0, user.statuses and user.statuses.look('OFFLINE', user_id, 0))
    online = 0
  else
    if slot > 0 and slot_live(leases, slot, now) then return 1 end
    online = end_lapsed(leases, user, user_id, now, window_ms, out) or 1
  end
  if not events then announce_all(channel, out, user.statuses) end
  return online
end
