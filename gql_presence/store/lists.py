"""Lists of users over every shard: each shard pages its own users from the same cursor
position, and the pages are merged; and weeklyStats, the sum of every shard's figures."""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Awaitable, Callable, Sequence
from datetime import date, datetime, timedelta

from gql_presence.store.days import days, local_date, to_ms
from gql_presence.store.deployment import Deployment
from gql_presence.store.models import (
    DailyActiveUsers,
    ListedUser,
    OnlineFilter,
    Page,
    PayFor,
    Status,
    WeeklyStats,
)
from gql_presence.store.replies import ShardPage, filtered_part_of, page_of
from gql_presence.store.scripts import ScriptName
from gql_presence.store.shard import Named, Shard, by_shard, guarded, named
from gql_presence.store.validation import (
    check_end_date,
    check_id,
    check_online_filter,
    check_page_size,
    check_range,
)

# A position in a list: (-(last seen, ms), user id), the order of every list.
Position = tuple[int, str]
# The most users a filtered page's walk (or its count's) looks at in one script call: a walk
# past many users who do not match goes on in further calls, so that no call holds Redis for
# long (up to about 10 µs a user looked at, so some 20 ms a call at most).
MOST_EXAMINED = 2000
# The name of the order by onlineSince in its cursors.
ONLINE_SINCE = "since"
# The statuses an online user can have, each with an index (lua/includes/online_index.lua).
_INDEXED = (Status.ONLINE, Status.AWAY, Status.BUSY, Status.INVISIBLE)


def _filter_name(kept: OnlineFilter) -> str:
    """What names a filter in its cursors: the same for the same filter, however given."""
    since = [
        None if at is None else to_ms(at) for at in (kept.online_since_from, kept.online_since_to)
    ]
    statuses = None if kept.statuses is None else sorted(set(kept.statuses))
    text = json.dumps([kept.user_id_prefix, kept.device, statuses, *since])
    return "f" + hashlib.sha256(text.encode()).hexdigest()[:16]


def _ms_or_empty(at: datetime | None) -> int | str:
    return "" if at is None else to_ms(at)


def _after(position: Position | None) -> Named:
    return named(
        after_score=position[0] if position else "", after_member=position[1] if position else ""
    )


class Lists:
    def __init__(self, shards: Sequence[Shard], deployment: Deployment) -> None:
        self._shards = shards
        self._deployment = deployment

    async def online_users(
        self,
        first: int,
        after: str | None,
        *,
        hide: bool,
        by_online_since: bool,
        kept: OnlineFilter | None = None,
        count: bool = True,
        seers: Sequence[str] = (),
        walking_on: PayFor | None = None,
    ) -> Page:
        """`seers`: for an end user, the users who may show them their onlineSince (friends
        both ways); those who show it to FRIENDS are found by an onlineSince range too.
        `walking_on`: paid before each further call of a shard's walk (a page whose
        matches lie far down the list walks past the users before them)."""
        check_page_size(first)
        if kept is not None and kept.given:
            return await self._filtered(
                first,
                after,
                kept,
                hide=hide,
                by_online_since=by_online_since,
                count=count,
                seers=seers,
                walking_on=walking_on,
            )
        if by_online_since:
            return await self._merged(
                lambda shard, at: self._online_since(shard, first, at, hide),
                first,
                after,
                ONLINE_SINCE,
            )
        return await self._merged(
            lambda shard, at: self._online_users(shard, first, at, hide), first, after
        )

    async def _online_users(
        self, shard: Shard, first: int, after: Position | None, hide: bool
    ) -> ShardPage:
        k = shard.keys
        reply = await shard.run(
            ScriptName.ONLINE_USERS,
            named(last_seen=k.last_seen, online=k.online, leases=k.leases),
            named(
                shard=shard.options,
                first=first,
                **_after(after),
                hide_invisible=int(hide),
            ),
        )
        return page_of(reply)

    async def _filtered(
        self,
        first: int,
        after: str | None,
        kept: OnlineFilter,
        *,
        hide: bool,
        by_online_since: bool,
        count: bool,
        seers: Sequence[str],
        walking_on: PayFor | None,
    ) -> Page:
        """A page of the online users that match every field of the filter, in the order
        asked for, from the online list's indexes (lua/online_filtered.lua)."""
        check_online_filter(kept)
        # Each shard checks the seers who live in it.
        seers_of = by_shard(list(seers), len(self._shards))
        statuses = ""
        if kept.statuses is not None:
            # An end user finds nobody INVISIBLE, and an online user is never OFFLINE.
            hidden = Status.INVISIBLE if hide else None
            shown = [s for s in _INDEXED if s in kept.statuses and s is not hidden]
            statuses = ",".join(shown) or "NONE"

        async def page(shard: Shard, at: Position | None) -> ShardPage:
            """The shard's part, in as many calls as its walks take: each call looks at
            MOST_EXAMINED users at most, and the next goes on where it stopped."""
            k = shard.keys
            nodes: list[ListedUser] = []
            total, more = 0, False
            paging, counting = True, count
            page_at, count_at = at, None
            calls = 0
            while paging or counting:
                if calls and walking_on is not None:
                    await walking_on(MOST_EXAMINED)
                calls += 1
                reply = await shard.run(
                    ScriptName.ONLINE_FILTERED,
                    named(
                        last_seen=k.last_seen,
                        online=k.online,
                        since=k.online_since,
                        leases=k.leases,
                    ),
                    named(
                        shard=shard.options,
                        first=first - len(nodes) if paging else -1,
                        **_after(page_at),
                        hide_invisible=int(hide),
                        order="s" if by_online_since else "l",
                        prefix=kept.user_id_prefix or "",
                        device=kept.device or "",
                        statuses=statuses,
                        since_from_ms=_ms_or_empty(kept.online_since_from),
                        since_to_ms=_ms_or_empty(kept.online_since_to),
                        count=int(counting),
                        most=MOST_EXAMINED,
                        count_after_score=count_at[0] if count_at else "",
                        count_after_member=count_at[1] if count_at else "",
                        seers=seers_of.get(shard.index, []),
                    ),
                )
                part = filtered_part_of(reply)
                if counting:
                    total += part.page.total_count
                if paging:
                    nodes.extend(part.page.nodes)
                    more = part.page.has_next_page
                # A page that found a user past its end is whole, wherever its walk stopped.
                paging = paging and part.page_stop is not None and not more
                counting = counting and part.count_stop is not None
                page_at, count_at = part.page_stop or page_at, part.count_stop
            return ShardPage(total, tuple(nodes), more)

        order = ONLINE_SINCE if by_online_since else ""
        return await self._merged(page, first, after, order, _filter_name(kept))

    async def _online_since(
        self, shard: Shard, first: int, after: Position | None, hide: bool
    ) -> ShardPage:
        """A page of the users online, most recently come online first: each node's
        position is -(onlineSince ms)."""
        k = shard.keys
        reply = await shard.run(
            ScriptName.ONLINE_SINCE,
            named(since=k.online_since, online=k.online, last_seen=k.last_seen, leases=k.leases),
            named(
                shard=shard.options,
                first=first,
                **_after(after),
                hide_invisible=int(hide),
            ),
        )
        return page_of(reply)

    async def online_friends(
        self, user_id: str, first: int, after: str | None, *, hide: bool
    ) -> Page:
        """Each shard pages the friends who live in it (an empty set answers at once)."""
        check_id(user_id, "userId")
        check_page_size(first)

        async def page(shard: Shard, at: Position | None) -> ShardPage:
            k = shard.keys
            reply = await shard.run(
                ScriptName.ONLINE_FRIENDS,
                named(
                    friends=k.friends(user_id),
                    online=k.online,
                    last_seen=k.last_seen,
                    scratch=k.scratch,
                    leases=k.leases,
                    invisible=k.invisible,
                ),
                named(
                    first=first,
                    **_after(at),
                    shard=shard.options,
                    hide_invisible=int(hide),
                ),
            )
            return page_of(reply)

        return await self._merged(page, first, after)

    async def active_in_range(
        self, start: datetime, end: datetime, first: int, after: str | None, *, hide: bool
    ) -> Page:
        check_page_size(first)
        check_range(start, end)
        start_ms, end_ms = to_ms(start), to_ms(end)

        async def page(shard: Shard, at: Position | None) -> ShardPage:
            k, settings = shard.keys, shard.settings
            reply = await shard.run(
                ScriptName.ACTIVE_IN_RANGE,
                named(last_seen=k.last_seen, online=k.online, leases=k.leases),
                named(
                    from_ms=start_ms,
                    to_ms=end_ms,
                    shard=shard.options,
                    first=first,
                    **_after(at),
                    held_slack_ms=settings.connection_ttl_ms // 2,
                    hide_invisible=int(hide),
                ),
            )
            return page_of(reply)

        return await self._merged(page, first, after)

    async def _merged(
        self,
        page_of_shard: Callable[[Shard, Position | None], Awaitable[ShardPage]],
        first: int,
        after: str | None,
        order: str = "",
        kept: str = "",
    ) -> Page:
        """Every shard pages its users from the same cursor position, (lastSeen, userId): as
        a user lives in one shard, the first `first` users after that position over all shards
        are among the first `first` of some shard. The cursor is the position of the last
        user listed, so it means the same whatever shard that user lives in."""
        position = None
        if after is not None:
            position = (await self._deployment.cursors(make=False)).decode(after, order, kept)
        pages = await asyncio.gather(*(page_of_shard(shard, position) for shard in self._shards))
        rows = sorted((node for page in pages for node in page.nodes), key=_position)
        nodes = tuple(rows[:first])
        end_cursor = None
        if nodes:
            cursors = await self._deployment.cursors(make=True)
            end_cursor = cursors.encode(*_position(nodes[-1]), order, kept)
        return Page(
            total_count=sum(page.total_count for page in pages),
            nodes=nodes,
            has_next_page=len(rows) > first or any(page.has_next_page for page in pages),
            end_cursor=end_cursor,
        )

    async def today(self) -> date:
        """Today in the stats time zone, by the Redis server's clock."""
        home = self._shards[0]
        seconds, micros = await guarded(home.redis.time())
        return local_date(seconds * 1000 + micros // 1000, home.settings.stats_zone)

    async def weekly_stats(self, end_date: date | None = None) -> WeeklyStats:
        """The sum of every shard's figures: exact, as each user is counted in one shard."""
        end_date = check_end_date(await self.today() if end_date is None else end_date)
        parts = await asyncio.gather(*(self._week(shard, end_date) for shard in self._shards))
        start_date = end_date - timedelta(days=6)
        return WeeklyStats(
            start_date=start_date,
            end_date=end_date,
            days=tuple(
                DailyActiveUsers(
                    start_date + timedelta(days=i), sum(p.days[i].active_users for p in parts)
                )
                for i in range(7)
            ),
            unique_users=sum(p.unique_users for p in parts),
            active_every_day=sum(p.active_every_day for p in parts),
            new_on_end_date=sum(p.new_on_end_date for p in parts),
        )

    async def _week(self, shard: Shard, end_date: date) -> WeeklyStats:
        start_date = end_date - timedelta(days=6)
        labels, boundaries = days(start_date, 7, shard.settings.stats_zone)
        k = shard.keys
        reply = await shard.run(
            ScriptName.WEEKLY_STATS,
            named(days=[k.day(label) for label in labels], scratch=k.scratch),
            named(shard=shard.options, boundaries=boundaries),
        )
        counts = [int(n) for n in reply]
        daily = tuple(DailyActiveUsers(start_date + timedelta(days=i), counts[i]) for i in range(7))
        return WeeklyStats(start_date, end_date, daily, counts[7], counts[8], counts[9])


def _position(node: ListedUser) -> Position:
    """Where a user stands in every list: the score of the shards' sorted sets, -(lastSeen ms)
    or a held user's, then the id, whose order as text is Redis's order of its UTF-8 bytes."""
    return node.position, node.user_id
