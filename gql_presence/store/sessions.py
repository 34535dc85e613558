"""Presence sessions held by a connection (presenceSession): each lives under this process's
lease in its user's shard, until closed, kicked, replaced, or the lease lapses."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Sequence

from gql_presence.store.days import from_ms
from gql_presence.store.keys import shard_of
from gql_presence.store.leases import Leases
from gql_presence.store.models import HeldPlaceSession, HeldSession, Lease, OpenedSession
from gql_presence.store.places import Places
from gql_presence.store.scripts import ScriptName
from gql_presence.store.shard import Shard, named
from gql_presence.store.validation import check_device, check_id

# Held sessions checked per script call (check_sessions): about three reads each, so a call
# blocks Redis for a millisecond or two at most.
CHECK_BATCH = 1000


class Sessions:
    def __init__(self, shards: Sequence[Shard], leases: Leases, places: Places) -> None:
        self._shards = shards
        self._leases = leases
        self._places = places

    def _shard(self, user_id: str) -> Shard:
        return self._shards[shard_of(user_id, len(self._shards))]

    async def open(self, user_id: str, session_id: str, device: str | None = None) -> OpenedSession:
        """Holds the session under this process's lease in the user's shard: live while the
        lease is renewed, until closed or kicked; active, with `device` if given. A second
        opening of the same session replaces the first holder (announced as REPLACED).
        Raises SessionRevokedError for a kicked session id."""
        check_id(user_id, "userId")
        check_id(session_id, "sessionId")
        check_device(device)
        shard = self._shard(user_id)

        async def opening(lease: Lease) -> OpenedSession:
            k = shard.keys
            days, boundaries = shard.days_around()
            await shard.announcing()
            generation, opened_ms = await shard.run(
                ScriptName.OPEN_SESSION,
                named(
                    last_seen=k.last_seen,
                    online=k.online,
                    sessions=k.sessions(user_id),
                    revoked=k.revoked(user_id),
                    conn=k.conn(user_id),
                    generations=k.generations,
                    user_index=k.user_index,
                    next_index=k.next_index,
                    free_indexes=k.free_indexes,
                    days=days,
                    leases=k.leases,
                ),
                named(
                    user_id=user_id,
                    session_id=session_id,
                    slot=lease.slot,
                    token=lease.token,
                    shard=shard.options,
                    boundaries=boundaries,
                    device=device or "",
                ),
            )
            held = HeldSession(user_id, session_id, int(generation), lease)
            return OpenedSession(held, from_ms(int(opened_ms)))

        return await self._leases.holding(shard.index, opening)

    async def close(self, held: HeldSession) -> bool:
        """Ends the session at once if `held` still holds it; OFFLINE goes out when it was
        the user's last live one. Returns whether a live session ended."""
        shard = self._shard(held.user_id)
        k = shard.keys
        days, boundaries = shard.days_around()
        await shard.announcing()
        closed, _ = await shard.run(
            ScriptName.CLOSE_SESSION,
            named(
                last_seen=k.last_seen,
                online=k.online,
                sessions=k.sessions(held.user_id),
                conn=k.conn(held.user_id),
                user_index=k.user_index,
                next_index=k.next_index,
                free_indexes=k.free_indexes,
                days=days,
                leases=k.leases,
            ),
            named(
                user_id=held.user_id,
                session_id=held.session_id,
                generation=held.generation,
                shard=shard.options,
                boundaries=boundaries,
            ),
        )
        return bool(closed)

    async def check(
        self, held: Sequence[HeldSession | HeldPlaceSession]
    ) -> list[HeldSession | HeldPlaceSession]:
        """Of the sessions given (presence and place sessions), those their holder holds no
        more (kicked, replaced, closed, or their lease lapsed): for a holder that may have
        missed their announcement. CHECK_BATCH per script call, the calls of all shards in
        parallel."""
        presence: dict[int, list[HeldSession]] = {}
        places: dict[int, list[HeldPlaceSession]] = {}
        for one in held:
            if isinstance(one, HeldPlaceSession):
                places.setdefault(one.lease.shard, []).append(one)
            else:
                presence.setdefault(one.lease.shard, []).append(one)
        calls: list[Awaitable[Sequence[HeldSession | HeldPlaceSession]]] = [
            self._check(self._shards[i], group[start : start + CHECK_BATCH])
            for i, group in presence.items()
            for start in range(0, len(group), CHECK_BATCH)
        ]
        calls += [
            self._places.check_sessions(self._shards[i], group[start : start + CHECK_BATCH])
            for i, group in places.items()
            for start in range(0, len(group), CHECK_BATCH)
        ]
        lost = await asyncio.gather(*calls)
        return [one for part in lost for one in part]

    async def _check(self, shard: Shard, held: Sequence[HeldSession]) -> list[HeldSession]:
        triples: list[str | int] = []
        for one in held:
            triples += [one.user_id, one.session_id, one.generation]
        k = shard.keys
        lost = await shard.run(
            ScriptName.CHECK_SESSIONS,
            named(leases=k.leases),
            named(shard=shard.options, held=triples),
        )
        return [held[int(position) - 1] for position in lost]

    async def revoked(self, held: HeldSession | HeldPlaceSession) -> bool:
        """Whether the held session's id is revoked: it was kicked."""
        shard = self._shard(held.user_id)
        revoked = await shard.run(
            ScriptName.SESSION_REVOKED,
            named(revoked=shard.keys.revoked(held.user_id)),
            named(session_id=held.session_id),
        )
        return bool(revoked)
