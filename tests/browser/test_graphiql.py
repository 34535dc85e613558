"""GraphiQL at /graphql: served whole by the service (nothing from another host), under a
strict Content-Security-Policy, and working in Chromium with every other host unreachable."""

from __future__ import annotations

import dataclasses
import re
from typing import Any
from urllib.parse import quote, urlsplit

import pytest
from aiohttp.test_utils import TestClient
from playwright.async_api import Browser, Page, Route

from gql_presence.app import create_app
from gql_presence.running.redis_server import RedisServer
from tests.conftest import TEST_SETTINGS, ClientFactory, graphql
from tests.helpers import BACKEND_TOKEN, SECURED, eventually, feeds_above

Service = TestClient[Any, Any]
HTML = {"Accept": "text/html"}


def assets(page: str) -> list[str]:
    return re.findall(r'(?:src|href)="([^"]+)"', page)


async def test_the_page_and_everything_it_loads_come_from_the_service(api: Service) -> None:
    response = await api.get("/graphql", headers=HTML)
    assert response.status == 200
    page = await response.text()
    assert "unpkg.com" not in page
    # No inline script: each one is a file of this service.
    assert re.findall(r"<script(?![^>]*\bsrc=)", page) == []
    loaded = assets(page)
    assert len(loaded) == 9
    for path in loaded:
        assert not urlsplit(path).netloc, path
        asset = await api.get(f"/{path}")
        assert asset.status == 200, path
        assert len(await asset.read()) > 0


async def test_the_page_carries_a_strict_policy_with_a_fresh_nonce(api: Service) -> None:
    policies = []
    for _ in range(2):
        response = await api.get("/graphql", headers=HTML)
        policy = response.headers["Content-Security-Policy"]
        assert "default-src 'self'" in policy
        assert "script-src" not in policy  # scripts fall under default-src 'self'
        assert "unsafe-inline" not in policy
        assert "unsafe-eval" not in policy
        nonce = re.search(r"'nonce-([^']+)'", policy)
        assert nonce is not None
        assert f'nonce="{nonce[1]}"' in await response.text()
        policies.append(policy)
    assert policies[0] != policies[1]


async def test_without_graphiql_its_files_are_not_served(
    aiohttp_client: ClientFactory, redis_server: RedisServer
) -> None:
    settings = dataclasses.replace(TEST_SETTINGS, redis_url=redis_server.url, graphiql=False)
    service = await aiohttp_client(create_app(settings))
    assert (await service.get("/graphiql/vendor/graphiql.min.js")).status == 404
    assert (await service.get("/graphql", headers=HTML)).status != 200


# --- in Chromium, offline ----------------------------------------------------------------------


async def open_offline(browser: Browser, service: Service, query: str) -> tuple[Page, list[str]]:
    """Opens GraphiQL with `query` in its editor; any request to another host fails, and every
    failure, error and policy violation is collected."""
    page = await browser.new_page()
    own_host = urlsplit(str(service.make_url("/"))).netloc
    problems: list[str] = []

    async def only_the_service(route: Route) -> None:
        if urlsplit(route.request.url).netloc == own_host:
            await route.continue_()
        else:
            problems.append(f"tried another host: {route.request.url}")
            await route.abort("internetdisconnected")

    await page.route("**/*", only_the_service)
    page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda error: problems.append(str(error)))
    await page.add_init_script(
        "document.addEventListener('securitypolicyviolation', e => "
        "console.error('CSP violation: ' + e.violatedDirective + ' ' + e.blockedURI))"
    )
    await page.goto(f"{service.make_url('/graphql')}?q={quote(query)}")
    await page.wait_for_selector(".graphiql-query-editor .CodeMirror", timeout=15_000)
    return page, problems


async def run(page: Page, expected: str) -> None:
    await page.click(".graphiql-execute-button")
    await page.wait_for_function(
        "text => document.querySelector('.result-window').innerText.includes(text)",
        arg=expected,
        timeout=10_000,
    )


@pytest.mark.slow
async def test_offline_the_editor_renders_and_a_query_from_the_address_runs(
    browser: Browser, api: Service
) -> None:
    await graphql(api, 'mutation { touch(userId: "ada", sessionId: "web") { online } }')
    page, problems = await open_offline(
        browser, api, "{ onlineUsers { totalCount nodes { userId } } }"
    )
    await run(page, '"userId": "ada"')
    # The explorer plugin and a dialog (which adds a <style> element under the nonce) work.
    await page.click("button[aria-label='Show GraphiQL Explorer']")
    await page.wait_for_selector(".graphiql-explorer-root", timeout=5000)
    await page.click(".graphiql-sidebar button[aria-label='Open settings dialog']")
    await page.wait_for_selector(".graphiql-dialog", timeout=5000)
    assert problems == []


@pytest.mark.slow
async def test_the_starter_text_shows_whole_at_1280_pixels_wide(
    browser: Browser, api: Service
) -> None:
    page = await browser.new_page(viewport={"width": 1280, "height": 800})
    await page.goto(str(api.make_url("/graphql")))
    await page.wait_for_selector(".graphiql-query-editor .CodeMirror-line", timeout=15_000)
    # Each line's text ends before the editor's toolbar (the run button), which covers the
    # editor's right edge, and the editor has nothing to scroll to sideways.
    lines = await page.evaluate(
        """() => {
          const toolbar = document.querySelector('.graphiql-toolbar').getBoundingClientRect();
          const scroll = document.querySelector('.graphiql-query-editor .CodeMirror-scroll');
          return {
            overflow: scroll.scrollWidth - scroll.clientWidth,
            cut: [...document.querySelectorAll('.graphiql-query-editor .CodeMirror-line > span')]
              .filter(line => line.getBoundingClientRect().right > toolbar.left)
              .map(line => line.innerText),
            text: [...document.querySelectorAll('.graphiql-query-editor .CodeMirror-line')]
              .map(line => line.innerText).join('\\n'),
          };
        }"""
    )
    assert lines["cut"] == []
    assert lines["overflow"] <= 0
    assert "open Headers" in lines["text"]
    assert '{"Authorization": "Bearer <token>"}' in lines["text"]
    await page.close()


@pytest.mark.slow
async def test_offline_the_headers_typed_in_graphiql_authorize_queries_and_subscriptions(
    browser: Browser, aiohttp_client: ClientFactory, redis_server: RedisServer, http_redis: Any
) -> None:
    service = await aiohttp_client(
        create_app(dataclasses.replace(SECURED, redis_url=redis_server.url))
    )
    backend = {"Authorization": f"Bearer {BACKEND_TOKEN}"}

    async def touch(user_id: str) -> None:
        touch = {"query": f'mutation {{ touch(userId: "{user_id}") {{ online }} }}'}
        assert (await service.post("/graphql", json=touch, headers=backend)).status == 200

    await touch("ada")
    page, problems = await open_offline(browser, service, "{ onlineUsers { nodes { userId } } }")
    await page.click("button:has-text('Headers')")
    await page.click(".graphiql-editor-tool .graphiql-editor:not(.hidden) .CodeMirror")
    await page.keyboard.type(f'{{"Authorization": "Bearer {BACKEND_TOKEN}"}}')
    await run(page, '"userId": "ada"')
    # A subscription goes over the WebSocket, the same headers as its connection_init payload.
    await page.evaluate(
        "text => document.querySelector('.graphiql-query-editor .CodeMirror').CodeMirror"
        ".setValue(text)",
        'subscription { presenceChanged(userIds: ["bob"]) { userId kind } }',
    )
    # The page records the edited document in its address once GraphiQL has taken it in.
    await page.wait_for_function("() => location.search.includes('subscription')")
    await page.click(".graphiql-execute-button")
    await eventually(feeds_above(service, 0), what="the subscription from GraphiQL")
    await touch("bob")
    await page.wait_for_function(
        "() => document.querySelector('.result-window').innerText.includes('ONLINE')"
    )
    assert problems == []
