--- @include "connections"
-- A user's status: what they chose, their custom status, who may see their lastSeen, and
-- what their live sessions say (idle or not). Kept in the keys that store/keys.py names (in
-- the hash tag of every script's KEYS): a script that reads or announces statuses passes
-- their names in its `shard` argument (Shard.options), and a user's keys (st:<user>, sx:<user>,
-- and their sessions key) are the names ending in ':' (status_prefix, extras_prefix,
-- sessions_prefix) followed by the user id:
--   st:<user>  HASH  chosen       AWAY|BUSY|INVISIBLE (none: AUTO)
--                    text, emoji  the custom status (none: not set)
--                    expires      when the custom status ends, ms (none: until changed)
--                    visible      FRIENDS|NOBODY: who may see lastSeen (none: EVERYONE)
--                    hidden_seen  the lastSeen other end users see while the user is
--                                 invisible: their last activity before they chose it, ms
--   sx:<user>  HASH  session_id -> "started_ms idle device": a session's start (ms), 1 if
--                    its client said the user is idle on it, else 0, and its device (may be
--                    empty). A session without an entry started at `since`, is active and
--                    has no device. Expires with the user's sessions key.
--   stexp      ZSET  member=user_id  score=when their custom status ends, ms: the sweep
--                    announces each end (lua/sweep.lua)
--   awayexp    ZSET  member=user_id  score=when their last active session expires, ms, for
--                    users with an idle live session and no active held one: then they turn
--                    AWAY by time alone, which the sweep announces (track_activity)
--   invisible  SET   the users who chose INVISIBLE
--   hidden     ZSET  the online entries (includes/live.lua) of the users who chose INVISIBLE,
--                    as in the online ZSET: onlineUsers' total for end users is the online
--                    count less this one's, O(log n) (sync_hidden keeps it)
--   since      ZSET  member=user_id  score=-(when their current online period began, ms), of
--                    the users online: onlineUsers(orderBy: ONLINE_SINCE)
-- A script that knows statuses also keeps the online periods its events end
-- (includes/online_time.lua, end_periods, through online_time_of), from the names user_index, online_time_prefix,
-- period_lengths_prefix, analytics_ms and zone of its `shard` argument.
-- st, stexp and invisible do not expire: a user's choice is kept until they change it (a user
-- who never chose anything has no st key); the others go with what they describe.

local function status_key(statuses, user_id) return statuses.names.status_prefix .. user_id end
local function since_key(statuses) return statuses.names.since end
local function extras_key(statuses, user_id) return statuses.names.extras_prefix .. user_id end
local function status_expiry_key(statuses) return statuses.names.status_expiries end

-- The user's choices at `now`, read: see choices_of.
local function choices_of_now(statuses, user_id, now)
  local v = redis.call('HMGET', status_key(statuses, user_id), 'chosen', 'text', 'emoji', 'expires', 'visible',
    'hidden_seen')
  -- onlineSince as this call wrote it (came_online, went_offline), else as kept.
  local since = statuses.since_written and statuses.since_written[user_id]
  if since == nil then
    since = tonumber(redis.call('ZSCORE', since_key(statuses), user_id))
    since = since and -since
  end
  local choices = {chosen = v[1] or 'AUTO', visible = v[5] or 'EVERYONE', hidden_seen = tonumber(v[6]),
    since = since or nil}
  local expires = tonumber(v[4])
  if v[2] and (expires == nil or now < expires) then
    choices.custom = {text = v[2], emoji = v[3] or false, expires = expires or false}
  elseif v[2] then
    choices.ended = true
  end
  return choices
end

-- The user's choices at `now`: {chosen, visible, hidden_seen (ms or nil), since (ms or nil),
-- custom = {text, emoji or false, expires (ms) or false} or nil once ended, ended = true when
-- it ended but is still kept, not yet announced}. Read once per call in a script that keeps
-- `statuses.choices` (statuses_of's `remember`), read anew after each write of them here.
local function choices_of(statuses, user_id, now)
  local kept = statuses.choices
  if kept and now == statuses.now then
    local choices = kept[user_id]
    if choices then return choices end
    choices = choices_of_now(statuses, user_id, now)
    kept[user_id] = choices
    return choices
  end
  return choices_of_now(statuses, user_id, now)
end

-- Forgets the user's choices read by choices_of, after a write of their st key or onlineSince.
local function choices_changed(statuses, user_id)
  if statuses.choices then statuses.choices[user_id] = nil end
end

-- Gives the user's choices read by choices_of, if they were, the onlineSince (ms, or nil)
-- this call has just written: the rest is as read.
local function since_changed(statuses, user_id, since)
  local kept = statuses.choices and statuses.choices[user_id]
  if not kept then return end
  statuses.choices[user_id] = {chosen = kept.chosen, visible = kept.visible,
    hidden_seen = kept.hidden_seen, since = since, custom = kept.custom, ended = kept.ended}
end

-- A session's extras {started (ms or nil), idle (bool), device (string or nil)} from its sx
-- entry (or false/nil: none).
local function parse_extras(value)
  if not value then return {idle = false} end
  local started, idle, device = string.match(value, '^(%d+) ([01]) (.*)$')
  if not started then return {idle = false} end
  return {started = tonumber(started), idle = idle == '1', device = device ~= '' and device or nil}
end

local function format_extras(extras)
  return string.format('%d', extras.started) .. ' ' .. (extras.idle and '1' or '0') .. ' ' .. (extras.device or '')
end

-- The extras of each of the sessions `ids`, in order.
local function extras_of(statuses, user_id, ids)
  if #ids == 0 then return {} end
  local kept = statuses.live_kept and statuses.live_kept[user_id]
  local key = kept and table.concat(ids, '\0')
  if kept and kept.ids == key then return kept.extras end
  local values = redis.call('HMGET', extras_key(statuses, user_id), unpack(ids))
  local out = {}
  for i = 1, #ids do out[i] = parse_extras(values[i]) end
  if kept then kept.ids, kept.extras = key, out end
  return out
end

-- Whether every one of the user's live sessions (`live`: {id, activity_ms, ...}) is idle.
local function all_idle(statuses, user_id, live)
  if #live == 0 then return false end
  local ids = {}
  for i = 1, #live, 2 do ids[#ids + 1] = live[i] end
  for _, extras in ipairs(extras_of(statuses, user_id, ids)) do
    if not extras.idle then return false end
  end
  return true
end

-- The status from liveness, choice and sessions (SEMANTICS "Status").
local function status_from(online, chosen, idle)
  if not online then return 'OFFLINE' end
  if chosen ~= 'AUTO' then return chosen end
  if idle then return 'AWAY' end
  return 'ONLINE'
end

-- The user's live sessions, {id, activity_ms, ...}: from their sessions key, or their online
-- entry alone for a keyless default session (includes/activity.lua); and, from a sessions
-- key, their scores as kept (live_sessions).
local function live_of_now(statuses, user_id, online_key, now)
  local sessions_key = statuses.names.sessions_prefix .. user_id
  if redis.call('EXISTS', sessions_key) == 1 then
    return live_sessions(statuses.leases, {sessions = sessions_key}, now, statuses.window_ms)
  end
  local expiry = live_expiry(statuses.leases, online_key, user_id, now)
  if expiry then return {'default', held_slot(expiry) and now or expiry - statuses.window_ms} end
  return {}
end

-- The same, read once per user in a script that called live_written: {id, activity_ms, ...},
-- not to be changed by the caller.
local function live_of(statuses, user_id, online_key, now)
  local kept = statuses.live_kept
  if not kept or online_key ~= statuses.online_key or now ~= statuses.now then
    return (live_of_now(statuses, user_id, online_key, now))
  end
  if not kept[user_id] then
    local live, scores = live_of_now(statuses, user_id, online_key, now)
    kept[user_id] = {live = live, scores = scores}
  end
  return kept[user_id].live
end

-- Says that the script has made its last write of its users' sessions keys, online entries
-- and sessions' extras: from then on live_of reads a user's live sessions once, and extras_of
-- their extras once (a script that knows statuses reads them again for each status, look and
-- index record it makes after its changes).
local function live_written(statuses)
  statuses.live_kept = {}
end

-- The user's status as backends and the user see it, with their choices: status, choices.
local function status_of(statuses, user_id, online_key, now)
  local choices = choices_of(statuses, user_id, now)
  local live = live_of(statuses, user_id, online_key, now)
  return status_from(#live > 0, choices.chosen, all_idle(statuses, user_id, live)), choices
end

-- The user's status as if the sessions `ending` (ids whose extras are still kept) were live
-- too: what subscribers were told while they were, to compare with the status once they end.
local function status_with(statuses, user_id, ending)
  local now = statuses.now
  local choices = choices_of(statuses, user_id, now)
  local live = {unpack(live_of(statuses, user_id, statuses.online_key, now))}
  for _, id in ipairs(ending) do
    live[#live + 1], live[#live + 2] = id, now
  end
  return status_from(#live > 0, choices.chosen, all_idle(statuses, user_id, live))
end

-- Drops the extras of sessions no longer in the user's sessions key, and gives the extras
-- key the sessions key's expiry: `expire_at` (ms) when the caller has just set it, -1 when it
-- has just taken it away (PERSIST), -2 when the caller knows the key gone, else as read.
-- A user left with no sessions key (their last session ended) loses the extras key whole.
local function tidy_extras(statuses, user_id, expire_at)
  local key = extras_key(statuses, user_id)
  if expire_at == -2 then
    redis.call('DEL', key)
    return
  end
  -- Its fields read at once (one a session of the user), none meaning no key to tidy.
  local ids = redis.call('HKEYS', key)
  if #ids == 0 then return end
  local sessions_key = statuses.names.sessions_prefix .. user_id
  local ttl = expire_at == -1 and -1 or not expire_at and redis.call('PTTL', sessions_key)
  if ttl == -2 then
    redis.call('DEL', key)
    return
  end
  local scores = redis.call('ZMSCORE', sessions_key, unpack(ids))
  for i = 1, #ids do
    if not scores[i] then redis.call('HDEL', key, ids[i]) end
  end
  if expire_at and expire_at ~= -1 then
    redis.call('PEXPIREAT', key, expire_at)
    return
  end
  if ttl == -1 then
    redis.call('PERSIST', key)
  else
    redis.call('PEXPIRE', key, ttl)
  end
end

-- The custom status as an event or reply carries it: {text, emoji or false, expires_ms or
-- false}, or false for none.
local function custom_value(custom)
  if not custom then return false end
  return {custom.text, custom.emoji, custom.expires}
end

-- When the user turns AWAY by time (awayexp's score, track_activity), or nil: read once per
-- call, then known from the call's writes of it, each made by away_written.
local function away_due(statuses, user_id)
  local known = statuses.away[user_id]
  if known == nil then
    known = tonumber(redis.call('ZSCORE', statuses.names.away_expiries, user_id)) or false
    statuses.away[user_id] = known
  end
  return known or nil
end

-- Writes when the user turns AWAY by time (ms), or (false) that nothing is due.
local function away_written(statuses, user_id, due)
  if due then
    redis.call('ZADD', statuses.names.away_expiries, due, user_id)
  else
    redis.call('ZREM', statuses.names.away_expiries, user_id)
  end
  statuses.away[user_id] = due
end

-- Kinds whose events carry the user's look; the others (FRIENDS, REPLACED, REVOKED) are the
-- service's own.
local LOOKED = {ONLINE = true, OFFLINE = true, KICKED = true, STATUS = true}

-- Fills in an event's look from the user's state after the script's changes (an event
-- followed by another change of the same user in the same script says by its own `online`
-- whether they were live).
-- The look of an event of `kind` of the user (online 0|1 after it), from their state now:
-- {status, custom, others_kind, visible, invisible}, as add_event takes it.
local function look_of(statuses, kind, user_id, online)
  local status, choices
  local now = statuses.now
  if online == 1 then
    status, choices = status_of(statuses, user_id, statuses.online_key, now)
  else
    status, choices = 'OFFLINE', choices_of(statuses, user_id, now)
  end
  -- The event tells the look of now: a custom status that ended, and a turn to AWAY by time,
  -- are announced by it, not by the sweep again.
  if choices.ended then
    redis.call('HDEL', status_key(statuses, user_id), 'text', 'emoji', 'expires')
    choices_changed(statuses, user_id)
    redis.call('ZREM', status_expiry_key(statuses), user_id)
  end
  local away = away_due(statuses, user_id)
  if away and away < now then away_written(statuses, user_id, false) end
  local invisible = choices.chosen == 'INVISIBLE'
  return {status, custom_value(choices.custom), invisible and '' or kind, choices.visible,
    invisible and 1 or 0}
end

local function fill_look(statuses, events, i)
  local kind, user_id, online = events[i], events[i + 1], events[i + 4]
  if not LOOKED[kind] then
    events[i + 5] = online == 1 and 'ONLINE' or 'OFFLINE'
    return
  end
  local look = look_of(statuses, kind, user_id, online)
  events[i + 5], events[i + 6], events[i + 7] = look[1], look[2], look[3]
  events[i + 8], events[i + 9] = look[4], look[5]
end

-- Records that the user came online through activity at t_ms: their onlineSince.
local function came_online(statuses, user_id, t_ms)
  redis.call('ZADD', since_key(statuses), string.format('%d', -t_ms), user_id)
  since_changed(statuses, user_id, t_ms)
  if statuses.since_written then statuses.since_written[user_id] = t_ms end
end

-- Marks the user for the online list's indexes, which index_flush (includes/online_index.lua)
-- brings up to date before the script returns.
local function index_mark(statuses, user_id)
  if statuses.marked[user_id] then return end
  statuses.marked[user_id] = true
  statuses.dirty[#statuses.dirty + 1] = user_id
end

-- Records that the user went offline: their onlineSince goes, and is kept for the event
-- that ends their online period (end_periods, includes/online_time.lua).
local function went_offline(statuses, user_id)
  index_mark(statuses, user_id)
  -- As choices_of read it, if it did (a write of it since would have said so).
  local kept = statuses.choices and statuses.choices[user_id]
  local since
  if kept then
    since = kept.since
  else
    since = tonumber(redis.call('ZSCORE', since_key(statuses), user_id))
    since = since and -since
  end
  if statuses.since_written then statuses.since_written[user_id] = false end
  if not since then return end
  statuses.period_starts[user_id] = since
  redis.call('ZREM', since_key(statuses), user_id)
  since_changed(statuses, user_id, nil)
end

local function hidden_key(statuses) return statuses.names.hidden end
local function away_expiry_key(statuses) return statuses.names.away_expiries end

-- Notes when the user turns AWAY by time alone: when their newest active session that lives
-- by time expires while an idle one stays live (and no active held session keeps them).
-- Called after live_written, it reads the live sessions once with the reads that follow.
local function track_activity(statuses, user_id)
  local now = statuses.now
  -- The live sessions with their scores as kept. A user without a sessions key has one
  -- session, never idle: nothing to note (an entry left from before is dropped by the sweep,
  -- which checks).
  local live, scores
  local sessions_key = statuses.names.sessions_prefix .. user_id
  if statuses.live_kept then
    live = live_of(statuses, user_id, statuses.online_key, now)
    scores = statuses.live_kept[user_id].scores
  elseif redis.call('EXISTS', sessions_key) == 1 then
    live, scores = live_sessions(statuses.leases, {sessions = sessions_key}, now, statuses.window_ms)
  end
  if not scores then return end
  local ids = {}
  for i = 1, #live, 2 do ids[#ids + 1] = live[i] end
  local some_idle, active_until, active_held = false, nil, false
  for i, extras in ipairs(extras_of(statuses, user_id, ids)) do
    if extras.idle then
      some_idle = true
    elseif held_slot(scores[i]) then
      active_held = true
    else
      active_until = math.max(active_until or 0, scores[i] + statuses.window_ms)
    end
  end
  if some_idle and active_until and not active_held then
    away_written(statuses, user_id, active_until)
  else
    -- One that is due stays for the sweep: the turn to AWAY it notes is not announced yet.
    local due = away_due(statuses, user_id)
    if due and due >= now then away_written(statuses, user_id, false) end
  end
end

-- After live_written: keeps the user's live sessions as live_of_now would read them, from what
-- refresh_online returned (online 0|1, and the sessions key as it left it and read it): none
-- once offline (the key deleted, the online entry gone).
local function live_refreshed(statuses, user, user_id, now, window_ms, online, rows)
  if user.online ~= statuses.online_key or now ~= statuses.now or window_ms ~= statuses.window_ms then return end
  local live, scores = {}, nil
  if online == 1 then live, scores = live_of_rows(statuses.leases, rows, now, window_ms) end
  statuses.live_kept[user_id] = {live = live, scores = scores}
end

-- refresh_online (includes/connections.lua) as the script's last write of the user's sessions,
-- online entry and extras (live_written), then track_activity from the sessions read once for
-- it and what follows. Returns 1 if the user is online, else 0.
local function refresh_last(statuses, user, user_id, now, window_ms, ended_ms)
  statuses.track_later = true
  local online, rows = refresh_online(user, user_id, now, window_ms, ended_ms)
  statuses.track_later = false
  live_written(statuses)
  live_refreshed(statuses, user, user_id, now, window_ms, online, rows)
  track_activity(statuses, user_id)
  return online
end

-- A turn to AWAY by time (track_activity) that the sweep has not announced yet is announced
-- first, into `events` with the look of now, so that a change that follows is told from it.
local function settle_away(statuses, user_id, events)
  local now = statuses.now
  local due = away_due(statuses, user_id)
  if not due or due >= now then return end
  away_written(statuses, user_id, false)
  local status, choices = status_of(statuses, user_id, statuses.online_key, now)
  if status == 'AWAY' and choices.chosen == 'AUTO' then
    add_event(events, 'STATUS', user_id, due, '', 1, look_of(statuses, 'STATUS', user_id, 1))
  end
end

-- Copies the user's online entry into `hidden` if they chose INVISIBLE (set_status takes it
-- out when they stop).
local function sync_hidden(statuses, user_id)
  if redis.call('SISMEMBER', statuses.names.invisible, user_id) == 0 then return end
  local score = online_score(statuses.online_key, user_id)
  online_written(hidden_key(statuses), user_id, score or false)
  if score then
    redis.call('ZADD', hidden_key(statuses), score, user_id)
  else
    redis.call('ZREM', hidden_key(statuses), user_id)
  end
end

-- includes/online_time.lua's functions {end_periods, forget_online_time}, made only when a
-- call ends an online period: made at the top of every script that knows statuses, its locals
-- would slow the making of each function after them (Lua finds a function's every captured
-- local among the ones captured before it, one by one), though few calls end a period. (A
-- script that includes it before this file has them at its top already.)
local function online_time_of()
--- @include "online_time"
  return {end_periods = end_periods, forget_online_time = forget_online_time}
end

-- What every script that changes or reads statuses passes to this file's functions (as their
-- first parameter, `statuses`), made first: the shard's names (its decoded `shard` argument),
-- its online key, the window (ms), the script's `now` and its leases (includes/live.lua,
-- lease_book); and what the includes that do not
-- know statuses call through it (includes/live.lua, `statuses` of a user's keys; fill for
-- announce_all's `looks`, includes/events.lua, which keeps in it the versions its events gave
-- their users, `versions`, for presence_entry). With `remember`, choices_of reads a user's
-- choices once per call: for a script whose only writes of them are this file's (came_online,
-- went_offline, look_of), which read them anew after (the onlineSince these two write is
-- known without a read).
local function statuses_of(names, online_key, window_ms, now, leases, remember)
  -- Every field named here, those set later as false: a table that grows is made anew.
  local statuses = {names = names, online_key = online_key, window_ms = window_ms, now = now,
    leases = leases, period_starts = {}, dirty = {}, marked = {}, away = {}, seen_scores = {},
    choices = remember and {} or nil, since_written = remember and {} or nil, fill = false,
    end_periods = false, offline = false, tidy = false, status = false, look = false,
    online_moved = false, live_kept = false, track_later = false, versions = false}
  statuses.fill = function(events, i) fill_look(statuses, events, i) end
  statuses.end_periods = function(events, size)
    -- Only a user whose onlineSince went_offline took can have a period to end.
    if next(statuses.period_starts) then
      online_time_of().end_periods(names, statuses.period_starts, events, size, index_of)
    end
  end
  statuses.offline = function(user_id) went_offline(statuses, user_id) end
  statuses.tidy = function(user_id, expire_at) tidy_extras(statuses, user_id, expire_at) end
  statuses.status = function(user_id, ending) return status_with(statuses, user_id, ending) end
  statuses.look = function(kind, user_id, online) return look_of(statuses, kind, user_id, online) end
  statuses.online_moved = function(user_id)
    index_mark(statuses, user_id)
    sync_hidden(statuses, user_id)
    -- A script that calls track_activity itself once its writes are done sets track_later.
    if not statuses.track_later then track_activity(statuses, user_id) end
  end
  return statuses
end

-- The user's lastSeen (ms) as backends and the user see it, or -1 if not kept: the present
-- while held, else their last activity (for a user held under several leases that have all
-- lapsed, unswept, the last lapse: what the sweep will record).
local function last_seen_of(statuses, user_id, last_seen_key, now, retention_ms)
  local score = tonumber(redis.call('ZSCORE', last_seen_key, user_id))
  -- Kept for index_sync, given a presence_entry read after the script's changes.
  if last_seen_key == statuses.names.last_seen then statuses.seen_scores[user_id] = score or false end
  if not score then return -1 end
  local last_seen = shown_last_seen(statuses.leases, score, now)
  if held_slot(-score) == 0 then
    local sessions_key = statuses.names.sessions_prefix .. user_id
    local held = redis.call('ZRANGEBYSCORE', sessions_key, string.format('%d', HELD), '+inf', 'WITHSCORES')
    local lapsed = 0
    for j = 2, #held, 2 do
      local slot = tonumber(held[j]) - HELD
      if slot_live(statuses.leases, slot, now) then
        lapsed = now
        break
      end
      lapsed = math.max(lapsed, lapse_of(statuses.leases, slot) or now)
    end
    if #held > 0 then
      -- As the sweep will record it: the last lapse, or a touched session's later activity.
      local touched = redis.call('ZREVRANGEBYSCORE', sessions_key, string.format('(%d', HELD),
        now - statuses.window_ms, 'WITHSCORES', 'LIMIT', 0, 1)
      last_seen = math.max(lapsed, tonumber(touched[2]) or 0)
    end
  end
  if last_seen < now - retention_ms then return -1 end
  return last_seen
end

-- One user's presence, read at `now` (gql_presence/store/shard.py reads it):
-- {last_seen_ms or -1, {session_id, activity_ms, started_ms, idle 0|1, device or "", ...},
--  status, chosen, custom (custom_value), visible, hidden_seen_ms or -1, since_ms or -1,
--  version (includes/feed.lua; 0 for none)}:
-- everything as backends and the user see it; the store hides what a reader may not see.
local function presence_entry(statuses, user_id, last_seen_key, now, retention_ms)
  local choices = choices_of(statuses, user_id, now)
  local live = live_of(statuses, user_id, statuses.online_key, now)
  local ids = {}
  for i = 1, #live, 2 do ids[#ids + 1] = live[i] end
  local extras = extras_of(statuses, user_id, ids)
  local sessions, idle = {}, #ids > 0
  for i, id in ipairs(ids) do
    local e = extras[i]
    if not e.idle then idle = false end
    local n = #sessions
    sessions[n + 1], sessions[n + 2] = id, live[2 * i]
    sessions[n + 3] = e.started or choices.since or live[2 * i]
    sessions[n + 4], sessions[n + 5] = e.idle and 1 or 0, e.device or ''
  end
  return {
    last_seen_of(statuses, user_id, last_seen_key, now, retention_ms), sessions,
    status_from(#ids > 0, choices.chosen, idle), choices.chosen, custom_value(choices.custom),
    choices.visible, choices.hidden_seen or -1, #ids > 0 and choices.since or -1,
    statuses.versions and statuses.versions[user_id] or version_of(statuses.names, user_id, now),
  }
end

-- How many users `online_key` holds online at `now` (online_count), less, when `hide`, those
-- who chose INVISIBLE: O(log n), and O(log n) per lapsed lease.
local function listed_online_count(statuses, online_key, now, hide)
  local total = online_count(statuses.leases, online_key, now)
  if hide then total = total - online_count(statuses.leases, hidden_key(statuses), now) end
  return total
end

-- 1 if the user is online at `now` and, when `hide`, did not choose INVISIBLE; else nil.
local function listed_online(statuses, online_key, user_id, now, hide)
  if not live_expiry(statuses.leases, online_key, user_id, now) then return nil end
  if hide and redis.call('HGET', status_key(statuses, user_id), 'chosen') == 'INVISIBLE' then return nil end
  return 1
end

--- @include "online_index"
