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
does depend on the caller (argument checks, authorization, rate) is decided per subscriber,
once, when it subscribes (graphql/follows.py).

A rendering also keeps its subscription's field and coerced arguments (`decided`): the same
document, operation name and variables always make the same, so a later subscribe of that
key, once admitted, is decided from them and joins the hub without running the document
through Strawberry and graphql-core again (graphql/operation.py).
"""

from __future__ import annotations

import json
import weakref
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from graphql import (
    ExecutionResult,
    FieldNode,
    FragmentDefinitionNode,
    GraphQLError,
    Node,
    OperationDefinitionNode,
    VariableNode,
)

from gql_presence.graphql.error_codes import with_codes
from gql_presence.lru import LeastRecentlyUsed

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from graphql.execution import Executor

    from gql_presence.graphql.follows import PresenceFollow
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


# How many renderings of distinct subscriptions (document, operation name, variables) a process
# keeps for a repeat of them: a few KiB each at most, the rest shared.
RECENT_RENDERINGS = 1024
# The longest variables (as JSON) of a subscription that shares its executor with others.
MOST_SHARED_VARIABLES = 1024
# As Strawberry encodes the messages it sends (strawberry.http.base's encode_json).
_COMPACT = (",", ":")


class Payloads(Generic[E]):
    """What renders one document's events: its executor, built once, run once per event.
    Shared by the renderings of every subscription of the same document and operation name
    whose variables agree on those a payload can read (`payload_variables`): the rest decide
    what is followed, not how an event is shown, so each event is rendered once for all of
    them, and one executor is kept for all of them."""

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


class Rendering(Generic[E]):
    """One document's rendering of events, by its text, operation name and variables."""

    def __init__(self, payloads: Payloads[E]) -> None:
        # The payloads' own: the hub renders an event once per distinct `render`.
        self.render: Callable[[E], bytes] = payloads.render
        # Set once a subscription of this rendering is decided (graphql/follows.py): its
        # field and coerced arguments, the same for every subscription of the rendering,
        # whose later subscribes are decided from them without executing the document.
        self.decided: tuple[str, dict[str, Any]] | None = None


class EventRendering(Rendering["PresenceChange"]):
    """A presenceChanged document's rendering of presence events."""

    def __init__(self, payloads: Payloads[PresenceChange]) -> None:
        super().__init__(payloads)
        # The last decision of a subscription of this rendering: the same arguments decide
        # the same users, and every delivery of the rendering holds this one set of them.
        self.follow: PresenceFollow | None = None


class PlaceRendering(Rendering["PublishedPlaceEvent"]):
    """A placeChanged document's rendering of a place's events."""


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
    """The renderings made lately in this process, by document text, operation name and
    variables, and the payloads they share, each of which lives as long as a rendering or a
    delivery holds it."""

    def __init__(self) -> None:
        # Kept whether or not a delivery still uses them (a delivery holds its payloads'
        # render, not its rendering): a subscribe of a key made lately is decided from its
        # rendering, with no parsing or validation; at most RECENT_RENDERINGS of them.
        self._by_key: LeastRecentlyUsed[
            tuple[str, str | None, str], EventRendering | PlaceRendering
        ] = LeastRecentlyUsed(RECENT_RENDERINGS)
        self._payloads: weakref.WeakValueDictionary[tuple[str, str | None, str], Payloads[Any]] = (
            weakref.WeakValueDictionary()
        )
        # payload_variables by document text and operation name: a walk of the document
        # costs about as much as a twentieth of a subscribe.
        self._read: LeastRecentlyUsed[tuple[str, str | None], frozenset[str]] = LeastRecentlyUsed(
            256
        )

    def known(self, operation: SocketOperation) -> EventRendering | PlaceRendering | None:
        """The rendering of a subscription of the same key that was decided lately: its
        `decided` is set."""
        rendering = self._by_key.get(operation.key)
        return None if rendering is None or rendering.decided is None else rendering

    def presence(
        self,
        operation: SocketOperation,
        executor: Executor[Any],
        root: Callable[[PresenceChange], object],
        report: Callable[[list[GraphQLError]], None],
    ) -> EventRendering:
        """The rendering of a presenceChanged operation, made with its executor when new."""
        rendering = self._by_key.get(operation.key)
        if not isinstance(rendering, EventRendering):
            rendering = EventRendering(self._payloads_of(operation, executor, root, report))
            self._by_key.put(operation.key, rendering)
        return rendering

    def place(
        self,
        operation: SocketOperation,
        executor: Executor[Any],
        root: Callable[[PublishedPlaceEvent], object],
        report: Callable[[list[GraphQLError]], None],
    ) -> PlaceRendering:
        """As presence(), for a placeChanged operation."""
        rendering = self._by_key.get(operation.key)
        if not isinstance(rendering, PlaceRendering):
            rendering = PlaceRendering(self._payloads_of(operation, executor, root, report))
            self._by_key.put(operation.key, rendering)
        return rendering

    def _payloads_of(
        self,
        operation: SocketOperation,
        executor: Executor[Any],
        root: Callable[[E], object],
        report: Callable[[list[GraphQLError]], None],
    ) -> Payloads[E]:
        """The payloads of the operation's document and the variables a payload can read,
        made with its executor when new."""
        document = (operation.query, operation.operation_name)
        read = self._read.get(document)
        if read is None:
            fragments = (details.definition for details in executor.fragments.values())
            read = frozenset(payload_variables(executor.operation, fragments))
            self._read.put(document, read)
        given = operation.key[2]
        if len(given) > MOST_SHARED_VARIABLES:
            # Each event's execution coerces the root field's arguments again: a subscription
            # given many ids keeps an executor of its own, so that the events of the others do
            # not pay for its list.
            shown = given
        else:
            variables = operation.variables or {}
            kept = {name: variables[name] for name in read if name in variables}
            shown = json.dumps(kept, sort_keys=True)
        key = (operation.query, operation.operation_name, shown)
        payloads: Payloads[E] | None = self._payloads.get(key)
        if payloads is None:
            payloads = self._payloads[key] = Payloads(executor, root, report)
        return payloads


def payload_variables(
    operation: OperationDefinitionNode, fragments: Iterable[FragmentDefinitionNode]
) -> set[str]:
    """The variables that an event's payload can depend on: every one the operation names
    except in its root fields' arguments (which say whom or what to follow; an event's root
    value is the event itself, whatever they are). Fragments count whole."""
    names: set[str] = set()
    for selection in operation.selection_set.selections:
        if isinstance(selection, FieldNode):
            _add_variables(selection.directives, names)
            _add_variables(selection.selection_set, names)
        else:
            _add_variables(selection, names)
    for fragment in fragments:
        _add_variables(fragment, names)
    return names


def _add_variables(node: object, names: set[str]) -> None:
    if isinstance(node, VariableNode):
        names.add(node.name.value)
    elif isinstance(node, Node):
        for key in node.keys:
            if key != "loc":
                _add_variables(getattr(node, key, None), names)
    elif isinstance(node, (list, tuple)):
        for item in node:
            _add_variables(item, names)
