"""The receivers docs/operations.md shows, in Python and in Node, run as written: it verifies what the deliveries send,
refuses a forged request, and takes each batch once however often it comes."""

from __future__ import annotations

import asyncio
import dataclasses
import ipaddress
import os
import sys
import urllib.error
import urllib.request
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from redis.asyncio import Redis

from gql_presence.running.redis_server import free_port
from gql_presence.store import PresenceStore
from gql_presence.webhooks.delivery import Deliveries, DeliverySettings
from gql_presence.webhooks.sender import Batch, Sender
from tests.conftest import TEST_SETTINGS
from tests.helpers import ROOT, eventually, snippets_of

pytestmark = pytest.mark.slow


def documented_receiver(language: str) -> str:
    [code] = [
        s.code
        for s in snippets_of(ROOT / "docs" / "operations.md")
        if s.language == language and "standardwebhooks" in s.code
    ]
    return code


@pytest.fixture(params=["python", "js"])
def receiver_program(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[list[str]]:
    """The documented receiver of each language, written to a file, as the command to run it
    (Node's beside tests/js's packages, where it finds `standardwebhooks`)."""
    code = documented_receiver(request.param)
    if request.param == "python":
        script = tmp_path / "receiver.py"
        script.write_text(code, encoding="utf-8")
        yield [sys.executable, str(script)]
        return
    folder = request.getfixturevalue("js_clients")
    script = folder / f"receiver-{uuid.uuid4().hex}.mjs"
    script.write_text(code, encoding="utf-8")
    try:
        yield ["node", str(script)]
    finally:
        script.unlink()


@pytest.fixture
async def store(flushed_redis: Redis) -> PresenceStore:
    return PresenceStore(flushed_redis, dataclasses.replace(TEST_SETTINGS, shards=3))


@pytest.fixture
async def deliveries(store: PresenceStore) -> AsyncIterator[Deliveries]:
    sender = Sender(store.webhooks, (ipaddress.ip_network("127.0.0.0/8"),), timeout_s=1)
    settings = DeliverySettings(lease_ms=600, poll_ms=20, retry_ms=(30,))
    deliveries = Deliveries(store.webhooks, store.feed, sender, settings)
    task = asyncio.create_task(deliveries.run_forever())
    yield deliveries
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    await deliveries.close()
    await sender.close()


def answered(port: int, body: bytes, headers: dict[str, str]) -> int:
    request = urllib.request.Request(f"http://127.0.0.1:{port}/hooks", data=body, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=5) as response:  # noqa: S310 - loopback
            return int(response.status)
    except urllib.error.HTTPError as error:
        return error.code


async def test_the_documented_receivers_verify_and_take_each_batch_once(
    store: PresenceStore, deliveries: Deliveries, receiver_program: list[str]
) -> None:
    port = free_port()
    webhook, secret = await store.webhooks.create(f"http://127.0.0.1:{port}/hooks", None, None, 0)
    receiver = await asyncio.create_subprocess_exec(
        *receiver_program,
        env={**os.environ, "WEBHOOK_SECRET": secret, "PORT": str(port)},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    lines: list[str] = []

    async def read() -> None:
        assert receiver.stdout is not None
        while line := await receiver.stdout.readline():
            lines.append(line.decode().strip())

    reading = asyncio.create_task(read())
    try:
        for user in ("ann", "bob"):
            await store.touch(user, "tab")
        await eventually(lambda: len(lines) == 2, within_s=10, what="both changes printed")
        assert sorted(lines) == ["presence ann ONLINE 1", "presence bob ONLINE 1"]
        # A batch sent again (its acknowledgement lost): printed once.
        found = await store.webhooks.webhook(webhook.id)
        assert found is not None
        change = {"type": "presence", "userId": "cy", "kind": "ONLINE", "version": 1}
        batch = Batch([change], end_cursor="c", id="msg_again")
        outcomes = [await deliveries.sender.post(found, batch) for _ in range(2)]
        assert [o.status for o in outcomes] == [204, 204]
        await eventually(lambda: len(lines) == 3, what="the batch printed")
        forged = {"webhook-id": "msg_1", "webhook-timestamp": "1", "webhook-signature": "v1,x"}
        assert await asyncio.to_thread(answered, port, b"{}", forged) == 400
        await asyncio.sleep(0.2)
        assert lines[2:] == ["presence cy ONLINE 1"]
    finally:
        receiver.terminate()
        await receiver.wait()
        await reading
