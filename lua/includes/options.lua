-- A script's `shard` argument (gql_presence/store/shard.py, Shard.options): the deployment's
-- options and the shard's names, made once per shard and packed (nine doubles, then each
-- name as a byte of length and its bytes), in the order below, which pack_options follows.
-- A name ending in ':' is followed by a user id (a lease's: by its slot; lease_members_prefix
-- by the slot, ':' and a place id; a place's: by the place id), in the hash tag of the
-- script's KEYS.
-- The table is made by one constructor, with room for every field: filled a field at a time,
-- it would be made anew each time it grew.
local function shard_options(packed)
  local window_ms, retention_ms, revoke_ms, max_sessions, empty_place_ttl_ms, feed_retention_ms,
    feed_max_changes, hourly_ms, analytics_ms, publish, channel, user_channel_prefix,
    sessions_prefix, status_prefix, extras_prefix, since, invisible, hidden, status_expiries,
    away_expiries, conn_prefix, revoked_prefix, lease_owners, lease_next, lease_users_prefix,
    lease_bits_prefix, lease_places_prefix, lease_members_prefix, place_members_prefix,
    place_holders_prefix, place_states_prefix, place_users_prefix, place_channel_prefix, feed,
    version_prefix, user_index, online_time_prefix, period_lengths_prefix, zone, hour_prefix,
    week_prefix, month_prefix, first_day_prefix, first_week_prefix, first_month_prefix,
    first_days, last_seen, index_prefix, versions =
    struct.unpack('>ddddddddd' .. string.rep('Bc0', 40), packed)
  return {window_ms = window_ms, retention_ms = retention_ms, revoke_ms = revoke_ms,
    max_sessions = max_sessions, empty_place_ttl_ms = empty_place_ttl_ms,
    feed_retention_ms = feed_retention_ms, feed_max_changes = feed_max_changes,
    hourly_ms = hourly_ms, analytics_ms = analytics_ms, publish = publish, channel = channel,
    user_channel_prefix = user_channel_prefix, sessions_prefix = sessions_prefix,
    status_prefix = status_prefix, extras_prefix = extras_prefix, since = since,
    invisible = invisible, hidden = hidden, status_expiries = status_expiries,
    away_expiries = away_expiries, conn_prefix = conn_prefix, revoked_prefix = revoked_prefix,
    lease_owners = lease_owners, lease_next = lease_next,
    lease_users_prefix = lease_users_prefix, lease_bits_prefix = lease_bits_prefix,
    lease_places_prefix = lease_places_prefix, lease_members_prefix = lease_members_prefix,
    place_members_prefix = place_members_prefix, place_holders_prefix = place_holders_prefix,
    place_states_prefix = place_states_prefix, place_users_prefix = place_users_prefix,
    place_channel_prefix = place_channel_prefix, feed = feed, version_prefix = version_prefix,
    user_index = user_index, online_time_prefix = online_time_prefix,
    period_lengths_prefix = period_lengths_prefix, zone = zone, hour_prefix = hour_prefix,
    week_prefix = week_prefix, month_prefix = month_prefix, first_day_prefix = first_day_prefix,
    first_week_prefix = first_week_prefix, first_month_prefix = first_month_prefix,
    first_days = first_days, last_seen = last_seen, index_prefix = index_prefix,
    versions = versions}
end
