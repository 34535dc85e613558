"""One request of a batch of changes to a webhook, signed as Standard Webhooks specifies, and
its attempt recorded.

A delivery reads the changes for a webhook from the feed, makes a Batch of them once (its id
and body stay the same on every attempt), and calls Sender.send until an attempt is
acknowledged; the acknowledged one moves the webhook's deliveredUpTo to the batch's end.
"""

from __future__ import annotations

import functools
import json
import socket
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

import aiohttp
from aiohappyeyeballs import AddrInfoType
from aiohttp.abc import AbstractResolver
from standardwebhooks.webhooks import Webhook as Signer

from gql_presence.lru import LeastRecentlyUsed
from gql_presence.store.errors import BadInputError
from gql_presence.store.models import Webhook
from gql_presence.store.validation import MAX_WEBHOOKS
from gql_presence.store.webhooks import MAX_ERROR_BYTES, Webhooks, bounded_error
from gql_presence.webhooks.safety import (
    Networks,
    RefusedAddressError,
    SafeResolver,
    check_sockaddr,
    check_url,
)

# At most this many changes in one request.
MAX_BATCH = 100

# How long a connection with no request in flight is kept for the next one: longer than the
# batching wait, so that a webhook sent changes every second keeps its connection; shorter than
# the idle timeouts receivers' servers commonly have (5 s in Node and uvicorn), so that it is
# mostly this end that closes an idle connection, not the receiver while a request is on its way.
KEEPALIVE_S = 4.0


@dataclass(frozen=True)
class Batch:
    """Changes sent in one request: the same id and body on every attempt."""

    changes: Sequence[Mapping[str, Any]]
    # The cursor of the batch's last change: the webhook's deliveredUpTo once acknowledged.
    end_cursor: str
    # When changes after deliveredUpTo were no longer retained: {"after": c, "until": c}.
    gap: Mapping[str, str] | None = None
    id: str = field(default_factory=lambda: "msg_" + uuid.uuid4().hex)
    made_at: datetime = field(default_factory=lambda: datetime.now(UTC))

    def __post_init__(self) -> None:
        if len(self.changes) > MAX_BATCH:
            raise ValueError(f"a batch holds at most {MAX_BATCH} changes")

    @functools.cached_property
    def body(self) -> str:
        """The JSON sent, made once: every attempt sends and signs the same."""
        data: dict[str, Any] = {}
        if self.gap is not None:
            data["gap"] = dict(self.gap)
        data["changes"] = list(self.changes)
        data["endCursor"] = self.end_cursor
        timestamp = self.made_at.isoformat(timespec="milliseconds").replace("+00:00", "Z")
        return json.dumps(
            {"type": "presence.changes", "timestamp": timestamp, "data": data},
            separators=(",", ":"),
        )


@dataclass(frozen=True)
class Outcome:
    """How one attempt went."""

    # The HTTP status answered; None when no answer came.
    status: int | None
    # At most 1 KiB of the answer, or the connection's error; None when acknowledged.
    error: str | None
    duration_ms: float

    @property
    def acknowledged(self) -> bool:
        return self.status is not None and 200 <= self.status < 300


def signature(secrets: Sequence[str], batch_id: str, timestamp_s: int, body: str) -> str:
    """The webhook-signature header: `v1,<base64>` under each secret, separated by spaces."""
    at = datetime.fromtimestamp(timestamp_s, UTC)
    return " ".join(_signer(secret).sign(batch_id, at, body) for secret in secrets)


@functools.lru_cache(maxsize=256)
def _signer(secret: str) -> Signer:
    # Made once per secret: making one decodes the secret's base64.
    return Signer(secret)


class Sender:
    """Sends batches to webhooks over connections the safety rules allow, and records each
    attempt in the store. One per process: it keeps the connections it may reuse.

    A connection is checked once, when it is made, on the address it connects to; a kept one is
    reused only for the same scheme, host (as the URL spells it) and port, under the same rules
    (the allowed networks are the Sender's for its whole life), so the address a request goes
    to is always one that was checked. `resolver`: where names' answers come from (the
    system's resolver unless another is given)."""

    def __init__(
        self,
        webhooks: Webhooks,
        allowed: Networks,
        timeout_s: float,
        resolver: AbstractResolver | None = None,
    ) -> None:
        self._webhooks = webhooks
        self._allowed = allowed
        self._timeout_s = timeout_s
        self._resolver = resolver
        # The URLs lately found to keep the rules, which are the Sender's for its whole life.
        self._urls_kept: LeastRecentlyUsed[str, bool] = LeastRecentlyUsed(4 * MAX_WEBHOOKS)
        # One client per scheme: a plain-http URL may reach only the allowed networks.
        self._clients: dict[bool, aiohttp.ClientSession] = {}

    def _client(self, plain_http: bool) -> aiohttp.ClientSession:
        if plain_http not in self._clients:
            allowed = self._allowed

            def checked_socket(addr_info: AddrInfoType) -> socket.socket:
                # The last gate, on the very address connected to: it also sees addresses
                # written in a URL, which aiohttp connects to without resolving.
                family, kind, proto, _, address = addr_info
                check_sockaddr(address, allowed, plain_http=plain_http)
                return socket.socket(family=family, type=kind, proto=proto)

            connector = aiohttp.TCPConnector(
                resolver=SafeResolver(allowed, plain_http=plain_http, source=self._resolver),
                socket_factory=checked_socket,
                # Resolved afresh for every connection made: a name's answers may change.
                use_dns_cache=False,
                keepalive_timeout=KEEPALIVE_S,
            )
            self._clients[plain_http] = aiohttp.ClientSession(
                connector=connector,
                timeout=aiohttp.ClientTimeout(total=self._timeout_s, connect=self._timeout_s),
                trust_env=False,  # no proxy from the environment: it would connect for us
            )
        return self._clients[plain_http]

    async def close(self) -> None:
        for client in self._clients.values():
            await client.close()
        self._clients.clear()

    async def send(self, webhook: Webhook, batch: Batch) -> Outcome:
        """One attempt to deliver the batch, recorded among the webhook's attempts (and, when
        acknowledged, its deliveredUpTo moved to the batch's end)."""
        outcome = await self.post(webhook, batch)
        await self._webhooks.record_attempt(
            webhook.id,
            delivery_id=batch.id,
            changes=len(batch.changes),
            status=outcome.status,
            error=outcome.error,
            duration_ms=outcome.duration_ms,
            acknowledged=outcome.acknowledged,
            delivered_up_to=batch.end_cursor,
        )
        return outcome

    async def post(self, webhook: Webhook, batch: Batch) -> Outcome:
        """The request itself, not recorded."""
        started = time.perf_counter()
        body = batch.body
        timestamp_s = int(time.time())
        headers = {
            "content-type": "application/json",
            "user-agent": "gql-presence-webhooks",
            "webhook-id": batch.id,
            "webhook-timestamp": str(timestamp_s),
            "webhook-signature": signature(webhook.secrets, batch.id, timestamp_s, body),
        }
        try:
            # Checked again as sent: the rules may be stricter than when it was made.
            if self._urls_kept.get(webhook.url) is None:
                check_url(webhook.url, self._allowed)
                self._urls_kept.put(webhook.url, True)
            plain_http = urlsplit(webhook.url).scheme.lower() == "http"
            client = self._client(plain_http)
            try:
                status, error = await _request(client, webhook.url, body, headers, client.timeout)
            except aiohttp.ClientConnectorError:
                raise
            except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError):
                # Closed or reset with no answer: most often a kept connection the receiver
                # closed as this request went out. Once more, over another connection, within
                # what is left of the timeout; a receiver drops a batch it has had by its
                # webhook-id.
                left = self._timeout_s - (time.perf_counter() - started)
                if left <= 0:
                    raise TimeoutError from None
                timeout = aiohttp.ClientTimeout(total=left, connect=left)
                status, error = await _request(client, webhook.url, body, headers, timeout)
        except TimeoutError:
            return _outcome(None, f"no answer within {self._timeout_s:g} s", started)
        except RefusedAddressError as refused:
            return _outcome(None, f"refused: {refused}", started)
        except BadInputError as refused:
            return _outcome(None, f"refused: {refused.message}", started)
        except aiohttp.ClientConnectorError as failed:
            return _outcome(None, _connection_error(failed), started)
        except (aiohttp.ClientError, OSError, ValueError) as failed:
            return _outcome(None, f"{type(failed).__name__}: {failed}", started)
        return _outcome(status, error, started)


async def _request(
    client: aiohttp.ClientSession,
    url: str,
    body: str,
    headers: Mapping[str, str],
    within: aiohttp.ClientTimeout,
) -> tuple[int, str | None]:
    """The status answered, and what a failure's answer said."""
    async with client.post(
        url, data=body.encode(), headers=headers, allow_redirects=False, timeout=within
    ) as answer:
        # At most 1 KiB of any answer is read: a connection whose answer was read whole is
        # kept for the next request, one whose answer was not is closed.
        head = await _head(answer.content)
        if answer.content.at_eof():
            answer.release()
        else:
            answer.close()
        status = answer.status
        if 200 <= status < 300:
            return status, None
        if 300 <= status < 400:
            return status, f"HTTP {status}: redirects are not followed"
        return status, head.decode("utf-8", "replace") or f"HTTP {status}"


async def _head(content: aiohttp.StreamReader) -> bytes:
    """The answer's first MAX_ERROR_BYTES at most: all of it when it is no longer."""
    head = b""
    while len(head) < MAX_ERROR_BYTES:
        part = await content.read(MAX_ERROR_BYTES - len(head))
        if not part:
            break
        head += part
    return head


def _connection_error(failed: aiohttp.ClientConnectorError) -> str:
    cause = failed.os_error
    if isinstance(cause, RefusedAddressError) or isinstance(cause.__cause__, RefusedAddressError):
        return f"refused: {cause}"
    return f"cannot connect to {failed.host}:{failed.port}: {cause.strerror or cause}"


def _outcome(status: int | None, error: str | None, started: float) -> Outcome:
    return Outcome(
        status,
        None if error is None else bounded_error(error),
        (time.perf_counter() - started) * 1000,
    )
