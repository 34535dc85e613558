"""The resolvers of Query: each checks the caller's right, calls one store method and maps
its result to the GraphQL types. Descriptions here are what GraphiQL shows.
"""

from __future__ import annotations

from datetime import date, datetime
from typing import Annotated

import strawberry

from gql_presence.graphql import analytics_resolvers, online_time_types, webhook_resolvers
from gql_presence.graphql.analytics_types import ActivityPeriod, RetentionCohort, Stickiness
from gql_presence.graphql.arguments import (
    AfterArg,
    FirstArg,
    PlaceIdArg,
    UserIdArg,
    authorized_store,
    place_store,
    reader_store,
)
from gql_presence.graphql.context import Context
from gql_presence.graphql.online_time_types import OnlinePeriods, OnlineTime
from gql_presence.graphql.types import (
    ID,
    ChangeKind,
    ChangePage,
    OnlineFilter,
    OnlineOrder,
    PlaceCount,
    PlaceMemberConnection,
    PresenceConnection,
    UserPresence,
    WeeklyStats,
    asks_total,
)
from gql_presence.graphql.webhook_types import Webhook
from gql_presence.policy.auth import Need
from gql_presence.store import (
    MAX_PRESENCES,
    check_id,
)
from gql_presence.store.errors import BadInputError
from gql_presence.store.feed import check_first
from gql_presence.store.validation import check_page_size


@strawberry.type(description="Reading presence: who is online, who was active when, and how many.")
class Query:
    @strawberry.field(
        description="Users with activity inside the presence window, most recently active first."
    )
    async def online_users(
        self,
        info: strawberry.Info[Context, None],
        first: FirstArg = 50,
        after: AfterArg = None,
        order_by: Annotated[
            OnlineOrder,
            strawberry.argument(
                description="LAST_SEEN (most recent activity first) or ONLINE_SINCE (most recently come online first); a cursor of one order is refused in the other."
            ),
        ] = OnlineOrder.LAST_SEEN,
        filter: Annotated[
            OnlineFilter | None,
            strawberry.argument(
                description="Only the users that match every field given; a cursor of one filter is refused with another."
            ),
        ] = None,
    ) -> PresenceConnection:
        store = authorized_store(info, Need.LISTING)
        # A page's work grows with its size: each entry it may hold costs what an id given
        # does, here and in every list below.
        await info.context.charge(check_page_size(first))
        by_since = order_by is OnlineOrder.ONLINE_SINCE
        page = await store.online_users(
            first,
            after,
            info.context.reader,
            by_online_since=by_since,
            kept=None if filter is None else filter.kept(),
            count=asks_total(info),
            # A walk past users who do not match costs what a page of them would.
            walking_on=info.context.charge,
        )
        return PresenceConnection.of(page)

    @strawberry.field(
        description="The online users among userId's friends, most recently active first."
    )
    async def online_friends(
        self,
        info: strawberry.Info[Context, None],
        user_id: UserIdArg,
        first: FirstArg = 50,
        after: AfterArg = None,
    ) -> PresenceConnection:
        store = authorized_store(info, Need.OWN, user_id)
        await info.context.charge(check_page_size(first))
        return PresenceConnection.of(
            await store.online_friends(user_id, first, after, info.context.reader)
        )

    @strawberry.field(
        description="Users whose last activity lies in [from, to] (both inclusive), most recent first."
    )
    async def active_in_range(
        self,
        info: strawberry.Info[Context, None],
        from_: Annotated[
            datetime,
            strawberry.argument(name="from", description="The earliest last activity to list."),
        ],
        to: Annotated[
            datetime,
            strawberry.argument(description="The latest last activity to list; not before `from`."),
        ],
        first: FirstArg = 50,
        after: AfterArg = None,
    ) -> PresenceConnection:
        store = authorized_store(info, Need.LISTING)
        await info.context.charge(check_page_size(first))
        page = await store.active_in_range(from_, to, first, after, info.context.reader)
        return PresenceConnection.of(page)

    @strawberry.field(
        description="Daily unique active users over the 7 days that end on endDate (default: today in the stats time zone)."
    )
    async def weekly_stats(
        self,
        info: strawberry.Info[Context, None],
        end_date: Annotated[
            date | None,
            strawberry.argument(
                description="The last of the seven days; null for today in the stats time zone."
            ),
        ] = None,
    ) -> WeeklyStats:
        return WeeklyStats.of(await authorized_store(info, Need.LISTING).weekly_stats(end_date))

    online_time: list[OnlineTime] = strawberry.field(
        resolver=online_time_types.online_time,
        description="Seconds online per day from `from` to `to` (at most 92 days), for each user asked for (at most 1,000), in the order given.",
    )
    online_periods: OnlinePeriods = strawberry.field(
        resolver=online_time_types.online_periods,
        description="The lengths of the online periods that ended in [from, to].",
    )

    @strawberry.field(
        description="One user's presence, as this reader may see it. End users may ask for themselves and their friends."
    )
    async def presence(
        self, info: strawberry.Info[Context, None], user_id: UserIdArg
    ) -> UserPresence:
        check_id(user_id, "userId")
        store = await reader_store(info, [user_id])
        return UserPresence.of(await store.presence(user_id, info.context.reader))

    @strawberry.field(
        description="The presence of each of these users (at most 1,000), in the order given, as this reader may see it: a friends list's online and offline friends with their last-seen times in one call. End users may ask for themselves and their friends only."
    )
    async def presences(
        self,
        info: strawberry.Info[Context, None],
        user_ids: Annotated[list[ID], strawberry.argument(description="At most 1,000 user ids.")],
    ) -> list[UserPresence]:
        if len(user_ids) > MAX_PRESENCES:
            raise BadInputError(
                f"presences takes at most {MAX_PRESENCES:,} ids per call; got {len(user_ids):,}."
            )
        asked = [check_id(user_id, "each of userIds") for user_id in user_ids]
        await info.context.charge(len(asked))
        store = await reader_store(info, asked)
        found = await store.presence_many(asked, info.context.reader)
        return [UserPresence.of(presence) for presence in found]

    @strawberry.field(description="The ids in userId's friend set, sorted.")
    async def friends(self, info: strawberry.Info[Context, None], user_id: UserIdArg) -> list[ID]:
        return [ID(f) for f in await authorized_store(info, Need.OWN, user_id).friends(user_id)]

    @strawberry.field(
        description="Who is in a place now: each live session there, most recently joined first, ties by userId then sessionId."
    )
    async def place_members(
        self,
        info: strawberry.Info[Context, None],
        place_id: PlaceIdArg,
        first: FirstArg = 50,
        after: AfterArg = None,
    ) -> PlaceMemberConnection:
        store = place_store(info, [place_id])
        await info.context.charge(check_page_size(first))
        return PlaceMemberConnection.of(await store.place_members(place_id, first, after))

    @strawberry.field(
        description="How many sessions and users are in each of these places now (at most 1,000 ids), in the order given."
    )
    async def place_counts(
        self,
        info: strawberry.Info[Context, None],
        place_ids: Annotated[list[ID], strawberry.argument(description="At most 1,000 place ids.")],
    ) -> list[PlaceCount]:
        store = place_store(info, place_ids)
        await info.context.charge(len(place_ids))
        return [
            PlaceCount(place_id=ID(c.place_id), sessions=c.sessions, users=c.users)
            for c in await store.place_counts(place_ids)
        ]

    @strawberry.field(
        description="The retained changes after `after` (from the oldest retained when null), oldest first, at most `first` (1 to 1,000), of the kinds and places asked for. Backends only. A request examines a bounded number of changes: when a filter leaves few of them, a page may hold fewer than `first` with hasMore true."
    )
    async def changes(
        self,
        info: strawberry.Info[Context, None],
        after: Annotated[
            str | None,
            strawberry.argument(
                description="A page's `endCursor` or `feedCursor`; null for the oldest change retained."
            ),
        ] = None,
        first: Annotated[
            int, strawberry.argument(description="Changes per page, 1 to 1,000.")
        ] = 100,
        kinds: Annotated[
            list[ChangeKind] | None,
            strawberry.argument(description="The kinds of change wanted; null for every kind."),
        ] = None,
        places: Annotated[
            list[str] | None,
            strawberry.argument(
                description="Place ids, and prefixes ending in `*`, whose place events are wanted (as a JWT's `places` claim); null for every place. Presence events are not filtered by it."
            ),
        ] = None,
    ) -> ChangePage:
        store = authorized_store(info, Need.BACKEND)
        # A page's work grows with its size: each change it may hold costs what an id given does.
        await info.context.charge(check_first(first))
        wanted = None if kinds is None else [kind.value for kind in kinds]
        page = await store.changes(after, first, wanted, places)
        return ChangePage.of(page, await store.event_cursors())

    @strawberry.field(
        description="A cursor at the present: the changes after it are those still to come. Backends only."
    )
    async def feed_cursor(self, info: strawberry.Info[Context, None]) -> str:
        return await authorized_store(info, Need.BACKEND).feed_cursor()

    webhooks: list[Webhook] = strawberry.field(
        resolver=webhook_resolvers.webhooks,
        description="Every webhook of the deployment. Backends only.",
    )
    webhook: Webhook | None = strawberry.field(
        resolver=webhook_resolvers.webhook,
        description="One webhook of the deployment by its id; null when there is none. Backends only.",
    )
    activity: list[ActivityPeriod] = strawberry.field(
        resolver=analytics_resolvers.activity,
        description="One entry per period that starts in [from, to], in order.",
    )
    retention: list[RetentionCohort] = strawberry.field(
        resolver=analytics_resolvers.retention,
        description="Cohorts of the users first active in each of `cohorts` periods (1 to 52) from the one holding `from`, each followed for `periods` periods (1 to 52).",
    )
    stickiness: Stickiness = strawberry.field(
        resolver=analytics_resolvers.stickiness,
        description="Over the `days` days (1 to 90) ending on endDate (today when null).",
    )
