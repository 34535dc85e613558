"""What a subscription follows, decided once per subscribe: the only place that checks a
subscription's arguments, authorizes its caller and charges its rate.

`follow_of` takes the subscription field's name, its arguments as GraphQL coerced them (by
their GraphQL names) and the request's context, and returns a Follow: the users or the place
whose events to deliver, or the held session to claim. Every path of a subscribe calls it:
the pipeline over a socket, after Strawberry's parsing and validation, and again for a later
subscribe of a document it has seen (graphql/operation.py); the resolvers of Subscription,
which feed their events themselves off sockets and while tracing (graphql/subscriptions.py).
To change who may follow whom, change this module (and the policy it calls), nothing else.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gql_presence.policy.auth import CallerKind, Need
from gql_presence.store import check_device, check_id, check_ids
from gql_presence.store.errors import BadInputError

if TYPE_CHECKING:
    from gql_presence.graphql.context import Context

PRESENCE_CHANGED = "presenceChanged"
PLACE_CHANGED = "placeChanged"
PRESENCE_SESSION = "presenceSession"
PLACE_SESSION = "placeSession"


@dataclass(frozen=True, slots=True)
class PresenceFollow:
    """presenceChanged: the presence events of these users, of a user's friends (as their
    friend set changes), or of everyone; exactly one of the three."""

    user_ids: frozenset[str]
    friends_of: str | None
    everyone: bool
    # A feed cursor: first the retained changes after it (the hub replays them), then live.
    after: str | None = None


@dataclass(frozen=True, slots=True)
class PlaceFollow:
    """placeChanged: who joins, updates and leaves a place."""

    place_id: str
    after: str | None = None  # as PresenceFollow's


@dataclass(frozen=True, slots=True)
class SessionClaim:
    """presenceSession (no place) or placeSession: the session to hold while the
    subscription lasts; `device` is a presenceSession's, `state` a placeSession's."""

    user_id: str
    session_id: str
    device: str | None = None
    place_id: str | None = None
    state: object = None


Follow = PresenceFollow | PlaceFollow | SessionClaim


async def follow_of(field: str, args: Mapping[str, object], context: Context) -> Follow:
    """What a subscribe of `field` with these arguments follows, once its caller may: raises
    the refusal (a PresenceError) of bad arguments, a caller without the right, or one over
    its rate, having changed nothing."""
    if field == PRESENCE_CHANGED:
        return await _presence_follow(args, context)
    if field == PLACE_CHANGED:
        place_id = _text(args, "placeId")
        context.caller.authorize_places(PLACE_CHANGED, [place_id])
        return PlaceFollow(check_id(place_id, "placeId"), _optional_text(args, "after"))
    if field == PRESENCE_SESSION:
        user_id = own_user(PRESENCE_SESSION, _optional_text(args, "userId"), context)
        session_id = check_id(_text(args, "sessionId"), "sessionId")
        device = _optional_text(args, "device")
        check_device(device)
        return SessionClaim(user_id, session_id, device=device)
    if field == PLACE_SESSION:
        user_id = own_user(PLACE_SESSION, _optional_text(args, "userId"), context)
        place_id = _text(args, "placeId")
        context.caller.authorize_places(PLACE_SESSION, [place_id])
        check_id(place_id, "placeId")
        session_id = check_id(_text(args, "sessionId"), "sessionId")
        return SessionClaim(user_id, session_id, place_id=place_id, state=args.get("state"))
    raise ValueError(f"{field} is not a subscription field")


async def _presence_follow(args: Mapping[str, object], context: Context) -> PresenceFollow:
    user_ids, friends_of = args.get("userIds"), _optional_text(args, "friendsOf")
    everyone = bool(args.get("all"))  # null means false, as the contract's type allows
    if [user_ids is not None, friends_of is not None, everyone].count(True) != 1:
        raise BadInputError("Give exactly one of userIds, friendsOf and all: true.")
    followed: frozenset[str] = frozenset()
    if isinstance(user_ids, list):
        followed = frozenset(check_ids(user_ids, "userIds"))
    if friends_of is not None:
        check_id(friends_of, "friendsOf")
    if everyone:
        context.caller.authorize(Need.BACKEND, "presenceChanged(all)")
    elif friends_of is None:
        context.caller.authorize(Need.READ, "presenceChanged(userIds)")
        await context.check_may_read(followed)
    else:
        context.caller.authorize(Need.OWN, "presenceChanged(friendsOf)", friends_of)
    await context.charge(len(followed))
    return PresenceFollow(followed, friends_of, everyone, _optional_text(args, "after"))


def own_user(operation: str, user_id: str | None, context: Context) -> str:
    """The user an operation acts for: the one given (an end user's own only), or an end
    user's own id when none is."""
    caller = context.caller
    if user_id is None:
        caller.require_credentials()
        if caller.kind is not CallerKind.USER or caller.name is None:
            raise BadInputError("Give the userId whose session this is.")
        user_id = caller.name
    caller.authorize(Need.OWN, operation, user_id)
    return check_id(user_id, "userId")


def _text(args: Mapping[str, object], name: str) -> str:
    value = args.get(name)
    if not isinstance(value, str):  # the schema makes it a non-null ID
        raise BadInputError(f"{name} must be given.")
    return value


def _optional_text(args: Mapping[str, object], name: str) -> str | None:
    value = args.get(name)
    return value if isinstance(value, str) else None
