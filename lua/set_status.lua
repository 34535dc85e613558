--[[
  set_status: one change a user makes to how they appear: their chosen status, their custom
  status, who may see their lastSeen, or whether they are idle on one session.

  KEYS[1]  last_seen  ZSET  member=user_id  score=-(last activity, ms), or -(held score)
  KEYS[2]  online     ZSET  member=user_id  score=newest live session's expiry, ms, or a held
                            score (includes/live.lua)
  KEYS[3]  leases     ZSET  member=slot  score=the moment the lease lapses, ms
  KEYS[4]  sessions   ZSET  member=session_id  score=last activity, ms, or a held score (this
                            user's)
  KEYS[5]  revoked    ZSET  member=session_id  score=end of revocation, ms (this user's)
  KEYS[6]  conn       HASH  session_id -> "generation slot" of this user's held sessions
  KEYS[7]  user_index HASH  user_id -> bit index in the day bitmaps
  KEYS[8]  invisible  SET   the users who chose INVISIBLE
  ARGV[1]  user_id       string
  ARGV[2]  change        "chosen", "custom", "visible" or "idle"
  ARGV[3..5]  values     chosen:  AUTO|AWAY|BUSY|INVISIBLE
                         custom:  text ("" clears it), emoji ("" for none), expires_ms ("" for
                                  until changed)
                         visible: EVERYONE|FRIENDS|NOBODY
                         idle:    session_id, 0|1
  ARGV[6]  shard  packed once per shard by the store (Shard.options, includes/options.lua): the
                  deployment's options and the shard's names that this script reads: window_ms,
                  retention_ms, the names of includes/status.lua (status_prefix, extras_prefix,
                  since, invisible, hidden, status_expiries, away_expiries), channel,
                  user_channel_prefix, publish, and the names of a lease's keys
                  (includes/connections.lua) (a name ending in ':' is followed by a user id, in the
                  hash tag of KEYS)
  Returns  the user's presence_entry (includes/status.lua) after the change
  Events   OFFLINE (or STATUS) for a presence that expired or lapsed unswept, and STATUS for a
           custom status that ended unswept (before anything else, as the sweep
           would have); STATUS when the user's status or custom status changes as backends
           and the user see it, or as other end users see it (ONLINE or OFFLINE to them when choosing or leaving
           INVISIBLE while live); of kind "" when only other end users see a change (a custom
           status hidden or shown by INVISIBLE); nothing when what is set was set already
  Errors   "EXPIRES_NOT_AHEAD" (expires_ms not after now, or past the retention),
           "SESSION_REVOKED", "SESSION_NOT_LIVE"; nothing is written when one is returned
  Feed     each change of a kind the feed keeps goes in the shard's feed, with the user's
           or the place's version, in this call (includes/feed.lua: its names and options
           are in `shard`)
  Indexes  the online list's, kept for each user changed (includes/online_index.lua: its keys
           are named from index_prefix and last_seen in `shard`, in the hash tag of KEYS)
]]
--- @include "clock"
--- @include "activity"
--- @include "status"
--- @include "options"
local shard = shard_options(ARGV[6])
local last_seen_key, online_key = KEYS[1], KEYS[2]
local leases = lease_book(KEYS[3], shard)
local user_id, change = ARGV[1], ARGV[2]
local window_ms, retention_ms = tonumber(shard.window_ms), tonumber(shard.retention_ms)
local channel = {shard.channel, shard.user_channel_prefix, shard.publish, feed_of(shard)}

local now = now_ms()
local statuses = statuses_of(shard, online_key, window_ms, now, leases)
local key = status_key(statuses, user_id)

-- What backends and the user see, and what other end users see: {status, custom, invisible}.
local function looks()
  local status, choices = status_of(statuses, user_id, online_key, now)
  local invisible = choices.chosen == 'INVISIBLE'
  local custom = custom_value(choices.custom)
  local others = {invisible and 'OFFLINE' or status, not invisible and custom}
  return {status, custom, choices.visible}, others, invisible
end

local function same_custom(a, b)
  if not a or not b then return a == b end
  return a[1] == b[1] and a[2] == b[2] and a[3] == b[3]
end

-- Refusals first, before anything is written.
if change == 'custom' then
  local expires = tonumber(ARGV[5])
  if expires and (expires <= now or expires > now + retention_ms) then
    return redis.error_reply('EXPIRES_NOT_AHEAD')
  end
elseif change == 'idle' then
  local session_id = ARGV[3]
  local revoked_until = redis.call('ZSCORE', KEYS[5], session_id)
  if revoked_until and tonumber(revoked_until) > now then return redis.error_reply('SESSION_REVOKED') end
  local sessions_key = KEYS[4]
  local score = tonumber(redis.call('ZSCORE', sessions_key, session_id))
  if session_id == DEFAULT_SESSION and redis.call('EXISTS', sessions_key) == 0 then
    local expiry = live_expiry(leases, online_key, user_id, now)
    score = expiry and expiry - window_ms
  end
  if not (score and session_live(leases, score, now, window_ms)) then return redis.error_reply('SESSION_NOT_LIVE') end
end

-- Whatever ended unswept (an expired presence, a lapsed lease, a turn to AWAY by time) is
-- announced first, as the
-- sweep would have, so that the change is told from what subscribers were told last.
local user = {online = online_key, last_seen = last_seen_key, sessions = KEYS[4],
  conn = KEYS[6], index = KEYS[7], statuses = statuses}
local settled = {}
settle(leases, user, channel, user_id, now, window_ms, settled)
settle_away(statuses, user_id, settled)
announce_all(channel, settled, statuses)
-- Likewise a custom status that ended.
if choices_of(statuses, user_id, now).ended then
  announce(channel, 'STATUS', user_id, now, '', #live_of(statuses, user_id, online_key, now) > 0 and 1 or 0,
    nil, statuses)
end
local own_before, others_before, invisible_before = looks()

if change == 'chosen' then
  local chosen = ARGV[3]
  if chosen == 'INVISIBLE' and not invisible_before then
    local last_seen = last_seen_of(statuses, user_id, last_seen_key, now, retention_ms)
    if last_seen >= 0 then
      redis.call('HSET', key, 'hidden_seen', string.format('%d', last_seen))
    else
      redis.call('HDEL', key, 'hidden_seen')
    end
  end
  if chosen == 'AUTO' then redis.call('HDEL', key, 'chosen') else redis.call('HSET', key, 'chosen', chosen) end
  if chosen == 'INVISIBLE' then
    redis.call('SADD', KEYS[8], user_id)
    sync_hidden(statuses, user_id)
  else
    redis.call('SREM', KEYS[8], user_id)
    redis.call('ZREM', hidden_key(statuses), user_id)
    online_written(hidden_key(statuses), user_id, false)
  end
elseif change == 'custom' then
  local text, emoji, expires = ARGV[3], ARGV[4], tonumber(ARGV[5])
  if expires and (expires <= now or expires > now + retention_ms) then
    return redis.error_reply('EXPIRES_NOT_AHEAD')
  end
  redis.call('HDEL', key, 'text', 'emoji', 'expires')
  redis.call('ZREM', status_expiry_key(statuses), user_id)
  if text ~= '' then
    redis.call('HSET', key, 'text', text)
    if emoji ~= '' then redis.call('HSET', key, 'emoji', emoji) end
    if expires then
      redis.call('HSET', key, 'expires', ARGV[5])
      redis.call('ZADD', status_expiry_key(statuses), expires, user_id)
    end
  end
elseif change == 'visible' then
  if ARGV[3] == 'EVERYONE' then redis.call('HDEL', key, 'visible') else redis.call('HSET', key, 'visible', ARGV[3]) end
elseif change == 'idle' then
  local session_id, idle = ARGV[3], ARGV[4] == '1'
  local revoked_until = redis.call('ZSCORE', KEYS[5], session_id)
  if revoked_until and tonumber(revoked_until) > now then return redis.error_reply('SESSION_REVOKED') end
  local sessions_key = KEYS[4]
  local keyless = session_id == DEFAULT_SESSION and redis.call('EXISTS', sessions_key) == 0
  if keyless then keep_default_in_key(leases, online_key, sessions_key, user_id, window_ms, now) end
  local score = tonumber(redis.call('ZSCORE', sessions_key, session_id))
  if not (score and session_live(leases, score, now, window_ms)) then return redis.error_reply('SESSION_NOT_LIVE') end
  if keyless then expire_with_newest(sessions_key, score, window_ms) end
  local extras = parse_extras(redis.call('HGET', extras_key(statuses, user_id), session_id))
  extras.started = extras.started or choices_of(statuses, user_id, now).since or now
  extras.idle = idle
  redis.call('HSET', extras_key(statuses, user_id), session_id, format_extras(extras))
  tidy_extras(statuses, user_id)
  track_activity(statuses, user_id)
end

local own_after, others_after, invisible_after = looks()
local own_changed = own_before[1] ~= own_after[1] or not same_custom(own_before[2], own_after[2])
local others_changed = others_before[1] ~= others_after[1]
  or not same_custom(others_before[2], others_after[2])
if own_changed or others_changed then
  local others_kind = ''
  if others_changed then
    others_kind = 'STATUS'
    if others_before[1] == 'OFFLINE' and others_after[1] ~= 'OFFLINE' then others_kind = 'ONLINE' end
    if others_before[1] ~= 'OFFLINE' and others_after[1] == 'OFFLINE' then others_kind = 'OFFLINE' end
  end
  local online = own_after[1] ~= 'OFFLINE' and 1 or 0
  local look = {own_after[1], own_after[2], others_kind, own_after[3], invisible_after and 1 or 0}
  -- Backends and the user are told only of what changed as they see it.
  announce(channel, own_changed and 'STATUS' or '', user_id, now, '', online, look, statuses)
end
index_mark(statuses, user_id)
index_flush(statuses)
return presence_entry(statuses, user_id, last_seen_key, now, retention_ms)
