"""onlineTime and onlinePeriods: their types, and their resolvers, which Query lists
(queries.py). Each resolver checks the caller's right and makes one store call."""

from __future__ import annotations

from datetime import date, datetime
from typing import Annotated

import strawberry

from gql_presence.graphql.arguments import authorized_store
from gql_presence.graphql.context import Context
from gql_presence.policy.auth import Need
from gql_presence.store import online_time as store

ID = strawberry.ID


@strawberry.type(description="How long a user was online on one day of the stats time zone.")
class DailyOnlineTime:
    date: date = strawberry.field(description="The day, in the stats time zone.")
    seconds: float = strawberry.field(
        description="Seconds the user was online that day (in the stats time zone)."
    )


@strawberry.type(
    description="How long one user was online on each day asked for: the union of their sessions' live time, so two devices at once count once."
)
class OnlineTime:
    user_id: ID = strawberry.field(description="The user asked for.")
    days: list[DailyOnlineTime] = strawberry.field(
        description="One entry per day from `from` to `to`, oldest first."
    )
    total_seconds: float = strawberry.field(description="The seconds of every day summed.")

    @classmethod
    def of(cls, found: store.UserOnlineTime) -> OnlineTime:
        return cls(
            user_id=ID(found.user_id),
            days=[DailyOnlineTime(date=d.date, seconds=d.seconds) for d in found.days],
            total_seconds=found.total_seconds,
        )


@strawberry.type(
    description="A bar of the histogram of online-period lengths: the periods longer than the bucket before's bound, up to this one's."
)
class LengthBucket:
    up_to_seconds: float | None = strawberry.field(
        description="The bucket's upper bound in seconds (null: the last, unbounded)."
    )
    count: int = strawberry.field(description="How many periods fell in the bucket.")


@strawberry.type(
    description="The lengths of online periods: quantiles within 5% of the true lengths, the exact mean, and a histogram in buckets 10% apart."
)
class OnlinePeriods:
    count: int = strawberry.field(
        description="Online periods (a user's time from ONLINE to OFFLINE or KICKED with online false) that ended in the range."
    )
    p50: float | None = strawberry.field(
        description="Their lengths in seconds, at these quantiles (null when count is 0)."
    )
    p90: float | None = strawberry.field(description="The 90th percentile, in seconds.")
    p99: float | None = strawberry.field(description="The 99th percentile, in seconds.")
    mean: float | None = strawberry.field(description="The mean length, in seconds (exact).")
    buckets: list[LengthBucket] = strawberry.field(
        description="The histogram: each bucket from the first that holds a period to the last, shortest first."
    )

    @classmethod
    def of(cls, found: store.PeriodLengths) -> OnlinePeriods:
        p50, p90, p99 = found.quantiles
        return cls(
            count=found.count,
            p50=p50,
            p90=p90,
            p99=p99,
            mean=found.mean,
            buckets=[
                LengthBucket(up_to_seconds=b.up_to_seconds, count=b.count) for b in found.buckets
            ],
        )


async def online_time(
    info: strawberry.Info[Context, None],
    user_ids: Annotated[
        list[ID],
        strawberry.argument(description="At most 1,000 user ids (an end user: their own)."),
    ],
    from_: Annotated[
        date, strawberry.argument(name="from", description="The first day, in the stats time zone.")
    ],
    to: Annotated[
        date, strawberry.argument(description="The last day; at most 91 days after `from`.")
    ],
) -> list[OnlineTime]:
    # An end user may ask for their own id alone; a backend for anyone's.
    info.context.caller.require_credentials()
    for user_id in dict.fromkeys(user_ids):
        authorized_store(info, Need.OWN, user_id)
    # Its work grows with users times days: each user counts once per day read.
    days = store.check_asked(user_ids, from_, to)
    await info.context.charge(len(user_ids) * days)
    found = await info.context.store.online_time.online_time(list(user_ids), from_, to)
    return [OnlineTime.of(one) for one in found]


async def online_periods(
    info: strawberry.Info[Context, None],
    from_: Annotated[
        datetime,
        strawberry.argument(
            name="from",
            description="The earliest end counted: periods are counted by the hour they ended in, for each hour that overlaps the range.",
        ),
    ],
    to: Annotated[
        datetime,
        strawberry.argument(description="The latest end counted; at most 92 days after `from`."),
    ],
) -> OnlinePeriods:
    store_ = authorized_store(info, Need.LISTING)
    return OnlinePeriods.of(await store_.online_time.online_periods(from_, to))
