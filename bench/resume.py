"""A frontend back after a 5 s disconnect that missed 1,000 changes: resuming with the cursor
of its last event, against a fresh subscribe and read of the same state, in one run:
`python -m bench.resume [--rounds R] [--users N] [--missed M]`.

One API process on a private Redis 6.2 (bench/harness.py `service`). N users (default 1,000,
a large friend list) are followed. The client takes one event (its cursor) and goes away; 5 s
pass, during which M of the N (default all: 1,000 changes) change once (ONLINE or KICKED in
turn, made through the store). Then it follows the N users with presenceChanged, by turns:

- resume: `presenceChanged(userIds, after: <the cursor it kept>)`: the missed changes
  come first, then live ones;
- fresh: `presenceChanged(userIds)`, then `presences(userIds)` (what the browser client did
  on every reconnect before it resumed).

From the subscribe, one more followed user changes every 20 ms. The figure is the time until
the client holds the whole state and its first live event has come: for resume, that event
(which the replay precedes); for fresh, both that event and the read's answer. Each way's
time and the bytes it received, medians of the rounds, and the service's CPU per reconnect.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import statistics
import time
from typing import Any

import aiohttp

from bench.harness import Service, fmt, print_table, service
from gql_presence.running.connection import redis_client
from gql_presence.settings import Settings
from gql_presence.store import PresenceStore

AWAY_S = 5.0
MARK_EVERY_S = 0.02
MARKER = "marker"
# Whose change gives the client its cursor before it goes away: followed then, not after.
LAST_SEEN = "last-seen"
# The service's PRESENCE_SUBSCRIBER_BUFFER, which bounds what a resume replays: the 1,000
# changes missed and those the marker makes during the hand-over, with room to spare (at the
# default 1,000 such a resume is refused with CURSOR_EXPIRED, and the client reads instead).
BUFFER = 2000
SUBSCRIBE = """subscription($u: [ID!], $after: String) {
  presenceChanged(userIds: $u, after: $after) { userId kind at online status version cursor } }"""
READ = "query($u: [ID!]!) { presences(userIds: $u) { userId online status lastSeen version } }"


class Client:
    """One graphql-transport-ws socket of a frontend, and what it received."""

    def __init__(self, socket: aiohttp.ClientWebSocketResponse) -> None:
        self.socket = socket
        self.bytes = 0

    @classmethod
    async def open(cls, http: aiohttp.ClientSession, url: str) -> Client:
        socket = await http.ws_connect(f"ws://{url}", protocols=["graphql-transport-ws"])
        await socket.send_json({"type": "connection_init", "payload": {}})
        assert (await socket.receive_json())["type"] == "connection_ack"
        return cls(socket)

    async def subscribe(self, users: list[str], after: str | None) -> None:
        payload = {"query": SUBSCRIBE, "variables": {"u": users, "after": after}}
        await self.socket.send_json({"id": "1", "type": "subscribe", "payload": payload})

    async def event(self) -> dict[str, Any]:
        text = await self.socket.receive_str(timeout=30)
        self.bytes += len(text)
        message = json.loads(text)
        assert message["type"] == "next", message
        assert "errors" not in message["payload"], message
        event: dict[str, Any] = message["payload"]["data"]["presenceChanged"]
        return event

    async def first_live(self, user: str = MARKER) -> tuple[int, dict[str, Any]]:
        """Reads events until the first of the user's (the marker's: the first live one): how
        many came before it, and it."""
        before = 0
        while (event := await self.event())["userId"] != user:
            before += 1
        return before, event


_SESSIONS = itertools.count()  # a kicked session stays revoked: each touch a new one


async def marking(store: PresenceStore, user: str = MARKER) -> None:
    """The user changes every MARK_EVERY_S: live events, whenever they begin."""
    while True:
        await store.touch(user, f"s{next(_SESSIONS)}")
        await asyncio.sleep(MARK_EVERY_S)
        await store.kick(user)
        await asyncio.sleep(MARK_EVERY_S)


async def missed(store: PresenceStore, users: list[str], round_number: int) -> None:
    """While the client is away: each user changes once, then the rest of AWAY_S passes."""
    started = time.perf_counter()
    if round_number % 2 == 0:
        await store.touch_many(users)
    else:
        for user in users:
            await store.kick(user)
    await asyncio.sleep(max(0.0, AWAY_S - (time.perf_counter() - started)))


async def reconnect(
    svc: Service,
    http: aiohttp.ClientSession,
    store: PresenceStore,
    users: list[str],
    *,
    after: str | None,
    changed: int,
) -> tuple[float, int]:
    """Seconds from the subscribe until the state is whole and the first live event came, and
    the bytes received: resuming after the cursor, or (None) subscribing and reading."""
    client = await Client.open(http, svc.url)
    marks = asyncio.create_task(marking(store))
    try:
        started = time.perf_counter()
        await client.subscribe([*users, MARKER], after)
        if after is None:
            read_body = http.post(
                f"http://{svc.url}", json={"query": READ, "variables": {"u": users}}
            )
            async with read_body as response:
                body = await response.read()
            assert b'"errors"' not in body, body[:200]
            client.bytes += len(body)
        replayed, _ = await client.first_live()
        assert replayed == (0 if after is None else changed), replayed
        return time.perf_counter() - started, client.bytes
    finally:
        marks.cancel()
        await client.socket.close()


async def main(rounds: int, count: int, changed: int) -> None:
    users = [f"friend{i}" for i in range(count)]
    async with (
        service(None, buffer=BUFFER) as svc,
        aiohttp.ClientSession() as http,
    ):
        redis = redis_client(svc.redis_url)
        # As the service runs (PRESENCE_REVOKE_SECONDS=0): a kicked user comes back at once.
        store = PresenceStore(redis, Settings(redis_url=svc.redis_url, revoke_ms=0))
        await store.load_scripts()
        times: dict[str, list[float]] = {"resume": [], "fresh": []}
        sizes: dict[str, list[float]] = {"resume": [], "fresh": []}
        cpu: dict[str, list[float]] = {"resume": [], "fresh": []}
        for number in range(rounds):
            for way in ["resume", "fresh"]:
                # The client's last event before it went away, and its cursor.
                client = await Client.open(http, svc.url)
                await client.subscribe([LAST_SEEN], None)
                marks = asyncio.create_task(marking(store, LAST_SEEN))
                cursor = (await client.first_live(LAST_SEEN))[1]["cursor"]
                marks.cancel()
                await client.socket.close()
                await missed(store, users[:changed], 2 * number + (way == "fresh"))
                before = svc.cpu_s()
                after = cursor if way == "resume" else None
                took, size = await reconnect(svc, http, store, users, after=after, changed=changed)
                cpu[way].append(svc.cpu_s() - before)
                times[way].append(took)
                sizes[way].append(size)
        await redis.aclose()

    measured: list[tuple[str, dict[str, list[float]], float, str]] = [
        ("to the whole state and the first live event", times, 1000, " ms"),
        ("received by the client", sizes, 1 / 1024, " KiB"),
        ("the service's CPU", cpu, 1000, " ms"),
    ]
    rows = []
    for what, figures, scale, unit in measured:
        ours, baseline = statistics.median(figures["resume"]), statistics.median(figures["fresh"])
        rows.append(
            (what, fmt(ours * scale, unit), fmt(baseline * scale, unit), f"{ours / baseline:.2f}x")
        )
    print(
        f"{count:,} users followed, {changed:,} changes missed over {AWAY_S:g} s, "
        f"{rounds} rounds, PRESENCE_SUBSCRIBER_BUFFER={BUFFER}; ours: resume after the "
        "cursor; baseline: subscribe, then read"
    )
    print_table(rows)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="A resume against a fresh read.")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--users", type=int, default=1000)
    parser.add_argument("--missed", type=int, default=None, help="default: --users")
    arguments = parser.parse_args()
    missed_changes = arguments.users if arguments.missed is None else arguments.missed
    asyncio.run(main(arguments.rounds, arguments.users, missed_changes))
