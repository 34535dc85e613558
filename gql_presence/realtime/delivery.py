"""Multiplexed delivery: each presence event rendered once per distinct subscription document,
and the same bytes written to every socket whose subscription uses it.

A `presenceChanged` subscription over graphql-transport-ws shares a Selection with every
other subscription of the same document text, operation name and variables. For each event
the hub asks each distinct Selection once for its payload: graphql-core executes the
operation with the event as root value, as its own subscription machinery does for each
event (so results and errors are those of a subscription of its own), and the result is
JSON-encoded once. Each subscriber's `next` message is its own id around those bytes.

A payload never depends on who subscribed: PresenceEvent's fields read only the event. What
does depend on the caller (authorization, argument checks) is done per subscriber, once,
when it subscribes.

A Selection also keeps what its subscription's resolver made of the arguments (`Following`):
the same document, operation name and variables always make the same, so a later subscribe
of that key, once admitted, only authorizes its caller and joins the hub, without running
the document through Strawberry and graphql-core again (PresenceSchema.stream).
"""

from __future__ import annotations

import json
import weakref
from contextvars import ContextVar
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any

from graphql import DocumentNode, ExecutionResult, GraphQLError

from gql_presence.graphql.error_codes import with_codes
from gql_presence.policy.auth import Caller, Need

if TYPE_CHECKING:
    from collections.abc import Callable

    import strawberry
    from graphql.execution import Executor

    from gql_presence.realtime.hub import Delivery, PresenceEvent


@dataclass(frozen=True)
class SocketOperation:
    """A graphql-transport-ws `subscribe` message, as the operation's task runs it."""

    id: str
    query: str
    operation_name: str | None
    variables: dict[str, Any] | None

    @cached_property
    def key(self) -> tuple[str, str | None, str]:
        """What subscriptions that share a Selection have alike; worked out once, since a
        first subscribe looks for it twice (Selections.known, then Selections.get) and its
        variables may list 10,000 ids."""
        return self.query, self.operation_name, json.dumps(self.variables, sort_keys=True)

    def next_head(self) -> bytes:
        """The start of this operation's `next` messages, up to their payload: the bytes
        that Strawberry's encoding of the whole message begins with."""
        return f'{{"id":{json.dumps(self.id)},"type":"next","payload":'.encode()


# As Strawberry encodes the messages it sends (strawberry.http.base's encode_json).
_COMPACT = (",", ":")


class HandedOverError(BaseException):
    """Raised by a subscription's resolver once the event hub delivers its events: it ends the
    operation's task, which has nothing left to do, without completing the operation. A
    BaseException, as CancelledError is, so that neither graphql-core nor Strawberry (which
    turn an Exception into an error result) takes it for an error of the operation; the
    graphql-transport-ws handler (view.py) catches it and keeps the delivery until the
    operation or its socket ends."""

    def __init__(self, delivery: Delivery) -> None:
        super().__init__("handed over to the event hub")
        self.delivery = delivery


# Set by the graphql-transport-ws handler in each operation's own task (view.py), so that the
# subscription's resolver, running in that task, knows which operation it serves.
SOCKET_OPERATION: ContextVar[SocketOperation | None] = ContextVar("socket_operation", default=None)


@dataclass(frozen=True)
class Following:
    """What a presenceChanged resolver made of its arguments: the right it checked, and the
    users to follow; the same for every subscription of one Selection."""

    need: Need
    operation: str
    user_ids: frozenset[str]
    friends_of: str | None  # also the user whose right Need.OWN checks
    everyone: bool

    def authorize(self, caller: Caller) -> None:
        """Raises as the resolver's own check does when the caller may not subscribe."""
        caller.authorize(self.need, self.operation, self.friends_of)


class Selection:
    """One document's rendering of events: its executor, built once, run once per event."""

    def __init__(
        self,
        executor: Executor[Any],
        root: Callable[[PresenceEvent], object],
        report: Callable[[list[GraphQLError]], None],
    ) -> None:
        self._executor = executor
        self._root = root
        self._report = report
        # Set by the first subscription of this Selection to reach the hub.
        self.following: Following | None = None

    def render(self, event: PresenceEvent) -> bytes:
        result = self._executor.build_per_event_executor(self._root(event)).execute_operation(False)
        # Every field of an event is read synchronously; anything else would be a fault of
        # the schema, which the tests would show.
        if not isinstance(result, ExecutionResult):
            raise TypeError(f"an event rendered as {type(result).__name__}, not a result")
        # As Strawberry sends a subscription's result: errors reported to the schema, then
        # coded (schema.py's _with_codes), then formatted.
        payload: dict[str, Any] = {"data": result.data}
        if result.errors:
            self._report(result.errors)
            payload["errors"] = [error.formatted for error in with_codes(result.errors)]
        return json.dumps(payload, separators=_COMPACT).encode()


class Selections:
    """The Selections in use in this process, by document text, operation name and variables;
    each lives as long as a delivery holds it."""

    def __init__(self) -> None:
        self._by_key: weakref.WeakValueDictionary[tuple[str, str | None, str], Selection] = (
            weakref.WeakValueDictionary()
        )

    def known(self, operation: SocketOperation) -> Selection | None:
        """The Selection of a subscription of the same key that reached the hub, while one
        such subscription lasts: its `following` is set."""
        selection = self._by_key.get(operation.key)
        return None if selection is None or selection.following is None else selection

    def get(
        self,
        operation: SocketOperation,
        info: strawberry.Info[Any, Any],
        executor_class: type[Executor[Any]],
        root: Callable[[PresenceEvent], object],
    ) -> Selection | None:
        """The operation's Selection, made from the resolver's `info` when new; None when
        its document cannot be executed that way (its subscription then runs on its own)."""
        key = operation.key
        selection = self._by_key.get(key)
        if selection is not None:
            return selection
        raw = info._raw_info  # graphql-core's info: the parsed operation and its fragments
        document = DocumentNode(definitions=(raw.operation, *raw.fragments.values()))
        executor = executor_class.build(
            raw.schema,
            document,
            raw_variable_values=operation.variables,
            operation_name=operation.operation_name,
        )
        if isinstance(executor, list):
            return None
        selection = Selection(executor, root, info.schema.process_errors)
        self._by_key[key] = selection
        return selection
