"""How users appear: every change of a user's status, custom status, lastSeen visibility or
session idleness is one call of lua/set_status.lua (includes/status.lua keeps the state)."""

from __future__ import annotations

from gql_presence.store.models import Presence
from gql_presence.store.replies import presence_of
from gql_presence.store.scripts import ScriptName
from gql_presence.store.shard import Shard, named


async def change_status(shard: Shard, user_id: str, change: str, *values: str | int) -> Presence:
    """One change of how the user appears (lua/set_status.lua); the user's presence
    after it, as they and backends see it."""
    k = shard.keys
    await shard.announcing()
    entry = await shard.run(
        ScriptName.SET_STATUS,
        named(
            last_seen=k.last_seen,
            online=k.online,
            leases=k.leases,
            sessions=k.sessions(user_id),
            revoked=k.revoked(user_id),
            conn=k.conn(user_id),
            user_index=k.user_index,
            invisible=k.invisible,
        ),
        named(
            user_id=user_id,
            change=change,
            values=[*values, "", "", ""][:3],
            shard=shard.options,
        ),
    )
    return presence_of(user_id, entry)
