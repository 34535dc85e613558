"""Friend sets, each split by the friend's shard: the friends of a user U who live in shard j
are kept in shard j's `friends:U`, next to their presence, so that onlineFriends is one
single-shard script per shard."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping, Sequence
from typing import Literal

from gql_presence.store.errors import BadInputError
from gql_presence.store.keys import shard_of
from gql_presence.store.publishing import Publish
from gql_presence.store.replies import text
from gql_presence.store.scripts import ScriptName
from gql_presence.store.shard import Shard, by_shard, friend_set_full, guarded, named
from gql_presence.store.validation import check_id, check_ids

LinkChange = Literal["SADD", "SREM", "CHECK"]


class Friends:
    def __init__(self, shards: Sequence[Shard]) -> None:
        self._shards = shards

    def _shard(self, user_id: str) -> Shard:
        return self._shards[shard_of(user_id, len(self._shards))]

    async def of(self, user_id: str) -> list[str]:
        check_id(user_id, "userId")
        parts = await asyncio.gather(
            *(guarded(shard.redis.smembers(shard.keys.friends(user_id))) for shard in self._shards)
        )
        return sorted({text(friend) for part in parts for friend in part})

    async def in_sets_of(self, user_id: str, owners: Iterable[str]) -> frozenset[str]:
        """Which of `owners` have user_id in their friend set: one script call on user_id's
        shard, which keeps each set's members that live there."""
        asked = list(owners)
        if not asked:
            return frozenset()
        shard = self._shard(user_id)
        flags = await shard.run(
            ScriptName.FRIEND_OF_EACH,
            named(friends=[shard.keys.friends(owner) for owner in asked]),
            named(user_id=user_id),
        )
        return frozenset(owner for owner, flag in zip(asked, flags, strict=True) if flag)

    async def among(self, user_id: str, user_ids: Iterable[str]) -> set[str]:
        """Which of user_ids are in user_id's friend set (each shard keeps the part of it
        that lives there): one command per shard."""
        groups = by_shard(list(user_ids), len(self._shards))

        async def part(shard: Shard, ids: list[str]) -> set[str]:
            found = await guarded(shard.redis.smismember(shard.keys.friends(user_id), ids))
            return {user for user, member in zip(ids, found, strict=True) if member}

        answers = await asyncio.gather(*(part(self._shards[i], g) for i, g in groups.items()))
        return set().union(*answers)

    async def change(
        self, change: LinkChange, user_id: str, friend_ids: Sequence[str], *, mutual: bool
    ) -> int:
        """The link user → f goes to f's shard, as friends:user; with mutual, f → user goes to
        the user's shard, as friends:f. One script per shard written, in parallel."""
        check_id(user_id, "userId")
        others = [f for f in check_ids(friend_ids, "friendIds") if f != user_id]
        if not others:
            return 0
        count = len(self._shards)
        links: dict[int, dict[str, list[str]]] = {}
        if mutual:
            home = links.setdefault(shard_of(user_id, count), {})
            for other in others:
                home[other] = [user_id]
        for other in others:
            # After the reverse links: in one shard, the user's FRIENDS event comes last.
            owners = links.setdefault(shard_of(other, count), {})
            owners.setdefault(user_id, []).append(other)
        kept_elsewhere: dict[int, dict[str, int]] = {}
        if change == "SADD" and count > 1:
            kept_elsewhere = await self._kept_elsewhere(links)
        changed = await asyncio.gather(
            *(
                self._change_links(self._shards[i], change, owners, kept_elsewhere.get(i))
                for i, owners in links.items()
            )
        )
        return sum(part.get(user_id, 0) for part in changed)

    async def _kept_elsewhere(
        self, links: Mapping[int, Mapping[str, Sequence[str]]]
    ) -> dict[int, dict[str, int]]:
        """For each shard to be written and each owner written there, how many friends the
        owner's set will keep in the other shards once the links are added: one script call
        per shard, and one more per shard written. A set that would pass max_friends is
        refused here, before anything is written; each shard's script checks its part again
        against the rest, atomically, so that changes made meanwhile cannot pass it either."""
        owners = sorted({owner for part in links.values() for owner in part})
        counts, added = await asyncio.gather(
            asyncio.gather(*(self._counts(shard, owners) for shard in self._shards)),
            asyncio.gather(
                *(self._change_links(self._shards[i], "CHECK", part) for i, part in links.items())
            ),
        )
        sizes = [dict(zip(owners, column, strict=True)) for column in counts]
        for i, after in zip(links, added, strict=True):
            sizes[i].update((owner, after[owner]) for owner in links[i] if links[i][owner])
        totals = {owner: sum(part[owner] for part in sizes) for owner in owners}
        most = self._shards[0].settings.max_friends
        if any(total > most for total in totals.values()):
            raise BadInputError(friend_set_full(most))
        return {i: {owner: totals[owner] - sizes[i][owner] for owner in links[i]} for i in links}

    async def _counts(self, shard: Shard, owners: Sequence[str]) -> list[int]:
        """How many friends each owner's friend set keeps in this shard."""
        if not owners:
            return []
        counts = await shard.run(
            ScriptName.FRIEND_COUNTS,
            named(friends=[shard.keys.friends(owner) for owner in owners]),
            named(),
        )
        return [int(c) for c in counts]

    async def _change_links(
        self,
        shard: Shard,
        change: LinkChange,
        links: Mapping[str, Sequence[str]],
        kept_elsewhere: Mapping[str, int] | None = None,
    ) -> dict[str, int]:
        """Adds (SADD) to or removes (SREM) from each owner's friend set in this shard the
        given friends (who live in this shard), in one atomic step; or (CHECK) writes nothing
        and returns the size each owner's set here would have after SADD. Returns how many
        links each owner's set changed. An addition that would take an owner's set past
        max_friends, counting the friends `kept_elsewhere` (in other shards), is refused whole
        with BadInputError. An owner's FRIENDS events go on the owner's own channel, in
        the owner's shard, which may not be this one; with sharded pub/sub, on the owner's
        channel in this shard instead, as a script publishes only on channels of its own
        slot (channels.Routes.friend_set)."""
        owners = [owner for owner, friend_ids in links.items() if friend_ids]
        if not owners:
            return dict.fromkeys(links, 0)
        publish = await shard.announcing()
        most = shard.settings.max_friends
        entries: list[str | int] = []
        for owner in owners:
            own = self._shard(owner) if publish is Publish.CLASSIC else shard
            room = most - (kept_elsewhere or {}).get(owner, 0)
            entries += [owner, own.channels.user_events(""), room, len(links[owner])]
            entries += links[owner]
        reply = await shard.run(
            ScriptName.CHANGE_FRIEND_LINKS,
            named(friends=[shard.keys.friends(owner) for owner in owners]),
            named(change=change, shard=shard.options, owners=entries),
        )
        changed = dict.fromkeys(links, 0)
        changed.update((owner, int(n)) for owner, n in zip(owners, reply, strict=True))
        return changed
