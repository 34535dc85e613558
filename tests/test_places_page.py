"""The places page in a real browser (Debian's Chromium, driven by Playwright), against the
whole service on a real port: two tabs on one place see each other, see each other's cursor
move, and see a closed tab leave."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.async_api import Browser, Page

from gql_presence.app import create_app
from gql_presence.settings import Settings
from tests.conftest import ClientFactory, graphql
from tests.helpers import Service

pytestmark = pytest.mark.slow  # a browser


@pytest.fixture
async def service(aiohttp_client: ClientFactory, deployment: Settings, http_redis: Any) -> Service:
    return await aiohttp_client(create_app(deployment))


async def open_place(browser: Browser, service: Service, place: str) -> tuple[Page, list[str]]:
    page = await browser.new_page(viewport={"width": 800, "height": 600})
    problems: list[str] = []
    page.on("pageerror", lambda error: problems.append(str(error)))
    await page.goto(str(service.make_url("/places")) + f"#place={place}")
    await page.wait_for_function("document.getElementById('status').textContent === 'live'")
    return page, problems


async def test_two_tabs_on_a_place_see_each_others_cursor_and_leaving(
    browser: Browser, service: Service
) -> None:
    first, first_problems = await open_place(browser, service, "board-1")
    second, second_problems = await open_place(browser, service, "board-1")
    # Each sees both members.
    for page in (first, second):
        await page.wait_for_function("document.querySelectorAll('[data-member]').length === 2")
    await first.mouse.move(200, 300)
    await first.mouse.move(240, 320)
    # The second tab draws the first's cursor where it is, relative to the board (3rem down).
    cursor = second.locator("[data-cursor]")
    await cursor.wait_for()
    await second.wait_for_function(
        "(() => { const c = document.querySelector('[data-cursor]');"
        " return c && c.style.left === '240px'; })()"
    )
    members = await graphql(
        service, '{ placeMembers(placeId: "board-1") { totalCount nodes { state } } }'
    )
    assert members["data"]["placeMembers"]["totalCount"] == 2
    # What the service keeps is the moved tab's last position, as the other tab drew it.
    assert [n["state"]["x"] for n in members["data"]["placeMembers"]["nodes"]] in (
        [240, None],
        [None, 240],
    )
    await first.close()
    await second.wait_for_function("document.querySelectorAll('[data-member]').length === 1")
    assert await second.locator("[data-cursor]").count() == 0
    assert first_problems == []
    assert second_problems == []
