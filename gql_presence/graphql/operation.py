"""The one pipeline of every operation, whatever its transport: an HTTP POST or GET, or a
WebSocket's `subscribe` message (queries, mutations and subscriptions alike).

Each passes, in this order and in this module only:
1. admission (credentials, document size, list variables, rate), before the document is
   parsed, so that a refused operation costs next to nothing;
2. persisted and trusted documents;
3. its time budget (PRESENCE_REQUEST_TIMEOUT_SECONDS), for the whole of a query or a mutation
   and for the admission of a subscription;
4. execution: a plan made before (planned.py) for an HTTP POST, Strawberry's otherwise; a
   subscription on a socket is parsed and validated as Strawberry does, decided once
   (follows.py), then handed to the event hub (event_rendering.py) or held with no task
   (session_rendering.py);
5. error codes (error_codes.py) on every result it gives back.
A refusal is the operation's error; over WebSocket, the socket stays open.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncGenerator, Awaitable, Callable
from contextlib import aclosing
from dataclasses import replace
from typing import Any

from graphql import DocumentNode, GraphQLError, OperationType, parse
from strawberry.http import GraphQLRequestData
from strawberry.types import ExecutionResult
from strawberry.types.execution import PreExecutionError

from gql_presence.graphql.budget import Budgets
from gql_presence.graphql.context import Context
from gql_presence.graphql.error_codes import log_unexpected, refusal, with_codes
from gql_presence.graphql.event_rendering import (
    EventRendering,
    EventRenderings,
    PlaceRendering,
    SocketOperation,
)
from gql_presence.graphql.follows import (
    PLACE_CHANGED,
    PRESENCE_CHANGED,
    PRESENCE_SESSION,
    PlaceFollow,
    PresenceFollow,
    SessionClaim,
    follow_of,
)
from gql_presence.graphql.internals import (
    core_schema,
    parsed_subscription,
    subscription_executor,
)
from gql_presence.graphql.labels import chosen_operation
from gql_presence.graphql.literal_shapes import LiteralShapes
from gql_presence.graphql.persisted import PersistedDocuments
from gql_presence.graphql.planned import Plans
from gql_presence.graphql.schema import PresenceSchema
from gql_presence.graphql.session_rendering import (
    LiveSession,
    SessionRendering,
    SessionRenderings,
)
from gql_presence.graphql.types import PlaceEvent, PlaceSessionState, PresenceEvent, SessionState
from gql_presence.lru import LeastRecentlyUsed
from gql_presence.observability.request_log import OPERATION
from gql_presence.policy.limits import MAX_DOCUMENT_BYTES
from gql_presence.realtime.delivery import Delivery, PlaceDelivery, PresenceChange, Writer
from gql_presence.store import (
    MAX_IDS_PER_CALL,
    PublishedPlaceEvent,
    member_joined,
    utf8_bytes,
)
from gql_presence.store.errors import BadInputError, PresenceError, StoreUnavailableError
from gql_presence.store.feed import EventCursors

# What a WebSocket operation's results are, as Strawberry's stream gives them.
Results = AsyncGenerator[Any, None]
# Strawberry's own execution of one HTTP request.
RunFully = Callable[[GraphQLRequestData], Awaitable[ExecutionResult]]


class OperationPipeline:
    """Runs every operation of one schema, over either transport."""

    def __init__(
        self,
        schema: PresenceSchema,
        documents: PersistedDocuments,
        budget_s: float,
        plans: Plans | None,
        *,
        shapes: LiteralShapes | None = None,
        on_socket: bool,
    ) -> None:
        self.schema = schema
        self._documents = documents
        self._budget_s = budget_s
        # The budget of every HTTP operation, kept by one timer of the loop (budget.py).
        self._budgets = Budgets(budget_s)
        # Plans of documents seen before (planned.py); None: every request runs fully.
        self.plans = plans
        # Plans shared by documents that differ only in argument literals (literal_shapes.py).
        self.shapes = shapes
        # Whether a subscription on a socket is decided here and handed to the hub or held
        # with no task: not while tracing, whose spans come from the document's execution
        # (the resolvers of Subscription then feed their events, as off sockets).
        self._on_socket = on_socket
        # The documents this process renders once per event for all their subscribers.
        self._renderings = EventRenderings()
        # The documents of the presenceSession subscriptions this process holds.
        self._session_renderings = SessionRenderings()
        # Subscription documents that passed parsing and validation, by text and operation
        # name: a subscribe of one with variables of its own (each user following their own
        # friends) skips those steps, whose outcome would be the same.
        self._subscription_documents: LeastRecentlyUsed[tuple[str, str | None], DocumentNode] = (
            LeastRecentlyUsed(256)
        )

    async def execute(
        self, context: Context, data: GraphQLRequestData, *, plannable: bool, run_fully: RunFully
    ) -> ExecutionResult:
        """The result of one HTTP request's operation, its errors coded. `plannable`: the
        request may run from a plan (a POST); `run_fully` is Strawberry's execution."""
        try:
            async with self._budgets.within():
                await admit(context, data.query, data.variables)
                data = await self._documents.resolve(data, context)
                result: ExecutionResult | None = None
                # Over plain HTTP a subscription cannot be answered; say where it can be.
                if is_subscription(data.query, data.operation_name):
                    error = GraphQLError(_SUBSCRIBE_OVER_WEBSOCKET)
                    result = ExecutionResult(data=None, errors=[error])
                elif plannable:
                    result = await self._run_planned(context, data)
                if result is None:
                    result = await run_fully(data)
        except PresenceError as error:
            return ExecutionResult(data=None, errors=[refusal(error)])
        except TimeoutError:
            return ExecutionResult(data=None, errors=[refusal(over_budget(self._budget_s))])
        if result.errors:
            result.errors = with_codes(result.errors)
        return result

    async def _run_planned(
        self, context: Context, data: GraphQLRequestData
    ) -> ExecutionResult | None:
        """The result of a document planned before (planned.py), with what the full path's
        extensions add: the log's operation label, unexpected errors logged. None when
        there is no plan for it, or the plan does not cover this request."""
        plan = self.plans.get(data.query, data.operation_name) if self.plans else None
        shaped = None
        if plan is None and self.shapes is not None:
            shaped = self.shapes.match(data.query, data.operation_name, data.variables)
        if plan is None and shaped is None:
            return None
        # A plan is made only of a document that passed every check (a shape's, of one that
        # would pass them): one named by its hash is kept from now on.
        await self._documents.checked(context)
        if shaped is not None:
            assert data.query is not None  # shapes are of texts
            plan = shaped.shape.plan
            result = await shaped.run(context, data.query, data.extensions)
        else:
            assert plan is not None
            result = await plan.run(context, data.variables, data.extensions)
        if result is None:
            return None
        context.request[OPERATION] = plan.label
        if result.errors:
            log_unexpected(result.errors, plan.operation_name)
        return result

    async def run_on_socket(
        self, context: Context, operation: SocketOperation
    ) -> Writer | LiveSession | Results:
        """A WebSocket operation's results, their errors coded; or, for a presenceChanged
        subscription handed to the event hub, its place there, and for a presenceSession
        held with no task, its LiveSession (the socket's handler ends either with the
        operation)."""
        # A context of its own, from the socket's: an operation is a request, and reads
        # nothing that another operation of the socket read (its DataLoaders are its own).
        context = replace(context)
        deadline = asyncio.get_running_loop().time() + self._budget_s
        try:
            async with asyncio.timeout_at(deadline):
                await admit(context, operation.query, operation.variables)
                self._documents.check_text(operation.query, context)
        except PresenceError as error:
            return _refused(error)
        except TimeoutError:
            return _refused(over_budget(self._budget_s))
        if not is_subscription(operation.query, operation.operation_name):
            results = await self._stream(context, operation)
            return _coded(_within(results, deadline, self._budget_s))
        if context.socket is not None and self._on_socket:
            return await self._subscribe_on_socket(context, operation)
        return _coded(await self._stream(context, operation))

    async def _subscribe_on_socket(
        self, context: Context, operation: SocketOperation
    ) -> Writer | LiveSession | Results:
        """A subscription on a socket, parsed and validated as Strawberry does, decided
        (graphql/follows.py), then handed over: presenceChanged and placeChanged to the
        hub, which renders each event once for every subscriber of its document;
        presenceSession and placeSession held with no task. A later subscribe of a document,
        operation name and variables decided before skips the parsing and validation."""
        known = self._renderings.known(operation)
        if known is not None and known.decided is not None:
            field, args = known.decided
            return await self._follow(context, operation, field, args, known)
        document = (operation.query, operation.operation_name)
        parsed = self._subscription_documents.get(document)
        if parsed is None:
            checked = await parsed_subscription(
                self.schema, operation.query, operation.variables, context, operation.operation_name
            )
            if not isinstance(checked, DocumentNode):
                return _coded(_once(checked))
            parsed = checked
            self._subscription_documents.put(document, parsed)
        core = core_schema(self.schema)
        built = subscription_executor(core, parsed, operation.variables, operation.operation_name)
        if isinstance(built, list):  # as Strawberry answers variables that do not fit
            self.schema.process_errors(built)
            return _coded(_once(PreExecutionError(data=None, errors=built)))
        executor, field, args = built
        rendering: EventRendering | PlaceRendering | SessionRendering
        report = self.schema.process_errors
        if field in {PRESENCE_CHANGED, PLACE_CHANGED}:
            try:
                # Read once per process (the deployment's secret), then kept.
                cursors = await context.store.event_cursors()
            except PresenceError as error:
                return _coded(_failed(error, self.schema.process_errors))
        if field == PRESENCE_CHANGED:
            rendering = self._renderings.presence(
                operation, executor, functools.partial(_presence_event, cursors), report
            )
        elif field == PLACE_CHANGED:
            rendering = self._renderings.place(
                operation, executor, functools.partial(_place_event, cursors), report
            )
        else:
            root = SessionState.of if field == PRESENCE_SESSION else PlaceSessionState.of
            rendering = self._session_renderings.get(operation, core, parsed, report, root)
        return await self._follow(context, operation, field, args, rendering)

    async def _follow(
        self,
        context: Context,
        operation: SocketOperation,
        field: str,
        args: dict[str, Any],
        rendering: EventRendering | PlaceRendering | SessionRendering,
    ) -> Writer | LiveSession | Results:
        """The subscription decided (graphql/follows.py), then handed to the hub or held."""
        try:
            follow = await follow_of(field, args, context)
        except PresenceError as error:
            return _coded(_failed(error, self.schema.process_errors))
        if isinstance(follow, SessionClaim):
            assert isinstance(rendering, SessionRendering)
            return await self._hold(context, operation, follow, rendering)
        assert not isinstance(rendering, SessionRendering)
        # Known from now on (joining the hub waits for Redis to confirm the subscription to
        # its channels): the same key's subscribes meanwhile are decided at once too.
        rendering.decided = (field, args)
        if isinstance(follow, PlaceFollow):
            assert isinstance(rendering, PlaceRendering)
            return await self._deliver_place(context, operation, rendering, follow)
        assert isinstance(rendering, EventRendering)
        if follow == rendering.follow:
            follow = rendering.follow
        else:
            rendering.follow = follow
        try:
            return await self._join(context, operation, rendering, follow)
        except PresenceError as error:
            return _refused(error)

    async def _hold(
        self,
        context: Context,
        operation: SocketOperation,
        claim: SessionClaim,
        rendering: SessionRendering,
    ) -> LiveSession | Results:
        """A presenceSession or placeSession claimed: its session opened, its first message
        rendered, held with no task (session_rendering.py). Cancelled at any point, it
        leaves nothing live."""
        assert context.socket is not None
        sessions = context.held_sessions
        try:
            if claim.place_id is not None:
                hold = await sessions.open_place(
                    claim.place_id, claim.user_id, claim.session_id, claim.state
                )
            else:
                hold = await sessions.open(claim.user_id, claim.session_id, claim.device)
        except Exception as error:  # as a subscription's generator that raises it is answered
            return _coded(_failed(error, self.schema.process_errors))
        try:
            payload = rendering.render(operation.variables, hold.as_opened())
        except BaseException:
            sessions.release(hold)
            raise
        first = b"".join((operation.next_head(), payload, b"}"))
        return LiveSession(sessions, hold, context.socket.send_now, operation, rendering, first)

    async def _deliver_place(
        self,
        context: Context,
        operation: SocketOperation,
        rendering: PlaceRendering,
        follow: PlaceFollow,
    ) -> PlaceDelivery | Results:
        """A placeChanged subscription the resolver left to the hub (or whose document,
        operation name and variables one did already): subscribed to the place's events
        first, then the place read, its members written as JOINED events, then every event
        the read does not reflect (its sequence says which). With `after`, the feed is read
        instead of the place: the changes after the cursor, then the events heard meanwhile
        that the replay did not pass."""
        assert context.socket is not None
        place_id = follow.place_id
        try:
            delivery = await context.events.deliver_place(
                context.close_socket,
                context.socket.send_frames,
                operation.next_head(),
                rendering.render,
                place_id,
            )
        except PresenceError as error:
            return _refused(error)
        try:
            if follow.after is not None:
                replayed, replay = await context.events.replay_place(
                    place_id, follow.after, context.charge
                )
            else:
                # Before the read: the members' cursor resumes where nothing the read
                # misses is passed.
                present = await context.store.feed_present(place_id)
                # placeChanged starts with the most recent 1,000 members.
                page = await context.store.place_members(place_id, first=1000)
        except BaseException as error:
            context.events.forget(delivery)
            if isinstance(error, PresenceError):
                return _refused(error)
            raise
        if follow.after is not None:
            delivery.resume(replayed, replay.passed)
            return delivery
        delivery.start(
            (member_joined(m, page.sequence, page.version, present) for m in page.nodes),
            page.sequence,
        )
        return delivery

    async def _stream(self, context: Context, operation: SocketOperation) -> Results:
        return await self.schema.stream(
            operation.query,
            variable_values=operation.variables,
            context_value=context,
            operation_name=operation.operation_name,
        )

    async def _join(
        self,
        context: Context,
        operation: SocketOperation,
        rendering: EventRendering,
        follow: PresenceFollow,
    ) -> Delivery:
        """A multiplexed subscription's place in the hub, writing to the context's socket."""
        assert context.socket is not None
        return await context.events.deliver(
            context.close_socket,
            context.socket.send_frames,
            operation.next_head(),
            rendering.render,
            user_ids=follow.user_ids,
            friends_of=follow.friends_of,
            everyone=follow.everyone,
            reader=context.reader,
            after=follow.after,
            # A resume pays for the feed it reads past a page of each shard.
            reading_on=context.charge,
        )


def _presence_event(cursors: EventCursors, event: PresenceChange) -> PresenceEvent:
    """An event as subscriptions render it, its cursor sealed once for every rendering."""
    return PresenceEvent.of(event, cursors.of(event.user_id, event.feed_id))


def _place_event(cursors: EventCursors, event: PublishedPlaceEvent) -> PlaceEvent:
    """A place's event as subscriptions render it, its cursor sealed once for every rendering."""
    return PlaceEvent.of(event, cursors.of(event.place_id, event.feed_id))


def request_data(payload: object) -> GraphQLRequestData | None:
    """An operation as a client sent it (an HTTP body, a WebSocket subscribe's payload), when
    every member has the type GraphQL over HTTP gives it: query and operationName strings,
    variables and extensions objects, each possibly absent. None for anything else."""
    if not isinstance(payload, dict):
        return None
    query, operation_name = payload.get("query"), payload.get("operationName")
    variables, extensions = payload.get("variables"), payload.get("extensions")
    if not (
        isinstance(query, str | None)
        and isinstance(operation_name, str | None)
        and isinstance(variables, dict | None)
        and isinstance(extensions, dict | None)
    ):
        return None
    return GraphQLRequestData(
        query=query, variables=variables, operation_name=operation_name, extensions=extensions
    )


async def admit(context: Context, document: str | None, variables: object) -> None:
    """Raises the refusal (a PresenceError) of an operation whose caller sent bad or no
    credentials, or whose credentials have expired; whose document takes too many bytes of
    UTF-8; whose list variables are longer than any argument takes; or whose caller is over
    its rate."""
    if context.credentials_refused is not None:
        raise context.credentials_refused
    context.caller.require_credentials()
    size = utf8_bytes(document or "")
    if size > MAX_DOCUMENT_BYTES:
        raise BadInputError(
            f"The document takes {size:,} bytes of UTF-8; at most {MAX_DOCUMENT_BYTES:,} bytes "
            "are allowed. Pass long lists of ids as variables."
        )
    _check_lists(variables)
    await context.limiter.admit(context.caller)


def _check_lists(variables: object) -> None:
    """Every list argument takes at most 10,000 ids: a longer list is refused here, before
    GraphQL coerces each of its values (millions of them fit in a body)."""
    if not isinstance(variables, dict):
        return  # refused where the variables are read
    for name, value in variables.items():
        if isinstance(value, list) and len(value) > MAX_IDS_PER_CALL:
            raise BadInputError(
                f"${name} holds {len(value):,} values; a list argument takes at most "
                f"{MAX_IDS_PER_CALL:,}."
            )


def over_budget(budget_s: float) -> StoreUnavailableError:
    """The answer to an operation that took longer than its time budget
    (PRESENCE_REQUEST_TIMEOUT_SECONDS), over HTTP and WebSocket alike."""
    return StoreUnavailableError(
        f"The request took longer than {budget_s:g} s and was stopped; try again shortly."
    )


def is_subscription(query: str | None, operation_name: str | None) -> bool:
    if not query or "subscription" not in query:  # cheap: most documents are not
        return False
    return _is_subscription(query, operation_name)


# Every WebSocket operation asks, and a page's subscriptions are a few documents sent again
# and again: parsing each anew was a third of the service's work of a subscribe.
@functools.lru_cache(maxsize=128)
def _is_subscription(query: str, operation_name: str | None) -> bool:
    try:
        document = parse(query)
    except GraphQLError:
        return False  # refused as a syntax error where it is executed
    operation = chosen_operation(document, operation_name)
    return operation is not None and operation.operation == OperationType.SUBSCRIPTION


async def _once(result: ExecutionResult) -> Results:
    yield result


async def _refused(error: PresenceError) -> Results:
    yield PreExecutionError(data=None, errors=[refusal(error)])


async def _failed(error: Exception, report: Callable[[list[GraphQLError]], None]) -> Results:
    """The one result of a subscription whose source raised `error` before its first event,
    as Strawberry answers it: a `next` with the error, the error reported to the schema."""
    errors = [GraphQLError(str(error), original_error=error)]
    report(errors)
    yield ExecutionResult(data=None, errors=errors)


async def _within(results: Results, deadline: float, budget_s: float) -> Results:
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


async def _after(first: object, results: Results) -> Results:
    """`first`, taken from `results` already, then the rest of them."""
    async with aclosing(results):
        if first is not None:
            yield first
        async for result in results:
            yield result


async def _coded(results: Results) -> Results:
    async with aclosing(results):
        async for result in results:
            if isinstance(result, ExecutionResult) and result.errors:
                result.errors = with_codes(result.errors)
            yield result


_SUBSCRIBE_OVER_WEBSOCKET = (
    "Subscriptions are served over WebSocket (graphql-transport-ws) at this same address, "
    "not over plain HTTP."
)
