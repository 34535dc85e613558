"""The GraphQL types of webhooks: each webhook as backends manage it, and its attempts."""

from __future__ import annotations

from datetime import datetime

import strawberry

from gql_presence.graphql.types import ID, ChangeKind
from gql_presence.store import models


@strawberry.type(description="One request to a webhook's URL, as it went.")
class WebhookAttempt:
    at: datetime = strawberry.field(description="When the request was sent.")
    delivery_id: ID = strawberry.field(
        description="The request's `webhook-id`: the same for every attempt of one batch."
    )
    changes: int = strawberry.field(description="How many changes the request carried.")
    status: int | None = strawberry.field(
        description="The HTTP status answered; null when no answer came (a timeout, a refused connection, a TLS failure)."
    )
    error: str | None = strawberry.field(
        description="What went wrong, when something did: at most 1 KiB of the answer, or the connection's error."
    )
    duration_ms: float = strawberry.field(
        description="Milliseconds from sending the request to its answer or failure."
    )

    @classmethod
    def of(cls, attempt: models.WebhookAttempt) -> WebhookAttempt:
        return cls(
            at=attempt.at,
            delivery_id=ID(attempt.delivery_id),
            changes=attempt.changes,
            status=attempt.status,
            error=attempt.error,
            duration_ms=attempt.duration_ms,
        )


@strawberry.type(
    description="Where the deployment's changes are POSTed, signed as Standard Webhooks specifies, and how far it has come."
)
class Webhook:
    id: ID = strawberry.field(
        description="The webhook's id, for webhook, updateWebhook and the rest."
    )
    url: str = strawberry.field(description="Where its requests are POSTed.")
    kinds: list[ChangeKind] = strawberry.field(description="The kinds of change delivered.")
    places: list[str] | None = strawberry.field(
        description="Place ids, and prefixes ending in *, whose place events are delivered; null: every place."
    )
    debounce_seconds: int = strawberry.field(
        description="Seconds an OFFLINE (LEFT) waits for an ONLINE of the same user (a JOINED of the same place session) that cancels both; 0 to 60."
    )
    enabled: bool = strawberry.field(description="Whether its changes are being delivered.")
    disabled_reason: str | None = strawberry.field(
        description="Why the service disabled it; null while enabled, or when a backend disabled it."
    )
    created_at: datetime = strawberry.field(
        description="When it was made: it delivers the changes made after this."
    )
    delivered_up_to: str | None = strawberry.field(
        description="The cursor of the last change it acknowledged; null before the first."
    )
    backlog: int = strawberry.field(description="Changes for it that wait to be delivered now.")
    attempts: list[WebhookAttempt] = strawberry.field(
        description="The most recent attempts, newest first (at most 20)."
    )

    @classmethod
    def of(cls, webhook: models.Webhook) -> Webhook:
        return cls(
            id=ID(webhook.id),
            url=webhook.url,
            kinds=[ChangeKind(kind.value) for kind in webhook.kinds],
            places=None if webhook.places is None else list(webhook.places),
            debounce_seconds=webhook.debounce_seconds,
            enabled=webhook.enabled,
            disabled_reason=webhook.disabled_reason,
            created_at=webhook.created_at,
            delivered_up_to=webhook.delivered_up_to,
            backlog=webhook.backlog,
            attempts=[WebhookAttempt.of(attempt) for attempt in webhook.attempts],
        )


@strawberry.type(description="A webhook with its signing secret, which is shown only here.")
class WebhookWithSecret:
    webhook: Webhook = strawberry.field(description="The webhook.")
    secret: str = strawberry.field(
        description="`whsec_` and the base64 of 32 random bytes (the Standard Webhooks form)."
    )
