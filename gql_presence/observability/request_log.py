"""One log line and a few metrics per GraphQL request: which operation, how it ended, how long.

The operation is named by its type and root fields (`mutation:touch`), which the schema
bounds, rather than by the client's operation name, which it does not.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Iterator
from functools import cache

from aiohttp import web
from aiohttp.typedefs import Middleware
from graphql import FieldNode, GraphQLSchema, OperationDefinitionNode
from strawberry.extensions import SchemaExtension

from gql_presence.observability.metrics import Metrics

log = logging.getLogger("gql_presence.requests")

OPERATION = web.RequestKey("operation", str)
OUTCOMES = web.RequestKey("outcomes", list[str])
# Who called: a backend's configured name, or the kind of caller; never a user id.
CALLER = web.RequestKey("caller", str)


class OperationLabel(SchemaExtension):
    """Names the request's operation for the request log (a parsed document is needed)."""

    def on_operation(self) -> Iterator[None]:
        yield
        context = self.execution_context
        request = getattr(context.context, "request", None)
        if isinstance(request, web.Request):
            roots = root_fields(context.schema._schema)  # graphql-core's schema
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


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _outcome_of_status(status: int) -> str:
    """For requests refused before GraphQL ran (a batch, no query, an unknown operation)."""
    if status < 400:
        return "ok"
    return "BAD_USER_INPUT" if status < 500 else "INTERNAL"


def request_telemetry(metrics: Metrics) -> Middleware:
    """aiohttp middleware: logs and measures each request to /graphql."""

    @web.middleware
    async def observe(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path != "/graphql":
            return await handler(request)
        started = time.perf_counter()
        status = 500
        try:
            response = await handler(request)
            status = response.status
            return response
        finally:
            seconds = time.perf_counter() - started
            websocket = request.headers.get("Upgrade", "").lower() == "websocket"
            operation = request.get(OPERATION, "websocket" if websocket else "none")
            ended = request.get(OUTCOMES, [_outcome_of_status(status)])
            caller = request.get(CALLER, "unknown")
            for outcome in ended:
                metrics.request_counter(operation, outcome).inc()
            if not websocket:  # a WebSocket's "request" lasts as long as its connection
                metrics.request_timer(operation).observe(seconds)
            # Made only when written: the line costs more than the metrics.
            if log.isEnabledFor(logging.INFO):
                outcome = ",".join(ended)
                log.info(
                    "%s %s %s %s %s %d %.1f ms",
                    request.method,
                    request.path,
                    operation,
                    outcome,
                    caller,
                    status,
                    seconds * 1000,
                    extra={
                        "method": request.method,
                        "path": request.path,
                        "status": status,
                        "operation": operation,
                        "outcome": outcome,
                        "caller": caller,
                        "duration_ms": round(seconds * 1000, 2),
                    },
                )

    return observe
