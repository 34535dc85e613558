-- When presence is live, written once: a session is live through its last activity plus the
-- window inclusive, and a user's online entry is scored by that moment (the expiry, ms).

-- Whether something that stays live through `expiry_ms` (a number, or nil) is live at `now`.
local function is_live(expiry_ms, now)
  return expiry_ms ~= nil and expiry_ms >= now
end

-- The expiry of the user's online entry (ms) if it says they are online at `now`, else nil.
local function live_expiry(online_key, user_id, now)
  local expiry = tonumber(redis.call('ZSCORE', online_key, user_id))
  if is_live(expiry, now) then return expiry end
  return nil
end
