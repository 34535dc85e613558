--[[
  online_filtered: one page of the users online now who match a filter, in the order of
  online_users (newest last activity first) or of online_since (most recently come online
  first), ties by id, from the online list's indexes (includes/online_index.lua).

  KEYS[1]  last_seen  ZSET  member=user_id  score=-(last activity, ms), or -(held score)
  KEYS[2]  online     ZSET  member=user_id  score=newest live session's expiry, ms, or a held
                            score (includes/live.lua)
  KEYS[3]  since      ZSET  member=user_id  score=-(onlineSince, ms), of the users online
  KEYS[4]  leases     ZSET  member=slot  score=the moment the lease lapses, ms
  ARGV[1]  shard  packed once per shard by the store (Shard.options, includes/options.lua): the
                  deployment's options and the shard's names that this script reads: window_ms,
                  sessions_prefix, the names of includes/status.lua (status_prefix, extras_prefix,
                  since, invisible, hidden, status_expiries, away_expiries), the names of a
                  lease's keys (includes/connections.lua), last_seen and index_prefix (a name
                  ending in ':' is followed by a user id or, index_prefix, an index's name: the
                  indexes' keys are derived from it, in the hash tag of KEYS)
  ARGV[2]  first         int: page size, 0 to 1000; -1: no page (only the count goes on)
  ARGV[3]  after_score   the cursor's score in this order, or "" for the first page
  ARGV[4]  after_member  the cursor's user_id
  ARGV[5]  hide_invisible  0|1: 1 for an end user, who finds neither the users who chose
                         INVISIBLE nor, by onlineSince, those who hide their lastSeen
  ARGV[6]  order         "l" (by last activity) or "s" (by onlineSince)
  ARGV[7]  prefix        string: the ids' prefix, or "" for any
  ARGV[8]  device        string: a live session's device, or "" for any
  ARGV[9]  statuses      string: ONLINE, AWAY, BUSY or INVISIBLE joined by ",", or "" for any
                         (the store sends at least one when the field is given)
  ARGV[10] since_from_ms int ms or "": the earliest onlineSince
  ARGV[11] since_to_ms   int ms or "": the latest onlineSince
  ARGV[12] count         0|1: 1 to count the matches (total), else total is 0
  ARGV[13] most          int: the most users each walk (the page's, the count's) looks at in
                         this call; one that stops there says where, and the caller goes on
                         from there in another call, so that no call holds Redis for long
  ARGV[14] count_after_score   where the count's walk goes on from (a stop it returned), or ""
                               to count from the start
  ARGV[15] count_after_member  that stop's user_id
  ARGV[16..] seers       strings: for an end user with an onlineSince range, the users of this
                         shard who have the reader in their friend set and are in the reader's
                         (at most PRESENCE_MAX_FRIENDS): those who show lastSeen to FRIENDS are
                         found by onlineSince too; none otherwise
  Returns  {total, has_next 0|1, page_stop_score, page_stop_member, count_stop_score,
           count_stop_member, user_id, score, last_seen_ms, online=1, ...}: score is the
           user's place in the order (the cursor's). A page's walk that stopped at `most` gives
           the users found so far and where it stopped (has_next then says nothing): the page
           goes on after that position; "" when it did not stop. The same for the count: total
           is then the matches counted in this call, to be added to the next calls'.
  Work     Each field given names the users it matches: status and device by their indexes
           in the order asked for, the prefix by ZRANGEBYLEX over the ids, the onlineSince
           range by the since ZSET. The page walks the field whose walk is cheapest by the
           counts (O(log n) each): a field's own index costs a page; a prefix or an onlineSince
           range in the other order is gathered whole and sorted when it matches at most
           GATHER users, else the list is walked and checked. Each user walked past costs one
           look-up of what they are indexed under. The total of one field is O(log n); of
           several, one pass over the cheapest field's matches. The seers who match are
           looked up one by one (a few look-ups each), sorted and merged with the page. Each
           walk looks at `most` users at most: the caller goes on from where it stopped.
]]
--- @include "clock"
--- @include "page"
--- @include "status"
--- @include "options"
local shard = shard_options(ARGV[1])
local last_seen_key, online_key, since_all_key = KEYS[1], KEYS[2], KEYS[3]
local leases = lease_book(KEYS[4], shard, shard.sessions_prefix, tonumber(shard.window_ms))
local window_ms, first = tonumber(shard.window_ms), tonumber(ARGV[2])
local after_score, after_member = ARGV[3], ARGV[4]
local hide, order = ARGV[5] == '1', ARGV[6]
local prefix, device = ARGV[7], ARGV[8]
local since_from, since_to = tonumber(ARGV[10]), tonumber(ARGV[11])
local want_count = ARGV[12] == '1'
local most = tonumber(ARGV[13])
local count_after_score, count_after_member = ARGV[14], ARGV[15]
local want_page = first >= 0
local SEERS = 16
-- The most users a field's matches may hold to be gathered whole.
local GATHER = 4096

local now = now_ms()
local statuses = statuses_of(shard, online_key, window_ms, now, leases)
local groups = hide and {'v', 'r'} or {'v', 'r', 'h'}
local wanted = nil
if ARGV[9] ~= '' then
  wanted = {}
  for status in string.gmatch(ARGV[9], '[A-Z]+') do wanted[status] = true end
end
local has_since = since_from ~= nil or since_to ~= nil
-- The since ZSET that an onlineSince range reads; an end user finds only group v in it.
local since_key = since_all_key
local since_min = since_to and string.format('%d', -since_to) or '-inf'
local since_max = since_from and string.format('%d', -since_from) or '+inf'
local cutoff = -(now - window_ms)

-- Whether a user found in some index matches every field, and is online now: when the index
-- walked holds only users that match (`exact`), whether they are online now. An end user
-- finds by onlineSince the users of group r only among the seers who show it to FRIENDS,
-- looked at apart from the indexes' walk (`friendly`), so that none is found twice.
local exact, friendly = false, nil
local function matches(user_id)
  if prefix ~= '' and string.sub(user_id, 1, #prefix) ~= prefix then return false end
  if exact then return live_expiry(leases, online_key, user_id, now) ~= nil end
  local record = redis.call('HGET', index_users_key(statuses), user_id)
  local fields
  if record then
    fields = record_fields(record)
  else
    -- A plain user (includes/online_index.lua), if indexed at all.
    local since = redis.call('ZSCORE', since_all_key, user_id)
    if not since then return false end
    fields = {'v', 'ONLINE', -tonumber(since)}
  end
  local group = fields[1]
  if hide and group == 'h' then return false end
  if wanted and not wanted[fields[2]] then return false end
  if has_since then
    if hide and group ~= 'v' and not (friendly and friendly[user_id]) then return false end
    local since = tonumber(fields[3])
    if (since_from and since < since_from) or (since_to and since > since_to) then return false end
  end
  if device ~= '' then
    local found = false
    for i = 4, #fields do
      if fields[i] == device then found = true end
    end
    if not found then return false end
  end
  return live_expiry(leases, online_key, user_id, now) ~= nil
end

-- A ZSET's users online now by its score in order l, counted as online_count does.
local function live_count(key)
  local total = redis.call('ZCOUNT', key, '-inf', string.format('%d', cutoff))
  for _, slot in ipairs(lapsed_slots(leases, now)) do
    local score = string.format('%d', -(HELD + slot))
    total = total - redis.call('ZCOUNT', key, score, score)
  end
  return total
end

local function prefix_range() return '[' .. prefix, '(' .. prefix .. '\255' end

-- The fields given, each {size = how many users it matches, then walk = the ZSETs in this
-- order holding exactly them (with min and max scores), or gather = a function listing them}.
local fields = {}
-- A field read from its indexes: walked in this order, counted in order l, whose scores tell
-- who is still online.
local function indexed(kind, values)
  local keys, size = {}, 0
  for _, g in ipairs(groups) do
    for _, value in ipairs(values) do
      keys[#keys + 1] = ix_key(statuses, g, order, kind, value)
      size = size + live_count(ix_key(statuses, g, 'l', kind, value))
    end
  end
  return {size = size, walk = keys, min = '-inf', max = order == 'l' and cutoff or math.huge}
end
if wanted then
  local values = {}
  for _, status in ipairs({'ONLINE', 'AWAY', 'BUSY', 'INVISIBLE'}) do
    if wanted[status] then values[#values + 1] = status end
  end
  fields[#fields + 1] = indexed('st', values)
end
if device ~= '' then fields[#fields + 1] = indexed('dev', {device}) end
if prefix ~= '' then
  local lo, hi = prefix_range()
  local size = 0
  for _, g in ipairs(groups) do size = size + redis.call('ZLEXCOUNT', index_ids_key(statuses, g), lo, hi) end
  fields[#fields + 1] = {size = size, gather = function()
    local ids = {}
    for _, g in ipairs(groups) do
      for _, id in ipairs(redis.call('ZRANGEBYLEX', index_ids_key(statuses, g), lo, hi)) do ids[#ids + 1] = id end
    end
    return ids
  end}
end
if has_since then
  local size = redis.call('ZCOUNT', since_key, since_min, since_max)
  if hide then size = size - redis.call('ZCOUNT', index_hidden_since_key(statuses), since_min, since_max) end
  local field = {size = size, hidden = hide}
  if order == 's' then
    field.walk, field.min, field.max = {since_key}, since_min, tonumber(since_max) or math.huge
  else
    field.gather = function() return redis.call('ZRANGEBYSCORE', since_key, since_min, since_max) end
  end
  fields[#fields + 1] = field
end

-- The cheapest way, in users looked at: a field's walk looks at a page's worth per (its size /
-- the fewest matches of any field), a gather at all it gathers, each costing a few look-ups
-- more (GATHERED_COST). A prefix is checked with no look-up: walking the whole list for it
-- costs ZRANGE's share alone per user passed (SCANNED_COST).
local GATHERED_COST, SCANNED_COST = 4, 0.25
local fewest = math.huge
for _, field in ipairs(fields) do fewest = math.min(fewest, field.size) end
local main = {walk = {order == 'l' and last_seen_key or since_all_key},
  size = redis.call('ZCARD', online_key), min = '-inf', max = order == 'l' and cutoff or math.huge}
local function walk_cost(field)
  local passed = (first + 1) * field.size / math.max(fewest, 1)
  if field == main and #fields == 1 and prefix ~= '' then return (first + 1) + passed * SCANNED_COST end
  return passed
end
local best, best_cost = main, walk_cost(main)
for _, field in ipairs(fields) do
  local cost
  if field.walk then
    cost = walk_cost(field)
  elseif field.size <= GATHER then
    cost = field.size * GATHERED_COST
  end
  if cost and cost < best_cost then best, best_cost = field, cost end
end
-- A field's own index holds exactly the users it matches (within a sweep of a change by time).
exact = #fields == 1 and best ~= main and best.walk ~= nil and not best.hidden

local function order_key() return order == 'l' and last_seen_key or since_all_key end

-- Whether (score, member) comes after the cursor's position.
local function past_cursor(score, member)
  if after_score == '' then return true end
  local a = tonumber(after_score)
  if score ~= a then return score > a end
  return sorts_after(member, after_member)
end

-- Walks the ZSETs `keys` together in (score, member) order from the cursor, within [min, max],
-- and keeps those that match, up to `limit` (all when nil), looking at `most` users at most.
-- Returns {member, score, ...}, and the score and member of the last user looked at when it
-- stopped at `most` (else nil).
local function walk(keys, min, max, limit)
  local heads = {}
  for i, key in ipairs(keys) do
    local start = page_start(key, after_score, after_member)
    if min ~= '-inf' then start = math.max(start, redis.call('ZCOUNT', key, '-inf', '(' .. min)) end
    heads[i] = {key = key, at = start, rows = {}, i = 1}
  end
  local function fill(head)
    if head.i <= #head.rows then return true end
    head.rows = redis.call('ZRANGE', head.key, head.at, head.at + 63, 'WITHSCORES')
    head.at, head.i = head.at + 64, 1
    return #head.rows > 0
  end
  local out, looked, last_score, last_member = {}, 0, nil, nil
  while limit == nil or #out < limit * 2 do
    if looked >= most then return out, last_score, last_member end
    local pick, pick_score, pick_member
    for _, head in ipairs(heads) do
      while fill(head) do
        local member, score = head.rows[head.i], tonumber(head.rows[head.i + 1])
        local lapsed = order == 'l' and past_lapsed(leases, head.key, score, now)
        if not lapsed then
          if score <= max and (pick == nil or score < pick_score or (score == pick_score and sorts_after(pick_member, member))) then
            pick, pick_score, pick_member = head, score, member
          end
          break
        end
        head.at, head.rows = lapsed, {}
      end
    end
    if pick == nil then break end
    pick.i = pick.i + 2
    looked, last_score, last_member = looked + 1, pick_score, pick_member
    if matches(pick_member) then
      out[#out + 1], out[#out + 2] = pick_member, pick_score
    end
  end
  return out
end

-- The scores in this order of the users `ids`.
local function read_in_order(ids)
  local scores = {}
  for at = 1, #ids, 1000 do
    local part = redis.call('ZMSCORE', order_key(), unpack(ids, at, math.min(at + 999, #ids)))
    for j = 1, #part do scores[at + j - 1] = part[j] end
  end
  return scores
end

-- Lists the gathered users that match, after the cursor, sorted in order, up to `limit`.
local function gathered(ids, limit)
  local rows, found = {}, 0
  local scores = #ids > 0 and read_in_order(ids) or {}
  for i, id in ipairs(ids) do
    local score = tonumber(scores[i])
    if score and (order ~= 'l' or score <= cutoff) and matches(id) then
      found = found + 1
      if past_cursor(score, id) then rows[#rows + 1] = {id, score} end
    end
  end
  table.sort(rows, function(a, b)
    if a[2] ~= b[2] then return a[2] < b[2] end
    return sorts_after(b[1], a[1])
  end)
  local out = {}
  for i = 1, math.min(#rows, limit or #rows) do
    out[#out + 1], out[#out + 2] = rows[i][1], rows[i][2]
  end
  return out, found
end

local rows, total, page_stop_score, page_stop_member = {}, nil, nil, nil
if best.gather then
  local found
  rows, found = gathered(best.gather(), first + 1)
  if count_after_score == '' then total = found end
elseif want_page then
  rows, page_stop_score, page_stop_member = walk(best.walk, best.min, best.max, first + 1)
end
if not want_page then rows = {} end
local count_stop_score, count_stop_member
if want_count and total == nil then
  if #fields == 1 then
    if count_after_score == '' then total = fields[1].size end
  else
    local saved_score, saved_member = after_score, after_member
    after_score, after_member = count_after_score, count_after_member
    local counted
    counted, count_stop_score, count_stop_member = walk(best.walk, best.min, best.max, nil)
    total = #counted / 2
    after_score, after_member = saved_score, saved_member
  end
end

-- The seers who show their onlineSince to FRIENDS (group r): found by it, merged by order.
if hide and has_since and #ARGV >= SEERS then
  local ids = {}
  friendly = {}
  for i = SEERS, #ARGV do
    local record = redis.call('HGET', index_users_key(statuses), ARGV[i])
    if record and string.sub(record, 1, 2) == 'r\t' and choices_of(statuses, ARGV[i], now).visible == 'FRIENDS' then
      friendly[ARGV[i]] = true
      ids[#ids + 1] = ARGV[i]
    end
  end
  exact = false
  local extra, found = gathered(ids, first + 1)
  -- Counted once, with the count's first call; a page that stopped takes the seers up to
  -- where it stopped, the next call those after.
  if want_count and count_after_score == '' then total = (total or 0) + found end
  if not want_page then extra = {} end
  if page_stop_score then
    local kept = {}
    for i = 1, #extra, 2 do
      local score = extra[i + 1]
      if score < page_stop_score or (score == page_stop_score and not sorts_after(extra[i], page_stop_member)) then
        kept[#kept + 1], kept[#kept + 2] = extra[i], score
      end
    end
    extra = kept
  end
  local merged, a, b = {}, 1, 1
  while #merged < (first + 1) * 2 and (a <= #rows or b <= #extra) do
    local take_row = b > #extra
    if a <= #rows and b <= #extra then
      take_row = rows[a + 1] < extra[b + 1] or (rows[a + 1] == extra[b + 1] and sorts_after(extra[b], rows[a]))
    end
    if take_row then
      merged[#merged + 1], merged[#merged + 2] = rows[a], rows[a + 1]
      a = a + 2
    else
      merged[#merged + 1], merged[#merged + 2] = extra[b], extra[b + 1]
      b = b + 2
    end
  end
  rows = merged
end

local function stop_of(score, member)
  if score == nil then return '', '' end
  return string.format('%d', score), member
end
local reply = {total or 0, #rows > first * 2 and 1 or 0}
reply[3], reply[4] = stop_of(page_stop_score, page_stop_member)
reply[5], reply[6] = stop_of(count_stop_score, count_stop_member)
for i = 1, math.min(#rows, first * 2), 2 do
  local user_id, score = rows[i], rows[i + 1]
  local seen = order == 'l' and score or tonumber(redis.call('ZSCORE', last_seen_key, user_id))
  reply[#reply + 1] = user_id
  reply[#reply + 1] = string.format('%d', score)
  reply[#reply + 1] = seen and shown_last_seen(leases, seen, now) or now
  reply[#reply + 1] = 1
end
return reply
