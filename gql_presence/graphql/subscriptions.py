"""The resolvers of Subscription: each decides what it follows (follows.py: the arguments,
the caller's right, the rate) and feeds its events itself. Over a socket the pipeline decides
the same (operation.py) and hands the subscription to the hub or holds its session with no
task, without these generators; they run off sockets and while tracing.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator
from typing import Annotated

import strawberry

from gql_presence.graphql.arguments import (
    DeviceArg,
    PlaceIdArg,
    PlaceSessionArg,
    PlaceUserArg,
    ResumeAfterArg,
)
from gql_presence.graphql.context import Context
from gql_presence.graphql.follows import (
    PLACE_CHANGED,
    PLACE_SESSION,
    PRESENCE_CHANGED,
    PRESENCE_SESSION,
    PlaceFollow,
    PresenceFollow,
    SessionClaim,
    follow_of,
)
from gql_presence.graphql.scalars import JSONObject
from gql_presence.graphql.types import (
    ID,
    PlaceEvent,
    PlaceSessionState,
    PresenceEvent,
    SessionEndReason,
    SessionState,
)
from gql_presence.realtime.delivery import FeedDroppedError, Passed, PresenceChange
from gql_presence.store import (
    PublishedPlaceEvent,
    member_joined,
)
from gql_presence.store.errors import StoreUnavailableError


def _passed_nothing(user_id: str, feed_id: str) -> bool:
    """A subscription that does not resume passed no event."""
    return False


# Place changes a placeChanged subscriber may be behind by before it is ended (it reads the
# place again and subscribes anew).
PLACE_EVENTS_BUFFERED = 1000


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
        after: ResumeAfterArg = None,
    ) -> AsyncGenerator[PresenceEvent, None]:
        context = info.context
        args = {"userIds": user_ids, "friendsOf": friends_of, "all": all, "after": after}
        follow = await follow_of(PRESENCE_CHANGED, args, context)
        assert isinstance(follow, PresenceFollow)
        async with context.events.feed(
            context.close_socket,
            user_ids=follow.user_ids,
            friends_of=follow.friends_of,
            everyone=follow.everyone,
            reader=context.reader,
        ) as feed:
            cursors = await context.store.event_cursors()
            replayed: list[PresenceChange] = []
            passed: Passed = _passed_nothing
            if follow.after is not None:
                # Subscribed first, then replayed: the events heard meanwhile wait in the
                # feed, and those the replay passed are dropped.
                replayed, replay = await context.events.replay(feed, follow.after, context.charge)
                passed = replay.passed
            for event in replayed:
                yield PresenceEvent.of(event, cursors.of(event.user_id, event.feed_id))
            try:
                async for event in feed:
                    if not passed(event.user_id, event.feed_id):
                        yield PresenceEvent.of(event, cursors.of(event.user_id, event.feed_id))
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
        args = {"userId": user_id, "sessionId": session_id, "device": device}
        claim = await follow_of(PRESENCE_SESSION, args, context)
        assert isinstance(claim, SessionClaim)
        user_id, session_id = ID(claim.user_id), ID(claim.session_id)
        async with context.held_sessions.hold(user_id, session_id, claim.device) as hold:
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
        args = {"placeId": place_id, "sessionId": session_id, "userId": user_id, "state": state}
        claim = await follow_of(PLACE_SESSION, args, info.context)
        assert isinstance(claim, SessionClaim)
        assert claim.place_id is not None
        sessions = info.context.held_sessions
        async with sessions.hold_place(
            claim.place_id, claim.user_id, claim.session_id, claim.state
        ) as hold:
            yield PlaceSessionState.of(hold)
            await hold.ended()
            yield PlaceSessionState.of(hold)

    @strawberry.subscription(
        description="Who joins, updates and leaves placeId: first a JOINED event for each session in the place now (the most recent 1,000 when there are more), then every change as it happens. With `after`, no JOINED list: the place's changes after that cursor, then every change as it happens."
    )
    async def place_changed(
        self,
        info: strawberry.Info[Context, None],
        place_id: PlaceIdArg,
        after: ResumeAfterArg = None,
    ) -> AsyncGenerator[PlaceEvent, None]:
        args = {"placeId": place_id, "after": after}
        decided = await follow_of(PLACE_CHANGED, args, info.context)
        assert isinstance(decided, PlaceFollow)
        place_id, store = ID(decided.place_id), info.context.store
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
                changes.put_nowait(
                    PublishedPlaceEvent("LEFT", place_id, "", "", 0, False, 0, 0, "")
                )

        async with info.context.events.follow_place(place_id, follow, lost):
            cursors = await store.event_cursors()
            if decided.after is not None:
                # Subscribed first, then replayed: the replay says which of the events
                # heard meanwhile it passed.
                replayed, replay = await info.context.events.replay_place(
                    place_id, decided.after, info.context.charge
                )
                for change in replayed:
                    yield PlaceEvent.of(change, cursors.of(place_id, change.feed_id))
                while True:
                    event = await changes.get()
                    if ended is not None:
                        raise StoreUnavailableError(ended)
                    if not replay.passed(place_id, event.feed_id):
                        yield PlaceEvent.of(event, cursors.of(place_id, event.feed_id))
            # Subscribed first, then read: what changed meanwhile is in both, and the
            # sequence the page reflects tells which of the changes it holds already.
            # Before the read: the members' cursor resumes where nothing the read misses
            # is passed.
            present = await store.feed_present(place_id)
            page = await store.place_members(place_id, first=1000)
            for member in page.nodes:
                joined = member_joined(member, page.sequence, page.version, present)
                yield PlaceEvent.of(joined, cursors.of(place_id, present))
            while True:
                event = await changes.get()
                if ended is not None:
                    raise StoreUnavailableError(ended)
                if event.sequence > page.sequence:
                    yield PlaceEvent.of(event, cursors.of(place_id, event.feed_id))
