"""The webhooks' queries and mutations: for backends only, each one store call.

Their fields are listed on Query and Mutation (resolvers.py); the resolvers are here so that
webhooks read as one piece. The URL's safety rules are checked here, with the deployment's
allowed networks, before the store keeps anything.
"""

from __future__ import annotations

from typing import Annotated

import strawberry

from gql_presence.graphql.context import Context
from gql_presence.graphql.types import ChangeKind
from gql_presence.graphql.webhook_types import Webhook, WebhookWithSecret
from gql_presence.policy.auth import Need
from gql_presence.store import models
from gql_presence.store.errors import BadInputError
from gql_presence.store.webhooks import Webhooks
from gql_presence.webhooks.safety import check_url

ID = strawberry.ID

IdArg = Annotated[ID, strawberry.argument(description="The webhook's id.")]
UrlArg = Annotated[
    str,
    strawberry.argument(
        description="Where to POST the changes: https (http only for hosts in PRESENCE_WEBHOOK_ALLOWED_NETWORKS), at most 2,048 characters, with no user name or password."
    ),
]
KindsArg = Annotated[
    list[ChangeKind] | None,
    strawberry.argument(
        description="The kinds of change to deliver; null: every kind but UPDATED."
    ),
]
PlacesArg = Annotated[
    list[str] | None,
    strawberry.argument(
        description="Place ids, and prefixes ending in *, whose place events are delivered (as a JWT's places claim); null: every place. Presence events are never limited by it."
    ),
]


def _webhooks(info: strawberry.Info[Context, None]) -> Webhooks:
    return info.context.store_for(Need.BACKEND, info.field_name).webhooks


def _found(webhook: models.Webhook | None, webhook_id: str) -> models.Webhook:
    if webhook is None:
        raise BadInputError(f"No webhook has the id {webhook_id!r}: `webhooks` lists them.")
    return webhook


def _kinds(kinds: list[ChangeKind] | None) -> list[str] | None:
    return None if kinds is None else [kind.value for kind in kinds]


async def webhooks(info: strawberry.Info[Context, None]) -> list[Webhook]:
    return [Webhook.of(webhook) for webhook in await _webhooks(info).webhooks()]


async def webhook(info: strawberry.Info[Context, None], id: IdArg) -> Webhook | None:
    found = await _webhooks(info).webhook(id)
    return None if found is None else Webhook.of(found)


async def create_webhook(
    info: strawberry.Info[Context, None],
    url: UrlArg,
    kinds: KindsArg = None,
    places: PlacesArg = None,
    debounce_seconds: Annotated[
        int,
        strawberry.argument(
            description="Seconds an OFFLINE (LEFT) waits for an ONLINE of the same user (a JOINED of the same place session) that cancels both; 0 to 60."
        ),
    ] = 0,
) -> WebhookWithSecret:
    store = _webhooks(info)
    check_url(url, info.context.webhook_networks)
    made, secret = await store.create(url, _kinds(kinds), places, debounce_seconds)
    return WebhookWithSecret(webhook=Webhook.of(made), secret=secret)


async def update_webhook(
    info: strawberry.Info[Context, None],
    id: IdArg,
    *,
    url: Annotated[
        str | None,
        strawberry.argument(description="A new URL, under the same rules as createWebhook's."),
    ] = None,
    kinds: KindsArg = None,
    places: PlacesArg = None,
    debounce_seconds: Annotated[int | None, strawberry.argument(description="0 to 60.")] = None,
    enabled: Annotated[
        bool | None,
        strawberry.argument(
            description="false stops its deliveries; true resumes them from deliveredUpTo."
        ),
    ] = None,
) -> Webhook:
    store = _webhooks(info)
    if url is not None:
        check_url(url, info.context.webhook_networks)
    changed = await store.update(
        id,
        url=url,
        kinds=_kinds(kinds),
        places=places,
        debounce_seconds=debounce_seconds,
        enabled=enabled,
    )
    return Webhook.of(_found(changed, id))


async def rotate_webhook_secret(
    info: strawberry.Info[Context, None],
    id: IdArg,
) -> WebhookWithSecret:
    rotated = await _webhooks(info).rotate_secret(id)
    if rotated is None:
        _found(None, id)
        raise AssertionError  # pragma: no cover - _found raised
    made, secret = rotated
    return WebhookWithSecret(webhook=Webhook.of(made), secret=secret)


async def delete_webhook(info: strawberry.Info[Context, None], id: IdArg) -> bool:
    return await _webhooks(info).delete(id)


async def replay_webhook(
    info: strawberry.Info[Context, None],
    id: IdArg,
    after: Annotated[
        str | None,
        strawberry.argument(
            description="A change's cursor: deliver again what came after it; null: from the oldest retained."
        ),
    ] = None,
) -> Webhook:
    replayed = await _webhooks(info).request_replay(id, after)
    return Webhook.of(_found(replayed, id))
