"""What an operation is called in the request log, the metrics and the traces: its type and
root fields (`mutation:touch`), which the schema bounds; never the client's operation name,
aliases or argument values, which it does not.
"""

from __future__ import annotations

from collections.abc import Generator, Iterator
from functools import cache

from aiohttp import web
from graphql import FieldNode, GraphQLSchema, OperationDefinitionNode
from opentelemetry import context, trace
from strawberry.extensions import LifecycleStep, SchemaExtension
from strawberry.extensions.tracing import OpenTelemetryExtension

from gql_presence.graphql.internals import core_schema
from gql_presence.observability.request_log import OPERATION


class OperationLabel(SchemaExtension):
    """Names the request's operation for the request log (a parsed document is needed)."""

    def on_operation(self) -> Iterator[None]:
        yield
        context = self.execution_context
        request = getattr(context.context, "request", None)
        if isinstance(request, web.Request):
            roots = root_fields(core_schema(context.schema))
            label = operation_label(context.graphql_document, context.operation_name, roots)
            request[OPERATION] = label


_INTROSPECTION = frozenset({"__typename", "__schema", "__type"})


@cache
def root_fields(schema: GraphQLSchema) -> dict[str, frozenset[str]]:
    """The field names each operation type has: the only names a label may hold."""
    roots = {"query": schema.query_type, "mutation": schema.mutation_type}
    roots["subscription"] = schema.subscription_type
    return {kind: frozenset(root.fields) | _INTROSPECTION for kind, root in roots.items() if root}


def chosen_operation(
    document: object, operation_name: str | None
) -> OperationDefinitionNode | None:
    """The operation of a parsed document that a request runs, as Strawberry picks it: the
    one named, or with no name given the first. (GraphQL would refuse a document of several
    operations without a name; Strawberry runs the first, named after it.)"""
    operations = [
        d for d in getattr(document, "definitions", ()) if isinstance(d, OperationDefinitionNode)
    ]
    if operation_name is None:
        return operations[0] if operations else None
    named = [o for o in operations if o.name is not None and o.name.value == operation_name]
    return named[0] if len(named) == 1 else None


def operation_label(
    document: object, operation_name: str | None, roots: dict[str, frozenset[str]]
) -> str:
    """`type:field,field` of the operation run; "invalid" for anything the schema does not
    have, so that no client-chosen text becomes a label or reaches the log."""
    operation = chosen_operation(document, operation_name)
    if operation is None:
        return "invalid"
    kind = operation.operation.value
    selections = operation.selection_set.selections
    fields = sorted({s.name.value for s in selections if isinstance(s, FieldNode)})
    if not set(fields) <= roots.get(kind, frozenset()):
        return "invalid"
    return f"{kind}:{','.join(fields) or 'fragments'}"


class OperationSpans(OpenTelemetryExtension):
    """Strawberry's tracing extension (its parsing and validation spans), with an operation
    span named by the operation's type and root fields: never the document, the client's
    operation name, aliases or argument values, which may hold ids. The operation's span is
    the current one while it runs, so the script calls of its resolvers are its children;
    resolvers get no span of their own (a span per field would cost more than the request)."""

    resolve = SchemaExtension.resolve  # type: ignore[assignment]

    def on_operation(self) -> Generator[None, None, None]:
        span = self._tracer.start_span("graphql", kind=trace.SpanKind.INTERNAL)
        self._span_holder[LifecycleStep.OPERATION] = span
        token = context.attach(trace.set_span_in_context(span))
        try:
            yield
        finally:
            context.detach(token)
            execution = self.execution_context
            roots = root_fields(core_schema(execution.schema))
            label = operation_label(execution.graphql_document, execution.operation_name, roots)
            kind, _, fields = label.partition(":")
            span.update_name(label)
            span.set_attribute("graphql.operation.type", kind)
            if fields:
                span.set_attribute("graphql.operation.root_fields", fields.split(","))
            span.end()
