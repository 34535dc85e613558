"""activity, retention and stickiness over HTTP, on one Redis, three shards and a cluster:
the figures against the reference, who may ask, and what bad input is told."""

from __future__ import annotations

import dataclasses
import random
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from aiohttp.test_utils import TestClient

from gql_presence.app import create_app
from gql_presence.running.redis_server import RedisServer
from gql_presence.store import Granularity, PresenceStore
from tests.analytics.reference import Reference, as_rows
from tests.conftest import EVERY_DEPLOYMENT, ClientFactory, error_codes, graphql
from tests.helpers import (
    BACKEND_TOKEN,
    OTHER_BACKEND_TOKEN,
    SECURED,
    as_user,
    rated,
    user_token,
)

ACTIVITY = """query ($from: DateTime!, $to: DateTime!, $g: Granularity!) {
  activity(from: $from, to: $to, granularity: $g) {
    start activeUsers newUsers returningUsers resurrectedUsers dormantUsers peakOnline peakAt
  }
}"""
RETENTION = """query ($from: Date!, $cohorts: Int!, $periods: Int!, $g: Granularity!) {
  retention(from: $from, cohorts: $cohorts, periods: $periods, granularity: $g) {
    start size retained
  }
}"""
STICKINESS = """query ($end: Date, $days: Int!) {
  stickiness(endDate: $end, days: $days) { endDate days activeUsers ratio activeDays }
}"""
FIGURES = ("activeUsers", "newUsers", "returningUsers", "resurrectedUsers", "dormantUsers")


def iso(moment: datetime) -> str:
    """As the service writes a DateTime: UTC, to the millisecond."""
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


async def backfill(store: PresenceStore, now: datetime) -> Reference:
    rng = random.Random(4)  # noqa: S311 - sample data
    reference = Reference(ZoneInfo("UTC"))
    users = [f"u{i}" for i in range(40)]  # spread over the three shards
    midnight = now.replace(hour=0, minute=0, second=0, microsecond=0)
    moments = [midnight - timedelta(milliseconds=1), midnight, midnight - timedelta(days=1)]
    moments += [now - timedelta(seconds=rng.uniform(120, 9 * 86_400)) for _ in range(25)]
    for at in sorted(m for m in moments if m < now - timedelta(minutes=2)):
        who = rng.sample(users, rng.randint(1, 12))
        await store.touch_many(who, at=at)
        reference.add(who, at)
    return reference


@EVERY_DEPLOYMENT
async def test_the_figures_match_the_reference_on_every_deployment(
    api: TestClient[Any, Any], store_of_api: PresenceStore
) -> None:
    now = datetime.now(UTC)
    reference = await backfill(store_of_api, now)
    for granularity, start in (
        ("DAY", now - timedelta(days=10)),
        ("HOUR", now - timedelta(days=2)),
    ):
        body = await graphql(
            api, ACTIVITY, **{"from": iso(start), "to": iso(now), "g": granularity}
        )
        rows = body["data"]["activity"]
        starts = reference.periods(start, now, granularity)
        assert [row["start"] for row in rows] == [iso(s) for s in starts]
        assert [{k: row[k] for k in FIGURES} for row in rows] == [
            reference.activity(s, granularity) for s in starts
        ]
    first = (now - timedelta(days=9)).date()
    body = await graphql(
        api, RETENTION, **{"from": first.isoformat(), "cohorts": 10, "periods": 9, "g": "DAY"}
    )
    expected = reference.retention(first, 10, 9, "DAY", datetime.now(UTC))
    assert [(r["start"], r["size"], r["retained"]) for r in body["data"]["retention"]] == [
        (iso(start), size, retained) for start, size, retained in expected
    ]
    body = await graphql(api, STICKINESS, end=None, days=14)
    sticky = body["data"]["stickiness"]
    active, ratio, histogram = reference.stickiness(now.date(), 14)
    assert (sticky["activeUsers"], sticky["activeDays"], sticky["days"]) == (active, histogram, 14)
    assert abs(sticky["ratio"] - ratio) < 1e-9


@EVERY_DEPLOYMENT
async def test_folding_hours_into_counts_changes_no_hourly_answer(
    store_of_api: PresenceStore,
) -> None:
    """Hours more than two days and a bit old are read from their folded counts, the rest
    from bitmaps; retention by hour reads cohorts of both and answers as before."""
    now = datetime.now(UTC)
    reference = await backfill(store_of_api, now)
    analytics = store_of_api.analytics
    hours_from = (now - timedelta(days=5)).date()

    async def answers() -> tuple[list[dict[str, int]], list[tuple[datetime, int, tuple[int, ...]]]]:
        activity = await analytics.activity(now - timedelta(days=6), now, Granularity.HOUR)
        retention = await analytics.retention(hours_from, 52, 52, Granularity.HOUR)
        return as_rows(activity), [(r.start, r.size, r.retained) for r in retention]

    before = await answers()
    starts = reference.periods(now - timedelta(days=6), now, "HOUR")
    assert before[0] == [reference.activity(s, "HOUR") for s in starts]
    expected = reference.retention(hours_from, 52, 52, "HOUR", datetime.now(UTC))
    assert before[1] == [(s, size, tuple(kept)) for s, size, kept in expected]
    assert await analytics.fold_ended() > 0
    assert await answers() == before


@EVERY_DEPLOYMENT
async def test_a_day_folded_up_to_midday_answers_for_its_afternoon_on_every_deployment(
    store_of_api: PresenceStore,
) -> None:
    """Users first seen in a day's folded morning are not new again in its afternoon, and its
    afternoon's cohorts leave them out, whichever shard they live in."""
    reference = Reference(ZoneInfo("UTC"))
    day = (datetime.now(UTC) - timedelta(days=4)).replace(hour=0, minute=0, second=0, microsecond=0)
    users = [f"u{i}" for i in range(24)]
    for hour, who in ((2, users[:12]), (9, users[6:18]), (14, users[:8] + users[16:])):
        await store_of_api.touch_many(who, at=day + timedelta(hours=hour, minutes=10))
        reference.add(who, day + timedelta(hours=hour, minutes=10))
    analytics = store_of_api.analytics

    async def answers() -> tuple[list[dict[str, int]], list[tuple[datetime, int, tuple[int, ...]]]]:
        activity = await analytics.activity(day, day + timedelta(hours=23), Granularity.HOUR)
        retention = await analytics.retention(day.date(), 24, 12, Granularity.HOUR)
        return as_rows(activity), [(r.start, r.size, r.retained) for r in retention]

    before = await answers()
    starts = reference.periods(day, day + timedelta(hours=23), "HOUR")
    assert before[0] == [reference.activity(s, "HOUR") for s in starts]
    assert [row["newUsers"] for row in before[0] if row["newUsers"]] == [12, 6, 6]
    fold_at = day + timedelta(hours=12 + 54, minutes=30)
    assert await analytics.fold_ended(int(fold_at.timestamp() * 1000)) > 0
    assert await answers() == before


async def test_bad_input_is_refused_saying_what_is_allowed(api: TestClient[Any, Any]) -> None:
    now = datetime.now(UTC)
    cases: list[tuple[str, dict[str, Any], str]] = [
        (ACTIVITY, {"from": iso(now - timedelta(days=40)), "to": iso(now), "g": "HOUR"}, "744"),
        (ACTIVITY, {"from": iso(now), "to": iso(now - timedelta(days=1)), "g": "DAY"}, "later"),
        (
            RETENTION,
            {"from": now.date().isoformat(), "cohorts": 53, "periods": 2, "g": "WEEK"},
            "1 and 52",
        ),
        (
            RETENTION,
            {"from": now.date().isoformat(), "cohorts": 2, "periods": 0, "g": "WEEK"},
            "1 and 52",
        ),
        (STICKINESS, {"end": None, "days": 91}, "1 and 90"),
        (
            RETENTION,
            {"from": "9998-12-01", "cohorts": 52, "periods": 52, "g": "MONTH"},
            "by 9998-12-31",
        ),
        (
            RETENTION,
            {"from": "9998-06-01", "cohorts": 30, "periods": 30, "g": "WEEK"},
            "by 9998-12-31",
        ),
    ]
    for query, variables, allowed in cases:
        body = await graphql(api, query, **variables)
        assert error_codes(body) == ["BAD_USER_INPUT"], body
        assert allowed in body["errors"][0]["message"]


async def test_backends_may_ask_and_users_only_where_they_see_everyone(
    aiohttp_client: ClientFactory, redis_server: RedisServer, http_redis: Any
) -> None:
    now = datetime.now(UTC)
    asks: list[tuple[str, dict[str, Any]]] = [
        (ACTIVITY, {"from": iso(now - timedelta(days=1)), "to": iso(now), "g": "DAY"}),
        (RETENTION, {"from": now.date().isoformat(), "cohorts": 1, "periods": 1, "g": "WEEK"}),
        (STICKINESS, {"end": None, "days": 7}),
    ]
    closed = await aiohttp_client(
        create_app(dataclasses.replace(SECURED, redis_url=redis_server.url))
    )
    opened = await aiohttp_client(
        create_app(
            dataclasses.replace(SECURED, redis_url=redis_server.url, users_see_everyone=True)
        )
    )
    for query, variables in asks:
        assert "errors" not in await as_user(closed, BACKEND_TOKEN, query, **variables)
        refused = await as_user(closed, user_token("alice"), query, **variables)
        assert error_codes(refused) == ["FORBIDDEN"]
        assert "PRESENCE_USERS_SEE_EVERYONE" in refused["errors"][0]["message"]
        assert "errors" not in await as_user(opened, user_token("alice"), query, **variables)


async def test_activity_retention_and_stickiness_cost_a_token_per_100_periods_they_read(
    aiohttp_client: ClientFactory, redis_server: RedisServer, http_redis: Any
) -> None:
    """Their work grows with the periods they read, as touchMany's with its ids: each period
    (each of a cohort's, its own included) counts as an id. A refused call costs its first
    token only. A bucket of 7 at once for each backend."""
    api = await aiohttp_client(create_app(rated(7, redis_server.url)))
    start = datetime(2026, 11, 1, tzinfo=UTC)
    month = {"from": iso(start), "to": iso(start + timedelta(days=31)), "g": "HOUR"}
    assert error_codes(await as_user(api, BACKEND_TOKEN, ACTIVITY, **month)) == ["BAD_USER_INPUT"]
    hours = {"from": iso(start), "to": iso(start + timedelta(hours=599)), "g": "HOUR"}
    listed = await as_user(api, BACKEND_TOKEN, ACTIVITY, **hours)  # 600 periods: six tokens
    assert len(listed["data"]["activity"]) == 600
    spent = await as_user(api, BACKEND_TOKEN, ACTIVITY, **hours)
    assert error_codes(spent) == ["RATE_LIMITED"]

    cohorts = {"from": "2026-11-02", "cohorts": 20, "periods": 49, "g": "DAY"}
    refused = await as_user(api, OTHER_BACKEND_TOKEN, RETENTION, **{**cohorts, "periods": 53})
    assert error_codes(refused) == ["BAD_USER_INPUT"]
    read = await as_user(
        api, OTHER_BACKEND_TOKEN, RETENTION, **cohorts
    )  # 20 cohorts of 50: ten tokens
    assert len(read["data"]["retention"]) == 20
    spent = await as_user(api, OTHER_BACKEND_TOKEN, RETENTION, **cohorts)
    assert error_codes(spent) == ["RATE_LIMITED"]

    # Each day stickiness counts is one more: fifteen of 90 days, 14 tokens.
    aliases = " ".join(f"a{i}: stickiness(days: 90) {{ ratio }}" for i in range(15))
    sticky = f"{{ {aliases} }}"
    settings = dataclasses.replace(
        rated(7, redis_server.url), backend_tokens=(("third", "t" * 40),)
    )
    third = await aiohttp_client(create_app(settings))
    assert "errors" not in await as_user(third, "t" * 40, sticky)
    assert error_codes(await as_user(third, "t" * 40, "{ __typename }")) == ["RATE_LIMITED"]
