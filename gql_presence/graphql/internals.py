"""Every use of a Strawberry or graphql-core API that is not public, in one place.

The rest of the package reaches these only through this module, so that an upgrade of either
library is checked here: `missing()` names what an installed version no longer has, and
tests/transport/test_internals.py fails with that list. The version bounds in pyproject.toml
say which versions were checked (strawberry-graphql 0.341, graphql-core 3.3).

Bodies copied from Strawberry, graphql-core and aiohttp (to change a step of theirs, or to
skip work they do) are listed in COPIED, each with the upstream code and the version it was
copied from: `copied_from_other_versions()` names those whose library is installed at another
version, and tests/transport/test_internals.py fails with that list, so that an upgrade
compares each copy with the new upstream code in one named place.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from importlib import metadata
from typing import TYPE_CHECKING, Any

from graphql import DocumentNode, FragmentDefinitionNode, GraphQLError, OperationDefinitionNode

# graphql-core 3.3's executor pieces, which graphql.execution does not export: planned
# execution (planned.py) calls them as the executor does.
from graphql.execution.collect_fields import (
    FieldDetails,
    FragmentDetails,
    collect_fields,
    collect_subfields,
)
from graphql.execution.executor import CollectedErrors
from graphql.execution.values import get_argument_values
from graphql.pyutils.gather_with_cancel import gather_with_cancel
from strawberry.exceptions import MissingQueryError
from strawberry.schema.exceptions import CannotGetOperationTypeError, InvalidOperationTypeError
from strawberry.schema.schema import (
    StrawberryGraphQLCoreExecutionContext,
    _coerce_pre_execution_error,
)
from strawberry.schema.schema import (
    _OperationContextAwareGraphQLResolveInfo as ResolveInfo,
)
from strawberry.subscriptions.protocols.graphql_transport_ws.handlers import (
    _OperationStreamClosed as OperationStreamClosed,
)
from strawberry.types.execution import PreExecutionError
from strawberry.types.graphql import OperationType

if TYPE_CHECKING:
    import strawberry
    from graphql import GraphQLResolveInfo, GraphQLSchema
    from graphql.execution import Executor
    from strawberry.schema.schema import StreamResult
    from strawberry.subscriptions.protocols.graphql_transport_ws.handlers import (
        BaseGraphQLTransportWSHandler,
        Operation,
    )
    from strawberry.types.execution import ExecutionContext
    from strawberry.types.execution import ExecutionResult as StrawberryResult
    from strawberry.types.field import StrawberryField

__all__ = [
    "CollectedErrors",
    "EventExecutionContext",
    "FieldDetails",
    "FragmentDetails",
    "OperationStreamClosed",
    "ResolveInfo",
    "collect_fields",
    "collect_subfields",
    "gather_with_cancel",
]


@dataclass(frozen=True)
class Copied:
    """A body of ours copied from a library's, to be compared with it on every upgrade."""

    ours: str  # module: what
    upstream: str  # the library's code it follows
    distribution: str
    version: str


COPIED = (
    Copied(
        "gql_presence/http/view.py: PresenceView._open_socket, _answer_json_post",
        "strawberry.http.async_base_view.AsyncBaseHTTPView.run",
        "strawberry-graphql",
        "0.341.2",
    ),
    Copied(
        "gql_presence/http/ws.py: GraphQLTransportWS.handle",
        "strawberry.subscriptions.protocols.graphql_transport_ws.handlers"
        ".BaseGraphQLTransportWSHandler.handle",
        "strawberry-graphql",
        "0.341.2",
    ),
    Copied(
        "gql_presence/http/ws.py: GraphQLTransportWS.run_operation",
        "strawberry.subscriptions.protocols.graphql_transport_ws.handlers"
        ".BaseGraphQLTransportWSHandler.run_operation",
        "strawberry-graphql",
        "0.341.2",
    ),
    Copied(
        "gql_presence/graphql/internals.py: parsed_subscription",
        "strawberry.schema.schema.Schema._stream (to the execution of a subscription)",
        "strawberry-graphql",
        "0.341.2",
    ),
    Copied(
        "gql_presence/graphql/internals.py: subscription_field",
        "graphql.execution.execute.execute_subscription (to its resolver's call)",
        "graphql-core",
        "3.3.2",
    ),
    Copied(
        "gql_presence/http/sockets.py: BoundedWebSocketResponse._reset_heartbeat, "
        "_on_data_received, heartbeat_tick (with _pong_not_received), write_eof, close",
        "aiohttp.web_ws.WebSocketResponse: _reset_heartbeat, _on_data_received, "
        "_send_heartbeat, _pong_not_received, write_eof, close",
        "aiohttp",
        "3.14.5",
    ),
)


def copied_from_other_versions(copies: tuple[Copied, ...] = COPIED) -> list[str]:
    """The copies (in COPIED) whose library is installed at another version than the one they
    were copied from, worded for the person upgrading it; empty when none is."""
    stale = []
    for copied in copies:
        installed = metadata.version(copied.distribution)
        if installed != copied.version:
            stale.append(
                f"{copied.ours} copies {copied.upstream} of {copied.distribution} "
                f"{copied.version}; {installed} is installed"
            )
    return stale


def core_schema(schema: strawberry.Schema) -> GraphQLSchema:
    """graphql-core's schema inside Strawberry's."""
    return schema._schema


def strawberry_schema_of(schema: GraphQLSchema) -> Any:
    """The Strawberry schema that made graphql-core's `schema`, or None."""
    return getattr(schema, "_strawberry_schema", None)


def provided_operation_name(context: ExecutionContext) -> str | None:
    """The operation name the request gave (Strawberry's `operation_name` is the one it ran)."""
    return context._provided_operation_name


def raw_info(info: strawberry.Info[Any, Any]) -> GraphQLResolveInfo[Any]:
    """graphql-core's resolve info inside Strawberry's: the parsed operation, its fragments."""
    return info._raw_info


def resolve_info(raw: object, field: StrawberryField, info_class: Any) -> Any:
    """Strawberry's resolve info of a field, as its resolver wrapper makes it."""
    return info_class(_raw_info=raw, _field=field)


def is_strawberry_resolver(resolve: object) -> bool:
    """Whether a graphql-core field's resolve is Strawberry's wrapper of a resolver of ours
    (False for its default resolver of plain attributes)."""
    return getattr(resolve, "_is_default", None) is False


def is_default_resolver(resolve: object) -> bool:
    """Whether a graphql-core field's resolve is Strawberry's reader of a plain attribute."""
    return bool(getattr(resolve, "_is_default", False))


def handles_exceptions(converter: object) -> bool:
    """Whether Strawberry's schema converter has exception handlers for resolvers (its
    wrapper must then run)."""
    return getattr(converter, "_exception_handler_specs", None) != ()


class EventExecutionContext(StrawberryGraphQLCoreExecutionContext):
    """graphql-core 3.3 runs each subscription event on a shallow copy of the subscription's
    executor, which shares its memo of collected sub-fields; the memo is keyed by lists made
    anew for every event, so it would grow for as long as a subscription lasts (about 1.4 kB
    an event). Each event's executor gets a memo of its own."""

    def build_per_event_executor(self, payload: Any) -> Any:
        executor = super().build_per_event_executor(payload)
        executor._relevant_sub_fields = {}
        return executor


async def send_result_stream(
    handler: BaseGraphQLTransportWSHandler[Any, Any],
    operation: Operation[Any, Any],
    results: StreamResult,
) -> None:
    """Sends an operation's results as Strawberry's graphql-transport-ws handler does: its
    first error before execution as an `error` message, each result as `next`. Raises
    OperationStreamClosed when the handler closed the socket instead."""
    await handler._send_result_stream(operation, results)


async def parsed_subscription(
    schema: strawberry.Schema,
    query: str,
    variables: dict[str, Any] | None,
    context: object,
    operation_name: str | None,
) -> DocumentNode | StrawberryResult:
    """A subscription's document, parsed and validated as Strawberry's `Schema.stream` does
    (the same extensions' operation, parsing and validation hooks, the same caches and
    limits) up to where it would execute it: the document of the operation run and its
    fragments, or the result Strawberry answers a document that fails.

    A copy of the start of Strawberry's `Schema._stream` (COPIED)."""
    execution_context = schema._create_execution_context(
        query=query,
        allowed_operation_types=(OperationType.SUBSCRIPTION,),
        variable_values=variables,
        context_value=context,
        operation_name=operation_name,
    )
    extensions = schema.get_extensions()
    for extension in extensions:
        extension.execution_context = execution_context
    runner = schema.create_extensions_runner(execution_context, extensions)
    async with runner.operation():
        try:
            error = await schema._prepare_operation_async(execution_context, runner)
        except (MissingQueryError, CannotGetOperationTypeError, InvalidOperationTypeError) as e:
            error = PreExecutionError(data=None, errors=[_coerce_pre_execution_error(e)])
        if error:
            error.extensions = await runner.get_extensions_results(execution_context)
            return await schema._handle_execution_result(execution_context, error, runner)
        document = execution_context.graphql_document
        assert document is not None
        operation = execution_context.operation_name
        chosen = [
            d
            for d in document.definitions
            if isinstance(d, OperationDefinitionNode)
            and (operation is None or (d.name is not None and d.name.value == operation))
        ]
        fragments = [d for d in document.definitions if isinstance(d, FragmentDefinitionNode)]
        return DocumentNode(definitions=(chosen[0], *fragments))


def subscription_executor(
    schema: GraphQLSchema,
    document: DocumentNode,
    variables: dict[str, Any] | None,
    operation_name: str | None,
) -> tuple[Executor[Any], str, dict[str, Any]] | list[GraphQLError]:
    """A validated subscription's executor (as Strawberry builds it to subscribe), its root
    field and the field's coerced arguments; or the errors graphql-core answers instead
    (variables that do not fit the document)."""
    executor = EventExecutionContext.build(
        schema, document, raw_variable_values=variables, operation_name=operation_name
    )
    if isinstance(executor, list):
        return executor
    try:
        field, args = subscription_field(executor)
    except GraphQLError as error:
        return [error]
    return executor, field, args


def subscription_field(executor: Executor[Any]) -> tuple[str, dict[str, Any]]:
    """The root field of a subscription's executor and its arguments, coerced by their
    GraphQL names, as graphql-core 3.3.2's `execute_subscription` gives them to the field's
    resolver (a copy: COPIED). Raises the GraphQLError graphql-core would."""
    schema = executor.schema
    root_type = schema.subscription_type
    assert root_type is not None
    grouped = collect_fields(
        schema,
        executor.fragments,
        executor.variable_values,
        root_type,
        executor.operation,
        executor.hide_suggestions,
    ).grouped_field_set
    _, details = next(iter(grouped.items()))
    field_name = details[0].node.name.value
    field = schema.get_field(root_type, field_name)
    if field is None:
        raise GraphQLError(f"The subscription field '{field_name}' is not defined.")
    args = get_argument_values(
        field,
        details[0].node,
        executor.variable_values,
        details[0].fragment_variable_values,
        executor.hide_suggestions,
    )
    return field_name, args


# What each use above needs of the installed libraries: (module, attribute path).
_USED = (
    ("graphql.execution.collect_fields", "collect_fields"),
    ("graphql.execution.collect_fields", "collect_subfields"),
    ("graphql.execution.collect_fields", "FieldDetails"),
    ("graphql.execution.collect_fields", "FragmentDetails"),
    ("graphql.execution.executor", "CollectedErrors"),
    ("graphql.execution.executor", "Executor.build_per_event_executor"),
    ("graphql.pyutils.gather_with_cancel", "gather_with_cancel"),
    ("aiohttp.web_ws", "WebSocketResponse._reset_heartbeat"),
    ("aiohttp.web_ws", "WebSocketResponse._on_data_received"),
    ("aiohttp.web_ws", "WebSocketResponse._pong_not_received"),
    ("graphql.execution.collect_fields", "FieldDetails.fragment_variable_values"),
    ("strawberry.schema.schema", "Schema._create_execution_context"),
    ("strawberry.schema.schema", "Schema._prepare_operation_async"),
    ("strawberry.schema.schema", "Schema._handle_execution_result"),
    ("strawberry.schema.schema", "_coerce_pre_execution_error"),
    ("strawberry.schema.schema", "_OperationContextAwareGraphQLResolveInfo"),
    ("strawberry.schema.schema", "StrawberryGraphQLCoreExecutionContext"),
    ("strawberry.subscriptions.protocols.graphql_transport_ws.handlers", "_OperationStreamClosed"),
    (
        "strawberry.subscriptions.protocols.graphql_transport_ws.handlers",
        "BaseGraphQLTransportWSHandler._send_result_stream",
    ),
)


def missing() -> list[str]:
    """What the uses above need and the installed libraries lack, worded for the person
    upgrading them; empty when everything is there. Attributes of instances (`_schema`,
    `_raw_info`, `_relevant_sub_fields`, ...) are checked by the tests that use them."""
    gone = []
    for module_name, path in _USED:
        try:
            found: object = importlib.import_module(module_name)
        except ImportError:
            gone.append(f"module {module_name}")
            continue
        for part in path.split("."):
            found = getattr(found, part, None)
            if found is None:
                gone.append(f"{module_name}.{path}")
                break
    return gone
