"""Webhooks delivered from the feed to real receivers: signed, at least once and in version
order per user through failures, one request at a time per webhook and shard whatever the
number of processes, disabled after failing for the configured time, resumed with a gap,
debounced, replayed."""

from __future__ import annotations

import asyncio
import dataclasses
import ipaddress
from collections import Counter
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from pytest_aiohttp import AiohttpClient
from redis.asyncio import Redis

from gql_presence.app import create_app
from gql_presence.running.redis_server import RedisServer
from gql_presence.store import ChosenStatus, PresenceStore
from gql_presence.store.keys import Keys
from gql_presence.store.models import Webhook
from gql_presence.webhooks.delivery import Deliveries, DeliverySettings, ShardTips
from gql_presence.webhooks.safety import Networks
from gql_presence.webhooks.sender import Sender
from tests.conftest import TEST_SETTINGS, graphql
from tests.helpers import WebhookReceiver, eventually, webhook_receiver

LOOPBACK: Networks = (ipaddress.ip_network("127.0.0.0/8"),)
SHORT = DeliverySettings(lease_ms=600, poll_ms=20, retry_ms=(30, 60), disable_after_ms=60_000)
USERS = [f"u{i}" for i in range(8)]


class Processes:
    """Deliveries as `serve` processes run them, on one store each (their own Redis clients),
    stopped at the test's end."""

    def __init__(self, redis: Redis, stack: AsyncExitStack) -> None:
        self._redis = redis
        self._stack = stack
        self.tasks: dict[int, asyncio.Task[None]] = {}

    def store(
        self, observe_script: Callable[[str, int, float], None] | None = None, **settings: Any
    ) -> PresenceStore:
        return PresenceStore(
            self._redis, dataclasses.replace(TEST_SETTINGS, **settings), observe_script
        )

    async def start(
        self, store: PresenceStore, settings: DeliverySettings = SHORT, timeout_s: float = 0.3
    ) -> Deliveries:
        sender = Sender(store.webhooks, LOOPBACK, timeout_s=timeout_s)
        deliveries = Deliveries(store.webhooks, store.feed, sender, settings)
        task = asyncio.create_task(deliveries.run_forever())
        self.tasks[id(deliveries)] = task

        async def stop() -> None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await deliveries.close()
            await sender.close()

        self._stack.push_async_callback(stop)
        return deliveries


async def kill(processes: Processes, deliveries: Deliveries) -> None:
    """Ends a process's deliveries as its death would: in the middle of what they do, with
    nothing given up (its leases lapse)."""
    processes.tasks[id(deliveries)].cancel()
    sending = [t for t in asyncio.all_tasks() if t.get_name().startswith("webhook ")]
    for task in sending:
        task.cancel()
    await asyncio.gather(processes.tasks[id(deliveries)], *sending, return_exceptions=True)


@pytest.fixture
async def processes(flushed_redis: Redis) -> AsyncIterator[Processes]:
    async with AsyncExitStack() as stack:
        yield Processes(flushed_redis, stack)


@pytest.fixture
async def receiver() -> AsyncIterator[WebhookReceiver]:
    async with webhook_receiver() as receiver:
        yield receiver


async def hooked(
    store: PresenceStore, receiver: WebhookReceiver, debounce_seconds: int = 0
) -> Webhook:
    webhook, secret = await store.webhooks.create(receiver.url, None, None, debounce_seconds)
    receiver.secret = secret
    return webhook


async def make_changes(store: PresenceStore, users: list[str] = USERS) -> int:
    """Each user online, away, kicked: their changes, in the feed, as a backend reads them."""
    for user in users:
        await store.touch(user, "tab")
        await store.set_status(user, ChosenStatus.AWAY)
    for user in users:
        await store.kick(user)
    page = await store.changes(None, 1000)
    return len(page.nodes)


def in_order_and_whole(receiver: WebhookReceiver, users: list[str] = USERS) -> bool:
    versions = receiver.versions()
    assert all(v == sorted(v) for v in versions.values()), versions
    return receiver.unverified == 0 and all(
        versions.get(f"presence:{user}") == [1, 2, 3] for user in users
    )


async def test_every_change_arrives_signed_once_acknowledged_in_version_order(
    processes: Processes, receiver: WebhookReceiver
) -> None:
    store = processes.store(shards=3)
    await store.touch("before", "tab")  # made before the webhook: not sent
    await asyncio.sleep(0.002)  # a change of the webhook's own millisecond would be sent
    webhook = await hooked(store, receiver)
    await processes.start(store)
    made = await make_changes(store) - 1
    await eventually(lambda: in_order_and_whole(receiver), what="every change in order")
    assert len(receiver.changes()) == made
    assert "before" not in {c["userId"] for c in receiver.changes()}
    first = receiver.requests[0].payload
    assert first["type"] == "presence.changes"
    change = first["data"]["changes"][0]
    assert set(change) == {
        "type",
        "userId",
        "kind",
        "at",
        "sessionId",
        "online",
        "status",
        "customStatus",
        "cursor",
        "version",
    }
    # The cursor of a change is a cursor of the feed: reading after it goes on from there.
    page = await store.changes(change["cursor"], 1000)
    assert change["cursor"] not in [c.feed_id for c in page.nodes]

    async def caught_up() -> bool:
        found = await store.webhooks.webhook(webhook.id)
        assert found is not None
        return found.backlog == 0 and found.delivered_up_to is not None

    await eventually(caught_up, what="deliveredUpTo at the end and no backlog")
    found = await store.webhooks.webhook(webhook.id)
    assert found is not None
    rest = await store.changes(found.delivered_up_to, 1000)
    assert rest.nodes == ()
    # After a rotation, a receiver that checks with the new secret (or the old) accepts it.
    rotated = await store.webhooks.rotate_secret(webhook.id)
    assert rotated is not None
    receiver.secret = rotated[1]
    await store.touch("after", "tab")
    await eventually(lambda: len(receiver.changes()) == made + 1, what="the change after")
    assert receiver.unverified == 0


async def test_idle_webhooks_cost_redis_one_look_per_shard_not_one_per_webhook(
    processes: Processes, receiver: WebhookReceiver, flushed_redis: Redis
) -> None:
    store = processes.store(shards=2)
    for _ in range(9):
        await store.webhooks.create(receiver.url, ["JOINED"], None, 0)
    await hooked(store, receiver)
    deliveries = await processes.start(store)
    await eventually(lambda: len(deliveries.held) == 20, what="every delivery held")

    await asyncio.sleep(0.2)  # each delivery's first steps, which find nothing
    before = await script_calls(flushed_redis)
    await asyncio.sleep(0.5)
    calls = await script_calls(flushed_redis) - before
    # Twenty deliveries looking every 20 ms would call 1,000 scripts; one look per shard and
    # poll is 50, and the tick a couple.
    polls = 0.5 / (SHORT.poll_ms / 1000)
    assert calls <= 2 * 2 * polls, calls
    # Woken by the look, a change is still sent at once.
    await store.touch("u0", "tab")
    await eventually(lambda: "presence:u0" in receiver.versions(), within_s=1, what="the change")


async def test_a_tick_reads_the_webhooks_once_another_process_changes_them_and_only_then(
    processes: Processes, receiver: WebhookReceiver
) -> None:
    calls: Counter[str] = Counter()
    delivering = processes.store(lambda script, shard, seconds: calls.update([script]), shards=2)
    deliveries = await processes.start(delivering)
    other = processes.store(shards=2)  # a process of its own: its changes reach no tick here
    tick_s = SHORT.lease_ms / 3 / 1000
    webhook = await hooked(other, receiver)
    await eventually(lambda: len(deliveries.held) == 2, within_s=3 * tick_s, what="made")
    await other.touch("ann", "tab")
    await eventually(lambda: len(receiver.changes()) == 1, what="ann's ONLINE")

    calls.clear()
    await asyncio.sleep(5 * tick_s)
    # Every tick kept the leases; none read the webhooks, which had not changed.
    assert calls["webhook_leases"] >= 3, calls
    assert calls["webhooks"] == 0, calls

    await other.webhooks.update(webhook.id, enabled=False)
    await eventually(lambda: deliveries.held == [], within_s=3 * tick_s, what="disabled")
    await other.webhooks.update(webhook.id, enabled=True, kinds=["KICKED"])
    await eventually(lambda: len(deliveries.held) == 2, within_s=3 * tick_s, what="enabled")
    await other.touch("bob", "tab")  # not for it now
    await other.kick("ann")
    await eventually(lambda: len(receiver.changes()) == 2, what="ann's KICKED")
    assert [c["kind"] for c in receiver.changes()] == ["ONLINE", "KICKED"]
    assert await other.webhooks.delete(webhook.id)
    await eventually(lambda: deliveries.held == [], within_s=3 * tick_s, what="deleted")


async def test_a_replay_asked_for_during_a_debounce_is_taken_at_the_next_tick(
    processes: Processes, receiver: WebhookReceiver
) -> None:
    store = processes.store(shards=1)
    webhook = await hooked(store, receiver, debounce_seconds=30)
    deliveries = await processes.start(store)
    await eventually(lambda: len(deliveries.held) == 1, what="held")
    await store.touch("ann", "tab")
    await asyncio.sleep(0.3)  # the delivery has read the change and holds it for the debounce
    assert receiver.changes() == []
    asked = await store.webhooks.request_replay(webhook.id, None)
    assert asked is not None

    async def taken() -> bool:
        [found] = await store.webhooks.for_deliveries(webhook.id)
        return found.progress[0].replay_id == asked.replay_id

    # Within a few ticks, not when the 30 s debounce ends.
    await eventually(taken, within_s=1.5, what="the replay taken")


async def test_webhooks_made_again_after_redis_lost_its_data_are_taken_at_the_next_tick(
    processes: Processes, receiver: WebhookReceiver, flushed_redis: Redis
) -> None:
    store = processes.store(shards=1)
    first = await hooked(store, receiver)
    sender = Sender(store.webhooks, LOOPBACK, timeout_s=0.3)
    deliveries = Deliveries(store.webhooks, store.feed, sender, SHORT)
    try:
        await deliveries.tick()
        assert deliveries.held == [(first.id, 0)]
        # A Redis without persistence restarted; the backend makes its webhook again, as
        # many changes after the loss as there had been before it.
        await flushed_redis.flushall()
        again = await hooked(store, receiver)
        await deliveries.tick()
        assert deliveries.held == [(again.id, 0)]
    finally:
        await deliveries.close()
        await sender.close()


async def test_a_tick_that_finds_a_webhook_deleted_takes_no_lease_of_it(
    processes: Processes, receiver: WebhookReceiver, flushed_redis: Redis
) -> None:
    store = processes.store(shards=1)
    webhook = await hooked(store, receiver)
    lease = Keys().webhook_lease(webhook.id, 0)
    await flushed_redis.set(lease, "another process", px=5000)
    sender = Sender(store.webhooks, LOOPBACK, timeout_s=0.3)
    deliveries = Deliveries(store.webhooks, store.feed, sender, SHORT)
    try:
        await deliveries.tick()
        assert deliveries.held == []
        await flushed_redis.delete(lease)  # given up by its holder as the webhook goes
        assert await store.webhooks.delete(webhook.id)
        await deliveries.tick()
        assert deliveries.held == []
        assert await flushed_redis.get(lease) is None
    finally:
        await deliveries.close()
        await sender.close()


async def script_calls(redis: Redis) -> int:
    stats = await redis.info("commandstats")
    return sum(int(stats.get(f"cmdstat_{c}", {}).get("calls", 0)) for c in ("evalsha", "eval"))


async def test_webhooks_that_want_none_of_the_changes_pass_over_them_with_no_step(
    processes: Processes, receiver: WebhookReceiver, flushed_redis: Redis
) -> None:
    store = processes.store(shards=2)
    joins = [await store.webhooks.create(receiver.url, ["JOINED"], None, 0) for _ in range(9)]
    settings = dataclasses.replace(SHORT, pass_ms=100)
    deliveries = await processes.start(store, settings)
    await eventually(lambda: len(deliveries.held) == 18, what="every delivery held")
    await asyncio.sleep(0.2)  # each delivery's first steps, which find nothing
    before = await script_calls(flushed_redis)
    for i in range(20):
        await store.touch(f"u{i}", "tab")
        await asyncio.sleep(0.025)
    calls = await script_calls(flushed_redis) - before
    # Twenty changes, each waking eighteen deliveries for a step of three reads, would call
    # about a thousand scripts; a look per shard and poll, the passes and the ticks, ~60.
    assert calls <= 20 + 2 * 2 * (0.5 / (SHORT.poll_ms / 1000)), calls
    assert receiver.requests == []

    # Their positions pass the changes, with no request: a JOINED of later is read at once.
    newest = (await store.changes(None, 100)).nodes[-1].feed_id

    async def passed() -> bool:
        found = await store.webhooks.for_deliveries()
        return all(max(p.position for p in w.progress) >= newest for w in found)

    await eventually(passed, what="the positions past the changes")
    receiver.secret = joins[0][1]  # the others' requests fail its check, and are counted
    await store.open_place_session("room", "ann", "tab")
    await eventually(
        lambda: len(receiver.changes()) == 1 and receiver.unverified >= 8,
        within_s=2,
        what="the JOINED, nine times",
    )


async def test_a_waiting_delivery_takes_its_webhooks_new_kinds_and_passes_nothing_they_want(
    processes: Processes, receiver: WebhookReceiver
) -> None:
    store = processes.store(shards=1)
    webhook, receiver.secret = await store.webhooks.create(receiver.url, ["JOINED"], None, 0)
    deliveries = await processes.start(store, dataclasses.replace(SHORT, pass_ms=20))
    await eventually(lambda: len(deliveries.held) == 1, what="the delivery held")
    await store.touch("ann", "tab")  # not for it: passed over
    [ann] = (await store.changes(None, 10)).nodes

    async def passed() -> bool:
        [found] = await store.webhooks.for_deliveries(webhook.id)
        return found.progress[0].position >= ann.feed_id

    await eventually(passed, what="ann's ONLINE passed over")
    await store.webhooks.update(webhook.id, kinds=["ONLINE"])
    await store.touch("bob", "tab")
    await eventually(lambda: bool(receiver.changes()), what="bob's ONLINE")
    assert [c["userId"] for c in receiver.changes()] == ["bob"]


async def test_a_webhooks_new_url_set_while_its_delivery_waits_gets_the_next_batch(
    processes: Processes, receiver: WebhookReceiver
) -> None:
    store = processes.store(shards=1)
    webhook = await hooked(store, receiver)
    deliveries = await processes.start(store, dataclasses.replace(SHORT, poll_ms=50))
    await eventually(lambda: len(deliveries.held) == 1, what="the delivery held")
    await store.touch("ann", "tab")
    await eventually(lambda: len(receiver.changes()) == 1, what="ann's ONLINE")
    async with webhook_receiver() as moved:
        moved.secret = receiver.secret
        await store.webhooks.update(webhook.id, url=moved.url)
        await store.touch("bob", "tab")
        await eventually(lambda: bool(moved.changes()), what="bob's ONLINE at the new url")
    assert [c["userId"] for c in moved.changes()] == ["bob"]
    assert [c["userId"] for c in receiver.changes()] == ["ann"]
    assert moved.unverified == receiver.unverified == 0


async def test_a_replay_asked_for_during_a_step_leaves_its_request_checked_against_a_new_url(
    processes: Processes, receiver: WebhookReceiver
) -> None:
    store = processes.store(shards=1)
    webhook = await hooked(store, receiver)
    for i in range(150):  # a full batch of 100, then a step that reads its page itself
        await store.touch(f"r{i}", "tab")
    deliveries = await processes.start(store, dataclasses.replace(SHORT, poll_ms=50))
    read_page = deliveries.feed.shard_page
    pages, paused, go_on = 0, asyncio.Event(), asyncio.Event()

    async def second_page_held(index: int, after: str, count: int) -> Any:
        nonlocal pages
        pages += 1
        if pages == 2:
            paused.set()
            await go_on.wait()
        return await read_page(index, after, count)

    deliveries.feed.shard_page = second_page_held  # type: ignore[method-assign]
    await asyncio.wait_for(paused.wait(), 5)
    assert len(receiver.changes()) == 100
    # While the second step reads its page: a new url, and a replay from the start, which the
    # ticks (every 0.2 s here) wake the delivery to take.
    async with webhook_receiver() as moved:
        moved.secret = receiver.secret
        await store.webhooks.update(webhook.id, url=moved.url)
        await store.webhooks.request_replay(webhook.id, None)
        await asyncio.sleep(0.5)
        go_on.set()
        await eventually(lambda: len(moved.changes()) >= 150, what="the replay at the new url")
    # The step under way found the url changed before its request, and sent nothing more to
    # the old one.
    assert len(receiver.changes()) == 100
    assert moved.unverified == receiver.unverified == 0


async def test_an_acknowledged_batch_costs_two_script_calls_of_its_own_and_then_none(
    processes: Processes, receiver: WebhookReceiver
) -> None:
    store = processes.store()
    webhook = await hooked(store, receiver)
    calls: Counter[str] = Counter()
    delivering = processes.store(lambda script, shard, seconds: calls.update([script]))
    deliveries = await processes.start(delivering, dataclasses.replace(SHORT, poll_ms=200))
    await eventually(lambda: len(deliveries.held) == 1, what="the delivery held")

    async def recorded(count: int) -> bool:
        found = await store.webhooks.webhook(webhook.id)
        assert found is not None
        return [a.status for a in found.attempts] == [204] * count

    await store.touch("ann", "tab")
    await eventually(lambda: recorded(1), what="the first attempt recorded")
    await asyncio.sleep(0.3)  # it waits for new entries
    calls.clear()
    await store.touch("bob", "tab")
    await eventually(lambda: recorded(2), what="the second attempt recorded")
    await asyncio.sleep(0.1)
    # Woken by the look at the feed, whose entries are its page: the batch's end kept
    # (checking the webhook and its position are as it knows them), the attempt recorded
    # with the position moved; no read of the webhook but the ticks', no page of its own.
    assert calls["advance_webhook"] == 2, calls
    assert calls["feed_page"] == 0, calls
    assert calls["webhooks"] == 0, calls  # nor the ticks': nothing changed
    assert calls["feed_tip"] >= 1, calls


async def test_a_trickle_of_changes_goes_in_one_request_after_the_batch_wait(
    processes: Processes, receiver: WebhookReceiver
) -> None:
    store = processes.store(shards=1)
    await hooked(store, receiver)
    deliveries = await processes.start(store, dataclasses.replace(SHORT, batch_wait_ms=500))
    await eventually(lambda: len(deliveries.held) == 1, what="the delivery held")
    for user in USERS[:5]:
        await store.touch(user, "tab")
        await asyncio.sleep(0.03)  # each change alone in a request, but for the wait
    await eventually(lambda: len(receiver.changes()) == 5, what="the five changes")
    [request] = receiver.requests
    assert [c["userId"] for c in request.payload["data"]["changes"]] == USERS[:5]


async def test_a_webhook_idle_for_longer_than_the_feed_keeps_missed_nothing(
    processes: Processes, receiver: WebhookReceiver
) -> None:
    store = processes.store(feed_retention_ms=400)
    await hooked(store, receiver)
    await processes.start(store)
    await store.touch("ann", "tab")
    await eventually(lambda: len(receiver.changes()) == 1, what="the first change")
    # Nothing for longer than the feed keeps a change: the one it delivered is gone too.
    await asyncio.sleep(0.6)
    await store.sweep()
    await store.touch("bob", "tab")
    await eventually(lambda: len(receiver.changes()) == 2, what="the next change")
    assert [c["userId"] for c in receiver.changes()] == ["ann", "bob"]
    assert [d for d in receiver.requests if "gap" in d.payload["data"]] == []


@pytest.mark.parametrize("trouble", ["errors", "timeouts", "down"])
async def test_changes_arrive_at_least_once_in_order_through_a_receiver_in_trouble(
    processes: Processes, receiver: WebhookReceiver, trouble: str
) -> None:
    store = processes.store(shards=3)
    webhook = await hooked(store, receiver)
    if trouble == "errors":
        # Until the test has looked: a receiver that recovered meanwhile would show no failure.
        receiver.failures = 1_000_000
    elif trouble == "timeouts":
        receiver.hang = True
    else:
        await receiver.stop()
    await processes.start(store, timeout_s=0.2)
    await make_changes(store)

    async def failing() -> bool:
        found = await store.webhooks.webhook(webhook.id)
        assert found is not None
        return len([a for a in found.attempts if a.status != 204]) >= 2

    await eventually(failing, what="failed attempts recorded")
    found = await store.webhooks.webhook(webhook.id)
    assert found is not None
    assert found.backlog > 0
    assert found.failing_since is not None
    failed = found.attempts[0]
    if trouble == "timeouts":
        assert (failed.status, failed.error) == (None, "no answer within 0.2 s")
    elif trouble == "down":
        assert failed.status is None
        assert "cannot connect" in (failed.error or "")
    receiver.failures = 0
    receiver.hang = False
    receiver.released.set()
    if trouble == "down":
        await receiver.start()
    await eventually(lambda: in_order_and_whole(receiver), what="every change in order")
    # Each batch sent again was sent with the same id and body.
    by_id: dict[str, list[object]] = {}
    for delivered in receiver.requests:
        by_id.setdefault(delivered.webhook_id, []).append(delivered.payload)
    assert all(len({str(p) for p in payloads}) == 1 for payloads in by_id.values())
    if trouble != "down":
        assert any(len(payloads) > 1 for payloads in by_id.values())


@pytest.mark.parametrize("users", [30, 150], ids=["a batch of 30", "a full batch"])
async def test_a_batch_in_flight_when_its_process_dies_is_sent_again_as_it_was(
    processes: Processes, receiver: WebhookReceiver, users: int
) -> None:
    store = processes.store()
    await hooked(store, receiver)
    receiver.hang = True
    first = await processes.start(store)
    await store.touch_many([f"u{i:03}" for i in range(users)])
    await eventually(lambda: len(receiver.requests) == 1, what="the first request")
    [hung] = receiver.requests
    assert len(hung.payload["data"]["changes"]) == min(users, 100)
    await store.touch("late", "tab")  # made after: no part of the batch in flight
    await kill(processes, first)
    receiver.hang = False
    await processes.start(store)
    await eventually(lambda: len(receiver.changes()) == users + 1, what="every change")
    again = receiver.requests[1]
    assert (again.webhook_id, again.payload) == (hung.webhook_id, hung.payload)
    assert again.status == 204


async def test_two_processes_never_send_one_webhooks_batches_at_once(
    processes: Processes,
) -> None:
    async with AsyncExitStack() as stack:
        receivers = [await stack.enter_async_context(webhook_receiver()) for _ in range(4)]
        first = processes.store()
        for receiver in receivers:
            await hooked(first, receiver)
            receiver.delay_s = 0.02
        one = await processes.start(first)
        two = await processes.start(processes.store())
        users = [f"u{i}" for i in range(20)]
        await make_changes(first, users)
        await eventually(lambda: all(in_order_and_whole(r, users) for r in receivers), within_s=10)
        assert [r.most_in_flight for r in receivers] == [1, 1, 1, 1]
        # Shared out: each process holds its fair share.
        await eventually(lambda: (len(one.held), len(two.held)) == (2, 2))


async def test_a_webhook_failing_for_the_configured_time_is_disabled_and_resumes_with_a_gap(
    processes: Processes, receiver: WebhookReceiver
) -> None:
    store = processes.store(feed_retention_ms=1000)
    webhook = await hooked(store, receiver)
    await receiver.stop()
    settings = DeliverySettings(lease_ms=600, poll_ms=20, retry_ms=(30,), disable_after_ms=300)
    await processes.start(store, settings)
    await store.touch("ann", "tab")

    async def disabled() -> bool:
        found = await store.webhooks.webhook(webhook.id)
        assert found is not None
        return not found.enabled

    await eventually(disabled, what="the webhook disabled")
    found = await store.webhooks.webhook(webhook.id)
    assert found is not None
    assert "No request was acknowledged" in (found.disabled_reason or "")
    await receiver.start()
    # Past the feed's retention (1 s), what it missed is gone.
    await asyncio.sleep(1.1)
    await store.touch("bob", "tab")
    await store.webhooks.update(webhook.id, enabled=True)
    await eventually(lambda: bool(receiver.changes()), what="a change after the resume")
    [gapped] = [d for d in receiver.requests if "gap" in d.payload["data"]]
    assert set(gapped.payload["data"]["gap"]) == {"after", "until"}
    assert [c["userId"] for c in receiver.changes()] == ["bob"]
    resumed = await store.webhooks.webhook(webhook.id)
    assert resumed is not None
    assert resumed.enabled
    assert resumed.disabled_reason is None


def kinds_of(receiver: WebhookReceiver, user: str) -> list[tuple[str, int]]:
    return [
        (c["kind"], c["version"])
        for c in receiver.changes()
        if c["type"] == "presence" and c["userId"] == user
    ]


async def test_a_page_reload_within_the_debounce_sends_nothing(
    processes: Processes, receiver: WebhookReceiver
) -> None:
    store = processes.store()
    await hooked(store, receiver, debounce_seconds=1)
    await processes.start(store)
    ann = (await store.open_session("ann", "tab")).held
    bob = (await store.open_session("bob", "tab")).held
    await eventually(lambda: len(receiver.changes()) == 2, what="the ONLINEs, after the debounce")
    # ann reloads the page: her session closed and opened again at once; bob leaves.
    await store.close_session(ann)
    await store.open_session("ann", "tab")
    await store.close_session(bob)
    await store.set_status("ann", ChosenStatus.AWAY)
    await eventually(lambda: len(kinds_of(receiver, "ann")) == 2, what="ann's STATUS")
    await eventually(lambda: len(kinds_of(receiver, "bob")) == 2, what="bob's OFFLINE")
    assert kinds_of(receiver, "ann") == [("ONLINE", 1), ("STATUS", 4)]
    assert kinds_of(receiver, "bob") == [("ONLINE", 1), ("OFFLINE", 2)]


async def test_a_request_carries_only_the_latest_updated_of_a_place_session(
    processes: Processes, receiver: WebhookReceiver
) -> None:
    store = processes.store()
    webhook, secret = await store.webhooks.create(
        receiver.url, ["JOINED", "UPDATED", "LEFT"], ["room*"], 0
    )
    receiver.secret = secret
    await store.webhooks.update(webhook.id, enabled=False)
    await processes.start(store)
    await store.open_place_session("room-1", "ann", "tab", {"x": 0})
    await store.open_place_session("lobby", "ann", "tab", {"x": 0})
    for x in range(1, 4):
        await store.set_place_state("room-1", "ann", "tab", {"x": x})
        await asyncio.sleep(0.06)  # past the 50 ms in which a place's states are merged
    await store.flush_planned()
    await store.webhooks.update(webhook.id, enabled=True)
    await eventually(lambda: bool(receiver.changes()), what="the batch")
    [request] = receiver.requests
    changes = request.payload["data"]["changes"]
    assert [(c["placeId"], c["kind"], c["state"]) for c in changes] == [
        ("room-1", "JOINED", {"x": 0}),
        ("room-1", "UPDATED", {"x": 3}),
    ]


async def test_a_replay_sends_again_what_came_after_its_cursor(
    processes: Processes, receiver: WebhookReceiver
) -> None:
    store = processes.store(shards=3)
    webhook = await hooked(store, receiver)
    await processes.start(store)
    made = await make_changes(store)
    await eventually(lambda: in_order_and_whole(receiver), what="every change")
    sent = len(receiver.requests)
    await store.webhooks.request_replay(webhook.id, None)

    def twice() -> bool:
        again = [
            change["cursor"]
            for delivered in receiver.requests[sent:]
            for change in delivered.payload["data"]["changes"]
        ]
        return len(again) == made and {c["cursor"] for c in receiver.changes()} == set(again)

    await eventually(twice, what="every change sent again")


async def test_metrics_show_each_webhooks_requests_changes_and_backlog(
    aiohttp_client: AiohttpClient,
    flushed_redis: Redis,
    redis_server: RedisServer,
    receiver: WebhookReceiver,
) -> None:
    settings = dataclasses.replace(
        TEST_SETTINGS,
        redis_url=redis_server.url,
        webhook_allowed_networks=LOOPBACK,
        webhook_poll_ms=20,
        webhook_retry_ms=(30,),
    )
    client = await aiohttp_client(create_app(settings))
    created = await graphql(
        client,
        f'mutation {{ createWebhook(url: "{receiver.url}") {{ secret webhook {{ id }} }} }}',
    )
    receiver.secret = created["data"]["createWebhook"]["secret"]
    webhook_id = created["data"]["createWebhook"]["webhook"]["id"]
    receiver.failures = 1
    for user in ("ann", "bob"):
        await graphql(client, f'mutation {{ touch(userId: "{user}") {{ online }} }}')
    await eventually(lambda: len(receiver.changes()) == 2, what="both changes")

    async def samples() -> dict[tuple[str, str], float]:
        text = await (await client.get("/metrics")).text()
        return {
            (
                sample.name,
                sample.labels.get("outcome", sample.labels.get("shard", "")),
            ): sample.value
            for family in text_string_to_metric_families(text)
            for sample in family.samples
            if sample.labels.get("webhook") == webhook_id
        }

    async def caught_up() -> bool:
        found = await samples()
        return (
            found.get(("gqlp_webhook_changes_delivered_total", "")) == 2
            and found.get(("gqlp_webhook_backlog", "0")) == 0
            and found.get(("gqlp_webhook_oldest_undelivered_age_seconds", "0")) == 0
        )

    # The backlog as the delivery reads the feed after its last request.
    await eventually(caught_up, what="the changes delivered counted, none waiting")
    found = await samples()
    assert found[("gqlp_webhook_requests_total", "refused")] == 1
    assert found[("gqlp_webhook_requests_total", "acknowledged")] >= 1
    listed = await graphql(client, "{ webhooks { backlog deliveredUpTo attempts { status } } }")
    [webhook] = listed["data"]["webhooks"]
    assert webhook["backlog"] == 0
    assert webhook["deliveredUpTo"] is not None
    assert [a["status"] for a in webhook["attempts"]][-1] == 500


async def test_a_place_session_left_and_joined_again_within_the_debounce_is_an_update_or_nothing(
    processes: Processes, receiver: WebhookReceiver
) -> None:
    store = processes.store()
    webhook, secret = await store.webhooks.create(
        receiver.url, ["JOINED", "UPDATED", "LEFT"], None, 1
    )
    receiver.secret = secret
    await processes.start(store)
    held = (await store.open_place_session("room", "ann", "tab", {"x": 0})).held
    await eventually(lambda: len(receiver.changes()) == 1, what="the JOINED")
    # Left and joined again: in another state (an UPDATED), then in the same one (nothing).
    # What it came back in is compared with the state it left with as far as one read of the
    # feed tells: the delivery is held off until all of them are past the debounce, so that
    # no step between two of them (which the moments of the calls would decide) splits them.
    await store.webhooks.update(webhook.id, enabled=False)
    await store.close_place_session(held)
    held = (await store.open_place_session("room", "ann", "tab", {"x": 1})).held
    await store.close_place_session(held)
    await store.open_place_session("room", "ann", "tab", {"x": 1})
    await store.open_place_session("room", "bob", "tab")
    await asyncio.sleep(1.05)
    await store.webhooks.update(webhook.id, enabled=True)
    await eventually(lambda: len(receiver.changes()) >= 3, what="bob's JOINED")
    assert [(c["userId"], c["kind"], c["state"]) for c in receiver.changes()] == [
        ("ann", "JOINED", {"x": 0}),
        ("ann", "UPDATED", {"x": 1}),
        ("bob", "JOINED", None),
    ]


async def test_a_delivery_that_begins_to_wait_during_a_look_still_gets_what_came_before_it(
    processes: Processes,
) -> None:
    """A look reads after the oldest position among those waiting when it starts; a delivery
    that starts waiting while it reads, from an older position, is woken with the changes in
    between all the same."""
    store = processes.store(shards=1)
    kicks, _ = await store.webhooks.create("http://127.0.0.1:9/kicks", ["KICKED"], None, 0)
    every, _ = await store.webhooks.create("http://127.0.0.1:9/every", None, None, 0)
    [kicks] = await store.webhooks.for_deliveries(kicks.id)
    [every] = await store.webhooks.for_deliveries(every.id)
    tips = ShardTips(store.feed, store.webhooks, "process", SHORT)
    looks = asyncio.create_task(tips.run_forever())
    kicks_wake, every_wake = asyncio.Event(), asyncio.Event()
    waits = [asyncio.create_task(tips.wait_past(0, kicks, kicks.progress[0], kicks_wake))]
    try:
        await store.touch("ann", "tab")  # a change the second webhook wants, the first not
        await eventually(lambda: _looked_past_ann(tips))
        reading = asyncio.Event()
        read = store.feed.shard_look

        async def slow_read(index: int, after: str, count: int) -> Any:
            reading.set()
            found = await read(index, after, count)
            await asyncio.sleep(0.1)
            return found

        store.feed.shard_look = slow_read  # type: ignore[method-assign]
        await asyncio.wait_for(reading.wait(), 2)
        # Its position from before ann's change: its last batch ended just before it.
        waits.append(asyncio.create_task(tips.wait_past(0, every, every.progress[0], every_wake)))
        _, entries = await asyncio.wait_for(waits[1], 2)
        assert entries is not None
        assert [change.user_id for _, change in entries if change] == ["ann"]
    finally:
        for task in [looks, *waits]:
            task.cancel()
        await asyncio.gather(looks, *waits, return_exceptions=True)


def _looked_past_ann(tips: ShardTips) -> bool:
    """Whether a look has read ann's change for the delivery waiting already."""
    return any(
        change is not None and change.user_id == "ann"
        for one in tips._waiting[0].values()
        for _, change in one.entries or ()
    )
