--- @include "live"
--- @include "events"
-- Connection-bound sessions (lua/open_session.lua) live as long as their process's lease
-- (includes/live.lua): in the user's sessions key such a session is scored HELD + slot, and
-- the user's conn key (HASH) names its holder: session_id -> "generation slot". The
-- generation, a number unique in the shard, tells a holder from one that replaced it.
--
-- Each lease keeps, in keys that store/keys.py names (in the leases key's hash tag; a script
-- gets their names in its `shard` argument, in `leases.names`), its owner (`lease_owners`,
-- HASH slot -> the owning process's token; slots come from the counter `lease_next`), the
-- users it holds sessions of (`lease_users_prefix` followed by the slot, SET) and their bits
-- (`lease_bits_prefix` followed by the slot: the users' day-bitmap bits, which each renewal
-- ORs into its day's bitmap: a session held across midnight counts on both days).
--
-- `user` names one user's keys: {online, last_seen, sessions, conn, index}; a script that
-- reads the sessions key after changing it sets `defer_expiry` (see expire_with_newest).
-- A script that knows statuses sets `statuses` (includes/status.lua, statuses_of), whose
-- functions these call besides: offline(user_id) when a user's online entry goes,
-- online_moved(user_id) after any write of it (an entry made, moved or removed),
-- tidy(user_id, expire_at) when their sessions key got its expiry or went (tidy_extras);
-- status(user_id, ending_ids) is the user's status as if the sessions ending_ids were still
-- live (to compare with the status once they ended), and look(kind, user_id, online) an
-- event's look at this moment (add_event's `look`).

local function lease_owners_key(leases) return leases.names.lease_owners end
local function lease_users_key(leases, slot) return leases.names.lease_users_prefix .. slot end
local function lease_bits_key(leases, slot) return leases.names.lease_bits_prefix .. slot end

-- The session's valid conn entry {generation=string, slot=number}, or nil.
local function conn_entry(user, session_id)
  local value = redis.call('HGET', user.conn, session_id)
  if not value then return nil end
  local generation, slot = string.match(value, '^(%d+) (%d+)$')
  if not generation then return nil end
  slot = tonumber(slot)
  if tonumber(redis.call('ZSCORE', user.sessions, session_id)) ~= HELD + slot then return nil end
  return {generation = generation, slot = slot}
end

-- The conn entry of the session if it is held under a live lease.
local function live_conn_entry(leases, user, session_id, now)
  local entry = conn_entry(user, session_id)
  if entry and slot_live(leases, entry.slot, now) then return entry end
  return nil
end

-- Whether a session scored `score` in a sessions key is live at `now`.
local function session_live(leases, score, now, window_ms)
  if held_slot(score) then return is_live(leases, score, now) end
  return score + window_ms >= now
end

-- The live sessions among `rows`, a user's sessions key read from the window's start by
-- ZRANGEBYSCORE ... WITHSCORES: {id, activity_ms, ...}, a held one's activity the present;
-- and their scores as kept, in the same order.
local function live_of_rows(leases, rows, now, window_ms)
  local live, scores = {}, {}
  for i = 1, #rows, 2 do
    local score = tonumber(rows[i + 1])
    if session_live(leases, score, now, window_ms) then
      live[#live + 1] = rows[i]
      live[#live + 1] = held_slot(score) and now or score
      scores[#scores + 1] = score
    end
  end
  return live, scores
end

-- The user's live sessions and their scores (live_of_rows).
local function live_sessions(leases, user, now, window_ms)
  local rows = redis.call('ZRANGEBYSCORE', user.sessions, string.format('%d', now - window_ms), '+inf', 'WITHSCORES')
  return live_of_rows(leases, rows, now, window_ms)
end

-- Users' bit indexes in the day bitmaps (includes/activity.lua, user_index), as read or
-- handed out in this call: a user keeps theirs while they are kept.
local indexes_read = {}

-- The user's bit index in the shard's HASH of them (index_key), or false if none.
local function index_of(index_key, user_id)
  local index = indexes_read[user_id]
  if index == nil then
    index = redis.call('HGET', index_key, user_id)
    indexes_read[user_id] = index
  end
  return index
end

-- Records that the user holds a session under `slot`.
local function hold_in_slot(leases, user, user_id, slot)
  redis.call('SADD', lease_users_key(leases, slot), user_id)
  redis.call('SETBIT', lease_bits_key(leases, slot), index_of(user.index, user_id), '1')
end

-- After one of the user's sessions under `slot` went: the lease forgets the user once none
-- is left, and their bit too unless `keep_bit` (a lapse keeps it for the lapse's day).
local function forget_if_last(leases, user, user_id, slot, keep_bit)
  local score = string.format('%d', HELD + slot)
  if redis.call('ZCOUNT', user.sessions, score, score) > 0 then return end
  redis.call('SREM', lease_users_key(leases, slot), user_id)
  local index = not keep_bit and index_of(user.index, user_id)
  if index then redis.call('SETBIT', lease_bits_key(leases, slot), index, '0') end
end

-- A session key expires once its newest session is no longer live. The script sets that
-- expiry after its last read of the key: Redis 6.2 deletes a key at once when given an expiry
-- its own clock has reached, and that clock moves on while the script runs, though the
-- script's `now` does not. Set earlier, the expiry of a session live at `now` could delete it
-- before the script has answered from it; set last, it deletes only what no later `now` holds
-- live.
local function expire_with_newest(sessions_key, newest_ms, window_ms)
  -- Live through newest + window_ms inclusive: the key outlives that moment by a millisecond.
  redis.call('PEXPIREAT', sessions_key, newest_ms + window_ms + 1)
end

-- Sets the user's online entry from their sessions, whose lapsed ones were ended first
-- (end_lapsed), and while a session holds them their lastSeen too; `ended_ms` is when what
-- ended their last held session ended, if that happened (their lastSeen then, unless a touched
-- session's activity is later). Sets the expiry of their sessions
-- key: none while a session is held (or, with user.defer_expiry, leaves it to the caller in
-- user.expire_at). Returns 1 if the user is online, else 0; and the sessions key as it is left,
-- read from the window's start (live_of_rows' `rows`), when it is not deleted.
local function refresh_online(user, user_id, now, window_ms, ended_ms)
  -- Numbers go to Redis as strings made here: Redis formats a number argument with
  -- snprintf('%.17g'), several times slower than string.format('%d').
  local cutoff = string.format('%d', now - window_ms)
  redis.call('ZREMRANGEBYSCORE', user.sessions, '-inf', '(' .. cutoff)
  -- What is left, by score: the touched sessions (the newest last), then the held ones.
  local rows = redis.call('ZRANGEBYSCORE', user.sessions, cutoff, '+inf', 'WITHSCORES')
  local slot, slots, newest = nil, 0, nil
  for i = 2, #rows, 2 do
    local kept = tonumber(rows[i])
    if kept >= HELD then
      -- Ordered by score, so each slot's sessions are next to each other.
      local this = kept - HELD
      if this ~= slot then slot, slots = this, slots + 1 end
    else
      newest = kept
    end
  end
  local was = online_score(user.online, user_id)
  local score = nil
  if slots == 1 and not newest then
    score = HELD + slot
  elseif slots > 0 then
    score = HELD
  elseif newest then
    score = newest + window_ms
  end
  online_written(user.online, user_id, score or false)
  if score then
    redis.call('ZADD', user.online, string.format('%d', score), user_id)
  else
    redis.call('ZREM', user.online, user_id)
    if user.statuses then user.statuses.offline(user_id) end
  end
  if user.statuses then user.statuses.online_moved(user_id) end
  if slots > 0 then
    redis.call('ZADD', user.last_seen, string.format('%d', -score), user_id)
    redis.call('PERSIST', user.sessions)
    redis.call('PERSIST', user.conn)
    if user.statuses then user.statuses.tidy(user_id, -1) end
    return 1, rows
  end
  redis.call('DEL', user.conn)
  if was and held_slot(was) then
    -- When the hold ended, or the latest activity of a touched session if that came later
    -- (a lease renewed last before it and lapsed since): never back before it.
    local last = ended_ms or now
    if newest then last = math.max(last, newest) end
    redis.call('ZADD', user.last_seen, string.format('%d', -last), user_id)
  end
  if newest then
    user.expire_at = newest + window_ms + 1
    if not user.defer_expiry then expire_with_newest(user.sessions, newest, window_ms) end
  end
  -- No session held or live: the key's other members went above, so Redis has deleted it.
  if user.statuses and not user.defer_expiry then user.statuses.tidy(user_id, not newest and -2 or nil) end
  if not score then return 0 end
  return 1, rows
end

-- Ends the user's sessions held under leases that have lapsed (their process died, or
-- stopped renewing for longer than the TTL), each at its lease's lapse, as the sweep would;
-- announces OFFLINE then (into `events`) if that left the user offline. Returns nil if none
-- had lapsed, else 1 if the user is online afterwards, 0 if not.
local function end_lapsed(leases, user, user_id, now, window_ms, events)
  local held = redis.call('ZRANGEBYSCORE', user.sessions, string.format('%d', HELD), '+inf', 'WITHSCORES')
  local ended, slots, ending = nil, {}, {}
  for i = 1, #held, 2 do
    if not slot_live(leases, tonumber(held[i + 1]) - HELD, now) then ending[#ending + 1] = held[i] end
  end
  -- The status its subscribers were told while those sessions were live.
  local status_before = #ending > 0 and user.statuses and user.statuses.status(user_id, ending)
  for i = 1, #held, 2 do
    local slot = tonumber(held[i + 1]) - HELD
    if not slot_live(leases, slot, now) then
      redis.call('ZREM', user.sessions, held[i])
      redis.call('HDEL', user.conn, held[i])
      local lapse = lapse_of(leases, slot) or now
      if not ended or lapse > ended then ended = lapse end
      slots[slot] = true
    end
  end
  if not ended then return nil end
  for slot in pairs(slots) do forget_if_last(leases, user, user_id, slot, true) end
  local before = online_score(user.online, user_id)
  local online = refresh_online(user, user_id, now, window_ms, ended)
  if online == 0 and before and held_slot(before) then
    add_event(events, 'OFFLINE', user_id, ended, '', 0, user.statuses and user.statuses.look('OFFLINE', user_id, 0))
  elseif online == 1 and status_before and user.statuses.status(user_id, {}) ~= status_before then
    -- Its last active session lapsed, an idle one stays: AWAY, with the look of now.
    add_event(events, 'STATUS', user_id, ended, '', 1, user.statuses.look('STATUS', user_id, 1))
  end
  return online
end
