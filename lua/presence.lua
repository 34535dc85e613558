--[[
  presence: the presence of each of several users, read at one moment.

  KEYS[1]        last_seen  ZSET  member=user_id     score=-(last activity, ms), or -(held score)
  KEYS[2]        online     ZSET  member=user_id     score=newest live session's expiry, ms, or
                                  a held score (includes/live.lua)
  KEYS[3..n+2]   sessions   ZSET  member=session_id  score=last activity, ms, or a held score
                                  (user i's; a user whose only session is "default" may have
                                  none, see includes/activity.lua)
  KEYS[n+3]      leases     ZSET  member=slot  score=the moment the lease lapses, ms
  ARGV[1]  window_ms     int ms
  ARGV[2]  retention_ms  int ms: a last activity older than this is no longer kept
  ARGV[3..n+2]  user_ids string
  Returns  {{last_seen_ms or -1, {session_id, last_activity_ms, ...}}, ...}: one entry per
           user, the live sessions in no particular order; a held session's activity, and its
           user's lastSeen, is the present; a session whose lease lapsed is not live, and its
           user was last seen when it lapsed
]]
--- @include "clock"
--- @include "activity"
local last_seen_key, online_key = KEYS[1], KEYS[2]
local window_ms, retention_ms = tonumber(ARGV[1]), tonumber(ARGV[2])
local n = #ARGV - 2
leases.key = KEYS[n + 3]

local now = now_ms()
local reply = {}
for i = 3, #ARGV do
  local user_id, sessions_key = ARGV[i], KEYS[i]
  local score = tonumber(redis.call('ZSCORE', last_seen_key, user_id))
  local last_seen = -1
  if score then last_seen = shown_last_seen(score, now) end
  local live = {}
  if redis.call('EXISTS', sessions_key) == 1 then
    live = live_sessions({sessions = sessions_key}, now, window_ms)
    if score and held_slot(-score) == 0 then
      -- Held under several leases, or held and touched: the present while one is held,
      -- else when the last of their leases lapsed (what the sweep will record).
      local held = redis.call('ZRANGEBYSCORE', sessions_key, string.format('%d', HELD), '+inf', 'WITHSCORES')
      local lapsed = 0
      for j = 2, #held, 2 do
        local slot = tonumber(held[j]) - HELD
        if slot_live(slot, now) then
          lapsed = now
          break
        end
        lapsed = math.max(lapsed, lapse_of(slot) or now)
      end
      if #held > 0 then last_seen = lapsed end
    end
  else
    local expiry = live_expiry(online_key, user_id, now)
    if expiry then live = {DEFAULT_SESSION, expiry - window_ms} end
  end
  if last_seen < now - retention_ms then last_seen = -1 end
  reply[#reply + 1] = {last_seen, live}
end
return reply
