-- A script's `shard` argument (gql_presence/store/shard.py, Shard.options): the deployment's
-- options and the shard's names, made once per shard and packed (nine doubles, then each
-- name as a byte of length and its bytes), in the order below, which pack_options follows.
-- A name ending in ':' is followed by a user id (a lease's: by its slot; lease_members_prefix
-- by the slot, ':' and a place id; a place's: by the place id), in the hash tag of the
-- script's KEYS.
local function shard_options(packed)
  local o = {}
  o.window_ms, o.retention_ms, o.revoke_ms, o.max_sessions, o.empty_place_ttl_ms,
    o.feed_retention_ms, o.feed_max_changes, o.hourly_ms, o.analytics_ms,
    o.publish, o.channel, o.user_channel_prefix, o.sessions_prefix, o.status_prefix,
    o.extras_prefix, o.since, o.invisible, o.hidden, o.status_expiries, o.away_expiries,
    o.conn_prefix, o.revoked_prefix, o.lease_owners, o.lease_next, o.lease_users_prefix,
    o.lease_bits_prefix, o.lease_places_prefix, o.lease_members_prefix, o.place_members_prefix,
    o.place_holders_prefix, o.place_states_prefix, o.place_users_prefix, o.place_channel_prefix,
    o.feed, o.version_prefix, o.user_index, o.online_time_prefix, o.period_lengths_prefix, o.zone,
    o.hour_prefix, o.week_prefix, o.month_prefix, o.first_day_prefix, o.first_week_prefix,
    o.first_month_prefix, o.first_days, o.last_seen, o.index_prefix, o.versions =
    struct.unpack('>ddddddddd' .. string.rep('Bc0', 40), packed)
  return o
end
