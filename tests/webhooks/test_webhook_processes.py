"""Webhooks delivered by real `gql-presence serve` processes: one killed with SIGKILL in the
middle of its requests, and another that takes its leases and sends the same batches again."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import signal
from pathlib import Path

import pytest
from redis.asyncio import Redis

from gql_presence.running.redis_server import RedisServer
from gql_presence.store import ChosenStatus, PresenceStore
from tests.conftest import TEST_SETTINGS
from tests.helpers import (
    BACKEND_TOKEN,
    end_services,
    eventually,
    post,
    start_services,
    webhook_receiver,
)

pytestmark = pytest.mark.slow

SHARDS = 3
USERS = [f"u{i}" for i in range(9)]
CREATE = 'mutation {{ createWebhook(url: "{}") {{ secret webhook {{ id }} }} }}'


async def test_a_process_killed_mid_request_leaves_its_batches_to_another_which_sends_them_again(
    flushed_redis: Redis, redis_server: RedisServer, tmp_path: Path
) -> None:
    env = {
        "REDIS_URL": redis_server.url,
        "PRESENCE_SHARDS": str(SHARDS),
        "PRESENCE_BACKEND_TOKENS": f"chat:{BACKEND_TOKEN}",
        "PRESENCE_WEBHOOK_ALLOWED_NETWORKS": "127.0.0.0/8",
        "PRESENCE_WEBHOOK_LEASE_SECONDS": "1",
        "PRESENCE_WEBHOOK_POLL_SECONDS": "0.05",
        "PRESENCE_WEBHOOK_RETRY_SECONDS": "0.05,0.1",
        "PRESENCE_LOG_LEVEL": "warning",
    }
    store = PresenceStore(flushed_redis, dataclasses.replace(TEST_SETTINGS, shards=SHARDS))
    async with webhook_receiver() as receiver:
        [first] = await start_services(1, tmp_path / "first", **env)
        started = [first]
        try:
            made = post(first.port, CREATE.format(receiver.url), f"Bearer {BACKEND_TOKEN}")
            receiver.secret = made["data"]["createWebhook"]["secret"]
            receiver.hang = True
            for user in USERS:
                await store.touch(user, "tab")
                await store.set_status(user, ChosenStatus.AWAY)
                await store.kick(user)
            await eventually(lambda: len(receiver.requests) == SHARDS, what="a request a shard")
            hung = {d.webhook_id: d.payload for d in receiver.requests}
            first.process.send_signal(signal.SIGKILL)
            first.process.wait()
            receiver.hang = False
            started += await start_services(1, tmp_path / "second", **env)

            def whole() -> bool:
                versions = receiver.versions()
                return all(versions.get(f"presence:{u}") == [1, 2, 3] for u in USERS)

            await eventually(whole, within_s=10, what="every change, in order, from the second")
        finally:
            receiver.released.set()
            await asyncio.to_thread(end_services, started)
    assert receiver.unverified == 0
    # Every batch that was in flight was sent again, under the same id, with the same body.
    again = {
        d.webhook_id: d.payload
        for d in receiver.requests[SHARDS:]
        if d.webhook_id in hung and d.status == 204
    }
    assert again == hung
    assert all(json.dumps(p["data"]["changes"]) for p in again.values())
