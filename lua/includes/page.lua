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
-- for which online_of(member) is not nil, until `limit` are kept.
-- Returns {member, score, online, member, score, online, ...}.
local function collect(key, start, max_score, limit, online_of)
  local out, kept = {}, 0
  local batch = math.max(limit, 16)
  while kept < limit do
    local rows = redis.call('ZRANGE', key, start, start + batch - 1, 'WITHSCORES')
    if #rows == 0 then return out end
    for i = 1, #rows, 2 do
      local score = tonumber(rows[i + 1])
      if score > max_score then return out end
      local online = online_of(rows[i])
      if online ~= nil then
        out[#out + 1] = rows[i]
        out[#out + 1] = rows[i + 1]
        out[#out + 1] = online
        kept = kept + 1
        if kept == limit then return out end
      end
    end
    start = start + batch
  end
  return out
end

-- The page reply: {total, has_next 0|1, member, last_seen_ms, online 0|1, ...}, from up to
-- first + 1 collected entries of a ZSET scored by -(last seen, ms).
local function page_reply(total, first, rows)
  local reply = {total, 0}
  if #rows > first * 3 then reply[2] = 1 end
  for i = 1, math.min(#rows, first * 3), 3 do
    reply[#reply + 1] = rows[i]
    reply[#reply + 1] = -tonumber(rows[i + 1])
    reply[#reply + 1] = rows[i + 2]
  end
  return reply
end

-- Where a page starts: after the cursor's (score, member) if one was given, else at rank 0.
local function page_start(key, after_score, after_member)
  if after_score == '' then return 0 end
  return rank_after(key, after_score, after_member)
end
