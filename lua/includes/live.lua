-- When presence is live, written once. A session is live through its last activity plus the
-- window inclusive, and a user's online entry is scored by that moment (the expiry, ms).
--
-- A session held by a connection (lua/open_session.lua) is live instead for as long as the
-- lease of the process holding it: each process holds one lease in each shard, a slot number
-- in the shard's leases ZSET (slot -> the moment it lapses, ms), renewed once per tick for
-- every session it holds (lua/renew_lease.lua). Such a session is scored HELD + slot, far
-- beyond any time, and so is its user while it holds them: their online entry sorts after
-- every expiry, and their lastSeen entry, -(HELD + slot), before every time, newest first, as
-- the present does. A user held under one lease only, and by nothing else, is scored
-- HELD + slot, so that a reader leaves out the users of a lapsed lease by their score alone
-- (one ZCOUNT per lapsed lease, before the sweep has ended their sessions); a user held under
-- several leases, or held and touched, is scored HELD (slot 0): a reader takes them as live,
-- and a script that writes to them ends first what has lapsed (includes/connections.lua).

-- 2^50 ms, in the year 37,648: every time is below it, and HELD + slot is exact in a double.
-- Written into a command's arguments with string.format('%d'), never with `..`, which would
-- print it with 14 digits.
local HELD = 1125899906842624

-- The shard's leases, which every function here that reads them takes first (`leases`): each
-- script that may meet a held score makes them first, from `key` (a KEYS entry) and, if it may
-- change a lease's keys, `names` (its decoded `shard` argument, whose lease names
-- store/keys.py makes). The lapses read are kept in them for the rest of the call: the
-- script's `now` does not move.
-- A script that lists users also gives `sessions_prefix` (a user's sessions key is it followed
-- by their id, in the hash tag of `key`) and `window_ms`, so that while a lease has lapsed
-- unswept a user scored HELD is looked at one by one (several_live).
local function lease_book(key, names, sessions_prefix, window_ms)
  return {key = key, names = names or false, lapse = {}, sessions_prefix = sessions_prefix or false,
    window_ms = window_ms or 0}
end

-- The moment (ms) the lease of `slot` lapses, or nil if there is none.
local function lapse_of(leases, slot)
  local lapse = leases.lapse[slot]
  if lapse == nil then
    lapse = tonumber(redis.call('ZSCORE', leases.key, slot)) or false
    leases.lapse[slot] = lapse
  end
  return lapse or nil
end

local function slot_live(leases, slot, now)
  local lapse = lapse_of(leases, slot)
  return lapse ~= nil and lapse >= now
end

-- The slot a held score names (0: several), or nil for a score that is a time.
local function held_slot(score)
  if score >= HELD then return score - HELD end
  return nil
end

-- The slots whose lease has lapsed by `now`: their sessions are not live, though the sweep
-- may not have ended them yet. Few: a lease lapses when its process dies.
local function lapsed_slots(leases, now)
  local slots = redis.call('ZRANGEBYSCORE', leases.key, '-inf', '(' .. now, 'LIMIT', 0, 1000)
  for i = 1, #slots do slots[i] = tonumber(slots[i]) end
  return slots
end

-- Whether some lease has lapsed unswept.
local function some_lapsed(leases, now)
  if leases.some_lapsed == nil then
    leases.some_lapsed = #redis.call('ZRANGEBYSCORE', leases.key, '-inf', '(' .. now, 'LIMIT', 0, 1) > 0
  end
  return leases.some_lapsed
end

-- Whether a user scored HELD has a live session, by their sessions: O(sessions).
local function several_live(leases, user_id, now)
  local cutoff = now - leases.window_ms
  local rows = redis.call('ZRANGEBYSCORE', leases.sessions_prefix .. user_id, cutoff, '+inf', 'WITHSCORES')
  for i = 2, #rows, 2 do
    local score = tonumber(rows[i])
    local slot = held_slot(score)
    if slot == nil or slot_live(leases, slot, now) then return true end
  end
  return false
end

-- Whether something that stays live through `expiry_ms` (a number, or nil; or a held score)
-- is live at `now`.
local function is_live(leases, expiry_ms, now)
  if expiry_ms == nil then return false end
  local slot = held_slot(expiry_ms)
  if slot == nil then return expiry_ms >= now end
  return slot == 0 or slot_live(leases, slot, now)
end

-- Users' scores in the online ZSET (and `hidden`, includes/status.lua) as read or written in
-- this call: key -> user_id -> score, or false for none. Each is read once: every write of
-- one says so (online_written), or, for a script that writes many at once, online_forget.
local online_scores = {}

-- The user's score in `key` (a number), or nil.
local function online_score(key, user_id)
  local scores = online_scores[key]
  if not scores then
    scores = {}
    online_scores[key] = scores
  end
  local score = scores[user_id]
  if score == nil then
    score = tonumber(redis.call('ZSCORE', key, user_id)) or false
    scores[user_id] = score
  end
  return score or nil
end

-- After a write of the user's score in `key`: the score, false once removed, nil when not
-- known (ZADD GT).
local function online_written(key, user_id, score)
  local scores = online_scores[key]
  if scores then scores[user_id] = score end
end

local function online_forget() online_scores = {} end

-- The expiry of the user's online entry (ms, or a held score) if it says they are online at
-- `now`, else nil.
local function live_expiry(leases, online_key, user_id, now)
  local expiry = online_score(online_key, user_id)
  if not is_live(leases, expiry, now) then return nil end
  if expiry == HELD and leases.sessions_prefix and some_lapsed(leases, now) and not several_live(leases, user_id, now) then
    return nil
  end
  return expiry
end

-- How many users `online_key` holds online at `now`: O(log n) per lapsed lease. A user held
-- under several leases that have all lapsed is still counted until the sweep ends their
-- sessions (the next sweep: within a second).
local function online_count(leases, online_key, now)
  local total = redis.call('ZCOUNT', online_key, now, '+inf')
  for _, slot in ipairs(lapsed_slots(leases, now)) do
    local score = string.format('%d', HELD + slot)
    total = total - redis.call('ZCOUNT', online_key, score, score)
  end
  return total
end

-- What a lastSeen score (-(last activity, ms), or a held one) shows at `now`: the present
-- while held, the lapse of a lapsed lease, else the time.
local function shown_last_seen(leases, score, now)
  local slot = held_slot(-score)
  if slot == nil then return -score end
  if slot == 0 or slot_live(leases, slot, now) then return now end
  return lapse_of(leases, slot) or now
end
