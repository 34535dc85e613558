"""Batches sent to real receivers: signed as Standard Webhooks specifies, recorded, and never
sent where the safety rules refuse."""

from __future__ import annotations

import asyncio
import dataclasses
import ipaddress
import json
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from pytest_aiohttp import AiohttpServer
from standardwebhooks import Webhook as Verifier
from standardwebhooks.webhooks import WebhookVerificationError

from gql_presence.store import PresenceStore
from gql_presence.store.models import Webhook
from gql_presence.webhooks.safety import Networks, RefusedAddressError
from gql_presence.webhooks.sender import Batch, Sender
from tests.helpers import Answers

LOOPBACK: Networks = (ipaddress.ip_network("127.0.0.0/8"),)
CHANGES = [
    {"type": "presence", "userId": "ada", "kind": "ONLINE", "cursor": "c1", "version": 1},
    {"type": "place", "placeId": "lobby", "kind": "JOINED", "cursor": "c2", "version": 4},
]


@dataclass
class Receiver:
    """An HTTP server on 127.0.0.1 that keeps every request it gets and answers as told."""

    url: str = ""
    requests: list[tuple[dict[str, str], str]] = field(default_factory=list)
    status: int = 204
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0
    # The far end of the connection each request came over: one per connection made.
    peers: list[Any] = field(default_factory=list)

    async def handle(self, request: web.Request) -> web.Response:
        self.requests.append((dict(request.headers), await request.text()))
        assert request.transport is not None
        self.peers.append(request.transport.get_extra_info("peername"))
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        return web.Response(status=self.status, body=self.body, headers=self.headers)


async def start(aiohttp_server: AiohttpServer) -> Receiver:
    receiver = Receiver()
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", receiver.handle)
    server = await aiohttp_server(app, host="127.0.0.1")
    receiver.url = f"http://127.0.0.1:{server.port}/hooks?token=receivers-own"
    return receiver


@pytest.fixture
async def receiver(aiohttp_server: AiohttpServer) -> Receiver:
    return await start(aiohttp_server)


@pytest.fixture
async def sender(store: PresenceStore) -> AsyncIterator[Sender]:
    sender = Sender(store.webhooks, LOOPBACK, timeout_s=1)
    yield sender
    await sender.close()


async def made(store: PresenceStore, url: str) -> tuple[Webhook, str]:
    """A webhook as the store keeps it (its URL's rules are the test's to choose)."""
    return await store.webhooks.create(url, None, None, 0)


async def test_a_batch_arrives_signed_and_its_acknowledgement_moves_delivered_up_to(
    store: PresenceStore, sender: Sender, receiver: Receiver
) -> None:
    webhook, secret = await made(store, receiver.url)
    batch = Batch(CHANGES, end_cursor="c2")
    outcome = await sender.send(webhook, batch)
    assert outcome.acknowledged
    [(headers, body)] = receiver.requests
    assert headers["Content-Type"] == "application/json"
    assert headers["webhook-id"] == batch.id
    payload = Verifier(secret).verify(body, headers)
    assert payload["type"] == "presence.changes"
    assert payload["data"] == {"changes": CHANGES, "endCursor": "c2"}
    assert payload["timestamp"].endswith("Z")
    with pytest.raises(WebhookVerificationError):
        Verifier("whsec_" + "A" * 43 + "=").verify(body, headers)
    found = await store.webhooks.webhook(webhook.id)
    assert found is not None
    assert found.delivered_up_to == "c2"
    [attempt] = found.attempts
    assert (attempt.delivery_id, attempt.changes, attempt.status, attempt.error) == (
        batch.id,
        2,
        204,
        None,
    )
    assert attempt.duration_ms > 0


async def test_every_attempt_of_a_batch_sends_the_same_id_and_body(
    store: PresenceStore, sender: Sender, receiver: Receiver
) -> None:
    webhook, secret = await made(store, receiver.url)
    batch = Batch(CHANGES, end_cursor="c2", gap={"after": "c0", "until": "c1"})
    receiver.status = 503
    first = await sender.send(webhook, batch)
    receiver.status = 200
    second = await sender.send(webhook, batch)
    assert (first.acknowledged, second.acknowledged) == (False, True)
    (h1, b1), (h2, b2) = receiver.requests
    assert (h1["webhook-id"], b1) == (h2["webhook-id"], b2)
    assert list(json.loads(b1)["data"]) == ["gap", "changes", "endCursor"]
    assert Verifier(secret).verify(b2, h2)["data"]["gap"] == {"after": "c0", "until": "c1"}


async def test_both_secrets_sign_while_a_rotated_one_still_does(
    store: PresenceStore, sender: Sender, receiver: Receiver
) -> None:
    webhook, old = await made(store, receiver.url)
    rotated = await store.webhooks.rotate_secret(webhook.id)
    assert rotated is not None
    webhook, new = rotated
    await sender.send(webhook, Batch(CHANGES, end_cursor="c2"))
    [(headers, body)] = receiver.requests
    assert len(headers["webhook-signature"].split(" ")) == 2
    assert all(s.startswith("v1,") for s in headers["webhook-signature"].split(" "))
    assert Verifier(old).verify(body, headers) == Verifier(new).verify(body, headers)
    # Once the old one stops signing, only the new one verifies.
    await sender.send(dataclasses.replace(webhook, secrets=(new,)), Batch(CHANGES, "c2"))
    headers, body = receiver.requests[1]
    Verifier(new).verify(body, headers)
    with pytest.raises(WebhookVerificationError):
        Verifier(old).verify(body, headers)


async def test_a_refusal_keeps_at_most_a_kibibyte_of_the_answer(
    store: PresenceStore, sender: Sender, receiver: Receiver
) -> None:
    webhook, _ = await made(store, receiver.url)
    receiver.status, receiver.body = 500, b"x" * 100_000
    outcome = await sender.send(webhook, Batch(CHANGES, end_cursor="c2"))
    assert (outcome.acknowledged, outcome.status) == (False, 500)
    assert outcome.error == "x" * 1024
    found = await store.webhooks.webhook(webhook.id)
    assert found is not None
    assert found.delivered_up_to is None
    assert found.attempts[0].error == "x" * 1024


async def test_a_slow_receiver_is_a_failure_with_no_status(
    store: PresenceStore, receiver: Receiver
) -> None:
    webhook, _ = await made(store, receiver.url)
    receiver.delay_s = 2
    sender = Sender(store.webhooks, LOOPBACK, timeout_s=0.3)
    try:
        outcome = await sender.send(webhook, Batch(CHANGES, end_cursor="c2"))
    finally:
        await sender.close()
    assert (outcome.status, outcome.error) == (None, "no answer within 0.3 s")
    assert outcome.duration_ms < 1500


async def test_a_redirect_is_a_failure_and_is_not_followed(
    store: PresenceStore, sender: Sender, aiohttp_server: AiohttpServer
) -> None:
    inside = await start(aiohttp_server)
    redirecting = await start(aiohttp_server)
    redirecting.status, redirecting.headers = 307, {"Location": inside.url}
    webhook, _ = await made(store, redirecting.url)
    outcome = await sender.send(webhook, Batch(CHANGES, end_cursor="c2"))
    assert (outcome.status, outcome.error) == (307, "HTTP 307: redirects are not followed")
    assert len(redirecting.requests) == 1
    assert inside.requests == []


async def test_no_connection_is_made_to_loopback_unless_it_is_an_allowed_network(
    store: PresenceStore, receiver: Receiver
) -> None:
    port = receiver.url.split(":")[2].split("/")[0]
    for url in (
        receiver.url,  # http, and no network allowed
        f"https://127.0.0.1:{port}/",
        f"https://2130706433:{port}/",
        f"https://0177.0.0.1:{port}/",
        f"https://[::ffff:127.0.0.1]:{port}/",
        f"https://localhost:{port}/",  # a name that resolves to loopback
    ):
        sender = Sender(store.webhooks, (), timeout_s=1)
        webhook, _ = await made(store, url)
        try:
            outcome = await sender.send(webhook, Batch(CHANGES, end_cursor="c2"))
        finally:
            await sender.close()
        assert outcome.status is None, url
        assert outcome.error is not None
        assert outcome.error.startswith("refused: "), outcome.error
        await store.webhooks.delete(webhook.id)
    assert receiver.requests == []


async def test_an_address_in_the_url_is_refused_at_the_connection_itself(
    store: PresenceStore, receiver: Receiver
) -> None:
    # Past the URL's check (as a URL made under other rules would be): the socket factory,
    # which sees the very address connected to, refuses it.
    sender = Sender(store.webhooks, (ipaddress.ip_network("10.0.0.0/8"),), timeout_s=1)
    try:
        with pytest.raises(aiohttp.ClientConnectorError) as refused:
            await sender._client(plain_http=True).post(receiver.url, data=b"{}")
    finally:
        await sender.close()
    assert isinstance(refused.value.os_error, RefusedAddressError)
    assert str(refused.value.os_error) == "connections to 127.0.0.1 are not allowed"
    assert receiver.requests == []


async def test_no_secret_reaches_a_log_or_an_attempt(
    store: PresenceStore, sender: Sender, receiver: Receiver, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    webhook, secret = await made(store, receiver.url)
    rotated = await store.webhooks.rotate_secret(webhook.id)
    assert rotated is not None
    webhook, new = rotated
    receiver.status, receiver.body = 400, b"bad signature"
    await sender.send(webhook, Batch(CHANGES, end_cursor="c2"))
    await sender.send(dataclasses.replace(webhook, url="https://localhost:1/"), Batch(CHANGES, "c"))
    found = await store.webhooks.webhook(webhook.id)
    shown: list[Any] = [found, *caplog.messages, *(r.getMessage() for r in caplog.records)]
    for text in map(str, shown):
        for key in (secret, new, secret.removeprefix("whsec_"), new.removeprefix("whsec_")):
            assert key not in text
    assert found is not None
    assert [a.error for a in found.attempts][1] == "bad signature"


async def test_one_connection_carries_the_batches_that_follow_one_another(
    store: PresenceStore, sender: Sender, receiver: Receiver
) -> None:
    webhook, _ = await made(store, receiver.url)
    receiver.status, receiver.body = 200, b'{"ok": true}'
    for end in ("c1", "c2", "c3", "c4"):
        assert (await sender.send(webhook, Batch(CHANGES, end_cursor=end))).acknowledged
    receiver.status, receiver.body = 500, b"busy"
    assert (await sender.send(webhook, Batch(CHANGES, end_cursor="c5"))).error == "busy"
    assert len(receiver.requests) == 5
    assert len(set(receiver.peers)) == 1


async def test_a_connection_whose_answer_was_not_read_whole_is_not_used_again(
    store: PresenceStore, sender: Sender, receiver: Receiver
) -> None:
    webhook, _ = await made(store, receiver.url)
    # Far more than the kibibyte read of an answer: the rest is neither read nor waited for.
    receiver.body = b"x" * 4_000_000
    for status in (200, 200, 500):
        receiver.status = status
        await sender.send(webhook, Batch(CHANGES, end_cursor="c2"))
    assert len(set(receiver.peers)) == 3


async def test_a_kept_connection_the_receiver_closes_as_a_batch_goes_out_costs_no_attempt(
    store: PresenceStore, sender: Sender
) -> None:
    # A receiver that answers the first request of each connection and closes the connection
    # when a second comes over it, as a server closing an idle connection at that moment does.
    answered: list[int] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        for turn in range(2):
            head = await reader.readuntil(b"\r\n\r\n")
            length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
            await reader.readexactly(length)
            if turn:
                break
            answered.append(len(answered))
            writer.write(b"HTTP/1.1 204 No Content\r\n\r\n")
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        webhook, _ = await made(store, f"http://127.0.0.1:{port}/")
        outcomes = [await sender.send(webhook, Batch(CHANGES, end_cursor=c)) for c in "ab"]
    finally:
        server.close()
    assert [(o.status, o.error) for o in outcomes] == [(204, None), (204, None)]
    assert len(answered) == 2
    found = await store.webhooks.webhook(webhook.id)
    assert found is not None
    assert [a.status for a in found.attempts] == [204, 204]


async def test_a_kept_connection_goes_only_to_the_address_checked_when_it_was_made(
    store: PresenceStore, aiohttp_server: AiohttpServer
) -> None:
    # The name first answers an allowed address, then only one the rules refuse: a request
    # over the connection kept still goes to the address checked; a new connection is refused.
    outside = await start(aiohttp_server)
    port = int(outside.url.split(":")[2].split("/")[0])
    inside = Receiver()
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", inside.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.2", port).start()
    answers = Answers("127.0.0.1")
    sender = Sender(store.webhooks, (ipaddress.ip_network("127.0.0.1/32"),), 1, answers)
    try:
        webhook, _ = await made(store, f"http://hooks.example:{port}/in")
        first = await sender.send(webhook, Batch(CHANGES, end_cursor="c1"))
        answers.addresses = ("127.0.0.2",)
        outside.headers = {"Connection": "close"}  # the connection ends with this answer
        kept = await sender.send(webhook, Batch(CHANGES, end_cursor="c2"))
        new = await sender.send(webhook, Batch(CHANGES, end_cursor="c3"))
    finally:
        await sender.close()
        await runner.cleanup()
    assert (first.status, kept.status) == (204, 204)
    assert len(set(outside.peers)) == 1
    assert new.status is None
    assert new.error == (
        "refused: the host resolves only to addresses that are not allowed (127.0.0.2)"
    )
    assert inside.requests == []


def test_a_batch_holds_at_most_a_hundred_changes() -> None:
    Batch([{"cursor": str(i)} for i in range(100)], end_cursor="99")
    with pytest.raises(ValueError, match="at most 100"):
        Batch([{"cursor": str(i)} for i in range(101)], end_cursor="100")


async def test_a_failed_tls_handshake_is_a_failure_with_no_status(
    store: PresenceStore, sender: Sender, receiver: Receiver
) -> None:
    https = receiver.url.replace("http://", "https://")
    webhook, _ = await made(store, https)
    outcome = await sender.send(webhook, Batch(CHANGES, end_cursor="c2"))
    assert outcome.status is None
    assert outcome.error
    assert "token=receivers-own" not in outcome.error
    assert receiver.requests == []
