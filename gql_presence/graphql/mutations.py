"""The resolvers of Mutation: each checks the caller's right, calls one store method and
maps its result to the GraphQL types. Descriptions here are what GraphiQL shows.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from typing import Annotated, Any

import strawberry

from gql_presence.graphql import webhook_resolvers
from gql_presence.graphql.arguments import (
    DeviceArg,
    FriendIdsArg,
    MutualArg,
    OwnUserIdArg,
    PlaceIdArg,
    PlaceSessionArg,
    PlaceUserArg,
    SessionIdArg,
    UserIdArg,
    acting_user,
    authorized_store,
    place_store,
)
from gql_presence.graphql.context import Context
from gql_presence.graphql.scalars import JSONObject
from gql_presence.graphql.types import (
    ID,
    ChosenStatus,
    KickResult,
    PlaceMember,
    UserPresence,
    Visibility,
)
from gql_presence.graphql.webhook_types import Webhook, WebhookWithSecret
from gql_presence.policy.auth import Need
from gql_presence.store import (
    PresenceStore,
    models,
)


def _friend_links_mutation(
    change: Callable[[PresenceStore, str, Sequence[str], bool], Awaitable[int]], description: str
) -> Any:
    """addFriends and removeFriends: the same arguments and rights, one store method each."""

    async def resolve(
        info: strawberry.Info[Context, None],
        user_id: UserIdArg,
        friend_ids: FriendIdsArg,
        mutual: MutualArg = True,
    ) -> int:
        store = authorized_store(info, Need.BACKEND)
        await info.context.charge(len(friend_ids))
        return await change(store, user_id, friend_ids, mutual)

    return strawberry.mutation(resolver=resolve, description=description)


@strawberry.type(description="Reporting activity and managing sessions and friends (for backends).")
class Mutation:
    @strawberry.mutation(
        description="Record activity of userId, for one session when sessionId is given. at backfills an earlier time."
    )
    async def touch(
        self,
        info: strawberry.Info[Context, None],
        user_id: UserIdArg,
        session_id: SessionIdArg = None,
        at: Annotated[
            datetime | None,
            strawberry.argument(
                description="When the activity happened, if not now: at most 5 seconds ahead, no further back than the retention."
            ),
        ] = None,
        *,
        device: DeviceArg = None,
        idle: Annotated[
            bool,
            strawberry.argument(
                description="Whether the user is away from this session (a heartbeat from a device whose user is away); any other touch makes it active again."
            ),
        ] = False,
    ) -> UserPresence:
        store = authorized_store(info, Need.BACKEND)
        return UserPresence.read(await store.touch(user_id, session_id, at, device, idle=idle))

    @strawberry.mutation(
        description="The user's own choice of status (an end user for their own id: userId null or their own). The custom status is left as it is."
    )
    async def set_status(
        self,
        info: strawberry.Info[Context, None],
        status: Annotated[ChosenStatus, strawberry.argument(description="The status chosen.")],
        user_id: OwnUserIdArg = None,
    ) -> UserPresence:
        user = acting_user(info, user_id)
        chosen = models.ChosenStatus(status.value)
        return UserPresence.of(await info.context.store.set_status(user, chosen))

    @strawberry.mutation(
        description="Sets the user's custom status (an end user for their own id); text null (or omitted) clears it. expiresAt null: shown until changed."
    )
    async def set_custom_status(
        self,
        info: strawberry.Info[Context, None],
        user_id: OwnUserIdArg = None,
        text: Annotated[
            str | None,
            strawberry.argument(
                description="1 to 128 characters, no control characters; null clears the custom status."
            ),
        ] = None,
        emoji: Annotated[
            str | None, strawberry.argument(description="At most 16 characters, or null.")
        ] = None,
        expires_at: Annotated[
            datetime | None,
            strawberry.argument(
                description="When it stops being shown: in the future, at most the retention ahead; null: until changed."
            ),
        ] = None,
    ) -> UserPresence:
        user = acting_user(info, user_id)
        store = info.context.store
        return UserPresence.of(await store.set_custom_status(user, text, emoji, expires_at))

    @strawberry.mutation(
        description="Who may see the user's lastSeen and sessions' times (an end user for their own id)."
    )
    async def set_last_seen_visibility(
        self,
        info: strawberry.Info[Context, None],
        visible_to: Annotated[
            Visibility, strawberry.argument(description="Who may see lastSeen from now on.")
        ],
        user_id: OwnUserIdArg = None,
    ) -> UserPresence:
        user = acting_user(info, user_id)
        visible = models.Visibility(visible_to.value)
        return UserPresence.of(await info.context.store.set_last_seen_visibility(user, visible))

    @strawberry.mutation(
        description="Marks one live session idle or active again: a tab hidden or shown, a screen locked. An end user for their own sessions. The user turns AWAY when every live session is idle."
    )
    async def set_session_idle(
        self,
        info: strawberry.Info[Context, None],
        session_id: Annotated[
            ID, strawberry.argument(description="One of the user's live sessions.")
        ],
        idle: Annotated[
            bool,
            strawberry.argument(
                description="true: the user is away from this session; false: active on it again."
            ),
        ],
        user_id: OwnUserIdArg = None,
    ) -> UserPresence:
        user = acting_user(info, user_id)
        store = info.context.store
        return UserPresence.of(await store.set_session_idle(user, session_id, idle=idle))

    @strawberry.mutation(
        description="Record activity of many users at once, in one atomic step per shard. Returns how many were recorded."
    )
    async def touch_many(
        self,
        info: strawberry.Info[Context, None],
        user_ids: Annotated[
            list[ID],
            strawberry.argument(
                description="At most 10,000 ids; each is touched in its `default` session, which is skipped while revoked."
            ),
        ],
    ) -> int:
        store = authorized_store(info, Need.BACKEND)
        await info.context.charge(len(user_ids))
        return await store.touch_many(user_ids)

    @strawberry.mutation(description="End userId's presence: every session, or only sessionId.")
    async def kick(
        self,
        info: strawberry.Info[Context, None],
        user_id: UserIdArg,
        session_id: Annotated[
            ID | None,
            strawberry.argument(
                description="The one session to end; null ends every live session."
            ),
        ] = None,
    ) -> KickResult:
        result = await authorized_store(info, Need.BACKEND).kick(user_id, session_id)
        return KickResult(
            user_id=ID(result.user_id), kicked_sessions=result.kicked_sessions, online=result.online
        )

    @strawberry.mutation(
        description="Replaces the state of a session in a place; announced to the place as UPDATED."
    )
    async def set_place_state(
        self,
        info: strawberry.Info[Context, None],
        place_id: PlaceIdArg,
        session_id: PlaceSessionArg,
        state: Annotated[
            JSONObject,
            strawberry.argument(description="A JSON object, at most 1 KiB once encoded."),
        ],
        user_id: PlaceUserArg = None,
    ) -> PlaceMember:
        user = acting_user(info, user_id)
        store = place_store(info, [place_id])
        return PlaceMember.of(await store.set_place_state(place_id, user, session_id, state))

    add_friends = _friend_links_mutation(
        PresenceStore.add_friends,
        "Add friendIds to userId's friend set (and userId to theirs when mutual). Returns how many links were added.",
    )
    remove_friends = _friend_links_mutation(
        PresenceStore.remove_friends,
        "Remove friendIds from userId's friend set (and userId from theirs when mutual). Returns how many links were removed.",
    )
    create_webhook: WebhookWithSecret = strawberry.mutation(
        resolver=webhook_resolvers.create_webhook,
        description="Delivers the changes from now on to `url`. Backends only; at most 50 webhooks.",
    )
    update_webhook: Webhook = strawberry.mutation(
        resolver=webhook_resolvers.update_webhook,
        description="Changes what is given; `enabled: true` resumes a disabled webhook from its deliveredUpTo.",
    )
    rotate_webhook_secret: WebhookWithSecret = strawberry.mutation(
        resolver=webhook_resolvers.rotate_webhook_secret,
        description="A new secret; the old one keeps signing beside it for 24 hours.",
    )
    delete_webhook: bool = strawberry.mutation(
        resolver=webhook_resolvers.delete_webhook,
        description="Deletes a webhook and its attempts; false when there was none. Backends only.",
    )
    replay_webhook: Webhook = strawberry.mutation(
        resolver=webhook_resolvers.replay_webhook,
        description="Delivers again every retained change after `after` (from the oldest retained when null), in order, before anything newer.",
    )
