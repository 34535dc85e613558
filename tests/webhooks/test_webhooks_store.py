"""Webhooks kept in Redis: made, changed, rotated, deleted, their attempts, and their cap."""

from __future__ import annotations

import asyncio
import base64
import dataclasses

import pytest
from redis.asyncio import Redis

from gql_presence.store import PresenceStore
from gql_presence.store.cursor import Cursors
from gql_presence.store.errors import BadInputError
from gql_presence.store.keys import Keys
from gql_presence.store.models import ChangeKind
from gql_presence.store.validation import MAX_WEBHOOKS
from gql_presence.store.webhooks import DEFAULT_KINDS, MAX_ATTEMPTS, bounded_error
from tests.conftest import TEST_SETTINGS

URL = "https://hooks.example.com/presence"


async def test_a_new_webhook_is_enabled_with_a_standard_secret_and_delivers_the_default_kinds(
    store: PresenceStore,
) -> None:
    webhook, secret = await store.webhooks.create(URL, None, None, 0)
    assert secret.startswith("whsec_")
    assert len(base64.b64decode(secret.removeprefix("whsec_"), validate=True)) == 32
    assert webhook.url == URL
    assert webhook.kinds == DEFAULT_KINDS
    assert ChangeKind.UPDATED not in webhook.kinds
    assert webhook.places is None
    assert webhook.enabled
    assert webhook.disabled_reason is None
    assert webhook.delivered_up_to is None
    assert webhook.attempts == ()
    assert webhook.secrets == (secret,)
    assert secret not in repr(webhook)
    assert await store.webhooks.webhooks() == [webhook]


async def test_webhooks_survive_a_new_store_on_the_same_redis(redis: Redis) -> None:
    first = PresenceStore(redis, TEST_SETTINGS)
    webhook, _ = await first.webhooks.create(URL, ["UPDATED"], ["room-*", "lobby"], 5)
    again = PresenceStore(redis, TEST_SETTINGS)
    found = await again.webhooks.webhook(webhook.id)
    assert found == webhook
    assert found is not None
    assert found.kinds == (ChangeKind.UPDATED,)
    assert found.places == ("room-*", "lobby")
    assert found.debounce_seconds == 5


@pytest.mark.parametrize(
    ("kinds", "places", "debounce", "said"),
    [
        (None, None, -1, "debounceSeconds must be 0 to 60; got -1"),
        (None, None, 61, "debounceSeconds must be 0 to 60; got 61"),
        (["SOMETIMES"], None, 0, "kinds may hold ONLINE, OFFLINE, KICKED, STATUS, JOINED"),
        ([], None, 0, "kinds must name at least one"),
        (None, ["a*b"], 0, "`*` may stand only at the end"),
        (None, [""], 0, "must be 1 to 128 characters"),
        (None, [f"p{i}" for i in range(101)], 0, "places takes at most 100"),
    ],
)
async def test_bad_input_is_refused_saying_what_is_allowed_and_makes_nothing(
    store: PresenceStore,
    kinds: list[str] | None,
    places: list[str] | None,
    debounce: int,
    said: str,
) -> None:
    with pytest.raises(BadInputError, match=said.replace("*", r"\*")):
        await store.webhooks.create(URL, kinds, places, debounce)
    assert await store.webhooks.webhooks() == []


async def test_a_deployment_has_at_most_fifty_webhooks_even_when_created_at_once(
    store: PresenceStore,
) -> None:
    made = await asyncio.gather(
        *(store.webhooks.create(URL, None, None, 0) for _ in range(MAX_WEBHOOKS + 10)),
        return_exceptions=True,
    )
    refused = [m for m in made if isinstance(m, BaseException)]
    assert len(refused) == 10
    assert all(isinstance(r, BadInputError) and "at most 50 webhooks" in str(r) for r in refused)
    assert len(await store.webhooks.webhooks()) == MAX_WEBHOOKS
    first, _ = made[0]  # type: ignore[misc]
    assert await store.webhooks.delete(first.id)
    await store.webhooks.create(URL, None, None, 0)
    assert len(await store.webhooks.webhooks()) == MAX_WEBHOOKS


async def test_an_update_changes_only_what_is_given(store: PresenceStore) -> None:
    webhook, _ = await store.webhooks.create(URL, None, ["lobby"], 3)
    changed = await store.webhooks.update(webhook.id, url=URL + "/v2", kinds=["LEFT", "JOINED"])
    assert changed is not None
    assert changed.url == URL + "/v2"
    assert changed.kinds == (ChangeKind.JOINED, ChangeKind.LEFT)
    assert changed.places == ("lobby",)
    assert changed.debounce_seconds == 3
    with pytest.raises(BadInputError, match="debounceSeconds"):
        await store.webhooks.update(webhook.id, url=URL + "/v3", debounce_seconds=99)
    assert await store.webhooks.webhook(webhook.id) == changed
    assert await store.webhooks.update("no-such-webhook", enabled=False) is None


async def test_enabling_after_the_service_disabled_it_clears_the_reason(
    store: PresenceStore,
) -> None:
    webhook, _ = await store.webhooks.create(URL, None, None, 0)
    disabled = await store.webhooks.disable(webhook.id, "failing for 24 hours")
    assert disabled is not None
    assert (disabled.enabled, disabled.disabled_reason) == (False, "failing for 24 hours")
    enabled = await store.webhooks.update(webhook.id, enabled=True)
    assert enabled is not None
    assert (enabled.enabled, enabled.disabled_reason) == (True, None)
    by_backend = await store.webhooks.update(webhook.id, enabled=False)
    assert by_backend is not None
    assert (by_backend.enabled, by_backend.disabled_reason) == (False, None)


async def test_a_rotated_secret_signs_beside_the_new_one_for_a_day(
    store: PresenceStore, redis: Redis
) -> None:
    webhook, old = await store.webhooks.create(URL, None, None, 0)
    rotated = await store.webhooks.rotate_secret(webhook.id)
    assert rotated is not None
    after, new = rotated
    assert new != old
    assert after.secrets == (new, old)
    key = Keys().webhook(webhook.id)
    until_ms = int(await redis.hget(key, "previous_until_ms") or 0)
    now_s, _ = await redis.time()
    assert abs(until_ms - (now_s * 1000 + 24 * 3600 * 1000)) < 5000
    # A day later the old one no longer signs.
    await redis.hset(key, "previous_until_ms", now_s * 1000 - 1)
    later = await store.webhooks.webhook(webhook.id)
    assert later is not None
    assert later.secrets == (new,)
    assert await store.webhooks.rotate_secret("no-such-webhook") is None


async def test_the_twenty_most_recent_attempts_are_kept_newest_first(store: PresenceStore) -> None:
    webhook, _ = await store.webhooks.create(URL, None, None, 0)
    for i in range(MAX_ATTEMPTS + 5):
        await store.webhooks.record_attempt(
            webhook.id,
            delivery_id=f"batch-{i}",
            changes=i,
            status=500,
            error="é" * 1000,
            duration_ms=1.5,
            acknowledged=False,
        )
    found = await store.webhooks.webhook(webhook.id)
    assert found is not None
    assert [a.delivery_id for a in found.attempts] == [
        f"batch-{i}" for i in reversed(range(5, MAX_ATTEMPTS + 5))
    ]
    assert found.attempts[0].status == 500
    assert found.attempts[0].error is not None
    assert len(found.attempts[0].error.encode()) <= 1024
    assert found.delivered_up_to is None
    assert found.failing_since is not None


async def test_an_acknowledged_attempt_moves_delivered_up_to_and_ends_the_failing(
    store: PresenceStore,
) -> None:
    webhook, _ = await store.webhooks.create(URL, None, None, 0)
    common = {"changes": 2, "duration_ms": 3.0, "delivered_up_to": "cursor-2"}
    await store.webhooks.record_attempt(
        webhook.id,
        delivery_id="b",
        status=None,
        error="timeout",
        acknowledged=False,
        **common,  # type: ignore[arg-type]
    )
    await store.webhooks.record_attempt(
        webhook.id,
        delivery_id="b",
        status=204,
        error=None,
        acknowledged=True,
        **common,  # type: ignore[arg-type]
    )
    found = await store.webhooks.webhook(webhook.id)
    assert found is not None
    assert found.delivered_up_to == "cursor-2"
    assert found.failing_since is None
    assert [(a.status, a.error) for a in found.attempts] == [(204, None), (None, "timeout")]


async def test_a_deleted_webhook_leaves_nothing_and_takes_no_attempts(
    store: PresenceStore, redis: Redis
) -> None:
    webhook, _ = await store.webhooks.create(URL, None, None, 0)
    await store.webhooks.record_attempt(
        webhook.id,
        delivery_id="b",
        changes=1,
        status=200,
        error=None,
        duration_ms=1,
        acknowledged=True,
    )
    assert await store.webhooks.delete(webhook.id)
    assert not await store.webhooks.delete(webhook.id)
    assert await store.webhooks.webhook(webhook.id) is None
    assert (
        await store.webhooks.record_attempt(
            webhook.id,
            delivery_id="b",
            changes=1,
            status=200,
            error=None,
            duration_ms=1,
            acknowledged=True,
        )
        is None
    )
    # But the count of changes to the webhooks, which outlives them: were it to start again,
    # a process could take webhooks made later for those it read at the same count.
    assert await redis.keys("*wh*") == [Keys().webhook_changes]


async def test_a_replay_asked_for_is_kept_for_the_delivery(store: PresenceStore) -> None:
    webhook, _ = await store.webhooks.create(URL, None, None, 0)
    from_oldest = await store.webhooks.request_replay(webhook.id, None)
    assert from_oldest is not None
    assert from_oldest.replay_after == ""
    cursor = await store.feed_cursor()
    after = await store.webhooks.request_replay(webhook.id, cursor)
    assert after is not None
    assert after.replay_after == cursor
    assert after.replay_id not in ("", from_oldest.replay_id)
    assert dataclasses.replace(after, replay_after=None, replay_id="") == dataclasses.replace(
        webhook, replay_after=None
    )


def test_an_error_is_cut_to_a_kibibyte_at_a_character_edge() -> None:
    assert bounded_error("ok") == "ok"
    cut = bounded_error("€" * 400)
    assert len(cut.encode()) <= 1024
    assert cut == "€" * 341


@pytest.mark.parametrize("after", ["", "c" * 1025, "c\n", "\ud800"])
async def test_a_replay_after_what_is_no_cursor_is_refused(
    store: PresenceStore, after: str
) -> None:
    webhook, _ = await store.webhooks.create(URL, None, None, 0)
    with pytest.raises(BadInputError, match="after is a change's cursor"):
        await store.webhooks.request_replay(webhook.id, after)
    assert await store.webhooks.webhook(webhook.id) == webhook


async def test_a_replay_after_a_cursor_of_another_deployment_is_refused(
    store: PresenceStore,
) -> None:
    webhook, _ = await store.webhooks.create(URL, None, None, 0)
    await store.feed_cursor()
    foreign = Cursors("another deployment's secret").seal(["feed", ["0-0"]])
    with pytest.raises(BadInputError, match="after must be a cursor of this service's feed"):
        await store.webhooks.request_replay(webhook.id, foreign)
    assert await store.webhooks.webhook(webhook.id) == webhook
