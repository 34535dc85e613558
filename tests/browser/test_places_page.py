"""The places page in a real browser (Debian's Chromium, driven by Playwright), against the
whole service on a real port: two tabs on one place see each other, see each other's cursor
move, and see a closed tab leave; with JWTs each member is named by their user id; a tab alone
says what to do."""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable
from typing import Any

import pytest
from playwright.async_api import Browser, Page

from gql_presence.app import create_app
from gql_presence.settings import Settings
from tests.conftest import ClientFactory, graphql
from tests.helpers import SECURED, Service, eventually, user_token

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


@pytest.fixture
async def secured_service(
    aiohttp_client: ClientFactory, deployment: Settings, http_redis: Any
) -> Service:
    settings = dataclasses.replace(SECURED, redis_url=deployment.redis_url)
    return await aiohttp_client(create_app(settings))


async def chips(page: Page) -> list[str]:
    texts: list[str] = await page.locator("[data-member]").all_text_contents()
    return sorted(texts)


async def test_with_jwts_each_member_is_named_by_their_user_id_and_a_lone_tab_says_what_to_do(
    browser: Browser, secured_service: Service
) -> None:
    pages = []
    for user in ("ann", "bob"):
        token = user_token(user, places=["doc:*"])
        page, problems = await open_place(browser, secured_service, f"doc:1&token={token}")
        pages.append((page, problems))
        if user == "ann":  # alone: the board says how to see someone
            hint = page.locator("#hint")
            assert await hint.is_visible()
            assert "another tab" in (await hint.text_content() or "")
    (anns, ann_problems), (bobs, bob_problems) = pages
    await eventually(lambda: _equals(chips(anns), ["ann (you)", "bob"]), 10, "bob at ann's")
    await eventually(lambda: _equals(chips(bobs), ["ann", "bob (you)"]), 10, "ann at bob's")
    assert not await anns.locator("#hint").is_visible()
    assert ann_problems == bob_problems == []


async def _equals(value: Awaitable[list[str]], expected: list[str]) -> bool:
    return await value == expected


async def test_a_tab_without_a_token_on_a_secured_service_says_where_the_token_goes(
    browser: Browser, secured_service: Service
) -> None:
    page = await browser.new_page()
    await page.goto(str(secured_service.make_url("/places")) + "#place=doc:1")
    await page.wait_for_function(
        "document.getElementById('error').textContent.includes('/places#place=<id>&token=')"
    )
