--[[
  check_sessions: which of a process's held sessions it holds no more (kicked, replaced,
  closed, or their lease lapsed), for a holder that may have missed the announcement.

  KEYS[1]  leases   ZSET  member=slot  score=the moment the lease lapses, ms
  ARGV[1]  shard  packed once per shard by the store (Shard.options, includes/options.lua): the
                  deployment's options and the shard's names that this script reads:
                  sessions_prefix, conn_prefix, and the names of a lease's keys
                  (includes/connections.lua) (a name ending in ':' is followed by a user id, in the
                  hash tag of KEYS)
  ARGV[2..] held            string triples: user_id, session_id, generation; at most a batch
                            (the store's CHECK_BATCH) per call
  Returns  {position, ...}: the 1-based positions of the triples whose session is no longer
           held by that generation under a live lease
  Work     about three reads per session
]]
--- @include "clock"
--- @include "connections"
--- @include "options"
local shard = shard_options(ARGV[1])
local leases = lease_book(KEYS[1], shard)
local sessions_prefix, conn_prefix = shard.sessions_prefix, shard.conn_prefix

local now = now_ms()
local lost = {}
for i = 2, #ARGV, 3 do
  local user_id, session_id, generation = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  local user = {sessions = sessions_prefix .. user_id, conn = conn_prefix .. user_id}
  local entry = live_conn_entry(leases, user, session_id, now)
  if not (entry and entry.generation == generation) then lost[#lost + 1] = (i + 1) / 3 end
end
return lost
