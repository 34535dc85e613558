"""The GraphQL schema: types, and resolvers that call one store method each.

Docstrings and descriptions here are what frontend developers read in GraphiQL.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Awaitable, Callable, Iterable, Sequence
from contextlib import aclosing
from datetime import UTC, date, datetime
from enum import Enum
from functools import partial
from typing import Annotated, Any

import strawberry
from graphql import GraphQLError
from strawberry.extensions import (
    DisableIntrospection,
    MaxTokensLimiter,
    SchemaExtension,
)
from strawberry.schema.config import StrawberryConfig
from strawberry.schema.name_converter import NameConverter
from strawberry.schema.schema import StrawberryGraphQLCoreExecutionContext, StreamResult
from strawberry.types import ExecutionResult
from strawberry.types.execution import PreExecutionError
from strawberry.types.graphql import OperationType

from gql_presence.graphql.context import Context
from gql_presence.graphql.document_limits import DocumentValidation
from gql_presence.graphql.error_codes import ErrorCodes, log_unexpected, refusal, with_codes
from gql_presence.graphql.operation import admit, is_subscription, over_budget
from gql_presence.graphql.persisted import Kept, PersistedDocumentCache
from gql_presence.graphql.planned import PlanRecorder, Plans
from gql_presence.http.app_keys import SETTINGS
from gql_presence.observability.request_log import OperationLabel
from gql_presence.observability.tracing import schema_extensions
from gql_presence.policy.auth import CallerKind, Need
from gql_presence.policy.limits import MAX_TOKENS
from gql_presence.realtime import delivery as fanout
from gql_presence.realtime import hub as events
from gql_presence.store import PresenceStore, check_id, check_ids, models
from gql_presence.store.errors import BadInputError, PresenceError

ID = strawberry.ID


def _serialize_datetime(value: datetime) -> str:
    # The store's times are in UTC already: no conversion to make for them.
    moment = value if value.tzinfo is UTC else value.astimezone(UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _parse_datetime(value: object) -> datetime:
    if not isinstance(value, str):
        raise TypeError("DateTime must be an ISO 8601 string, e.g. 2026-11-21T09:30:00.250Z.")
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        parsed = None
    if parsed is None or parsed.tzinfo is None:
        raise ValueError(
            f"DateTime must be ISO 8601 with an offset, e.g. 2026-11-21T09:30:00.250Z; got {value!r}."
        )
    return parsed


def _parse_date(value: object) -> date:
    try:
        return date.fromisoformat(str(value)) if isinstance(value, str) else _bad_date(value)
    except ValueError:
        return _bad_date(value)


def _bad_date(value: object) -> date:
    raise ValueError(f"Date must be ISO 8601, e.g. 2026-11-21; got {value!r}.")


DateTimeScalar = strawberry.scalar(
    name="DateTime",
    description="A point in time, ISO 8601 with an offset, e.g. 2026-11-21T09:30:00.250Z.",
    serialize=_serialize_datetime,
    parse_value=_parse_datetime,
)
DateScalar = strawberry.scalar(
    name="Date",
    description="A calendar date, ISO 8601, e.g. 2026-11-21.",
    serialize=date.isoformat,
    parse_value=_parse_date,
)


@strawberry.type(description="One live session of a user (a device, a tab).")
class Session:
    session_id: ID = strawberry.field(
        description="The session's id; `default` when none was given."
    )
    last_seen: datetime = strawberry.field(description="The session's last activity.")

    @classmethod
    def of(cls, session: models.Session) -> Session:
        return cls(session_id=ID(session.session_id), last_seen=session.last_seen)


@strawberry.type(description="A user's presence: online or not, when last seen, and where.")
class UserPresence:
    user_id: ID = strawberry.field(description="The user's id.")
    online: bool = strawberry.field(
        description="Whether at least one of the user's sessions is live."
    )
    last_seen: datetime | None = strawberry.field(
        description="The last recorded activity; null when none is kept."
    )
    known_sessions: strawberry.Private[tuple[models.Session, ...] | None] = None

    @strawberry.field(description="The live sessions, most recently active first.")
    async def sessions(self, info: strawberry.Info[Context, None]) -> list[Session]:
        found = self.known_sessions
        if found is None:
            found = await info.context.sessions.load(str(self.user_id))
        return [Session.of(s) for s in found]

    @classmethod
    def of(cls, presence: models.Presence) -> UserPresence:
        return cls(
            user_id=ID(presence.user_id),
            online=presence.online,
            last_seen=presence.last_seen,
            known_sessions=presence.sessions,
        )


@strawberry.type(description="Whether there are more users after this page, and where it ended.")
class PageInfo:
    has_next_page: bool = strawberry.field(description="Whether a next page has users.")
    end_cursor: str | None = strawberry.field(
        description="Pass as `after` to get the next page; null on an empty page."
    )


@strawberry.type(description="One page of a list of users, most recently active first.")
class PresenceConnection:
    total_count: int = strawberry.field(description="How many users match, over all pages.")
    nodes: list[UserPresence] = strawberry.field(description="The users on this page, in order.")
    page_info: PageInfo = strawberry.field(description="Where this page ended.")

    @classmethod
    def of(cls, page: models.Page) -> PresenceConnection:
        return cls(
            total_count=page.total_count,
            nodes=[
                UserPresence(user_id=ID(u.user_id), online=u.online, last_seen=u.last_seen)
                for u in page.nodes
            ],
            page_info=PageInfo(has_next_page=page.has_next_page, end_cursor=page.end_cursor),
        )


@strawberry.type(description="What a kick ended.")
class KickResult:
    user_id: ID = strawberry.field(description="The user who was kicked.")
    kicked_sessions: int = strawberry.field(description="How many live sessions were ended.")
    online: bool = strawberry.field(
        description="Whether the user is still online after the kick (another session still live)."
    )


@strawberry.type(description="The distinct users active on one day of the stats time zone.")
class DailyActiveUsers:
    date: date = strawberry.field(description="The day, in the stats time zone.")
    active_users: int = strawberry.field(description="Distinct users with any activity that day.")


@strawberry.type(description="Exact daily active users over seven days, and how they overlap.")
class WeeklyStats:
    start_date: date = strawberry.field(
        description="The first of the seven days (endDate minus 6)."
    )
    end_date: date = strawberry.field(description="The last of the seven days.")
    days: list[DailyActiveUsers] = strawberry.field(description="Seven entries, oldest first.")
    unique_users: int = strawberry.field(
        description="Users active on at least one of the seven days."
    )
    active_every_day: int = strawberry.field(
        description="Users active on every one of the seven days."
    )
    new_on_end_date: int = strawberry.field(
        description="Users active on endDate who were not active on the day before it."
    )

    @classmethod
    def of(cls, stats: models.WeeklyStats) -> WeeklyStats:
        return cls(
            start_date=stats.start_date,
            end_date=stats.end_date,
            days=[DailyActiveUsers(date=d.day, active_users=d.active_users) for d in stats.days],
            unique_users=stats.unique_users,
            active_every_day=stats.active_every_day,
            new_on_end_date=stats.new_on_end_date,
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


def _store(
    info: strawberry.Info[Context, None], need: Need, user_id: str | None = None
) -> PresenceStore:
    """The store, once the caller may run this field (for this user)."""
    return info.context.store_for(need, info.field_name, user_id)


@strawberry.type(description="Reading presence: who is online, who was active when, and how many.")
class Query:
    @strawberry.field(
        description="Users with activity inside the presence window, most recently active first."
    )
    async def online_users(
        self, info: strawberry.Info[Context, None], first: FirstArg = 50, after: AfterArg = None
    ) -> PresenceConnection:
        return PresenceConnection.of(await _store(info, Need.LISTING).online_users(first, after))

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
        return PresenceConnection.of(
            await _store(info, Need.OWN, user_id).online_friends(user_id, first, after)
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
        return PresenceConnection.of(
            await _store(info, Need.LISTING).active_in_range(from_, to, first, after)
        )

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

    @strawberry.field(description="One user's presence.")
    async def presence(
        self, info: strawberry.Info[Context, None], user_id: UserIdArg
    ) -> UserPresence:
        return UserPresence.of(await _store(info, Need.OWN, user_id).presence(user_id))

    @strawberry.field(description="The ids in userId's friend set, sorted.")
    async def friends(self, info: strawberry.Info[Context, None], user_id: UserIdArg) -> list[ID]:
        return [ID(f) for f in await _store(info, Need.OWN, user_id).friends(user_id)]


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
        return await change(_store(info, Need.BACKEND), user_id, friend_ids, mutual)

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
    ) -> UserPresence:
        return UserPresence.of(await _store(info, Need.BACKEND).touch(user_id, session_id, at))

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
        return await _store(info, Need.BACKEND).touch_many(user_ids)

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

    add_friends = _friend_links_mutation(
        PresenceStore.add_friends,
        "Add friendIds to userId's friend set (and userId to theirs when mutual). Returns how many links were added.",
    )
    remove_friends = _friend_links_mutation(
        PresenceStore.remove_friends,
        "Remove friendIds from userId's friend set (and userId from theirs when mutual). Returns how many links were removed.",
    )


@strawberry.enum(description="What changed in a user's presence.")
class PresenceEventKind(Enum):
    ONLINE = strawberry.enum_value(
        "ONLINE", description="The user came online: their first live session began."
    )
    OFFLINE = strawberry.enum_value(
        "OFFLINE", description="The user went offline: their last live session expired."
    )
    KICKED = strawberry.enum_value(
        "KICKED", description="A session, or every session, of the user was kicked."
    )


# Its fields read only the event, never the caller: one rendering of an event is shared by
# every subscriber of the same document (fanout.py). Keep it so.
@strawberry.type(description="One change of one user's presence.")
class PresenceEvent:
    user_id: ID = strawberry.field(description="The user whose presence changed.")
    kind: PresenceEventKind = strawberry.field(description="What changed.")
    at: datetime = strawberry.field(
        description="When the change happened, on the one clock (the Redis server's)."
    )
    session_id: ID | None = strawberry.field(
        description="The session concerned, for KICKED of one session; null otherwise."
    )
    online: bool = strawberry.field(description="Whether the user is online after this event.")

    @classmethod
    def of(cls, event: events.PresenceEvent) -> PresenceEvent:
        return cls(
            user_id=ID(event.user_id),
            kind=PresenceEventKind(event.kind),
            at=event.at,
            session_id=None if event.session_id is None else ID(event.session_id),
            online=event.online,
        )


@strawberry.enum(description="Why the service ended a presenceSession.")
class SessionEndReason(Enum):
    KICKED = strawberry.enum_value(
        "KICKED",
        description="The session, or every session of the user, was kicked; its id is revoked as for any kick.",
    )
    REPLACED = strawberry.enum_value(
        "REPLACED",
        description="Another presenceSession with the same userId and sessionId took over.",
    )


@strawberry.type(description="The state of a connection-bound session (presenceSession).")
class SessionState:
    user_id: ID = strawberry.field(description="The user whose session this is.")
    session_id: ID = strawberry.field(description="The session (device, tab) kept live.")
    live: bool = strawberry.field(
        description="True while the session is live; false in the last message."
    )
    at: datetime = strawberry.field(description="When this state began, on the one clock.")
    end_reason: SessionEndReason | None = strawberry.field(
        description="Why the service ended the session; null while live."
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
            strawberry.argument(description="The users to follow, at most 10,000."),
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
            need, what = Need.BACKEND, "presenceChanged(userIds)"
        else:
            need, what = Need.OWN, "presenceChanged(friendsOf)"
        context.caller.authorize(need, what, friends_of)
        followed = () if user_ids is None else check_ids(user_ids, "userIds")
        if friends_of is not None:
            check_id(friends_of, "friendsOf")
        operation, socket = fanout.SOCKET_OPERATION.get(), context.socket
        if operation is not None and socket is not None:
            selection = context.selections.get(
                operation, info, EventExecutionContext, PresenceEvent.of
            )
            if selection is not None:
                # Multiplexed (fanout.py): the hub writes each event's message to the socket,
                # and the socket's handler ends the delivery with the operation.
                following = fanout.Following(
                    need, what, frozenset(followed), friends_of, everyone=everyone
                )
                delivery = await _deliver(context, operation, selection, following)
                selection.following = following
                raise fanout.HandedOverError(delivery)
        async with context.events.feed(
            context.close_socket, user_ids=followed, friends_of=friends_of, everyone=everyone
        ) as feed:
            try:
                async for event in feed:
                    yield PresenceEvent.of(event)
            except events.FeedDroppedError as dropped:
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
        async with context.held_sessions.hold(user_id, session_id) as holding:
            yield SessionState(
                user_id=user_id,
                session_id=session_id,
                live=True,
                at=holding.opened_at,
                end_reason=None,
            )
            ended = await holding.ended()
            yield SessionState(
                user_id=user_id,
                session_id=session_id,
                live=False,
                at=ended.at,
                end_reason=SessionEndReason(ended.reason.value),
            )


async def _deliver(
    context: Context,
    operation: fanout.SocketOperation,
    selection: fanout.Selection,
    following: fanout.Following,
) -> events.Delivery:
    """A multiplexed subscription's place in the hub, writing to the context's socket."""
    assert context.socket is not None
    return await context.events.deliver(
        context.close_socket,
        context.socket.send_now,
        operation.next_head(),
        selection.render,
        user_ids=following.user_ids,
        friends_of=following.friends_of,
        everyone=following.everyone,
    )


class EventExecutionContext(StrawberryGraphQLCoreExecutionContext):
    """graphql-core 3.3 runs each subscription event on a shallow copy of the subscription's
    executor, which shares its memo of collected sub-fields; the memo is keyed by lists made
    anew for every event, so it would grow for as long as a subscription lasts (about 1.4 kB
    an event). Each event's executor gets a memo of its own."""

    def build_per_event_executor(self, payload: Any) -> Any:
        executor = super().build_per_event_executor(payload)
        executor._relevant_sub_fields = {}
        return executor


@strawberry.federation.type(
    keys=["id"],
    description="A user, as other subgraphs of a federated graph know them: this one adds their presence.",
)
class User:
    id: ID

    @strawberry.field(description="The user's presence.")
    async def presence(self, info: strawberry.Info[Context, None]) -> UserPresence:
        return UserPresence.of(await _store(info, Need.OWN, self.id).presence(self.id))

    @classmethod
    def resolve_reference(cls, id: ID) -> User:
        return cls(id=id)


class PresenceSchema(strawberry.Schema):
    # Whether a subscribe of a key already multiplexed skips the document's execution
    # (_subscribe_again): not while tracing, whose spans come from that execution.
    reuses_subscriptions = True

    def process_errors(self, errors: list[GraphQLError], execution_context: Any = None) -> None:
        # Refusals are answers, not faults: only unexpected errors are logged.
        log_unexpected(errors, execution_context.operation_name if execution_context else None)

    async def stream(  # noqa: PLR0917 - Strawberry's signature
        self,
        query: str | None,
        variable_values: dict[str, Any] | None = None,
        context_value: Any | None = None,
        root_value: Any | None = None,
        operation_name: str | None = None,
        operation_extensions: dict[str, Any] | None = None,
        allowed_operation_types: Iterable[OperationType] | None = None,
    ) -> StreamResult:
        """Runs an operation over WebSocket, once admitted; its errors coded like those of
        queries.

        Strawberry's graphql-transport-ws handler (BaseGraphQLTransportWSHandler.run_operation,
        strawberry-graphql 0.341) runs every `subscribe` message's operation, be it a query, a
        mutation or a subscription, through this public method with the connection's context:
        the one place all of them pass, and the one internal relied upon here. A refusal is
        the operation's `error` message; the socket stays open."""
        if not isinstance(context_value, Context):
            raise TypeError("Operations run with the service's Context.")
        # The time budget of an HTTP request holds for a query or a mutation here too; a
        # subscription's budget ends with its admission.
        budget_s = context_value.request.app[SETTINGS].request_timeout_ms / 1000
        deadline = asyncio.get_running_loop().time() + budget_s
        try:
            async with asyncio.timeout_at(deadline):
                await admit(context_value, query, variable_values)
            context_value.documents.check_text(query, context_value)
        except PresenceError as error:
            return _refused(error)
        except TimeoutError:
            return _refused(over_budget(budget_s))
        if self.reuses_subscriptions:
            await _subscribe_again(context_value)
        results = await super().stream(
            query,
            variable_values=variable_values,
            context_value=context_value,
            root_value=root_value,
            operation_name=operation_name,
            operation_extensions=operation_extensions,
            allowed_operation_types=allowed_operation_types,
        )
        if not is_subscription(query, operation_name):
            results = _within(results, deadline, budget_s)
        return _with_codes(results)


async def _subscribe_again(context: Context) -> None:
    """Raises HandedOverError with the delivery of an admitted presenceChanged subscription
    whose document, operation name and variables a multiplexed one of this process has
    already run: the same document passes the same parsing, validation and limits, and the
    same variables make the same arguments, so what is left of the resolver's work is the
    caller's authorization and joining the hub. Returns, for the full path to run (and to
    answer), when the key is not known, or when either step refuses it."""
    operation = fanout.SOCKET_OPERATION.get()
    if operation is None or context.socket is None:
        return
    selection = context.selections.known(operation)
    if selection is None or selection.following is None:
        return
    try:
        selection.following.authorize(context.caller)
        delivery = await _deliver(context, operation, selection, selection.following)
    except PresenceError:
        return
    raise fanout.HandedOverError(delivery)


async def _refused(error: PresenceError) -> StreamResult:
    yield PreExecutionError(data=None, errors=[refusal(error)])


async def _within(results: StreamResult, deadline: float, budget_s: float) -> StreamResult:
    """A query's or a mutation's results, or UNAVAILABLE once its time budget is spent: its
    Redis calls are cancelled, as over HTTP."""
    try:
        async with aclosing(results), asyncio.timeout_at(deadline):
            answered = [result async for result in results]
    except TimeoutError:
        yield PreExecutionError(data=None, errors=[refusal(over_budget(budget_s))])
        return
    for result in answered:
        yield result


async def _with_codes(source: StreamResult) -> StreamResult:
    async with aclosing(source):
        async for result in source:
            if isinstance(result, ExecutionResult) and result.errors:
                result.errors = with_codes(result.errors)
            yield result


class FederatedPresenceSchema(strawberry.federation.Schema, PresenceSchema):
    """The same schema as an Apollo Federation 2 subgraph: User, _entities and _service."""


class KeptNames(NameConverter):
    """Strawberry's names, each worked out once: Strawberry works out the GraphQL name of
    every argument again on each call of a resolver."""

    def __init__(self) -> None:
        super().__init__()
        # Names of the schema's own fields, arguments and types; bounded all the same, should
        # Strawberry ever convert a name it was sent.
        self._names: dict[str, str] = {}

    def apply_naming_config(self, name: str) -> str:
        converted = self._names.get(name)
        if converted is None:
            converted = super().apply_naming_config(name)
            if len(self._names) < _NAMES_KEPT:
                self._names[name] = converted
        return converted


_NAMES_KEPT = 10_000


def build_schema(
    *, introspection: bool = True, federation: bool = False, plans: Plans | None = None
) -> PresenceSchema:
    """The schema; with `plans`, each document that passes validation is planned there."""
    traced = schema_extensions()
    extensions: list[type[SchemaExtension] | Callable[[], SchemaExtension]] = [
        *traced,  # traces, when on: first, so that its span holds the others
        OperationLabel,
        ErrorCodes,
        # Parsing the same few documents again is much of GraphQL's cost per request: keep
        # their results (shared by every request), and for documents known by their hash
        # the validated syntax tree, of this schema.
        partial(PersistedDocumentCache, maxsize=256, checked=Kept()),
        # Bounds on one document's work; their reasons are in gql_presence/limits.py.
        partial(MaxTokensLimiter, max_token_count=MAX_TOKENS),
        partial(DocumentValidation, hide_suggestions=not introspection),
    ]
    if not introspection:
        extensions.append(DisableIntrospection)
    if plans is not None:
        extensions.append(partial(PlanRecorder, plans=plans))
    config = StrawberryConfig(
        scalar_map={datetime: DateTimeScalar, date: DateScalar}, name_converter=KeptNames()
    )
    schema = (FederatedPresenceSchema if federation else PresenceSchema)(
        query=Query,
        mutation=Mutation,
        subscription=Subscription,
        types=[User] if federation else (),
        extensions=extensions,
        execution_context_class=EventExecutionContext,
        config=config,
    )
    schema.reuses_subscriptions = not traced
    return schema
