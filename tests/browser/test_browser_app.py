"""A frontend on another origin, in Chromium: a page served from another port queries and
mutates with fetch and an Authorization header, follows presenceChanged over a WebSocket with
the graphql-ws client, keeps its user online with presenceSession until the tab is closed, and
runs README.md's JavaScript as written; a tab that another tab hides makes its user AWAY to a
friend's page until it is shown. Without PRESENCE_CORS_ORIGINS the same page is refused."""

from __future__ import annotations

import dataclasses
import itertools
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from playwright.async_api import Browser, BrowserContext, Page
from pytest_aiohttp import AiohttpServer

from gql_presence.app import create_app
from gql_presence.settings import Settings
from gql_presence.store import PresenceStore
from gql_presence.store.client import AnyRedis
from tests.helpers import (
    BACKEND_TOKEN,
    FIELDS,
    SECURED,
    SOON_S,
    documented_snippets,
    eventually,
    subscribed,
    user_token,
)

pytestmark = pytest.mark.slow  # a browser

# The page a frontend's build would serve; graphql-ws straight from its package, by import map.
PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>friends</title>
<script type="importmap">{"imports": {"graphql-ws": "/graphql-ws/client.js"}}</script>
</head><body><ul id="friends"></ul></body></html>"""

CALL = """async ({ url, query, token }) => {
  const response = await fetch(url, {
    method: "POST",
    headers: { "Content-Type": "application/json", Authorization: `Bearer ${token}` },
    body: JSON.stringify({ query }),
  });
  return response.json();
}"""

SUBSCRIBE = """async ({ url, token }) => {
  const { createClient } = await import("graphql-ws");
  window.events = [];
  const client = createClient({ url, connectionParams: { Authorization: `Bearer ${token}` } });
  client.subscribe(
    { query: 'subscription { presenceChanged(friendsOf: "alice") { userId kind online } }' },
    { next: ({ data }) => window.events.push(data.presenceChanged),
      error: (e) => window.events.push({ error: String(e.reason || e.message || e) }),
      complete: () => {} },
  );
}"""

# As README.md's frontend holds its user's session: one subscription, one id per tab.
HOLD_SESSION = """async ({ url, token }) => {
  const { createClient } = await import("graphql-ws");
  window.session = [];
  const client = createClient({ url, connectionParams: { Authorization: `Bearer ${token}` } });
  client.subscribe(
    { query: "subscription($s: ID!) { presenceSession(sessionId: $s) { live endReason } }",
      variables: { s: crypto.randomUUID() } },
    { next: ({ data }) => window.session.push(data.presenceSession),
      error: (e) => window.session.push({ error: String(e.reason || e.message || e) }),
      complete: () => {} },
  );
}"""

Serve = Callable[..., Awaitable[tuple[str, str]]]

EVENT_KINDS = {"ONLINE", "OFFLINE", "KICKED"}


def is_presence_event(change: Any) -> bool:
    """Whether `change` is one PresenceEvent with at least `{ userId kind online }`, those
    non-null, and a `cursor` string when selected (the pages' snippets resume with it)."""
    return (
        isinstance(change, dict)
        and {"userId", "kind", "online"} <= change.keys()
        and isinstance(change.get("cursor", ""), str)
        and isinstance(change["userId"], str)
        and change["kind"] in EVENT_KINDS
        and isinstance(change["online"], bool)
    )


@pytest.fixture
async def serve(
    aiohttp_server: AiohttpServer, js_clients: Path, deployment: Settings, http_redis: AnyRedis
) -> Serve:
    """Serves the page on one port and the service on another; returns (page URL, service
    URL). `listed` says whether the page's origin is in PRESENCE_CORS_ORIGINS."""

    async def page(request: web.Request) -> web.Response:
        return web.Response(text=PAGE, content_type="text/html")

    async def start(*, listed: bool, secured: bool = True) -> tuple[str, str]:
        site = web.Application()
        site.router.add_get("/", page)
        site.router.add_static("/graphql-ws", js_clients / "node_modules" / "graphql-ws" / "dist")
        frontend: TestServer = await aiohttp_server(site)
        origin = str(frontend.make_url("")).rstrip("/")
        base = SECURED if secured else deployment
        settings = dataclasses.replace(
            base, redis_url=deployment.redis_url, cors_origins=(origin,) if listed else ()
        )
        service: TestServer = await aiohttp_server(create_app(settings))
        return str(frontend.make_url("/")), str(service.make_url("/graphql"))

    return start


async def opened(browser: Browser, url: str) -> Page:
    page = await browser.new_page()
    await page.goto(url)
    return page


async def test_a_page_on_another_origin_queries_mutates_and_subscribes(
    serve: Serve, browser: Browser, deployment: Settings, http_redis: AnyRedis
) -> None:
    page_url, service = await serve(listed=True)
    page = await opened(browser, page_url)
    alice = user_token("alice")

    async def call(query: str, token: str) -> Any:
        return await page.evaluate(CALL, {"url": service, "query": query, "token": token})

    touched = await call('mutation { touch(userId: "alice") { online } }', BACKEND_TOKEN)
    assert touched == {"data": {"touch": {"online": True}}}
    read = await call('{ presence(userId: "alice") { online } }', alice)
    assert read == {"data": {"presence": {"online": True}}}

    store = PresenceStore(http_redis, deployment)
    await store.add_friends("alice", ["bob"])
    sessions = itertools.count()  # a kicked session id is refused for a while
    await page.evaluate(SUBSCRIBE, {"url": service.replace("http", "ws", 1), "token": alice})

    async def bob_seen() -> bool:
        await store.touch("bob", f"s{next(sessions)}")
        await store.kick("bob")
        events = await page.evaluate("window.events")
        assert all(map(is_presence_event, events)), events  # no error, no null
        return any(e["userId"] == "bob" for e in events)

    await eventually(bob_seen, 10, "bob's change in the page")


async def test_without_the_setting_the_same_page_is_refused(serve: Serve, browser: Browser) -> None:
    page_url, service = await serve(listed=False)
    page = await opened(browser, page_url)
    refused = await page.evaluate(
        f"""async () => {{
          try {{ await ({CALL})({{ url: "{service}", query: "{{ __typename }}", token: "x" }}); }}
          catch (error) {{ return String(error); }}
          return "answered";
        }}"""
    )
    assert "Failed to fetch" in refused
    await page.evaluate(SUBSCRIBE, {"url": service.replace("http", "ws", 1), "token": "x"})
    await eventually(lambda: page.evaluate("window.events.length > 0"), 10, "the refused WebSocket")
    assert "error" in (await page.evaluate("window.events"))[0]


# What a page runs: Node's programs (the webhook receiver of docs/operations.md, which
# tests/webhooks/test_webhook_receivers.py runs) import its `node:` modules.
READMES_JAVASCRIPT = [
    s
    for s in documented_snippets()
    if s.language in {"js", "javascript"} and 'from "node:' not in s.code
]


async def test_the_readmes_javascript_runs_as_written_in_a_page_on_another_origin(
    serve: Serve, browser: Browser, deployment: Settings, http_redis: AnyRedis
) -> None:
    assert len(READMES_JAVASCRIPT) >= 2
    page_url, service = await serve(listed=True, secured=False)  # as the README's open mode
    page = await opened(browser, page_url)
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    # What the README's page would have: a token (none in open mode), and a list to update.
    # A function, not statements: Playwright calls an expression whose value is a function,
    # and statements ending in `window.updateFriend = ...` would have called updateFriend(null).
    await page.evaluate(
        "() => { window.token = undefined; window.seen = [];"
        " window.updateFriend = (change) => { window.seen.push(change); };"
        " window.showOnlineFriends = (nodes) => { window.read = nodes; }; }"
    )
    address = service.removeprefix("http://").removesuffix("/graphql")
    for number, snippet in enumerate(READMES_JAVASCRIPT):
        code = snippet.code.replace("127.0.0.1:8080", address)
        await page.add_script_tag(content=f"{code}\nwindow.ran{number} = true;", type="module")
        await eventually(
            lambda n=number: page.evaluate(f"window.ran{n} === true || undefined"),
            10,
            f"{snippet.where} to run",
        )
        assert errors == [], f"{snippet.where}: {errors}"

    store = PresenceStore(http_redis, deployment)
    await store.add_friends("alice", ["bob"])
    sessions = itertools.count()  # a kicked session id is refused for a while

    async def bob_seen() -> bool:
        await store.touch("bob", f"s{next(sessions)}")
        await store.kick("bob")
        seen = await page.evaluate("window.seen")
        # Every change the page is given is an event as the schema types it: never null.
        assert all(map(is_presence_event, seen)), seen
        return any(change["userId"] == "bob" for change in seen)

    await eventually(bob_seen, 10, "the README's subscription to update the page")


async def test_closing_the_tab_that_holds_a_session_is_offline_long_before_the_ttl(
    serve: Serve, browser: Browser, deployment: Settings, http_redis: AnyRedis
) -> None:
    page_url, service = await serve(listed=True)
    socket_url = service.replace("http", "ws", 1)
    store = PresenceStore(http_redis, deployment)
    everyone = f"subscription {{ presenceChanged(all: true) {{ {FIELDS} }} }}"
    async with subscribed(socket_url, everyone, authorization=f"Bearer {BACKEND_TOKEN}") as watcher:
        sessions = itertools.count()  # a kicked session id is refused for a while

        async def watching() -> bool:
            await store.touch("probe", f"s{next(sessions)}")
            await store.kick("probe")
            return not watcher.events.empty()

        await eventually(watching, 10, "the watcher to subscribe")
        page = await opened(browser, page_url)
        await page.evaluate(HOLD_SESSION, {"url": socket_url, "token": user_token("alice")})
        await eventually(lambda: page.evaluate("window.session.length > 0"), 10, "the session")
        assert await page.evaluate("window.session") == [{"live": True, "endReason": None}]

        async def alices_next() -> dict[str, Any]:
            while (event := await watcher.next(within_s=SOON_S))["userId"] != "alice":
                pass
            return event

        assert (await alices_next())["kind"] == "ONLINE"
        started = time.monotonic()
        await page.close()
        offline = await alices_next()
        assert (offline["kind"], offline["online"]) == ("OFFLINE", False)
        assert time.monotonic() - started < SOON_S  # ended by the page's close, not by the TTL


# bob's friends panel: his friends' changes, with their status.
FOLLOW_BOBS_FRIENDS = """async ({ url, token }) => {
  const { createClient } = await import("graphql-ws");
  window.events = [];
  const client = createClient({ url, connectionParams: { Authorization: `Bearer ${token}` } });
  client.subscribe(
    { query: `subscription { presenceChanged(friendsOf: "bob") {
        userId kind status customStatus { text } } }` },
    { next: ({ data }) => window.events.push(data.presenceChanged),
      error: (e) => window.events.push({ error: String(e.reason || e.message || e) }),
      complete: () => {} },
  );
}"""

HOLDING_SNIPPET = next(s for s in READMES_JAVASCRIPT if "presenceSession(" in s.code)


@dataclasses.dataclass
class Tabs:
    """ann's tabs, in one window of a browser whose tabs hide one another, and bob's friends
    panel in a window of its own, each page from the frontend's origin."""

    window: BrowserContext
    bobs: Page
    socket_url: str
    page_url: str
    problems: list[str]

    async def holding_anns_session(self, page: Page) -> None:
        """Runs README.md's presenceSession code in `page`, signed in as ann."""
        page.on("pageerror", lambda error: self.problems.append(str(error)))
        page.on("console", lambda m: self.problems.append(m.text) if m.type == "error" else None)
        await page.goto(self.page_url)
        await page.evaluate(
            "(token) => { window.getUserJwt = async () => token;"
            " window.showEnded = (reason) => console.error('ended', reason); }",
            user_token("ann"),
        )
        url = self.socket_url
        code = HOLDING_SNIPPET.code.replace("wss://presence.example.com/graphql", url)
        await page.add_script_tag(content=code, type="module")

    async def seen(self, *expected: tuple[str, str]) -> None:
        """Waits until bob's panel has shown exactly these (kind, status) of ann's."""

        async def arrived() -> bool:
            events = await self.bobs.evaluate("window.events")
            assert all("error" not in e for e in events), events
            return [(e["kind"], e["status"]) for e in events if e["userId"] == "ann"] == list(
                expected
            )

        await eventually(arrived, 5, f"bob's panel to show ann's {list(expected)}")


@pytest.fixture
async def tabs(
    serve: Serve, tabbed_browser: Browser, deployment: Settings, http_redis: AnyRedis
) -> Tabs:
    page_url, service = await serve(listed=True)
    socket_url = service.replace("http", "ws", 1)
    store = PresenceStore(http_redis, deployment)
    await store.add_friends("bob", ["ann", "probe"])
    bobs = await (await tabbed_browser.new_context()).new_page()  # another window
    await bobs.goto(page_url)
    await bobs.evaluate(FOLLOW_BOBS_FRIENDS, {"url": socket_url, "token": user_token("bob")})
    sessions = itertools.count()  # a kicked session id is refused for a while

    async def following() -> bool:
        await store.touch("probe", f"s{next(sessions)}")
        await store.kick("probe")
        return bool(await bobs.evaluate("window.events.length > 0"))

    await eventually(following, 10, "bob's panel to subscribe")
    return Tabs(tabbed_browser.contexts[0], bobs, socket_url, page_url, [])


async def test_a_hidden_tab_is_away_to_a_friend_and_online_again_when_shown(tabs: Tabs) -> None:
    anns = tabs.window.pages[0]  # the only tab of its window
    await tabs.holding_anns_session(anns)
    await tabs.seen(("ONLINE", "ONLINE"))

    # Another tab opened over it hides it, as a user switching tabs does.
    cover = await tabs.window.new_page()
    assert await anns.evaluate("document.visibilityState") == "hidden"
    await tabs.seen(("ONLINE", "ONLINE"), ("STATUS", "AWAY"))

    await anns.bring_to_front()
    assert await anns.evaluate("document.visibilityState") == "visible"
    await tabs.seen(("ONLINE", "ONLINE"), ("STATUS", "AWAY"), ("STATUS", "ONLINE"))
    await cover.close()
    assert tabs.problems == []


async def test_a_session_opened_in_a_hidden_tab_is_away_until_the_tab_is_shown(
    tabs: Tabs,
) -> None:
    anns = tabs.window.pages[0]
    cover = await tabs.window.new_page()
    assert await anns.evaluate("document.visibilityState") == "hidden"
    await tabs.holding_anns_session(anns)  # a session starts active
    await tabs.seen(("ONLINE", "ONLINE"), ("STATUS", "AWAY"))

    await cover.close()
    assert await anns.evaluate("document.visibilityState") == "visible"
    await tabs.seen(("ONLINE", "ONLINE"), ("STATUS", "AWAY"), ("STATUS", "ONLINE"))
    assert tabs.problems == []
