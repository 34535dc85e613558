--- @include "live"
-- Whether member a sorts after b the way Redis orders members of equal score: bytes
-- compared one by one, then the shorter first. (Lua's own '<' follows the server's locale.)
local function sorts_after(a, b)
  for i = 1, math.min(#a, #b) do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then return x > y end
  end
  return #a > #b
end

-- The rank of the first entry of ZSET `key` that comes after (score, member) in
-- (score, member) order, whether or not that entry is still there: O(log n) calls.
local function rank_after(key, score, member)
  local lo = redis.call('ZCOUNT', key, '-inf', '(' .. score)
  local hi = redis.call('ZCOUNT', key, '-inf', score)
  while lo < hi do
    local mid = math.floor((lo + hi) / 2)
    if sorts_after(redis.call('ZRANGE', key, mid, mid)[1], member) then
      hi = mid
    else
      lo = mid + 1
    end
  end
  return lo
end

-- Walks ZSET `key` up from rank `start` while scores are <= max_score, and keeps the entries
-- for which online_of(member) is not nil, until `limit` are kept. `jump(score)`, if given,
-- may name a rank to go on from instead (past entries known to be left out, whatever their
-- number). Returns {member, score, online, member, score, online, ...}.
local function collect(key, start, max_score, limit, online_of, jump)
  local out, kept = {}, 0
  local batch = math.max(limit, 16)
  while kept < limit do
    local rows = redis.call('ZRANGE', key, start, start + batch - 1, 'WITHSCORES')
    if #rows == 0 then return out end
    local next_start = start + batch
    for i = 1, #rows, 2 do
      local score = tonumber(rows[i + 1])
      if score > max_score then return out end
      local to = jump and jump(score)
      if to then
        next_start = to
        break
      end
      local online = online_of(rows[i])
      if online ~= nil then
        out[#out + 1] = rows[i]
        out[#out + 1] = rows[i + 1]
        out[#out + 1] = online
        kept = kept + 1
        if kept == limit then return out end
      end
    end
    start = next_start
  end
  return out
end

-- The page reply: {total, has_next 0|1, member, score, last_seen_ms, online 0|1, ...}, from
-- up to first + 1 collected entries of a ZSET scored by -(last seen, ms) or -(held score):
-- the score is the entry's place in every list (its cursor), and a held entry shows
-- `held_ms` as its last seen.
local function page_reply(total, first, rows, held_ms)
  local reply = {total, 0}
  if #rows > first * 3 then reply[2] = 1 end
  for i = 1, math.min(#rows, first * 3), 3 do
    local score = tonumber(rows[i + 1])
    reply[#reply + 1] = rows[i]
    reply[#reply + 1] = rows[i + 1]
    reply[#reply + 1] = held_slot(-score) and held_ms or -score
    reply[#reply + 1] = rows[i + 2]
  end
  return reply
end

-- Where in a ZSET scored by -(last seen) to go on from when at `score`: past the whole run
-- of entries held under a lease that lapsed (includes/live.lua), or nil to go on as usual.
local function past_lapsed(leases, key, score, now)
  local slot = held_slot(-score)
  if slot == nil or slot == 0 or slot_live(leases, slot, now) then return nil end
  return redis.call('ZCOUNT', key, '-inf', string.format('%d', score))
end

-- Where a page starts: after the cursor's (score, member) if one was given, else at rank 0.
local function page_start(key, after_score, after_member)
  if after_score == '' then return 0 end
  return rank_after(key, after_score, after_member)
end
