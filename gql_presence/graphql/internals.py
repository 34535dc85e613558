"""Every use of a Strawberry or graphql-core API that is not public, in one place.

The rest of the package reaches these only through this module, so that an upgrade of either
library is checked here: `missing()` names what an installed version no longer has, and
tests/test_internals.py fails with that list. The version bounds in pyproject.toml say which
versions were checked (strawberry-graphql 0.341, graphql-core 3.3).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from graphql import DocumentNode

# graphql-core 3.3's executor pieces, which graphql.execution does not export: planned
# execution (planned.py) calls them as the executor does.
from graphql.execution.collect_fields import (
    FieldDetails,
    FragmentDetails,
    collect_fields,
    collect_subfields,
)
from graphql.execution.executor import CollectedErrors
from graphql.pyutils.gather_with_cancel import gather_with_cancel
from strawberry.schema.schema import (
    StrawberryGraphQLCoreExecutionContext,
)
from strawberry.schema.schema import (
    _OperationContextAwareGraphQLResolveInfo as ResolveInfo,
)
from strawberry.subscriptions.protocols.graphql_transport_ws.handlers import (
    _OperationStreamClosed as OperationStreamClosed,
)

if TYPE_CHECKING:
    import strawberry
    from graphql import GraphQLResolveInfo, GraphQLSchema
    from strawberry.schema.schema import StreamResult
    from strawberry.subscriptions.protocols.graphql_transport_ws.handlers import (
        BaseGraphQLTransportWSHandler,
        Operation,
    )
    from strawberry.types.execution import ExecutionContext
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


def running_document(info: strawberry.Info[Any, Any]) -> tuple[GraphQLSchema, DocumentNode]:
    """graphql-core's schema, and a document of the operation a resolver runs in and its
    fragments: what an executor of that operation is built from."""
    raw = raw_info(info)
    return raw.schema, DocumentNode(definitions=(raw.operation, *raw.fragments.values()))


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


# What each use above needs of the installed libraries: (module, attribute path).
_USED = (
    ("graphql.execution.collect_fields", "collect_fields"),
    ("graphql.execution.collect_fields", "collect_subfields"),
    ("graphql.execution.collect_fields", "FieldDetails"),
    ("graphql.execution.collect_fields", "FragmentDetails"),
    ("graphql.execution.executor", "CollectedErrors"),
    ("graphql.execution.executor", "Executor.build_per_event_executor"),
    ("graphql.pyutils.gather_with_cancel", "gather_with_cancel"),
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
