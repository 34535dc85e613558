"""The GraphQL types of who and when: activity by period, retention cohorts, stickiness."""

from __future__ import annotations

from datetime import date, datetime
from enum import Enum

import strawberry

from gql_presence.store import analytics


@strawberry.enum(
    description="A length of period, in the stats time zone (PRESENCE_STATS_TIMEZONE)."
)
class Granularity(Enum):
    HOUR = "HOUR"
    DAY = "DAY"
    WEEK = strawberry.enum_value("WEEK", description="Weeks start on Monday.")
    MONTH = "MONTH"

    @property
    def of_store(self) -> analytics.Granularity:
        return analytics.Granularity(self.value)


@strawberry.type(
    description="Who was active in one period: how many, how many were new, came back or stayed away, and the peak online."
)
class ActivityPeriod:
    start: datetime = strawberry.field(
        description="Where the period starts, in the stats time zone."
    )
    active_users: int = strawberry.field(description="Distinct users active in the period.")
    new_users: int = strawberry.field(
        description="Active in the period, and never active before it."
    )
    returning_users: int = strawberry.field(
        description="Active in the period and in the period before."
    )
    resurrected_users: int = strawberry.field(
        description="Active in the period, not in the period before, and active some time before that."
    )
    dormant_users: int = strawberry.field(
        description="Active in the period before, and not in this one."
    )
    peak_online: int = strawberry.field(
        description="The most users online at once in the period, and when (null for a period with nobody online)."
    )
    peak_at: datetime | None = strawberry.field(
        description="When peakOnline was first reached in the period (null for a period with nobody online)."
    )

    @classmethod
    def of(cls, period: analytics.ActivityPeriod) -> ActivityPeriod:
        return cls(
            start=period.start,
            active_users=period.active_users,
            new_users=period.new_users,
            returning_users=period.returning_users,
            resurrected_users=period.resurrected_users,
            dormant_users=period.dormant_users,
            peak_online=period.peak_online,
            peak_at=period.peak_at,
        )


@strawberry.type(
    description="The users first active in one period, and how many of them were active in each period after it."
)
class RetentionCohort:
    start: datetime = strawberry.field(
        description="Where the period in which these users were first active starts."
    )
    size: int = strawberry.field(description="How many users were first active in it.")
    retained: list[int] = strawberry.field(
        description="retained[k]: how many of them were active k periods after it (retained[0] = size); periods still to come are left out."
    )

    @classmethod
    def of(cls, cohort: analytics.RetentionCohort) -> RetentionCohort:
        return cls(start=cohort.start, size=cohort.size, retained=list(cohort.retained))


@strawberry.type(
    description="How many of the users active over some days were active on how many of them (DAU/MAU)."
)
class Stickiness:
    end_date: date = strawberry.field(description="The last of the days, in the stats time zone.")
    days: int = strawberry.field(description="How many days, ending on endDate.")
    active_users: int = strawberry.field(description="Distinct users active on any of the days.")
    ratio: float = strawberry.field(
        description="The mean daily active users over the days, divided by activeUsers (0 when nobody was active)."
    )
    active_days: list[int] = strawberry.field(
        description="activeDays[k - 1]: how many users were active on exactly k of the days."
    )

    @classmethod
    def of(cls, sticky: analytics.Stickiness) -> Stickiness:
        return cls(
            end_date=sticky.end_date,
            days=sticky.days,
            active_users=sticky.active_users,
            ratio=sticky.ratio,
            active_days=list(sticky.active_days),
        )
