--- @include "live"
--- @include "feed"
-- Places (lua/open_place_session.lua): each place lives in one shard, the shard of its id, in
-- keys named by the place id (its last part):
--   members  ZSET  "user_id \0 session_id" -> -(joined, ms): most recently joined first, ties
--                  by user id then session id (ids hold no control characters, so \0 sorts
--                  first and never occurs in one)
--   holders  HASH  member -> "generation slot": the subscription holding it, under the lease of
--                  its process in the shard (includes/live.lua)
--   states   HASH  member -> its state, JSON (absent: none); and member .. "\0" -> when its
--                  last UPDATED was announced, ms, followed by " pending" while a later state
--                  waits to be announced (lua/set_place_state.lua); it goes with the member
--   users    HASH  user_id -> how many of the user's sessions are in the place; its field ""
--                  (no user id is empty) counts the place's events: their sequence. Once the
--                  place is empty it expires after place.empty_ttl_ms (remove_member), and
--                  a place's sequence starts at the server's clock (next_in_sequence)
-- The shard's flushes ZSET ("place_id \0 user_id \0 session_id" -> when its state is due to be
-- announced, ms) lists the pending states, so that the sweep announces those whose process
-- died before it did (lua/flush_place_state.lua).
-- And, named by store/keys.py (`leases.names`, includes/connections.lua), per lease the places
-- it holds members of (`lease_places_prefix` followed by the slot, SET) and per lease and place
-- those members (`lease_members_prefix` followed by the slot, ':' and the place id, SET), so
-- that the sweep ends a lapsed lease's members without reading any place whole.
--
-- Events go on the place's channel (with place.publish: PUBLISH, or SPUBLISH, the place's
-- channel being in the hash tag of its keys; lua/includes/events.lua), each a JSON array of one or more events of nine values:
-- kind (JOINED, UPDATED, LEFT, or REPLACED for the holding process), place_id, user_id,
-- session_id, at_ms, the state (JSON text) or false, the event's number in the place's
-- sequence (so that a subscriber that reads the place's members, whose reply says up to which
-- number it holds, takes the events after it and no other; a REPLACED counts for nothing and
-- carries the number before it), the place's version after it (place_version), and the id of
-- its entry in the feed (includes/feed.lua; "" for a REPLACED, which the feed does not keep). The place's
-- `feed` is its shard's (feed_of). An emptied place's sequence expires no sooner than the
-- feed's retention (Shard.options' empty_place_ttl_ms), so no kept change is older.

local function member_of(user_id, session_id) return user_id .. '\0' .. session_id end

local function split_member(member)
  local at = string.find(member, '\0', 1, true)
  return string.sub(member, 1, at - 1), string.sub(member, at + 1)
end

local function lease_places_key(leases, slot) return leases.names.lease_places_prefix .. slot end
local function lease_members_key(leases, slot, place_id)
  return leases.names.lease_members_prefix .. slot .. ':' .. place_id
end

-- The place's keys: {members, holders, states, users, channel, id, publish}, and where a state
-- may be left to announce, the shard's flushes key.

-- The number of the place's next event. A place without a sequence (new, or emptied and
-- expired) starts it at the server's clock, ms: above every number it gave out before, which
-- a subscriber may still hold (it leaves out the events up to the one its read reflects). Its
-- field "\0" (no user id holds a control character) keeps where it started, so that the
-- place's version, the events since then, starts at 1. Returns the number, and where the
-- sequence started (false if that is not kept), read with it.
local function next_in_sequence(place)
  local kept = redis.call('HMGET', place.users, '', '\0')
  if not kept[1] then
    local start = now_ms()
    redis.call('HSET', place.users, '', start, '\0', start)
    kept[2] = start
  end
  return redis.call('HINCRBY', place.users, '', 1), tonumber(kept[2]) or false
end

-- The place's version at `sequence`: how many events it announced since its sequence began
-- (`start`, if the caller has read it: a number, or false if it is not kept).
local function place_version(place, sequence, start)
  if start == nil then start = tonumber(redis.call('HGET', place.users, '\0')) or false end
  return sequence - (start or sequence)
end

local function add_place_event(events, place, kind, user_id, session_id, at_ms, state)
  local n = #events
  events[n + 1], events[n + 2], events[n + 3] = kind, place.id, user_id
  events[n + 4], events[n + 5], events[n + 6] = session_id, at_ms, state or false
  local start
  if kind == 'REPLACED' then
    events[n + 7] = tonumber(redis.call('HGET', place.users, '')) or 0
  else
    events[n + 7], start = next_in_sequence(place)
  end
  events[n + 8] = place_version(place, events[n + 7], start)
  events[n + 9] = ''
end

-- The number of the place's last event.
local function place_sequence(place)
  return tonumber(redis.call('HGET', place.users, '')) or 0
end

-- Distinct users in the place (the users hash less its sequence field).
local function place_user_count(place)
  local count = redis.call('HLEN', place.users)
  if redis.call('HEXISTS', place.users, '') == 1 then count = count - 1 end
  if redis.call('HEXISTS', place.users, '\0') == 1 then count = count - 1 end
  return count
end

local PLACE_FIELDS = 9

-- Keeps the place's changes in the feed, then announces them.
local function announce_place(place, events)
  if #events == 0 then return end
  local last = 0
  for i = 1, #events, PLACE_FIELDS do
    if FEED_KINDS[events[i]] then last = i end
  end
  for i = 1, last, PLACE_FIELDS do
    if FEED_KINDS[events[i]] then
      events[i + 8] = feed_append(place.feed, 'p', cjson.encode({unpack(events, i, i + 7)}), i == last)
    end
  end
  redis.call(place.publish, place.channel, cjson.encode(events))
end

-- The holder {generation=string, slot=number} of a member, or nil.
local function place_holder(place, member)
  local value = redis.call('HGET', place.holders, member)
  if not value then return nil end
  local generation, slot = string.match(value, '^(%d+) (%d+)$')
  return {generation = generation, slot = tonumber(slot)}
end

-- The field of the states hash that says when the member's last UPDATED was announced.
local function updated_field(member) return member .. '\0' end

-- When the member's last UPDATED was announced (ms, or nil), and whether a state waits.
local function last_update(place, member)
  local value = redis.call('HGET', place.states, updated_field(member))
  if not value then return nil, false end
  local at_ms, pending = string.match(value, '^(%d+)(.*)$')
  return tonumber(at_ms), pending ~= ''
end

local function flush_entry(place, member) return place.id .. '\0' .. member end

-- UPDATED with the member's state now, announced at `now`; nothing waits after it.
local function add_update(events, place, member, now, state)
  local user_id, session_id = split_member(member)
  add_place_event(events, place, 'UPDATED', user_id, session_id, now, state)
  redis.call('HSET', place.states, updated_field(member), now)
end

-- Announces a member's waiting state if its interval has passed, the member still held
-- under a live lease (one that lapsed leaves with the sweep). Returns {1 if it announced it,
-- else 0; in how many ms the state is due, if it waits for a later moment, else 0}.
local function flush_state(leases, place, member, now, interval_ms, events)
  local last_ms, pending = last_update(place, member)
  if pending and now < last_ms + interval_ms then return {0, last_ms + interval_ms - now} end
  redis.call('ZREM', place.flushes, flush_entry(place, member))
  if not pending then return {0, 0} end
  local holder = place_holder(place, member)
  if not holder or not slot_live(leases, holder.slot, now) then return {0, 0} end
  add_update(events, place, member, now, redis.call('HGET', place.states, member))
  return {1, 0}
end

-- Takes a member out of the place and out of its lease's books; LEFT at `at_ms`.
local function remove_member(leases, place, member, holder, at_ms, events)
  local user_id, session_id = split_member(member)
  redis.call('ZREM', place.members, member)
  redis.call('HDEL', place.holders, member)
  redis.call('HDEL', place.states, member, updated_field(member))
  if redis.call('HINCRBY', place.users, user_id, -1) <= 0 then redis.call('HDEL', place.users, user_id) end
  local by_lease = lease_members_key(leases, holder.slot, place.id)
  redis.call('SREM', by_lease, member)
  if redis.call('EXISTS', by_lease) == 0 then redis.call('SREM', lease_places_key(leases, holder.slot), place.id) end
  add_place_event(events, place, 'LEFT', user_id, session_id, at_ms, nil)
  -- Emptied: nothing of it is left but its sequence, which expires (a join persists it).
  if place.empty_ttl_ms and place_user_count(place) == 0 then
    redis.call('PEXPIRE', place.users, place.empty_ttl_ms)
  end
end

-- Ends the place's members held under `slot`, whose lease lapsed, at its lapse: at most
-- `limit` of them. Returns how many it ended.
local function end_lapsed_members(leases, place, slot, limit, events)
  local lapse = lapse_of(leases, slot)
  local members = redis.call('SRANDMEMBER', lease_members_key(leases, slot, place.id), limit)
  for _, member in ipairs(members) do
    local holder = place_holder(place, member)
    if holder and holder.slot == slot then
      remove_member(leases, place, member, holder, lapse, events)
    else
      redis.call('SREM', lease_members_key(leases, slot, place.id), member)
    end
  end
  if redis.call('EXISTS', lease_members_key(leases, slot, place.id)) == 0 then
    redis.call('SREM', lease_places_key(leases, slot), place.id)
  end
  return #members
end
