"""The root types' resolvers: each checks the caller's right, calls one store method and maps
its result to the GraphQL types. Descriptions here are what GraphiQL shows.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncGenerator, Awaitable, Callable, Sequence
from datetime import date, datetime
from typing import Annotated, Any

import strawberry
from strawberry.extensions import DisableIntrospection
from strawberry.printer import print_schema

from gql_presence.graphql import webhook_resolvers
from gql_presence.graphql.context import NOT_A_FRIEND, Context
from gql_presence.graphql.event_rendering import Interest
from gql_presence.graphql.types import (
    ID,
    ChosenStatus,
    JSONObject,
    KickResult,
    OnlineOrder,
    PlaceCount,
    PlaceEvent,
    PlaceMember,
    PlaceMemberConnection,
    PlaceSessionState,
    PresenceConnection,
    PresenceEvent,
    SessionEndReason,
    SessionState,
    UserPresence,
    Visibility,
    Webhook,
    WebhookWithSecret,
    WeeklyStats,
)
from gql_presence.policy.auth import CallerKind, Need
from gql_presence.policy.limits import MAX_REPRESENTATIONS
from gql_presence.realtime.delivery import FeedDroppedError
from gql_presence.store import (
    MAX_PRESENCES,
    PresenceStore,
    PublishedPlaceEvent,
    check_device,
    check_id,
    check_ids,
    member_joined,
    models,
)
from gql_presence.store.errors import BadInputError, ForbiddenError, StoreUnavailableError

# Place changes a placeChanged subscriber may be behind by before it is ended (it reads the
# place again and subscribes anew).
PLACE_EVENTS_BUFFERED = 1000

UserIdArg = Annotated[
    ID,
    strawberry.argument(description="The user's id: 1 to 128 characters, no control characters."),
]
FirstArg = Annotated[int, strawberry.argument(description="Page size, 0 to 1000.")]
AfterArg = Annotated[
    str | None,
    strawberry.argument(
        description="The `endCursor` of the previous page; null for the first page."
    ),
]
FriendIdsArg = Annotated[
    list[ID],
    strawberry.argument(
        description="The friends' ids, at most 10,000; the user's own id is ignored."
    ),
]
MutualArg = Annotated[
    bool,
    strawberry.argument(
        description="Whether to change the friends' own sets as well, both directions."
    ),
]
SessionIdArg = Annotated[
    ID | None,
    strawberry.argument(
        description="The session (device, tab); null means the session named `default`."
    ),
]


OwnUserIdArg = Annotated[
    ID | None,
    strawberry.argument(
        description="Whose: an end user's own id (or null for it); a backend gives it."
    ),
]
DeviceArg = Annotated[
    str | None,
    strawberry.argument(
        description='What the client says it is ("web", "ios", "desktop"…): 1 to 32 characters; null keeps what the session said before.'
    ),
]


def _store(
    info: strawberry.Info[Context, None], need: Need, user_id: str | None = None
) -> PresenceStore:
    """The store, once the caller may run this field (for this user)."""
    return info.context.store_for(need, info.field_name, user_id)


async def _reader_store(
    info: strawberry.Info[Context, None], user_ids: Sequence[str]
) -> PresenceStore:
    """The store, once the caller may read the presence of every user given."""
    await info.context.check_may_read(user_ids)
    return info.context.store


def _place_store(info: strawberry.Info[Context, None], place_ids: Sequence[str]) -> PresenceStore:
    """The store, once the caller may act in every place given."""
    info.context.caller.authorize_places(info.field_name, place_ids)
    return info.context.store


def _own_user(info: strawberry.Info[Context, None], user_id: str | None) -> str:
    """The user an operation acts for: the one given (an end user's own only), or an end
    user's own id when none is."""
    caller = info.context.caller
    if user_id is None:
        caller.require_credentials()
        if caller.kind is not CallerKind.USER or caller.name is None:
            raise BadInputError("Give the userId whose session this is.")
        user_id = caller.name
    caller.authorize(Need.OWN, info.field_name, user_id)
    return check_id(user_id, "userId")


PlaceIdArg = Annotated[
    ID, strawberry.argument(description="The place (a document, a channel, a lobby).")
]
PlaceUserArg = Annotated[
    ID | None,
    strawberry.argument(
        description="Whose session: an end user's own id (or null for it); a backend gives it."
    ),
]
PlaceSessionArg = Annotated[
    ID, strawberry.argument(description="The session (device, tab) in the place.")
]


@strawberry.type(description="Reading presence: who is online, who was active when, and how many.")
class Query:
    @strawberry.field(
        description="Users with activity inside the presence window, most recently active first."
    )
    async def online_users(
        self,
        info: strawberry.Info[Context, None],
        first: FirstArg = 50,
        after: AfterArg = None,
        order_by: Annotated[
            OnlineOrder,
            strawberry.argument(
                description="LAST_SEEN (most recent activity first) or ONLINE_SINCE (most recently come online first); a cursor of one order is refused in the other."
            ),
        ] = OnlineOrder.LAST_SEEN,
    ) -> PresenceConnection:
        store = _store(info, Need.LISTING)
        by_since = order_by is OnlineOrder.ONLINE_SINCE
        page = await store.online_users(first, after, info.context.reader, by_online_since=by_since)
        return PresenceConnection.of(page)

    @strawberry.field(
        description="The online users among userId's friends, most recently active first."
    )
    async def online_friends(
        self,
        info: strawberry.Info[Context, None],
        user_id: UserIdArg,
        first: FirstArg = 50,
        after: AfterArg = None,
    ) -> PresenceConnection:
        store = _store(info, Need.OWN, user_id)
        return PresenceConnection.of(
            await store.online_friends(user_id, first, after, info.context.reader)
        )

    @strawberry.field(
        description="Users whose last activity lies in [from, to] (both inclusive), most recent first."
    )
    async def active_in_range(
        self,
        info: strawberry.Info[Context, None],
        from_: Annotated[
            datetime,
            strawberry.argument(name="from", description="The earliest last activity to list."),
        ],
        to: Annotated[
            datetime,
            strawberry.argument(description="The latest last activity to list; not before `from`."),
        ],
        first: FirstArg = 50,
        after: AfterArg = None,
    ) -> PresenceConnection:
        store = _store(info, Need.LISTING)
        page = await store.active_in_range(from_, to, first, after, info.context.reader)
        return PresenceConnection.of(page)

    @strawberry.field(
        description="Daily unique active users over the 7 days that end on endDate (default: today in the stats time zone)."
    )
    async def weekly_stats(
        self,
        info: strawberry.Info[Context, None],
        end_date: Annotated[
            date | None,
            strawberry.argument(
                description="The last of the seven days; null for today in the stats time zone."
            ),
        ] = None,
    ) -> WeeklyStats:
        return WeeklyStats.of(await _store(info, Need.LISTING).weekly_stats(end_date))

    @strawberry.field(
        description="One user's presence, as this reader may see it. End users may ask for themselves and their friends."
    )
    async def presence(
        self, info: strawberry.Info[Context, None], user_id: UserIdArg
    ) -> UserPresence:
        check_id(user_id, "userId")
        store = await _reader_store(info, [user_id])
        return UserPresence.of(await store.presence(user_id, info.context.reader))

    @strawberry.field(
        description="The presence of each of these users (at most 1,000), in the order given, as this reader may see it: a friends list's online and offline friends with their last-seen times in one call. End users may ask for themselves and their friends only."
    )
    async def presences(
        self,
        info: strawberry.Info[Context, None],
        user_ids: Annotated[list[ID], strawberry.argument(description="At most 1,000 user ids.")],
    ) -> list[UserPresence]:
        if len(user_ids) > MAX_PRESENCES:
            raise BadInputError(
                f"presences takes at most {MAX_PRESENCES:,} ids per call; got {len(user_ids):,}."
            )
        asked = [check_id(user_id, "each of userIds") for user_id in user_ids]
        await info.context.charge(len(asked))
        store = await _reader_store(info, asked)
        found = await store.presence_many(asked, info.context.reader)
        return [UserPresence.of(presence) for presence in found]

    @strawberry.field(description="The ids in userId's friend set, sorted.")
    async def friends(self, info: strawberry.Info[Context, None], user_id: UserIdArg) -> list[ID]:
        return [ID(f) for f in await _store(info, Need.OWN, user_id).friends(user_id)]

    @strawberry.field(
        description="Who is in a place now: each live session there, most recently joined first, ties by userId then sessionId."
    )
    async def place_members(
        self,
        info: strawberry.Info[Context, None],
        place_id: PlaceIdArg,
        first: FirstArg = 50,
        after: AfterArg = None,
    ) -> PlaceMemberConnection:
        store = _place_store(info, [place_id])
        return PlaceMemberConnection.of(await store.place_members(place_id, first, after))

    @strawberry.field(
        description="How many sessions and users are in each of these places now (at most 1,000 ids), in the order given."
    )
    async def place_counts(
        self,
        info: strawberry.Info[Context, None],
        place_ids: Annotated[list[ID], strawberry.argument(description="At most 1,000 place ids.")],
    ) -> list[PlaceCount]:
        store = _place_store(info, place_ids)
        await info.context.charge(len(place_ids))
        return [
            PlaceCount(place_id=ID(c.place_id), sessions=c.sessions, users=c.users)
            for c in await store.place_counts(place_ids)
        ]

    webhooks: list[Webhook] = strawberry.field(
        resolver=webhook_resolvers.webhooks,
        description="Every webhook of the deployment. Backends only.",
    )
    webhook: Webhook | None = strawberry.field(
        resolver=webhook_resolvers.webhook,
        description="One webhook of the deployment by its id; null when there is none. Backends only.",
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
        store = _store(info, Need.BACKEND)
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
        store = _store(info, Need.BACKEND)
        return UserPresence.of(await store.touch(user_id, session_id, at, device, idle=idle))

    @strawberry.mutation(
        description="The user's own choice of status (an end user for their own id: userId null or their own). The custom status is left as it is."
    )
    async def set_status(
        self,
        info: strawberry.Info[Context, None],
        status: Annotated[ChosenStatus, strawberry.argument(description="The status chosen.")],
        user_id: OwnUserIdArg = None,
    ) -> UserPresence:
        user = _own_user(info, user_id)
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
        user = _own_user(info, user_id)
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
        user = _own_user(info, user_id)
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
        user = _own_user(info, user_id)
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
        store = _store(info, Need.BACKEND)
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
        result = await _store(info, Need.BACKEND).kick(user_id, session_id)
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
        user = _own_user(info, user_id)
        store = _place_store(info, [place_id])
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


@strawberry.type(
    description="Presence changes as they happen, over WebSocket (graphql-transport-ws)."
)
class Subscription:
    @strawberry.subscription(
        description="Presence changes of the given users, of userId's friends, or of everyone (exactly one of the three arguments)."
    )
    async def presence_changed(
        self,
        info: strawberry.Info[Context, None],
        user_ids: Annotated[
            list[ID] | None,
            strawberry.argument(
                description="The users to follow, at most 10,000 (an end user: themselves and their friends)."
            ),
        ] = None,
        friends_of: Annotated[
            ID | None,
            strawberry.argument(
                description="Follow this user's friends, as their friend set changes."
            ),
        ] = None,
        all: Annotated[
            bool | None,
            strawberry.argument(description="Follow every user (backends only)."),
        ] = False,
    ) -> AsyncGenerator[PresenceEvent, None]:
        everyone = bool(all)  # null means false, as the contract's type allows
        if [user_ids is not None, friends_of is not None, everyone].count(True) != 1:
            raise BadInputError("Give exactly one of userIds, friendsOf and all: true.")
        context = info.context
        if everyone:
            need, what = Need.BACKEND, "presenceChanged(all)"
        elif friends_of is None:
            need, what = Need.READ, "presenceChanged(userIds)"
        else:
            need, what = Need.OWN, "presenceChanged(friendsOf)"
        followed = () if user_ids is None else check_ids(user_ids, "userIds")
        if friends_of is not None:
            check_id(friends_of, "friendsOf")
        interest = Interest(need, what, frozenset(followed), friends_of, everyone=everyone)
        await interest.authorize(context.caller, context.check_may_read)
        await context.charge(len(followed))
        shared = context.shared_subscription
        if shared is not None and shared.take(interest, info, PresenceEvent.of):
            # Multiplexed (event_rendering.py): the pipeline joins the hub for it, and the
            # hub writes each event's message to the socket.
            return
        async with context.events.feed(
            context.close_socket,
            user_ids=followed,
            friends_of=friends_of,
            everyone=everyone,
            reader=context.reader,
        ) as feed:
            try:
                async for event in feed:
                    yield PresenceEvent.of(event)
            except FeedDroppedError as dropped:
                # Close the whole connection, with the reason, rather than complete this
                # one subscription as if nothing had been missed.
                await context.close_socket(dropped)

    @strawberry.subscription(
        description="Keeps `sessionId` of `userId` live for as long as this subscription lasts: a browser tab's or an app's presence, with no heartbeats sent by anyone. An end user gives no userId (or their own); a backend gives the userId. The first message says the session is live; the last one, when the service ends it (a kick, or the same session opened on another connection), says why."
    )
    async def presence_session(
        self,
        info: strawberry.Info[Context, None],
        user_id: Annotated[
            ID | None,
            strawberry.argument(
                description="Whose session: an end user's own id (or null for it); a backend gives it."
            ),
        ] = None,
        *,
        session_id: Annotated[
            ID, strawberry.argument(description="The session (device, tab) to keep live.")
        ],
        device: DeviceArg = None,
    ) -> AsyncGenerator[SessionState, None]:
        context = info.context
        caller = context.caller
        if user_id is None:
            caller.require_credentials()
            if caller.kind is not CallerKind.USER or caller.name is None:
                raise BadInputError("Give the userId whose session this is.")
            user_id = ID(caller.name)
        caller.authorize(Need.OWN, "presenceSession", user_id)
        check_id(user_id, "userId")
        check_id(session_id, "sessionId")
        check_device(device)
        held = context.held_subscription
        if held is not None and held.take(user_id, session_id, info, SessionState.of, device):
            # Held with no task (session_rendering.py): the pipeline opens it, and the
            # service's end of it writes the last messages.
            return
        async with context.held_sessions.hold(user_id, session_id, device) as hold:
            yield SessionState(
                user_id=user_id,
                session_id=session_id,
                live=True,
                at=hold.opened_at,
                end_reason=None,
            )
            ended = await hold.ended()
            yield SessionState(
                user_id=user_id,
                session_id=session_id,
                live=False,
                at=ended.at,
                end_reason=SessionEndReason(ended.reason.value),
            )

    @strawberry.subscription(
        description="Holds sessionId of userId in placeId for as long as this subscription lasts, with a state others in the place see. The first message says it is in; the last one, if the service ends it, why."
    )
    async def place_session(
        self,
        info: strawberry.Info[Context, None],
        place_id: PlaceIdArg,
        session_id: PlaceSessionArg,
        user_id: PlaceUserArg = None,
        state: Annotated[
            JSONObject | None,
            strawberry.argument(
                description="The session's state in the place: a JSON object, at most 1 KiB once encoded."
            ),
        ] = None,
    ) -> AsyncGenerator[PlaceSessionState, None]:
        user = _own_user(info, user_id)
        _place_store(info, [place_id])
        check_id(place_id, "placeId")
        check_id(session_id, "sessionId")
        held = info.context.held_subscription
        if held is not None and held.take_place(
            place_id, user, session_id, state, info, PlaceSessionState.of
        ):
            # Held with no task (session_rendering.py), as a presenceSession is.
            return
        async with info.context.held_sessions.hold_place(place_id, user, session_id, state) as hold:
            yield PlaceSessionState.of(hold)
            await hold.ended()
            yield PlaceSessionState.of(hold)

    @strawberry.subscription(
        description="Who joins, updates and leaves placeId: first a JOINED event for each session in the place now (the most recent 1,000 when there are more), then every change as it happens."
    )
    async def place_changed(
        self, info: strawberry.Info[Context, None], place_id: PlaceIdArg
    ) -> AsyncGenerator[PlaceEvent, None]:
        store = _place_store(info, [place_id])
        check_id(place_id, "placeId")
        shared = info.context.shared_subscription
        if shared is not None and shared.take_place(place_id, info, PlaceEvent.of):
            # Multiplexed (graphql/event_rendering.py): the pipeline hands it to the hub,
            # which renders each event once for every subscription of this document.
            return
        changes: asyncio.Queue[PublishedPlaceEvent] = asyncio.Queue(PLACE_EVENTS_BUFFERED)
        ended: str | None = None

        def follow(event: PublishedPlaceEvent) -> None:
            nonlocal ended
            try:
                changes.put_nowait(event)
            except asyncio.QueueFull:
                ended = (
                    "This subscriber fell too far behind the place's changes; read "
                    "placeMembers and subscribe again."
                )

        def lost(why: str) -> None:
            nonlocal ended
            ended = why
            # Wakes the subscription, which ends with the reason rather than this event.
            with contextlib.suppress(asyncio.QueueFull):
                changes.put_nowait(PublishedPlaceEvent("LEFT", place_id, "", "", 0, False, 0))

        async with info.context.events.follow_place(place_id, follow, lost):
            # Subscribed first, then read: what changed meanwhile is in both, and the
            # sequence the page reflects tells which of the changes it holds already.
            page = await store.place_members(place_id, first=1000)
            for member in page.nodes:
                yield PlaceEvent.of(member_joined(member))
            while True:
                event = await changes.get()
                if ended is not None:
                    raise StoreUnavailableError(ended)
                if event.sequence > page.sequence:
                    yield PlaceEvent.of(event)


@strawberry.federation.type(
    keys=["id"],
    description="A user, as other subgraphs of a federated graph know them: this one adds their presence.",
)
class User:
    id: ID

    @strawberry.field(description="The user's presence.")
    async def presence(self, info: strawberry.Info[Context, None]) -> UserPresence:
        context = info.context
        caller = context.caller
        caller.require_credentials()
        # As presence(userId) allows: an end user themselves and their friends, each checked
        # with every other User of the _entities list in one read per shard.
        stranger = (
            caller.kind is CallerKind.USER
            and self.id != caller.name
            and not caller.users_see_everyone
            and not await context.friend_checks.load(self.id)
        )
        if stranger:
            raise ForbiddenError(NOT_A_FRIEND.format(json.dumps(self.id)))
        # Every User of an _entities list in one read per shard.
        return UserPresence.of(await context.presences.load(self.id))


REPRESENTATION = '{"__typename": "User", "id": "<id>"}'


def users_represented(representations: Sequence[object]) -> list[str]:
    """The ids of `_entities`' representations, each checked: raises BadInputError, before
    anything is read, for more than MAX_REPRESENTATIONS, or for any that is not a User's."""
    if len(representations) > MAX_REPRESENTATIONS:
        raise BadInputError(
            f"_entities takes at most {MAX_REPRESENTATIONS:,} representations per call; got "
            f"{len(representations):,}."
        )
    user_ids = []
    for index, representation in enumerate(representations):
        fault = _representation_fault(representation)
        if fault is not None:
            raise BadInputError(
                f"representations[{index}] must be {REPRESENTATION}, the one entity this "
                f"subgraph resolves; {fault}."
            )
        assert isinstance(representation, dict)
        user_ids.append(check_id(representation["id"], f"representations[{index}].id"))
    return user_ids


def _representation_fault(representation: object) -> str | None:
    """What keeps a value from being a User's representation, or None."""
    if not isinstance(representation, dict):
        return f"got a JSON {_json_kind(representation)}"
    for field, wanted in (("__typename", "User"), ("id", None)):
        if field not in representation:
            return f"it has no {field}"
        value = representation[field]
        if not isinstance(value, str):
            return f"its {field} is a JSON {_json_kind(value)}, not a string"
        if wanted is not None and value != wanted:
            return f"its {field} is {json.dumps(value[:40])}"
    if len(representation) > 2:
        return "it has fields besides these two"
    return None


def _json_kind(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


@strawberry.type(name="_Service", description="This subgraph, as a gateway composes it.")
class SubgraphService:
    @strawberry.field(description="The subgraph's schema, in the federation's SDL.")
    def sdl(self, info: strawberry.Info[Context, None]) -> str:
        return print_schema(info.schema)


@strawberry.type(
    name="Query",
    description="Reading presence: who is online, who was active when, and how many.",
)
class FederatedQuery(Query):
    @strawberry.field(
        name="_service",
        description="The subgraph's schema for a gateway; with introspection off, for backends only.",
    )
    def service(self, info: strawberry.Info[Context, None]) -> SubgraphService:
        caller = info.context.caller
        caller.require_credentials()
        # The whole schema, as introspection would give it: not for end users while the
        # schema answers no introspection (PRESENCE_INTROSPECTION=false).
        if caller.kind is CallerKind.USER and DisableIntrospection in info.schema.extensions:
            raise ForbiddenError(
                "_service is for backend services while introspection is off "
                "(PRESENCE_INTROSPECTION=false): a gateway composes the supergraph with a "
                "backend token."
            )
        return SubgraphService()
