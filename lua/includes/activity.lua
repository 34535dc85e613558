--- @include "connections"
-- The session of a touch without a session id (the store's DEFAULT_SESSION).
local DEFAULT_SESSION = 'default'

-- Where a user's sessions are kept: in their session key, except for a user whose only live
-- session is DEFAULT_SESSION and who has no session key: that session is then kept by the
-- user's online entry alone, its last activity being the entry's expiry minus the window. So
-- touching the default session of many users creates no key per user.

-- The user's bit index in the day bitmaps, handing out a free one to a user seen first.
local function user_index(index_key, next_key, free_key, user_id)
  local index = redis.call('HGET', index_key, user_id)
  if not index then
    index = redis.call('LPOP', free_key) or (redis.call('INCR', next_key) - 1)
    redis.call('HSET', index_key, user_id, index)
  end
  return index
end

-- Which of the consecutive days whose boundaries (ms) are given holds `t_ms`; nil if none.
local function day_of(t_ms, boundaries)
  for i = 1, #boundaries - 1 do
    if t_ms >= boundaries[i] and t_ms < boundaries[i + 1] then return i end
  end
  return nil
end

-- Marks the user active at t_ms: their bit in the day's bitmap, and their lastSeen (which
-- never moves backwards).
local function mark_active(last_seen_key, day_key, index_key, next_key, free_key, user_id, t_ms)
  redis.call('SETBIT', day_key, user_index(index_key, next_key, free_key, user_id), 1)
  redis.call('ZADD', last_seen_key, 'LT', -t_ms, user_id)
end

-- Keeps a day's bitmap until retention_ms after the end of the day (its position `day`).
local function keep_day(day_key, day, boundaries, retention_ms)
  redis.call('PEXPIREAT', day_key, boundaries[day + 1] + retention_ms)
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
  local live = redis.call('ZCOUNT', user.sessions, now - window_ms, '+inf')
  -- Counted again without the sessions of leases that lapsed unswept, only when it matters.
  if live >= max_sessions then live = #live_sessions(leases, user, now, window_ms) / 2 end
  if live == 0 and session_id ~= DEFAULT_SESSION and live_expiry(leases, user.online, user_id, now) then
    live = 1
  end
  return live >= max_sessions
end

-- Records that a session of the user was active at t_ms, which activity_refused allowed: the
-- user's bit in the bitmap of t_ms's day (kept until retention_ms after the day) and their
-- lastSeen.
local function mark_activity(keys, user_id, t_ms, boundaries, retention_ms)
  local day = day_of(t_ms, boundaries)
  mark_active(keys.last_seen, keys.days[day], keys.index, keys.next, keys.free, user_id, t_ms)
  keep_day(keys.days[day], day, boundaries, retention_ms)
end

-- Gives a user whose default session is kept by their online entry alone a session key that
-- holds it, before a change that needs the key (another session, a kick). The key has no
-- expiry yet: the caller sets it with expire_with_newest once it is done reading the key.
local function keep_default_in_key(leases, online_key, sessions_key, user_id, window_ms, now)
  if redis.call('EXISTS', sessions_key) == 1 then return end
  local expiry = live_expiry(leases, online_key, user_id, now)
  if not expiry then return end
  redis.call('ZADD', sessions_key, expiry - window_ms, DEFAULT_SESSION)
end

-- Records activity of the default session of a user with no session key, at t_ms (never
-- moving a time backwards); returns the session's newest time if it is live, else nil.
-- An expired online entry must have been settled first.
local function record_default(online_key, user_id, t_ms, cutoff_ms, window_ms, statuses)
  if t_ms >= cutoff_ms then
    redis.call('ZADD', online_key, 'GT', t_ms + window_ms, user_id)
    if statuses then statuses.online_moved(user_id) end
  end
  local expiry = redis.call('ZSCORE', online_key, user_id)
  if not expiry then return nil end
  return tonumber(expiry) - window_ms
end

-- Records activity of the session at t_ms (never moving a time backwards: a held session
-- keeps its held score, so activity moves only lastSeen), and returns 1 if the user is online
-- afterwards, else 0. Their lapsed sessions must have been ended first (settle).
local function record_session(user, user_id, session_id, t_ms, now, window_ms)
  if t_ms >= now - window_ms then
    redis.call('ZADD', user.sessions, 'GT', t_ms, session_id)
  end
  return refresh_online(user, user_id, now, window_ms, nil)
end

-- Brings the user's online entry up to date before a change: removes it if it expired, and
-- ends their sessions held under lapsed leases, announcing OFFLINE (into `events`, or at
-- once when it is nil) when they went offline then, at the moment they did, as the sweep
-- would have. Returns 1 if the user is online now, else 0.
local function settle(leases, user, channel, user_id, now, window_ms, events)
  local out = events or {}
  local expiry = tonumber(redis.call('ZSCORE', user.online, user_id))
  if not expiry then return 0 end
  local online
  local slot = held_slot(expiry)
  if slot == nil then
    if expiry >= now then return 1 end
    redis.call('ZREM', user.online, user_id)
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
