"""The dashboard in a real browser: Debian's Chromium, driven by Playwright, against the
whole service on a real port."""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import os
import random
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
from tests.helpers import BACKEND_TOKEN, SECURED

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
    await page.screenshot(path=str(SCREENSHOT))
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
    # Without the token it says why it shows nothing.
    page, _ = await open_dashboard(browser, api)
    await page.wait_for_function(
        "document.getElementById('error').textContent.includes('credentials')", timeout=5000
    )
