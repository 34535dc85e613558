"""The schema: the types of types.py and the resolvers of queries.py,
mutations.py, subscriptions.py and federation.py with the extensions every
operation runs through, built once per process (federated or not)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import date, datetime
from functools import partial
from typing import Any

import strawberry
from graphql import GraphQLEnumType, GraphQLError
from strawberry.extensions import (
    DisableIntrospection,
    MaxTokensLimiter,
    SchemaExtension,
)
from strawberry.federation.schema import FederationAny
from strawberry.schema.config import StrawberryConfig
from strawberry.schema.name_converter import NameConverter

from gql_presence.graphql.context import Context
from gql_presence.graphql.document_limits import DocumentValidation
from gql_presence.graphql.error_codes import ENUM_VALUES, ErrorCodes, log_unexpected
from gql_presence.graphql.federation import FederatedQuery, User, users_represented
from gql_presence.graphql.internals import EventExecutionContext, core_schema
from gql_presence.graphql.labels import OperationLabel, OperationSpans
from gql_presence.graphql.literal_shapes import LiteralShapes, ShapeRecorder
from gql_presence.graphql.mutations import Mutation
from gql_presence.graphql.persisted import (
    KEPT_PER_PROCESS,
    PersistedDocumentCache,
    PersistedDocuments,
)
from gql_presence.graphql.planned import PlanRecorder, Plans
from gql_presence.graphql.queries import Query
from gql_presence.graphql.scalars import DateScalar, DateTimeScalar, JSONObject, JSONObjectScalar
from gql_presence.graphql.subscriptions import Subscription
from gql_presence.graphql.types import ID
from gql_presence.lru import LeastRecentlyUsed
from gql_presence.policy.limits import MAX_TOKENS


class PresenceSchema(strawberry.Schema):
    def process_errors(self, errors: list[GraphQLError], execution_context: Any = None) -> None:
        # Refusals are answers, not faults: only unexpected errors are logged.
        log_unexpected(errors, execution_context.operation_name if execution_context else None)


class FederatedPresenceSchema(strawberry.federation.Schema, PresenceSchema):
    """The same schema as an Apollo Federation 2 subgraph: User, _entities and _service."""

    # In place of Strawberry's resolver of _entities (a coroutine function serves as well),
    # which takes representations as they come: any number of them, and a KeyError or
    # TypeError, answered as our fault, for one that is not an object of a known __typename
    # with the right fields. Here they are checked and bounded first, and the Users' presence
    # is read in batches (Context.presences).
    async def entities_resolver(  # type: ignore[override]
        self, info: strawberry.Info[Context, None], representations: list[FederationAny]
    ) -> list[User]:
        user_ids = users_represented(representations)
        await info.context.charge(len(user_ids))
        return [User(id=ID(user_id)) for user_id in user_ids]


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
    *,
    introspection: bool = True,
    federation: bool = False,
    plans: Plans | None = None,
    shapes: LiteralShapes | None = None,
    traced: bool = False,
    documents: PersistedDocuments | None = None,
) -> PresenceSchema:
    """The schema; with `plans`, each document that passes validation is planned there, and
    with `shapes` its shape (literal_shapes.py);
    `traced`, each operation has its span (observability/tracing.py); with `documents`,
    each document named by its hash is kept there once it passes validation."""
    extensions: list[type[SchemaExtension] | Callable[[], SchemaExtension]] = [
        # Traces, when on: first, so that its span holds the others.
        *([OperationSpans] if traced else []),
        OperationLabel,
        ErrorCodes,
        # Parsing and validating the same few documents again is much of GraphQL's cost per
        # request: keep the validated syntax trees (shared by every request), by text and for
        # documents known by their hash by hash, of this schema; of no document that fails.
        partial(
            PersistedDocumentCache,
            parsed=LeastRecentlyUsed(256),
            checked=LeastRecentlyUsed(KEPT_PER_PROCESS),
            documents=documents,
        ),
        # Bounds on one document's work; their reasons are in policy/limits.py.
        partial(MaxTokensLimiter, max_token_count=MAX_TOKENS),
        partial(DocumentValidation, hide_suggestions=not introspection),
    ]
    if not introspection:
        extensions.append(DisableIntrospection)
    if plans is not None and shapes is not None:
        extensions.append(partial(ShapeRecorder, plans=plans, shapes=shapes))
    elif plans is not None:
        extensions.append(partial(PlanRecorder, plans=plans))
    config = StrawberryConfig(
        scalar_map={datetime: DateTimeScalar, date: DateScalar, JSONObject: JSONObjectScalar},
        name_converter=KeptNames(),
    )
    schema = (FederatedPresenceSchema if federation else PresenceSchema)(
        query=FederatedQuery if federation else Query,
        mutation=Mutation,
        subscription=Subscription,
        types=[User] if federation else (),
        extensions=extensions,
        execution_context_class=EventExecutionContext,
        config=config,
    )
    ENUM_VALUES.update(
        (name, tuple(kind.values))
        for name, kind in core_schema(schema).type_map.items()
        if isinstance(kind, GraphQLEnumType) and not name.startswith("__")
    )
    return schema
