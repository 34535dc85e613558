"""The dashboard in a real browser: Debian's Chromium, driven by Playwright, against the
whole service on a real port."""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import hashlib
import math
import os
import random
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient
from playwright.async_api import Browser, Page, Route

from gql_presence.app import create_app
from gql_presence.running.demo import fill
from gql_presence.running.redis_server import RedisServer
from gql_presence.store import PresenceStore
from tests.conftest import TEST_SETTINGS, ClientFactory, graphql
from tests.helpers import BACKEND_TOKEN, SECURED, eventually

Service = TestClient[Any, Any]
# A browser per test.
pytestmark = pytest.mark.slow

SCREENSHOT = Path(__file__).parents[2] / "docs" / "dashboard.png"


async def open_dashboard(
    browser: Browser,
    api: Service,
    fragment: str = "",
    *,
    fake_clock: bool = False,
    **page_options: Any,
) -> tuple[Page, list[str]]:
    """The dashboard in a new page; with `fake_clock`, the page's timers run only when the
    test moves its clock (`page.clock.run_for`)."""
    page = await browser.new_page(**page_options)
    if fake_clock:
        await page.clock.install()
    problems: list[str] = []
    page.on(
        "console",
        lambda message: problems.append(message.text) if message.type == "error" else None,
    )
    page.on("pageerror", lambda error: problems.append(str(error)))
    page.on("requestfailed", lambda request: problems.append(f"failed: {request.url}"))
    await page.goto(str(api.make_url("/dashboard")) + fragment)
    return page, problems


async def shows(page: Page, element: str, text: str) -> None:
    """Waits (5 s at most) until the element with that id shows that text."""
    await page.wait_for_function(
        f"document.getElementById('{element}').textContent === '{text}'", timeout=5000
    )


async def test_the_count_follows_a_touch_live_and_the_page_is_clean(
    browser: Browser, api: Service
) -> None:
    await graphql(api, 'mutation { touch(userId: "first-user", sessionId: "web") { online } }')
    page, problems = await open_dashboard(browser, api)
    await shows(page, "online-count", "1")
    await shows(page, "status", "live")
    await graphql(api, 'mutation { touch(userId: "second-user", sessionId: "phone") { online } }')
    await shows(page, "online-count", "2")
    assert "second-user" in await page.inner_text("#recent")
    await page.wait_for_function(
        "document.querySelectorAll('#chart rect').length === 7", timeout=5000
    )
    assert await page.inner_text("#unique") == "1"  # read when the page loaded
    # A kick of a listed user reaches the page through its subscription.
    await graphql(api, 'mutation { kick(userId: "first-user") { online } }')
    await shows(page, "online-count", "1")
    assert "first-user" not in await page.inner_text("#recent")
    assert problems == []


async def test_the_online_list_is_read_on_events_not_polled(browser: Browser, api: Service) -> None:
    await graphql(api, 'mutation { touch(userId: "first-user") { online } }')
    page, problems = await open_dashboard(browser, api, fake_clock=True)
    await shows(page, "status", "live")
    await shows(page, "online-count", "1")
    await page.wait_for_timeout(500)  # the reads of the page's start are over
    reads: list[str] = []
    page.on(
        "request",
        lambda request: (
            reads.append(request.url) if "onlineUsers" in (request.post_data or "") else None
        ),
    )
    # A minute of the page's timers, run at once: a poll of any period up to that would read.
    await page.clock.run_for(60_000)
    await page.wait_for_timeout(200)  # time for a read it started to leave the page
    assert reads == []
    await graphql(api, 'mutation { touch(userId: "second-user") { online } }')
    await shows(page, "online-count", "2")
    assert len(reads) == 1  # one event, one read
    assert problems == []


async def row_shows(page: Page, user: str, text: str) -> None:
    """Waits (5 s at most) until the online list's row of that user contains that text."""
    await page.wait_for_function(
        """([user, text]) => [...document.querySelectorAll('#recent li')].some(
             (row) => row.dataset.user === user && row.textContent.includes(text))""",
        arg=[user, text],
        timeout=5000,
    )


async def test_each_listed_user_shows_their_status_from_the_events(
    browser: Browser, api: Service
) -> None:
    await graphql(api, 'mutation { touch(userId: "ann", sessionId: "web") { online } }')
    page, problems = await open_dashboard(browser, api)
    await shows(page, "status", "live")
    await row_shows(page, "ann", "online")
    # The list's reads wait meanwhile: what changes the row is the events themselves.
    reads_may_go = asyncio.Event()

    async def held(route: Route) -> None:
        if "onlineUsers" in (route.request.post_data or ""):
            await reads_may_go.wait()
        await route.continue_()

    await page.route("**/graphql", held)
    idle = 'mutation { setSessionIdle(userId: "ann", sessionId: "web", idle: true) { status } }'
    await graphql(api, idle)
    await row_shows(page, "ann", "away")
    custom = (
        'mutation { setCustomStatus(userId: "ann", text: "In a meeting", emoji: "📅") { status } }'
    )
    await graphql(api, custom)
    await row_shows(page, "ann", "📅 In a meeting")
    await graphql(api, 'mutation { setStatus(userId: "ann", status: BUSY) { status } }')
    await row_shows(page, "ann", "busy")
    reads_may_go.set()
    # The reads that follow agree, and a cleared custom status leaves the row.
    await graphql(api, 'mutation { setCustomStatus(userId: "ann") { status } }')
    await page.wait_for_function(
        "!document.getElementById('recent').textContent.includes('In a meeting')", timeout=5000
    )
    await row_shows(page, "ann", "busy")
    assert problems == []


async def test_a_read_that_answers_late_does_not_undo_a_newer_one(
    browser: Browser, api: Service
) -> None:
    await graphql(api, 'mutation { touch(userId: "ann", sessionId: "web") { online } }')
    page, problems = await open_dashboard(browser, api)
    await shows(page, "status", "live")
    await row_shows(page, "ann", "online")
    held, may_answer = asyncio.Event(), asyncio.Event()

    async def one_late(route: Route) -> None:
        if "onlineUsers" not in (route.request.post_data or "") or held.is_set():
            await route.continue_()
            return
        answer = await route.fetch()  # ann online, as read now
        held.set()
        await may_answer.wait()
        await route.fulfill(response=answer)

    await page.route("**/graphql", one_late)
    await graphql(api, 'mutation { touch(userId: "bob") { online } }')  # its read answers late
    await asyncio.wait_for(held.wait(), 5)
    idle = 'mutation { setSessionIdle(userId: "ann", sessionId: "web", idle: true) { status } }'
    await graphql(api, idle)
    await shows(page, "online-count", "2")  # a newer read is shown
    await row_shows(page, "ann", "away")
    async with page.expect_request_finished(lambda r: "onlineUsers" in (r.post_data or "")):
        may_answer.set()
    await page.evaluate("new Promise((resolve) => setTimeout(resolve))")  # once it was taken
    assert "away" in await page.inner_text("#recent li[data-user=ann]")
    assert problems == []


@pytest.mark.skipif(
    not os.environ.get("UPDATE_SCREENSHOT"), reason="UPDATE_SCREENSHOT=1 redraws it"
)
async def test_screenshot_for_the_readme(
    browser: Browser, api: Service, store_of_api: PresenceStore
) -> None:
    await fill(store_of_api, 600, TEST_SETTINGS, random.Random(7))  # noqa: S311 - sample data
    page, problems = await open_dashboard(browser, api, viewport={"width": 1000, "height": 600})
    await page.wait_for_function(
        "document.querySelectorAll('#recent li').length === 15", timeout=5000
    )
    await page.wait_for_function(
        "document.querySelectorAll('#chart rect').length === 7", timeout=5000
    )
    for chart in CHARTS:
        await page.wait_for_function(
            f"document.querySelectorAll('#{chart} rect').length > 0", timeout=5000
        )
    await page.screenshot(path=str(SCREENSHOT), full_page=True)
    assert problems == []


async def test_it_fits_a_phone_screen(browser: Browser, api: Service) -> None:
    await graphql(api, 'mutation { touchMany(userIds: ["a", "b", "c"]) }')
    long_status = 'mutation($t: String) { setCustomStatus(userId: "a", text: $t) { status } }'
    await graphql(api, long_status, t="Working from the mountains this week " * 3)
    page, problems = await open_dashboard(browser, api, viewport={"width": 390, "height": 844})
    await page.wait_for_function(
        "document.getElementById('online-count').textContent === '3'", timeout=5000
    )
    await row_shows(page, "a", "Working from the mountains")
    overflow = await page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
    assert overflow <= 0
    assert problems == []


# Browser apps on another origin, a trusted-documents manifest and federation change nothing
# for the dashboard, which calls with a backend token from its own origin.
FRONTEND_SETTINGS = {
    "cors_origins": ("https://app.example.com",),
    "trusted_documents": {hashlib.sha256(b"{ __typename }").hexdigest(): "{ __typename }"},
    "federation": True,
}


@pytest.mark.parametrize("extra", [{}, FRONTEND_SETTINGS], ids=["plain", "frontend-settings"])
async def test_with_credentials_it_uses_the_token_in_its_address(
    browser: Browser,
    aiohttp_client: ClientFactory,
    redis_server: RedisServer,
    http_redis: Any,
    extra: dict[str, Any],
) -> None:
    settings = dataclasses.replace(SECURED, redis_url=redis_server.url, **extra)
    api = await aiohttp_client(create_app(settings))
    backend = {"Authorization": f"Bearer {BACKEND_TOKEN}"}
    touch = {"query": 'mutation { touch(userId: "a") { online } }'}
    assert (await (await api.post("/graphql", json=touch, headers=backend)).json())["data"]
    page, problems = await open_dashboard(browser, api, f"#token={BACKEND_TOKEN}")
    await page.wait_for_function(
        "document.getElementById('online-count').textContent === '1'", timeout=5000
    )
    await page.wait_for_function(
        "document.getElementById('status').textContent === 'live'", timeout=5000
    )
    assert problems == []
    # Without the token, or with one refused, it says why it shows nothing and where the
    # token goes on this page.
    for address in ("", "#token=not-a-token"):
        page, _ = await open_dashboard(browser, api, address)
        await page.wait_for_function(
            "document.getElementById('error').textContent.includes('/dashboard#token=')",
            timeout=5000,
        )


CHARTS = (
    "days-chart",
    "hours-chart",
    "retention-chart",
    "stickiness-chart",
    "periods-chart",
    "peaks-chart",
)
# What the page asks (dashboard.js), with the test's own clock.
FIGURES = """query ($days: DateTime!, $now: DateTime!, $cohorts: Date!, $week: DateTime!) {
  activity(from: $days, to: $now, granularity: DAY) { start newUsers returningUsers peakOnline }
  retention(from: $cohorts, cohorts: 6, periods: 5, granularity: WEEK) { start size retained }
  stickiness(days: 28) { days ratio activeDays }
  onlinePeriods(from: $week, to: $now) { count buckets { upToSeconds count } }
}"""
# The colours of new, returning and resurrected users in the charts.
LIFECYCLE_RGB = [(0x3B, 0x82, 0xF6), (0x1F, 0x7A, 0x4D), (0xF7, 0x90, 0x09)]


async def backfill_weeks(store: PresenceStore, api: Service, now: datetime) -> None:
    """Five weeks of users arriving, coming back each with a chance of their own, at different
    hours; online periods of 8 to 48 seconds ended by kicks; five users online now, counted at
    today's peak by the sweeper."""
    rng = random.Random(11)  # noqa: S311 - sample data
    users = [f"user-{i:02d}" for i in range(60)]
    chance = {user: 0.15 + 0.7 * (i % 5) / 4 for i, user in enumerate(users)}
    midnight = now.replace(hour=0, minute=0, second=0, microsecond=0)
    for days_ago in range(34, 0, -1):
        arrived = users[: 12 + (34 - days_ago) * 48 // 33]
        for hour in (8, 13, 20):
            who = [user for user in arrived if rng.random() < chance[user] / 3]
            if who:
                await store.touch_many(who, at=midnight - timedelta(days=days_ago, hours=-hour))
    for seconds in range(8, 49, 8):
        await store.touch(f"brief-{seconds}", at=now - timedelta(seconds=seconds))
        await store.kick(f"brief-{seconds}")
    await store.touch_many(users[:5])

    async def peak_recorded() -> bool:
        answer = await graphql(api, FIGURES, **figure_range(datetime.now(UTC)))
        return bool(answer["data"]["activity"][-1]["peakOnline"] >= 5)

    await eventually(peak_recorded, what="today's peak to be recorded")


def figure_range(now: datetime) -> dict[str, str]:
    return {
        "days": (now - timedelta(days=27)).isoformat(),
        "now": now.isoformat(),
        "cohorts": (now - timedelta(days=35)).date().isoformat(),
        "week": (now - timedelta(days=7)).isoformat(),
    }


async def looked_at(page: Page, png: bytes) -> dict[str, Any]:
    """The screenshot as the browser decodes it: its size, how many colours it has, and how
    many of its pixels have each of the lifecycle's colours."""
    return dict(
        await page.evaluate(
            """async ([data, wanted]) => {
              const image = new Image();
              image.src = "data:image/png;base64," + data;
              await image.decode();
              const canvas = document.createElement("canvas");
              canvas.width = image.width; canvas.height = image.height;
              const context = canvas.getContext("2d");
              context.drawImage(image, 0, 0);
              const pixels = context.getImageData(0, 0, image.width, image.height).data;
              const colors = new Set();
              const found = wanted.map(() => 0);
              for (let i = 0; i < pixels.length; i += 4) {
                colors.add((pixels[i] << 16) | (pixels[i + 1] << 8) | pixels[i + 2]);
                wanted.forEach(([r, g, b], k) => {
                  if (pixels[i] === r && pixels[i + 1] === g && pixels[i + 2] === b) found[k]++;
                });
              }
              return { width: image.width, height: image.height, colors: colors.size, found };
            }""",
            [base64.b64encode(png).decode(), LIFECYCLE_RGB],
        )
    )


async def titles(page: Page, chart: str) -> list[str]:
    found: list[str] = await page.eval_on_selector_all(
        f"#{chart} title", "(all) => all.map((title) => title.textContent)"
    )
    return found


@pytest.mark.parametrize(
    "viewport",
    [{"width": 1100, "height": 900}, {"width": 390, "height": 844}],
    ids=["desktop", "phone"],
)
async def test_the_charts_show_the_apis_figures_at_desktop_and_phone_widths(
    browser: Browser, api: Service, store_of_api: PresenceStore, viewport: dict[str, int]
) -> None:
    await backfill_weeks(store_of_api, api, datetime.now(UTC))
    page, problems = await open_dashboard(browser, api, viewport=viewport)
    for chart in CHARTS:
        await page.wait_for_function(
            f"document.querySelectorAll('#{chart} rect').length > 0", timeout=5000
        )
    answer = (await graphql(api, FIGURES, **figure_range(datetime.now(UTC))))["data"]

    for chart in CHARTS:
        heading = await page.inner_text(f"#{chart} >> xpath=.. >> h2")
        assert heading, chart
        assert await page.get_attribute(f"#{chart}", "aria-labelledby"), chart
        assert await page.locator(f"#{chart} text").count() > 0, chart  # its axis labels
        box = await page.locator(f"#{chart}").bounding_box()
        assert box is not None
        assert box["width"] > 200, chart
        assert box["height"] > 50, chart
        assert box["x"] >= 0, chart
        assert box["x"] + box["width"] <= viewport["width"], chart
        seen = await looked_at(page, await page.locator(f"#{chart}").screenshot())
        assert seen["width"] == pytest.approx(box["width"], abs=1), chart
        assert seen["height"] == pytest.approx(box["height"], abs=1), chart
        assert seen["colors"] > 3, chart  # drawn, not blank
        if chart == "days-chart":
            assert all(count > 0 for count in seen["found"]), "new, returning and resurrected"
    overflow = await page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
    assert overflow <= 0

    # The values the charts say are the API's, for the same data.
    days = await titles(page, "days-chart")
    past = [day for day in answer["activity"][:-1] if day["newUsers"] and day["returningUsers"]]
    assert len(past) > 10
    for day in past:
        assert f"{day['start'][:10]}: {day['newUsers']} new" in days
        assert f"{day['start'][:10]}: {day['returningUsers']} returning" in days
    cells = await titles(page, "retention-chart")
    cohorts = [cohort for cohort in answer["retention"] if cohort["size"]]
    assert len(cohorts) >= 4
    for cohort in cohorts:
        day = cohort["start"][:10]
        for k, count in enumerate(cohort["retained"]):
            later = "first week" if k == 0 else "1 week later" if k == 1 else f"{k} weeks later"
            percent = math.floor(count / cohort["size"] * 100 + 0.5)
            assert f"Week of {day}, {later}: {count} of {cohort['size']} ({percent}%)" in cells
    sticky = answer["stickiness"]
    bars = await titles(page, "stickiness-chart")
    for k, users in enumerate(sticky["activeDays"], start=1):
        if users:
            assert f"Active on {k} of {sticky['days']} days: {users} users" in bars
    assert float(await page.inner_text("#dau-mau")) == pytest.approx(sticky["ratio"], abs=0.005)
    periods = answer["onlinePeriods"]
    assert periods["count"] == 6
    assert await page.inner_text("#periods-count") == "6"
    histogram = await titles(page, "periods-chart")
    assert sum(int(t.split(": ")[1].split()[0]) for t in histogram) == 6
    assert (await page.inner_text("#p50")).endswith(" s")  # periods of 8 to 48 seconds
    peaks = await titles(page, "peaks-chart")
    today = answer["activity"][-1]
    assert any(
        t.startswith(f"{today['start'][:10]}: {today['peakOnline']} online at the peak")
        for t in peaks
    )
    assert problems == []


async def test_every_chart_has_something_to_show_with_the_demos_data(
    browser: Browser, api: Service, store_of_api: PresenceStore
) -> None:
    await fill(store_of_api, 300, TEST_SETTINGS, random.Random(3))  # noqa: S311 - sample data
    page, problems = await open_dashboard(browser, api, viewport={"width": 1100, "height": 900})
    for chart in CHARTS:
        await page.wait_for_function(
            f"document.querySelectorAll('#{chart} rect').length > 0", timeout=5000
        )
    days = " ".join(await titles(page, "days-chart"))
    for kind in ("new", "returning", "resurrected", "dormant"):
        assert days.count(f" {kind}") >= 20, kind  # on most of the 28 days
    hours = {title.split(": ")[0] for title in await titles(page, "hours-chart")}
    assert len(hours) >= 40  # of 48
    cells = await titles(page, "retention-chart")
    shares = [int(title.rsplit("(", 1)[1].rstrip("%)")) for title in cells]
    assert len(shares) >= 15
    assert sum(1 for share in shares if 0 < share < 95) >= 5  # cohorts that shrink
    assert len(await titles(page, "stickiness-chart")) >= 15  # of 28 counts of days
    assert 0 < float(await page.inner_text("#dau-mau")) < 1
    assert len(await titles(page, "periods-chart")) >= 5
    assert int(await page.inner_text("#periods-count")) >= 20
    assert len(await titles(page, "peaks-chart")) >= 27  # every day's peak, today's perhaps not yet
    assert problems == []
