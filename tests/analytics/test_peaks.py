"""peakOnline and peakAt: the most users online at once in a period, as the sweeper measures
it every second, with when it was first reached."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

from aiohttp.test_utils import TestClient

from gql_presence.store import Granularity, PresenceStore
from tests.conftest import EVERY_DEPLOYMENT, graphql
from tests.helpers import eventually

PEAKS = """query ($from: DateTime!, $to: DateTime!, $g: Granularity!) {
  activity(from: $from, to: $to, granularity: $g) { start peakOnline peakAt }
}"""


async def test_each_period_shows_its_highest_count_and_when_it_was_first_reached(
    store: PresenceStore,
) -> None:
    before = datetime.now(UTC)
    await store.analytics.record_peak(3)
    reached = datetime.now(UTC)
    await asyncio.sleep(0.02)
    await store.analytics.record_peak(2)
    await store.analytics.record_peak(3)  # as high, later: the first time stays
    for granularity in Granularity:
        start = before - timedelta(days=3 if granularity is Granularity.HOUR else 40)
        periods = await store.analytics.activity(start, datetime.now(UTC), granularity)
        current = periods[-1]
        assert current.peak_online == 3, granularity
        assert current.peak_at is not None
        assert before - timedelta(milliseconds=1) <= current.peak_at <= reached
        assert all((p.peak_online, p.peak_at) == (0, None) for p in periods[:-1]), granularity
    await store.analytics.record_peak(5)
    day = (
        await store.analytics.activity(
            before - timedelta(days=1), datetime.now(UTC), Granularity.DAY
        )
    )[-1]
    assert day.peak_online == 5
    assert day.peak_at is not None
    assert day.peak_at > reached - timedelta(seconds=1)


@EVERY_DEPLOYMENT
async def test_the_sweeper_records_the_users_online_on_every_shard(
    api: TestClient[Any, Any], store_of_api: PresenceStore
) -> None:
    await store_of_api.touch_many([f"user-{i}" for i in range(7)])
    now = datetime.now(UTC)

    async def peak_is_seven() -> bool:
        variables = {
            "from": (now - timedelta(hours=2)).isoformat(),
            "to": datetime.now(UTC).isoformat(),
        }
        body = await graphql(api, PEAKS, **variables, g="HOUR")
        current = body["data"]["activity"][-1]
        return bool(current["peakOnline"] == 7 and current["peakAt"] is not None)

    # The service's own sweeper counts them, once a second: patient for a busy machine, where
    # a second can be several.
    await eventually(peak_is_seven, within_s=15, what="the peak of 7 users online")


async def test_a_backfilled_peak_counts_in_its_own_hour_and_day(store: PresenceStore) -> None:
    now = datetime.now(UTC)
    yesterday = now.replace(hour=10, minute=30, second=0, microsecond=0) - timedelta(days=1)
    await store.analytics.record_peak(4, at=yesterday)
    await store.analytics.record_peak(6, at=yesterday + timedelta(hours=3))
    await store.analytics.record_peak(5, at=yesterday + timedelta(hours=3, minutes=1))
    days = await store.analytics.activity(yesterday - timedelta(days=1), now, Granularity.DAY)
    # The days that start from then: yesterday, with its highest hour, and today.
    assert [(d.peak_online, d.peak_at) for d in days] == [
        (6, yesterday + timedelta(hours=3)),
        (0, None),
    ]
    from_ten = yesterday - timedelta(minutes=30)
    hours = await store.analytics.activity(
        from_ten, from_ten + timedelta(hours=4), Granularity.HOUR
    )
    assert [h.peak_online for h in hours] == [4, 0, 0, 6, 0]
    assert hours[0].peak_at == yesterday
