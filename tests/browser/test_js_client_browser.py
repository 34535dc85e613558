"""clients/js (gql-presence-client) as a browser app uses it: the package tsc built, served to a
page on another origin with graphql-ws by an import map, in Debian's Chromium, against the
service. Two pages in one place see each other join, move a cursor and leave; a hidden tab makes
its user AWAY to the other page; the service restarted under them, both pages come back and
their maps equal placeMembers and presences read afresh, and say meanwhile that they show the
last known; a kicked page stops and says why; a refused token is told at once, with the
service's reason; README.md's page runs as written against the service as README.md starts it."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import shlex
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from playwright.async_api import Browser, Page
from pytest_aiohttp import AiohttpServer

from gql_presence.app import create_app
from gql_presence.running.redis_server import free_port
from gql_presence.settings import Settings
from gql_presence.store import PresenceStore
from gql_presence.store.client import AnyRedis
from gql_presence.store.models import ChosenStatus
from tests.helpers import (
    BACKEND_TOKEN,
    SECURED,
    eventually,
    readme_snippets,
    run_service,
    stop,
    user_token,
    wait_until_serving,
)

pytestmark = pytest.mark.slow  # a browser

PLACE = "doc:42"

# A frontend's page: the client from its built package, graphql-ws beside it, by import map.
PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>who is here</title>
<script type="importmap">{"imports": {
  "gql-presence-client": "/client/index.js", "graphql-ws": "/graphql-ws/client.js"}}</script>
</head><body style="margin:0;height:100vh"><p id="why"></p></body></html>"""

# What the page does with the client: its user online, in the place with a name and a cursor,
# and the presence of the user's friends; window.view() tells the test what the page shows.
START = """async ({ url, token, name, tokens = [] }) => {
  const { createPresenceClient } = await import("gql-presence-client");
  // The page's sockets, so that a test can drop one as a network would.
  const Native = window.WebSocket;
  window.sockets = [];
  window.WebSocket = class extends Native {
    constructor(...args) { super(...args); sockets.push(this); }
  };
  // The app's token function: `tokens` first (short-lived ones, for a test), then `token`; one
  // the service refuses while window.refuse is set.
  window.tokensAsked = 0;
  const fresh = () => {
    window.tokensAsked++;
    return window.refuse ? "forged" : tokens.shift() ?? token;
  };
  const client = createPresenceClient({ url, token: fresh, backoff: { baseMs: 200 } });
  const hold = client.holdPresence({ device: "web" });
  const place = client.joinPlace("doc:42", { state: { name } });
  const follow = client.followUsers({ friendsOf: name });
  window.mine = client.myStatus();
  window.reopen = () => {  // the tab's session opened on another socket, as a copied tab does
    const other = createPresenceClient({ url, token: () => token });
    return other.holdPresence({ sessionId: hold.sessionId });
  };
  const why = document.getElementById("why");
  window.log = [];
  client.on("connection", (state) => log.push(`connection ${state}`));
  client.on("error", (e) => log.push(`error ${e.code} ${e.closeCode}: ${e.message}`));
  follow.on("error", (e) => log.push(`follow error ${e.code ?? e.closeCode}: ${e.message}`));
  place.onJoin((m) => log.push(`join ${m.userId}`));
  place.onLeave((m) => log.push(`leave ${m.userId}`));
  hold.on("ended", (reason, error) => { why.textContent = `ended: ${reason ?? error?.code}`; });
  place.on("ended", (reason) => log.push(`place ended: ${reason}`));
  addEventListener("pointermove", (e) => place.setState({ name, x: e.clientX, y: e.clientY }));
  window.view = () => ({
    members: [...place.members.values()]
      .map((m) => ({ userId: m.userId, sessionId: m.sessionId, state: m.state }))
      .sort((a, b) => a.userId.localeCompare(b.userId)),
    presences: Object.fromEntries([...follow.getSnapshot()].map(([id, p]) => [id, p.status])),
    live: hold.getSnapshot().live && place.getSnapshot().live,
    // What each of the page's snapshots says of itself: live, or last known.
    stale: {
      hold: hold.getSnapshot().stale, place: place.getSnapshot().stale,
      follow: follow.getSnapshot().stale, mine: mine.getSnapshot()?.stale ?? null,
    },
    anyLive: hold.getSnapshot().live || place.getSnapshot().live,
    errors: [hold.getSnapshot().error?.message ?? null, place.getSnapshot().error?.message ?? null],
    idle: hold.getSnapshot().idle,
    mine: mine.getSnapshot()?.status ?? null,
    sessionId: hold.sessionId,
  });
  // The reads of the friends' presence and of the place's members made so far.
  window.reads = () => ({ friends: follow.reads, place: place.reads });
}"""

REACT_PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>react</title></head>
<body style="margin:0"><div id="root"></div></body></html>"""

MEMBERS = """query($place: ID!) { placeMembers(placeId: $place, first: 100) {
  nodes { userId sessionId state } } }"""
PRESENCES = 'query { presences(userIds: ["ann", "bob"]) { userId status } }'


@dataclasses.dataclass
class Site:
    """The frontend's origin and the service, which `restart` stops and starts on its port."""

    page_url: str
    service: TestServer
    settings: Settings
    start_service: Callable[..., Awaitable[TestServer]]

    @property
    def socket_url(self) -> str:
        return str(self.service.make_url("/graphql")).replace("http", "ws", 1)

    async def restart(
        self, while_down: Callable[[], Awaitable[None]], settings: Settings | None = None
    ) -> None:
        """Stops the service, runs `while_down`, and starts it again on its port (with
        `settings` when given)."""
        port = self.service.port
        await self.service.close()
        await while_down()
        self.service = await self.start_service(settings or self.settings, port=port)

    async def backend(self, query: str, **variables: Any) -> dict[str, Any]:
        async with (
            aiohttp.ClientSession() as session,
            session.post(
                self.service.make_url("/graphql"),
                json={"query": query, "variables": variables},
                headers={"Authorization": f"Bearer {BACKEND_TOKEN}"},
            ) as response,
        ):
            body: dict[str, Any] = await response.json()
        assert "errors" not in body, body
        data: dict[str, Any] = body["data"]
        return data

    @property
    def page_origin(self) -> str:
        return self.page_url.rstrip("/")

    async def opened(self, page: Page, user: str, first_tokens: tuple[str, ...] = ()) -> Page:
        problems: list[str] = []
        page.on("pageerror", lambda error: problems.append(str(error)))
        await page.goto(self.page_url)
        token = user_token(user, places=["doc:*"])
        arguments = {"url": self.socket_url, "token": token, "name": user}
        await page.evaluate(START, {**arguments, "tokens": list(first_tokens)})
        await eventually(lambda: page.evaluate("window.view().live"), 10, f"{user}'s page live")
        assert problems == []
        return page


@pytest.fixture
async def site(
    aiohttp_server: AiohttpServer,
    built_js_client: Path,
    deployment: Settings,
    http_redis: AnyRedis,
) -> Site:
    async def page(request: web.Request) -> web.Response:
        return web.Response(text=PAGE, content_type="text/html")

    async def react_page(request: web.Request) -> web.Response:
        return web.Response(text=REACT_PAGE, content_type="text/html")

    frontend = web.Application()
    frontend.router.add_get("/", page)
    frontend.router.add_get("/react", react_page)
    # The React app on the hooks (clients/js/fixtures/react-app.js), bundled by esbuild.
    frontend.router.add_static("/build", built_js_client / "build")
    frontend.router.add_static("/client", built_js_client / "dist")
    graphql_ws = built_js_client / "node_modules" / "graphql-ws" / "dist"
    frontend.router.add_static("/graphql-ws", graphql_ws)
    served: TestServer = await aiohttp_server(frontend)
    origin = str(served.make_url("")).rstrip("/")
    settings = dataclasses.replace(SECURED, redis_url=deployment.redis_url, cors_origins=(origin,))
    store = PresenceStore(http_redis, deployment)
    await store.add_friends("ann", ["bob"])

    async def start_service(settings: Settings, **kwargs: Any) -> TestServer:
        server: TestServer = await aiohttp_server(create_app(settings), **kwargs)
        return server

    return Site(str(served.make_url("/")), await start_service(settings), settings, start_service)


SNIPPETS = readme_snippets()
README_PAGE = next(s for s in SNIPPETS if s.language == "html" and "gql-presence-client" in s.code)
# The command README.md prints beside the page: the service it runs against.
README_SERVE = SNIPPETS[SNIPPETS.index(README_PAGE) - 1]
# The app's origin in README.md's example, which the test's app server replaces.
README_ORIGIN = "http://localhost:5173"


def readme_settings(origin: str) -> dict[str, str]:
    """The settings of README.md's command beside the page, for a page served from `origin`."""
    words = shlex.split(README_SERVE.code)
    assignments = list(itertools.takewhile(lambda word: "=" in word, words))
    assert words[len(assignments) :] == [".venv/bin/gql-presence", "serve"], README_SERVE.code
    settings = dict(word.split("=", 1) for word in assignments)
    assert README_ORIGIN in settings.get("PRESENCE_CORS_ORIGINS", ""), README_SERVE.code
    return {name: value.replace(README_ORIGIN, origin) for name, value in settings.items()}


async def view(page: Page) -> dict[str, Any]:
    seen: dict[str, Any] = await page.evaluate("window.view()")
    return seen


def names(seen: dict[str, Any]) -> list[str]:
    return [m["userId"] for m in seen["members"]]


async def test_two_pages_see_each_other_join_move_and_leave(site: Site, browser: Browser) -> None:
    anns = await site.opened(await browser.new_page(), "ann")
    bobs = await site.opened(await browser.new_page(), "bob")

    async def both_here() -> bool:
        return names(await view(anns)) == names(await view(bobs)) == ["ann", "bob"]

    await eventually(both_here, 10, "each page to see the other join")
    assert "join bob" in await anns.evaluate("window.log")

    await anns.mouse.move(120, 80)  # ann's cursor, as the other page sees it

    async def moved() -> bool:
        state = (await view(bobs))["members"][0]["state"]
        return bool(state == {"name": "ann", "x": 120, "y": 80})

    await eventually(moved, 10, "bob's page to see ann's cursor")
    await anns.close()

    async def left() -> bool:
        return names(await view(bobs)) == ["bob"]

    await eventually(left, 5, "bob's page to see ann leave")
    assert "leave ann" in await bobs.evaluate("window.log")


async def test_a_hidden_tab_turns_its_user_away_at_the_other_page(
    site: Site, tabbed_browser: Browser
) -> None:
    bobs = await site.opened(await (await tabbed_browser.new_context()).new_page(), "bob")
    window = tabbed_browser.contexts[0]
    anns = await site.opened(window.pages[0], "ann")

    async def ann_is(status: str) -> bool:
        return bool((await view(bobs))["presences"].get("ann") == status)

    await eventually(lambda: ann_is("ONLINE"), 10, "ann ONLINE at bob's page")
    cover = await window.new_page()  # another tab over ann's hides it
    assert await anns.evaluate("document.visibilityState") == "hidden"
    await eventually(lambda: ann_is("AWAY"), 10, "ann AWAY at bob's page")
    await cover.close()
    await eventually(lambda: ann_is("ONLINE"), 10, "ann ONLINE again at bob's page")


async def test_after_a_restart_both_pages_come_back_with_the_maps_read_afresh(
    site: Site, browser: Browser, deployment: Settings, http_redis: AnyRedis
) -> None:
    anns = await site.opened(await browser.new_page(), "ann")
    bobs = await site.opened(await browser.new_page(), "bob")
    cys = await site.opened(await browser.new_page(), "cy")
    await eventually(lambda: _equals(_names(anns), ["ann", "bob", "cy"]), 10, "cy at ann's page")
    await bobs.mouse.move(30, 40)
    store = PresenceStore(http_redis, deployment)
    # ann's page has had events of both (bob came online, then joined): it resumes after them;
    # bob's has had none of his friends' (ann was online before he came): it reads them again.
    anns_reads, bobs_reads = await settled_reads(anns), await settled_reads(bobs)

    async def while_down() -> None:
        # Changes no page hears of (there is no service to tell them): the re-read must show
        # bob BUSY, and the place's map must lose cy, who left with the old process.
        await store.set_status("bob", ChosenStatus.BUSY)
        await cys.close()
        # Meanwhile each page says that what it shows is last known, not live.
        await eventually(lambda: _last_known(anns), 10, "ann's page to say it is not live")
        await eventually(lambda: _last_known(bobs), 10, "bob's page to say it is not live")
        seen = await view(anns)
        assert names(seen) == ["ann", "bob", "cy"]  # the members it last knew
        assert seen["presences"] == {"bob": "ONLINE"}
        assert seen["mine"] == "ONLINE"  # the user's own status as last known

    await site.restart(while_down)

    await eventually(lambda: equal_to_a_fresh_read(site, anns, bobs), 20, "a fresh read's maps")
    seen = await view(anns)
    assert names(seen) == ["ann", "bob"]
    assert seen["members"][1]["state"] == {"name": "bob", "x": 30, "y": 40}  # the latest state
    assert seen["presences"] == {"bob": "BUSY"}
    assert (await view(bobs))["presences"] == {"ann": "ONLINE"}
    assert await reads(anns) == anns_reads
    assert (await reads(bobs))["friends"] > bobs_reads["friends"]
    assert (await reads(bobs))["place"] == bobs_reads["place"]


async def reads(page: Page) -> dict[str, int]:
    counted: dict[str, int] = await page.evaluate("window.reads()")
    return counted


async def settled_reads(page: Page) -> dict[str, int]:
    """The page's reads once its first ones are done: the friends read at once and again a
    second later (the client's SETTLE_MS), the place once."""

    async def settled() -> bool:
        return await reads(page) == {"friends": 2, "place": 1}

    await eventually(settled, 5, "the page's first reads")
    return await reads(page)


async def equal_to_a_fresh_read(site: Site, anns: Page, bobs: Page) -> bool:
    """Whether both pages are live and show what placeMembers and presences read now."""
    members = (await site.backend(MEMBERS, place=PLACE))["placeMembers"]["nodes"]
    fresh = sorted(members, key=lambda m: str(m["userId"]))
    presences = {p["userId"]: p["status"] for p in (await site.backend(PRESENCES))["presences"]}
    seen = {"ann": await view(anns), "bob": await view(bobs)}
    friends = {"ann": "bob", "bob": "ann"}  # each page follows its user's friends
    return all(
        s["live"]
        and not any(s["stale"].values())
        and s["members"] == fresh
        and s["presences"] == {friends[user]: presences[friends[user]]}
        for user, s in seen.items()
    )


async def test_a_dropped_socket_resumes_without_reading(site: Site, browser: Browser) -> None:
    anns = await site.opened(await browser.new_page(), "ann")
    bobs = await site.opened(await browser.new_page(), "bob")
    await eventually(lambda: _equals(_names(anns), ["ann", "bob"]), 10, "bob at ann's page")
    before = await settled_reads(anns)
    # The network drops ann's socket; bob moves and goes busy meanwhile.
    await anns.evaluate("window.sockets.at(-1).close()")
    await bobs.mouse.move(50, 60)
    await site.backend('mutation { setStatus(userId: "bob", status: BUSY) { online } }')
    await eventually(lambda: equal_to_a_fresh_read(site, anns, bobs), 20, "a fresh read's maps")
    seen = await view(anns)
    assert seen["presences"] == {"bob": "BUSY"}
    assert seen["members"][1]["state"] == {"name": "bob", "x": 50, "y": 60}
    assert await anns.evaluate("window.sockets.length") == 2  # it did reconnect
    assert await reads(anns) == before


async def test_a_cursor_past_the_feeds_retention_is_read_afresh(
    site: Site, browser: Browser, deployment: Settings, http_redis: AnyRedis
) -> None:
    anns = await site.opened(await browser.new_page(), "ann")
    bobs = await site.opened(await browser.new_page(), "bob")
    await eventually(lambda: _equals(_names(anns), ["ann", "bob"]), 10, "bob at ann's page")
    before = await settled_reads(anns)
    store = PresenceStore(http_redis, deployment)
    retention_ms = 300

    async def while_down() -> None:
        await store.set_status("bob", ChosenStatus.BUSY)
        await asyncio.sleep(2 * retention_ms / 1000)  # every cursor the pages hold expires

    # Back with a feed that keeps less than the pages were away: CURSOR_EXPIRED, then a read.
    short = dataclasses.replace(site.settings, feed_retention_ms=retention_ms)
    await site.restart(while_down, short)
    await eventually(lambda: equal_to_a_fresh_read(site, anns, bobs), 20, "a fresh read's maps")
    assert (await view(anns))["presences"] == {"bob": "BUSY"}
    after = await reads(anns)
    assert after["friends"] > before["friends"]
    assert after["place"] > before["place"]
    assert not [line for line in await anns.evaluate("window.log") if "error" in line]


async def _last_known(page: Page) -> bool:
    seen = await view(page)
    return not seen["anyLive"] and all(seen["stale"].values())


REFUSED = "The bearer token is not valid."


async def test_while_every_new_token_is_refused_the_page_says_why_and_that_it_shows_last_known(
    site: Site, browser: Browser
) -> None:
    anns = await site.opened(await browser.new_page(), "ann")
    await site.opened(await browser.new_page(), "bob")
    await eventually(lambda: _equals(_names(anns), ["ann", "bob"]), 10, "bob at ann's page")

    async def while_down() -> None:
        await anns.evaluate("window.refuse = true")  # the app's sign-in has lapsed
        await eventually(lambda: _last_known(anns), 10, "ann's page to say it is not live")

    await site.restart(while_down)

    async def told() -> bool:
        return bool((await view(anns))["errors"] == [REFUSED, REFUSED])

    await eventually(told, 10, "the refusal in the hold's and the place's snapshots")
    seen = await view(anns)
    assert names(seen) == ["ann", "bob"]  # last known, and said to be
    assert await _last_known(anns)
    log = await anns.evaluate("window.log")
    assert log.count(f"error UNAUTHENTICATED 4403: {REFUSED}") == 1
    assert not [line for line in log if "ended" in line]  # a new token may be accepted
    # It goes on asking, with backoff; the next token accepted, the page is live again.
    await anns.evaluate("window.refuse = false")

    async def live_again() -> bool:
        seen = await view(anns)
        return bool(
            seen["live"] and not any(seen["stale"].values()) and seen["errors"] == [None, None]
        )

    await eventually(live_again, 15, "ann's page live again")


# A page whose token the service refuses: a fixed one, or a function (`tokens` in turn).
REFUSED_START = """async ({ url, token, tokens }) => {
  const { createPresenceClient } = await import("gql-presence-client");
  window.tokensAsked = 0;
  const asked = () => { window.tokensAsked++; return tokens.length > 1 ? tokens.shift() : tokens[0]; };
  const client = createPresenceClient({ url, token: token ?? asked });
  window.log = [];
  client.on("error", (e) => log.push(`error ${e.code} ${e.closeCode}: ${e.message}`));
  const hold = client.holdPresence();
  const place = client.joinPlace("doc:42");
  place.on("ended", (reason, error) => log.push(`place ended: ${reason} ${error?.message}`));
  hold.on("ended", (reason, error) => log.push(`hold ended: ${reason} ${error?.message}`));
  window.snapshots = () => ({ hold: hold.getSnapshot(), place: place.getSnapshot() });
}"""


async def test_a_fixed_token_refused_is_told_at_once_and_not_retried(
    site: Site, browser: Browser
) -> None:
    page = await browser.new_page()
    sockets: list[str] = []
    page.on("websocket", lambda socket: sockets.append(socket.url))
    await page.goto(site.page_url)
    await page.evaluate(REFUSED_START, {"url": site.socket_url, "token": "forged"})
    told = [
        f"error UNAUTHENTICATED 4403: {REFUSED}",
        f"place ended: null {REFUSED}",
        f"hold ended: null {REFUSED}",
    ]

    async def all_told() -> bool:
        return sorted(await page.evaluate("window.log")) == sorted(told)

    await eventually(all_told, 5, "the refusal told to the app and both handles ended")
    snapshots = await page.evaluate(
        "(({ hold, place }) => [hold.live, hold.error.message, place.live, place.error.message])"
        "(window.snapshots())"
    )
    assert snapshots == [False, REFUSED, False, REFUSED]
    # No new token can come: the client asks no more (a first retry would be 0.25-0.5 s on).
    await asyncio.sleep(1.5)
    assert len(sockets) == 1
    assert sorted(await page.evaluate("window.log")) == sorted(told)


async def test_a_token_function_refused_is_told_at_once_and_asked_again_with_backoff(
    site: Site, browser: Browser
) -> None:
    page = await browser.new_page()
    await page.goto(site.page_url)
    good = user_token("ann", places=["doc:*"])
    tokens = ["forged"] * 3 + [good]
    await page.evaluate(REFUSED_START, {"url": site.socket_url, "token": None, "tokens": tokens})
    await eventually(lambda: page.evaluate("window.log.length > 0"), 2, "the refusal told at once")
    assert await page.evaluate("window.log") == [f"error UNAUTHENTICATED 4403: {REFUSED}"]
    snapshots = await page.evaluate(
        "(({ hold, place }) => [hold.live, hold.ended, hold.error.message, place.live,"
        " place.ended, place.error.message])(window.snapshots())"
    )
    assert snapshots == [False, None, REFUSED, False, None, REFUSED]
    # Asked again after waits that double (0.25-0.5 s, then 0.5-1 s, ...): the fourth token,
    # a good one, is accepted; the refusal was told once.
    await eventually(
        lambda: page.evaluate("window.snapshots().place.live && window.snapshots().hold.live"),
        15,
        "held once a token is accepted",
    )
    started = await page.evaluate("window.tokensAsked")
    assert started == 4
    assert await page.evaluate("window.log") == [f"error UNAUTHENTICATED 4403: {REFUSED}"]
    assert await page.evaluate("window.snapshots().place.error") is None


async def test_a_kicked_page_stops_and_says_why(
    site: Site, browser: Browser, deployment: Settings, http_redis: AnyRedis
) -> None:
    anns = await site.opened(await browser.new_page(), "ann")
    await PresenceStore(http_redis, deployment).kick("ann")
    await eventually(
        lambda: anns.evaluate("document.getElementById('why').textContent === 'ended: kicked'"),
        10,
        "the page to say it was kicked",
    )
    # The place's session ends too, told on its own subscription, after or before the other.
    await eventually(
        lambda: anns.evaluate("window.log.includes('place ended: kicked')"),
        10,
        "the place's session to end as kicked",
    )
    assert (await view(anns))["live"] is False
    # Not held again: ann stays offline.
    read = await site.backend('query { presence(userId: "ann") { online } }')
    assert read == {"presence": {"online": False}}


async def test_the_readmes_page_runs_as_written_on_another_origin_against_the_readmes_service(
    aiohttp_server: AiohttpServer, browser: Browser, tmp_path: Path
) -> None:
    """README.md's page pasted as it is into an app's page, served from the app's origin,
    against `gql-presence serve` started with the settings printed beside it (open, with its
    embedded Redis), in two tabs: ?me=ann and ?me=bob."""
    assert README_PAGE.language == "html"
    port = free_port()
    page_html = README_PAGE.code.replace("127.0.0.1:8080", f"127.0.0.1:{port}")

    async def app_page(request: web.Request) -> web.Response:
        return web.Response(text=page_html, content_type="text/html")

    frontend = web.Application()
    frontend.router.add_get("/", app_page)
    app_server: TestServer = await aiohttp_server(frontend)
    origin = str(app_server.make_url("")).rstrip("/")
    service = run_service(tmp_path, port, **readme_settings(origin))
    try:
        await asyncio.to_thread(wait_until_serving, service, port)
        problems: list[str] = []
        pages = []
        for user in ("ann", "bob"):
            page = await browser.new_page()
            page.on("pageerror", lambda error: problems.append(str(error)))
            page.on("dialog", lambda dialog: problems.append(dialog.message))
            await page.goto(f"{origin}/?me={user}")
            pages.append(page)
        anns, bobs = pages

        async def items(page: Page) -> list[str]:
            texts: list[str] = await page.locator("#here li").all_text_contents()
            return sorted(texts)

        for page in pages:
            await eventually(
                lambda p=page: _equals(items(p), ["ann", "bob"]), 10, "both users listed"
            )
        await anns.mouse.move(150, 90)
        anns_item = bobs.locator("#here li", has_text="ann")

        async def moved() -> bool:
            style = await anns_item.get_attribute("style") or ""
            return "left: 150px" in style and "top: 90px" in style

        await eventually(moved, 10, "ann's cursor to move at bob's page")
        await anns.close()
        await eventually(lambda: _equals(items(bobs), ["bob"]), 5, "ann to leave bob's page")
        assert problems == []
    finally:
        stop(service)


async def _equals(value: Awaitable[list[str]], expected: list[str]) -> bool:
    return await value == expected


async def test_a_socket_closed_for_an_expired_token_comes_back_with_a_fresh_one(
    site: Site, browser: Browser
) -> None:
    # The service allows 30 s of clock skew: this token stops being valid in 3 to 4 s.
    expiring = user_token("ann", places=["doc:*"], exp=int(time.time()) - 30 + 4)
    anns = await site.opened(await browser.new_page(), "ann", first_tokens=(expiring,))
    assert await anns.evaluate("window.tokensAsked") == 1
    # At the token's expiry the service closes the socket (4401); the client asks for a new one.
    await eventually(lambda: anns.evaluate("window.tokensAsked >= 2"), 10, "a fresh token")

    async def back() -> bool:
        seen = await view(anns)
        online = await site.backend('query { presence(userId: "ann") { online } }')
        return bool(seen["live"] and names(seen) == ["ann"] and online["presence"]["online"])

    await eventually(back, 10, "ann's page held again")
    assert await anns.evaluate("document.getElementById('why').textContent") == ""
    assert not [line for line in await anns.evaluate("window.log") if "ended" in line]


async def test_my_status_is_read_set_and_seen_by_a_friend(
    site: Site, browser: Browser, deployment: Settings, http_redis: AnyRedis
) -> None:
    anns = await site.opened(await browser.new_page(), "ann")
    bobs = await site.opened(await browser.new_page(), "bob")

    async def statuses(expected: str) -> bool:
        mine, seen = (await view(anns))["mine"], (await view(bobs))["presences"].get("ann")
        return bool(mine == expected == seen)

    await eventually(lambda: statuses("ONLINE"), 10, "ann ONLINE to herself and to bob")
    await anns.evaluate("window.mine.setStatus('BUSY')")
    await eventually(lambda: statuses("BUSY"), 10, "ann BUSY to herself and to bob")
    # Changed elsewhere (another device, a backend): the page follows the user's own id too.
    await PresenceStore(http_redis, deployment).set_status("ann", ChosenStatus.AWAY)
    await eventually(lambda: statuses("AWAY"), 10, "ann AWAY to herself and to bob")


async def test_the_react_hooks_show_the_place_the_friends_and_my_status(
    site: Site, browser: Browser
) -> None:
    problems: list[str] = []
    pages = []
    for user in ("ann", "bob"):
        page = await browser.new_page()
        page.on("pageerror", lambda error: problems.append(str(error)))
        await page.goto(f"{site.page_origin}/react")
        token = user_token(user, places=["doc:*"])
        await page.evaluate(
            "async (args) => (await import('/build/react-app.js')).start(args)",
            {"url": site.socket_url, "token": token, "name": user},
        )
        pages.append(page)
    anns, bobs = pages

    async def shown(page: Page, selector: str) -> list[str]:
        texts: list[str] = await page.locator(selector).all_text_contents()
        return sorted(texts)

    async def everything_shown() -> bool:
        ann = await shown(anns, "#members li"), await shown(anns, "#friends li")
        bob = await shown(bobs, "#members li"), await shown(bobs, "#friends li")
        mine = await anns.locator("#me").text_content()
        return (
            ann == (["ann", "bob"], ["bob ONLINE"])
            and bob == (["ann", "bob"], ["ann ONLINE"])
            and mine == "ONLINE"
        )

    await eventually(everything_shown, 10, "usePlace, usePresence and useMyStatus to show")
    await anns.mouse.move(70, 60)
    anns_item = bobs.locator("#members li", has_text="ann")
    await eventually(
        lambda: _equals_text(anns_item.get_attribute("data-x"), "70"), 10, "ann's cursor at bob's"
    )
    await anns.close()
    await eventually(
        lambda: _equals(shown(bobs, "#members li"), ["bob"]), 5, "ann to leave bob's page"
    )
    assert problems == []


async def _equals_text(value: Awaitable[str | None], expected: str) -> bool:
    return await value == expected


async def _names(page: Page) -> list[str]:
    return names(await view(page))


async def test_a_session_taken_over_elsewhere_says_replaced_and_is_not_taken_back(
    site: Site, browser: Browser
) -> None:
    anns = await site.opened(await browser.new_page(), "ann")
    await anns.evaluate("window.other = window.reopen(); undefined")
    await eventually(
        lambda: anns.evaluate("document.getElementById('why').textContent === 'ended: replaced'"),
        10,
        "the first hold to say it was replaced",
    )
    await eventually(lambda: anns.evaluate("window.other.getSnapshot().live"), 10, "the other")
    read = await site.backend('query { presence(userId: "ann") { online sessions { sessionId } } }')
    session = await anns.evaluate("window.view().sessionId")
    assert read == {"presence": {"online": True, "sessions": [{"sessionId": session}]}}
