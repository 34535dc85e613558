"""The queries of who and when: for backends, and for users where PRESENCE_USERS_SEE_EVERYONE
is set; each one store call. Their fields are listed on Query (queries.py)."""

from __future__ import annotations

from datetime import date, datetime
from typing import Annotated

import strawberry

from gql_presence.graphql.analytics_types import (
    ActivityPeriod,
    Granularity,
    RetentionCohort,
    Stickiness,
)
from gql_presence.graphql.arguments import authorized_store
from gql_presence.graphql.context import Context
from gql_presence.policy.auth import Need
from gql_presence.store import analytics


async def activity(
    info: strawberry.Info[Context, None],
    from_: Annotated[
        datetime,
        strawberry.argument(name="from", description="The earliest start of a period to list."),
    ],
    to: Annotated[
        datetime, strawberry.argument(description="The latest start of a period to list.")
    ],
    granularity: Annotated[
        Granularity,
        strawberry.argument(description="Hours, days, weeks or months: at most 744 of them."),
    ] = Granularity.DAY,
) -> list[ActivityPeriod]:
    store = authorized_store(info, Need.LISTING)
    # Its work grows with the periods it lists: each costs what an id given costs.
    listed = store.analytics.periods_starting_in(from_, to, granularity.of_store)
    await info.context.charge(len(listed))
    periods = await store.analytics.activity(from_, to, granularity.of_store)
    return [ActivityPeriod.of(period) for period in periods]


async def retention(
    info: strawberry.Info[Context, None],
    from_: Annotated[
        date,
        strawberry.argument(name="from", description="A day of the first cohort's period."),
    ],
    cohorts: Annotated[
        int, strawberry.argument(description="How many cohorts, of consecutive periods: 1 to 52.")
    ] = 12,
    periods: Annotated[
        int,
        strawberry.argument(
            description="How many periods after its own each cohort is followed: 1 to 52."
        ),
    ] = 12,
    granularity: Annotated[
        Granularity, strawberry.argument(description="The length of each period.")
    ] = Granularity.WEEK,
) -> list[RetentionCohort]:
    store = authorized_store(info, Need.LISTING)
    read = analytics.retention_periods(from_, cohorts, periods, granularity.of_store)
    await info.context.charge(read)
    rows = await store.analytics.retention(from_, cohorts, periods, granularity.of_store)
    return [RetentionCohort.of(row) for row in rows]


async def stickiness(
    info: strawberry.Info[Context, None],
    end_date: Annotated[
        date | None,
        strawberry.argument(
            description="The last day counted; null for today in the stats time zone."
        ),
    ] = None,
    days: Annotated[int, strawberry.argument(description="How many days: 1 to 90.")] = 28,
) -> Stickiness:
    store = authorized_store(info, Need.LISTING)
    # Each day it counts is a bitmap of every user added into its counters, as activity
    # reads a period's: each costs what an id given costs.
    await info.context.charge(analytics.sticky_days(days))
    return Stickiness.of(await store.analytics.stickiness(end_date, days))
