"""Multiplexed subscriptions: each presence event rendered once per distinct subscription
document, and the same bytes written to every socket whose subscription uses it.

A `presenceChanged` subscription over graphql-transport-ws shares an EventRendering with
every other subscription of the same document text, operation name and variables. For each
event the hub (realtime/) asks each distinct rendering once for its payload: graphql-core
executes the operation with the event as root value, as its own subscription machinery does
for each event (so results and errors are those of a subscription of its own), and the
result is JSON-encoded once. Each subscriber's `next` message is its own id around those
bytes.

A payload never depends on who subscribed: PresenceEvent's fields read only the event. What
does depend on the caller (authorization, argument checks) is done per subscriber, once,
when it subscribes.

A rendering also keeps what its subscription's resolver made of the arguments (`Interest`):
the same document, operation name and variables always make the same, so a later subscribe
of that key, once admitted, only authorizes its caller and joins the hub, without running
the document through Strawberry and graphql-core again (graphql/operation.py).
"""

from __future__ import annotations

import json
import weakref
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from graphql import ExecutionResult, GraphQLError

from gql_presence.graphql.error_codes import with_codes
from gql_presence.graphql.internals import EventExecutionContext, running_document
from gql_presence.policy.auth import Caller, Need

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Iterable

    import strawberry
    from graphql.execution import Executor

    from gql_presence.realtime.delivery import PresenceChange
    from gql_presence.store import PublishedPlaceEvent


E = TypeVar("E")


@dataclass(frozen=True)
class SocketOperation:
    """A graphql-transport-ws `subscribe` message, as the pipeline runs it."""

    id: str
    query: str
    operation_name: str | None
    variables: dict[str, Any] | None

    @cached_property
    def key(self) -> tuple[str, str | None, str]:
        """What subscriptions that share a rendering have alike; worked out once, since a
        first subscribe looks for it twice (EventRenderings.known, then .get) and its
        variables may list 10,000 ids."""
        return self.query, self.operation_name, json.dumps(self.variables, sort_keys=True)

    def next_head(self) -> bytes:
        """The start of this operation's `next` messages, up to their payload: the bytes
        that Strawberry's encoding of the whole message begins with."""
        return next_head(self.id)


def next_head(operation_id: str) -> bytes:
    """The start of an operation's `next` messages, up to their payload."""
    return f'{{"id":{json.dumps(operation_id)},"type":"next","payload":'.encode()


# As Strawberry encodes the messages it sends (strawberry.http.base's encode_json).
_COMPACT = (",", ":")


@dataclass(frozen=True)
class Interest:
    """What a presenceChanged resolver made of its arguments: the right it checked, and the
    users to follow; the same for every subscription of one rendering."""

    need: Need
    operation: str
    user_ids: frozenset[str]
    friends_of: str | None  # also the user whose right Need.OWN checks
    everyone: bool

    async def authorize(
        self, caller: Caller, check_may_read: Callable[[Iterable[str]], Awaitable[None]]
    ) -> None:
        """Raises unless the caller may subscribe (check_may_read: Context.check_may_read of
        the caller's request): the resolver's check, and the join's of a subscription the hub
        already renders."""
        caller.authorize(self.need, self.operation, self.friends_of)
        if self.need is Need.READ:
            await check_may_read(self.user_ids)


class Rendering(Generic[E]):
    """One document's rendering of events: its executor, built once, run once per event."""

    def __init__(
        self,
        executor: Executor[Any],
        root: Callable[[E], object],
        report: Callable[[list[GraphQLError]], None],
    ) -> None:
        self._executor = executor
        self._root = root
        self._report = report

    def render(self, event: E) -> bytes:
        return render_root(self._executor, self._root(event), self._report)


class EventRendering(Rendering["PresenceChange"]):
    """A presenceChanged document's rendering of presence events."""

    def __init__(
        self,
        executor: Executor[Any],
        root: Callable[[PresenceChange], object],
        report: Callable[[list[GraphQLError]], None],
    ) -> None:
        super().__init__(executor, root, report)
        # Set once the first subscription of this rendering is joining the hub.
        self.interest: Interest | None = None


class PlaceRendering(Rendering["PublishedPlaceEvent"]):
    """A placeChanged document's rendering of a place's events."""

    def __init__(
        self,
        executor: Executor[Any],
        root: Callable[[PublishedPlaceEvent], object],
        report: Callable[[list[GraphQLError]], None],
    ) -> None:
        super().__init__(executor, root, report)
        # Set once the first subscription of this rendering is delivered: the place its
        # document and variables name, the same for every subscription of this rendering.
        self.place_id: str | None = None


def render_root(
    executor: Executor[Any], root: object, report: Callable[[list[GraphQLError]], None]
) -> bytes:
    """The payload of a `next` message: the operation of `executor` run with `root` as its
    root value, as graphql-core runs a subscription's event, JSON-encoded as Strawberry
    encodes it."""
    result = executor.build_per_event_executor(root).execute_operation(False)
    # Every field of an event or a session's state is read synchronously; anything else
    # would be a fault of the schema, which the tests would show.
    if not isinstance(result, ExecutionResult):
        raise TypeError(f"a result rendered as {type(result).__name__}, not a result")
    return encode_payload(result.data, result.errors, report)


def encode_payload(
    data: object,
    errors: list[GraphQLError] | None,
    report: Callable[[list[GraphQLError]], None],
) -> bytes:
    """A result as a subscription's result is sent: errors reported to the schema, then
    coded as the pipeline codes every result, then formatted."""
    payload: dict[str, Any] = {"data": data}
    if errors:
        report(errors)
        payload["errors"] = [error.formatted for error in with_codes(errors)]
    return json.dumps(payload, separators=_COMPACT).encode()


class EventRenderings:
    """The renderings in use in this process, by document text, operation name and
    variables; each lives as long as a delivery holds it."""

    def __init__(self) -> None:
        self._by_key: weakref.WeakValueDictionary[tuple[str, str | None, str], EventRendering] = (
            weakref.WeakValueDictionary()
        )
        self._places: weakref.WeakValueDictionary[tuple[str, str | None, str], PlaceRendering] = (
            weakref.WeakValueDictionary()
        )

    def known(self, operation: SocketOperation) -> EventRendering | None:
        """The rendering of a subscription of the same key that reached the hub, while one
        such subscription lasts: its `interest` is set."""
        rendering = self._by_key.get(operation.key)
        return None if rendering is None or rendering.interest is None else rendering

    def get(
        self,
        operation: SocketOperation,
        info: strawberry.Info[Any, Any],
        root: Callable[[PresenceChange], object],
    ) -> EventRendering | None:
        """The operation's rendering, made from the resolver's `info` when new; None when
        its document cannot be executed that way (its subscription then runs on its own)."""
        rendering = self._by_key.get(operation.key)
        if rendering is not None:
            return rendering
        executor = _executor(operation, info)
        if executor is None:
            return None
        rendering = EventRendering(executor, root, info.schema.process_errors)
        self._by_key[operation.key] = rendering
        return rendering

    def known_place(self, operation: SocketOperation) -> PlaceRendering | None:
        """As known(), for a placeChanged subscription: set once one reached the hub."""
        rendering = self._places.get(operation.key)
        return None if rendering is None or rendering.place_id is None else rendering

    def get_place(
        self,
        operation: SocketOperation,
        info: strawberry.Info[Any, Any],
        root: Callable[[PublishedPlaceEvent], object],
    ) -> PlaceRendering | None:
        """As get(), for a placeChanged subscription."""
        rendering = self._places.get(operation.key)
        if rendering is not None:
            return rendering
        executor = _executor(operation, info)
        if executor is None:
            return None
        rendering = PlaceRendering(executor, root, info.schema.process_errors)
        self._places[operation.key] = rendering
        return rendering


def _executor(operation: SocketOperation, info: strawberry.Info[Any, Any]) -> Executor[Any] | None:
    """The operation's executor, from the document the resolver's `info` runs; None when its
    document cannot be executed with an event as its root value."""
    schema, document = running_document(info)
    executor = EventExecutionContext.build(
        schema,
        document,
        raw_variable_values=operation.variables,
        operation_name=operation.operation_name,
    )
    return None if isinstance(executor, list) else executor


class SharedSubscription:
    """One presenceChanged subscribe of a socket while the pipeline runs its document: the
    resolver leaves here what it made of its arguments, and the rendering its events share,
    instead of waiting for events itself; the pipeline then joins the hub for it."""

    def __init__(self, operation: SocketOperation, renderings: EventRenderings) -> None:
        self.operation = operation
        self._renderings = renderings
        self.rendering: EventRendering | None = None
        self.interest: Interest | None = None
        # For a placeChanged subscribe: the place, and the rendering its events share.
        self.place_id: str | None = None
        self.place_rendering: PlaceRendering | None = None

    def take(
        self,
        interest: Interest,
        info: strawberry.Info[Any, Any],
        root: Callable[[PresenceChange], object],
    ) -> bool:
        """Whether the subscription is left to the hub: False when its document cannot be
        rendered once for all (its resolver then feeds its own events)."""
        rendering = self._renderings.get(self.operation, info, root)
        if rendering is None:
            return False
        self.rendering, self.interest = rendering, interest
        return True

    def take_place(
        self,
        place_id: str,
        info: strawberry.Info[Any, Any],
        root: Callable[[PublishedPlaceEvent], object],
    ) -> bool:
        """As take(), for a placeChanged subscription, its caller's right already checked."""
        rendering = self._renderings.get_place(self.operation, info, root)
        if rendering is None:
            return False
        self.place_rendering, self.place_id = rendering, place_id
        return True
