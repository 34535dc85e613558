"""What the root types' resolvers share: their arguments' types and descriptions (user
documentation, shown in GraphiQL), and the checks of a caller's right that hand them the
store."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated

import strawberry

from gql_presence.graphql.context import Context
from gql_presence.graphql.follows import (
    own_user,
)
from gql_presence.graphql.types import (
    ID,
)
from gql_presence.policy.auth import Need
from gql_presence.store import (
    PresenceStore,
)

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


def authorized_store(
    info: strawberry.Info[Context, None], need: Need, user_id: str | None = None
) -> PresenceStore:
    """The store, once the caller may run this field (for this user)."""
    return info.context.store_for(need, info.field_name, user_id)


async def reader_store(
    info: strawberry.Info[Context, None], user_ids: Sequence[str]
) -> PresenceStore:
    """The store, once the caller may read the presence of every user given."""
    await info.context.check_may_read(user_ids)
    return info.context.store


def place_store(info: strawberry.Info[Context, None], place_ids: Sequence[str]) -> PresenceStore:
    """The store, once the caller may act in every place given."""
    info.context.caller.authorize_places(info.field_name, place_ids)
    return info.context.store


def acting_user(info: strawberry.Info[Context, None], user_id: str | None) -> str:
    """The user an operation acts for: the one given (an end user's own only), or an end
    user's own id when none is."""
    return own_user(info.field_name, user_id, info.context)


ResumeAfterArg = Annotated[
    str | None,
    strawberry.argument(
        description="Resume after this event's `cursor` (or a `feedCursor`): first every retained change after it that this subscription follows and you may see, in order, then the live ones, none lost or repeated. CURSOR_EXPIRED when the feed no longer holds what follows it (or holds more than a resume replays): read afresh and subscribe without it."
    ),
]
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
