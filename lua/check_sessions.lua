--[[
  check_sessions: which of a process's held sessions it holds no more (kicked, replaced,
  closed, or their lease lapsed), for a holder that may have missed the announcement.

  KEYS[1]  leases   ZSET  member=slot  score=the moment the lease lapses, ms
  ARGV[1]  sessions_prefix  string: a user's sessions key is this followed by the user id
  ARGV[2]  conn_prefix      string: a user's conn key (includes/connections.lua) is this
                            followed by the user id. Both hold the hash tag of KEYS: one slot.
  ARGV[3..] held            string triples: user_id, session_id, generation; at most a batch
                            (the store's CHECK_BATCH) per call
  Returns  {position, ...}: the 1-based positions of the triples whose session is no longer
           held by that generation under a live lease
  Work     about three reads per session
]]
--- @include "clock"
--- @include "connections"
leases.key = KEYS[1]
local sessions_prefix, conn_prefix = ARGV[1], ARGV[2]

local now = now_ms()
local lost = {}
for i = 3, #ARGV, 3 do
  local user_id, session_id, generation = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  local user = {sessions = sessions_prefix .. user_id, conn = conn_prefix .. user_id}
  local entry = live_conn_entry(user, session_id, now)
  if not (entry and entry.generation == generation) then lost[#lost + 1] = i / 3 end
end
return lost
