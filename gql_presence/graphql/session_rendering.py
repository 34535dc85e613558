"""presenceSession subscriptions held with no task, generator or execution of their own.

The pipeline (graphql/operation.py) decides a presenceSession (or placeSession) subscribe on
a socket (graphql/follows.py: the arguments checked, the caller's right, a SessionClaim),
then opens the session through realtime/held.py (which keeps the guarantee that a cancelled
opening leaves nothing live), renders its first `next` once, and hands a LiveSession to the
socket's handler. What is left while the session is held is that LiveSession, its SessionHold
and the socket's entry for the operation. When the service ends the session (a kick, a
replacement, a check that found it gone, a lapsed lease) the hold calls the LiveSession back,
which writes the last messages to the socket; the client's `complete` or the socket's end
closes it instead.

Each state is rendered by executing the operation's own document with the state as its root
value, as graphql-core runs a subscription's event, so that aliases, fragments and
`__typename` in the client's document are honoured and the bytes are those a subscription of
its own sends.
"""

from __future__ import annotations

import json
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from graphql import (
    DocumentNode,
    FragmentDefinitionNode,
    GraphQLError,
    GraphQLSchema,
    OperationDefinitionNode,
)

from gql_presence.graphql.event_rendering import (
    encode_payload,
    next_head,
    payload_variables,
    render_root,
)
from gql_presence.graphql.internals import EventExecutionContext

if TYPE_CHECKING:
    from graphql.execution import Executor

    from gql_presence.graphql.event_rendering import SocketOperation
    from gql_presence.realtime.delivery import WriteNow
    from gql_presence.realtime.held import Ended, HeldSessions, SessionHold
    from gql_presence.store.errors import PresenceError

Report = Callable[[list[GraphQLError]], None]
# The root value of a state of a held session (SessionState.of).
Root = Callable[["SessionHold"], object]


class SessionRendering:
    """One document's rendering of a session's states: its operation and fragments, parsed
    and validated once, shared by every session of the same document text and operation
    name (their variables are each their own). When no payload can depend on the variables
    (`reads_variables` false: they name only whose session it is), the executor built for
    the first state rendered renders every session's states, and no session keeps its
    variables."""

    __slots__ = (
        "__weakref__",
        "_document",
        "_operation_name",
        "_report",
        "_root",
        "_schema",
        "_shared",
        "reads_variables",
    )

    def __init__(
        self,
        schema: GraphQLSchema,
        document: DocumentNode,
        operation_name: str | None,
        report: Report,
        root: Root,
    ) -> None:
        self._root = root
        self._schema = schema
        self._document = document
        self._operation_name = operation_name
        self._report = report
        # The document holds the operation run and its fragments only (parsed_subscription).
        [operation] = [d for d in document.definitions if isinstance(d, OperationDefinitionNode)]
        fragments = [d for d in document.definitions if isinstance(d, FragmentDefinitionNode)]
        self.reads_variables = bool(payload_variables(operation, fragments))
        self._shared: Executor[Any] | None = None

    def render(self, variables: dict[str, Any] | None, hold: SessionHold) -> bytes:
        """The payload of the `next` message that carries the state of `hold`: live, or how
        the service ended it. `variables` are the session's own, None once it has been
        opened when the document reads none."""
        executor = self._shared
        if executor is None:
            built = EventExecutionContext.build(
                self._schema,
                self._document,
                raw_variable_values=variables,
                operation_name=self._operation_name,
            )
            # It was built with the same variables when the session was decided.
            if isinstance(built, list):
                raise TypeError("a session's document no longer builds with its variables")
            executor = built
            if not self.reads_variables:
                self._shared = executor
        return render_root(executor, self._root(hold), self._report)

    def render_error(self, error: Exception) -> bytes:
        """The payload of the `next` message that ends a session with `error`, as a
        subscription's generator that raises it is answered."""
        return encode_payload(None, [GraphQLError(str(error), original_error=error)], self._report)


class SessionRenderings:
    """The session renderings in use in this process, by document text and operation name;
    each lives as long as a session holds it."""

    def __init__(self) -> None:
        self._by_key: weakref.WeakValueDictionary[tuple[str, str | None], SessionRendering] = (
            weakref.WeakValueDictionary()
        )

    def get(
        self,
        operation: SocketOperation,
        schema: GraphQLSchema,
        document: DocumentNode,
        report: Report,
        root: Root,
    ) -> SessionRendering:
        """The operation's rendering, made from its validated document (the operation run
        and its fragments) when new."""
        key = (operation.query, operation.operation_name)
        rendering = self._by_key.get(key)
        if rendering is None:
            rendering = SessionRendering(schema, document, operation.operation_name, report, root)
            self._by_key[key] = rendering
        return rendering


class LiveSession:
    """A presenceSession (or placeSession) held for a socket, with no task: its hold, what
    renders its states, and where its messages go."""

    __slots__ = (
        "_finished",
        "_first",
        "_hold",
        "_id",
        "_rendering",
        "_sessions",
        "_variables",
        "_write",
    )

    def __init__(  # noqa: PLR0917 - each part is distinct
        self,
        sessions: HeldSessions,
        hold: SessionHold,
        write: WriteNow,
        operation: SocketOperation,
        rendering: SessionRendering,
        first: bytes,
    ) -> None:
        self._sessions = sessions
        self._hold = hold
        self._write = write
        self._id = operation.id
        # Its first state is rendered: a document that reads none renders with no variables
        # from now on.
        self._variables = operation.variables if rendering.reads_variables else None
        self._rendering = rendering
        self._first = first
        self._finished: Callable[[str], None] | None = None

    def start(self, finished: Callable[[str], None]) -> None:
        """Writes the first message; from then on, the service's end of the session writes
        the last ones and calls `finished` with the operation's id (at once, should the
        service have ended it while it opened)."""
        first, self._first = self._first, b""
        self._write([first])
        self._finished = finished
        outcome = self._hold.outcome
        if outcome is None:
            self._hold.on_end = self._ended
        else:
            self._ended(outcome)

    def close(self) -> None:
        """The client completed the subscription, or its socket ended: the session is closed
        at once (on its own, so that nothing cancels the close), unless the service ended it."""
        self._hold.on_end = None
        self._sessions.release(self._hold)

    def _ended(self, outcome: Ended | PresenceError) -> None:
        self._hold.on_end = None
        self._sessions.release(self._hold)  # forgotten; the service ended it, nothing to close
        if isinstance(outcome, Exception):
            payload = self._rendering.render_error(outcome)
        else:
            payload = self._rendering.render(self._variables, self._hold)
        self._write(
            [
                b"".join((next_head(self._id), payload, b"}")),
                json.dumps({"id": self._id, "type": "complete"}, separators=(",", ":")).encode(),
            ]
        )
        if self._finished is not None:
            self._finished(self._id)
