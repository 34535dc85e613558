"""This process's leases: one per shard it holds sessions in (presence sessions and place
sessions alike), taken when first needed, renewed together, given up at shutdown. A held
session lives as long as the lease it is held under (lua/includes/live.lua)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

from gql_presence.store.errors import LeaseLostError
from gql_presence.store.models import Lease
from gql_presence.store.scripts import ScriptName
from gql_presence.store.shard import Shard, named

T = TypeVar("T")


class Leases:
    """The leases of this process (its token names it to every shard)."""

    def __init__(self, shards: Sequence[Shard]) -> None:
        self._shards = shards
        self._token = uuid.uuid4().hex
        self._held: dict[int, Lease] = {}
        self._locks = tuple(asyncio.Lock() for _ in shards)

    @property
    def held(self) -> tuple[Lease, ...]:
        """The leases this process holds now, one per shard it has held sessions in."""
        return tuple(self._held.values())

    async def holding(self, index: int, opening: Callable[[Lease], Awaitable[T]]) -> T:
        """What `opening` makes under this process's lease in shard `index` (taken now if it
        has none there); again under a new lease if that one lapsed since its last renewal
        (this process stood still)."""
        lease = await self._lease(index)
        try:
            return await opening(lease)
        except LeaseLostError:
            self._forget(lease)
            return await opening(await self._lease(index))

    async def _lease(self, index: int) -> Lease:
        async with self._locks[index]:
            lease = self._held.get(index)
            if lease is None:
                shard = self._shards[index]
                slot = await shard.run(
                    ScriptName.ACQUIRE_LEASE,
                    named(leases=shard.keys.leases),
                    named(
                        token=self._token,
                        ttl_ms=shard.settings.connection_ttl_ms,
                        shard=shard.options,
                    ),
                )
                lease = Lease(index, int(slot), self._token)
                self._held[index] = lease
            return lease

    def _forget(self, lease: Lease) -> None:
        if self._held.get(lease.shard) == lease:
            del self._held[lease.shard]

    async def renew(self, at_ms: int | None) -> list[Lease]:
        """Renews every lease, one script call per shard, all in parallel: whatever the
        number of sessions held, they are not touched. Returns the leases found lapsed (or no
        longer this process's): their sessions have ended, or are ending, and the next
        opening in their shard takes a new lease. `at_ms` backfills the renewal."""
        leases = list(self._held.values())
        renewed = await asyncio.gather(*(self._renew(lease, at_ms) for lease in leases))
        lost = [lease for lease, ok in zip(leases, renewed, strict=True) if not ok]
        for lease in lost:
            self._forget(lease)
        return lost

    async def release(self) -> None:
        """Gives up every lease, once this process holds no session: the sweep ends whatever
        was left under them at once rather than after the TTL."""
        leases, self._held = list(self._held.values()), {}
        await asyncio.gather(*(self._renew(lease, None, give_up=True) for lease in leases))

    async def _renew(self, lease: Lease, at_ms: int | None, *, give_up: bool = False) -> bool:
        """Renews the lease (or gives it up); False if it had lapsed or is not its own."""
        shard = self._shards[lease.shard]
        days, boundaries = shard.days_around(at_ms)
        renewed = await shard.run(
            ScriptName.RENEW_LEASE,
            named(leases=shard.keys.leases, days=days),
            named(
                slot=lease.slot,
                token=lease.token,
                ttl_ms=0 if give_up else shard.settings.connection_ttl_ms,
                at_ms="" if at_ms is None else at_ms,
                shard=shard.options,
                boundaries=boundaries,
            ),
        )
        return bool(renewed)
