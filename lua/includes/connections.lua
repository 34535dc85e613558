-- Connection-bound sessions (lua/open_session.lua): a session held by a live connection
-- expires conn_ttl_ms after its last renewal instead of window_ms after its last activity.
-- Its score in the user's sessions key is that expiry minus the window, so that the one test
-- of liveness, score + window >= now, holds for both kinds of session (and the user's online
-- entry, the newest score plus the window, is their newest expiry).
--
-- The user's conn key (HASH) marks them: session_id -> "generation score renewed_ms", the
-- holder (a number unique in the shard), the session's score when the entry was written, and
-- its last renewal (its activity, as listed). An entry whose score is no longer the session's
-- (the session was removed, or expired and was touched again) is stale and means nothing, so
-- entries need no clean-up besides the key's own expiry.

-- The session's valid conn entry {generation=string, score=number, renewed=number}, or nil.
local function conn_entry(sessions_key, conn_key, session_id)
  local value = redis.call('HGET', conn_key, session_id)
  if not value then return nil end
  local generation, score, renewed = string.match(value, '^(%d+) (%S+) (%S+)$')
  local current = tonumber(redis.call('ZSCORE', sessions_key, session_id))
  if current == nil or tonumber(score) ~= current then return nil end
  return {generation = generation, score = current, renewed = tonumber(renewed)}
end

-- The conn entry of the session if it is connection-bound and live (score >= cutoff_ms).
local function live_conn_entry(sessions_key, conn_key, session_id, cutoff_ms)
  local entry = conn_entry(sessions_key, conn_key, session_id)
  if entry and entry.score >= cutoff_ms then return entry end
  return nil
end

-- Writes the conn entry of a session whose score was just set.
local function write_conn_entry(conn_key, session_id, generation, score, renewed_ms)
  redis.call('HSET', conn_key, session_id, generation .. ' ' .. string.format('%d', score) .. ' ' .. string.format('%d', renewed_ms))
end

-- Live sessions as ZRANGEBYSCORE ... WITHSCORES lists them, {id, score, ...}, with the last
-- renewal of each connection-bound one in place of its score: its activity.
local function with_renewals(live, conn_key)
  if #live == 0 or redis.call('EXISTS', conn_key) == 0 then return live end
  for i = 1, #live, 2 do
    local value = redis.call('HGET', conn_key, live[i])
    if value then
      local _, score, renewed = string.match(value, '^(%d+) (%S+) (%S+)$')
      if tonumber(score) == tonumber(live[i + 1]) then live[i + 1] = renewed end
    end
  end
  return live
end
