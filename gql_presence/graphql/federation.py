"""What this service adds to a federated graph (Apollo Federation 2): User with its presence,
the checks of `_entities` representations, and `_service`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import strawberry
from strawberry.extensions import DisableIntrospection
from strawberry.printer import print_schema

from gql_presence.graphql.context import NOT_A_FRIEND, Context
from gql_presence.graphql.queries import Query
from gql_presence.graphql.types import (
    ID,
    UserPresence,
)
from gql_presence.policy.auth import CallerKind
from gql_presence.policy.limits import MAX_REPRESENTATIONS
from gql_presence.store import (
    check_id,
)
from gql_presence.store.errors import BadInputError, ForbiddenError


@strawberry.federation.type(
    keys=["id"],
    description="A user, as other subgraphs of a federated graph know them: this one adds their presence.",
)
class User:
    id: ID

    @strawberry.field(description="The user's presence.")
    async def presence(self, info: strawberry.Info[Context, None]) -> UserPresence:
        context = info.context
        caller = context.caller
        caller.require_credentials()
        # As presence(userId) allows: an end user themselves and their friends, each checked
        # with every other User of the _entities list in one read per shard.
        stranger = (
            caller.kind is CallerKind.USER
            and self.id != caller.name
            and not caller.users_see_everyone
            and not await context.friend_checks.load(self.id)
        )
        if stranger:
            raise ForbiddenError(NOT_A_FRIEND.format(json.dumps(self.id)))
        # Every User of an _entities list in one read per shard.
        return UserPresence.of(await context.presences.load(self.id))


REPRESENTATION = '{"__typename": "User", "id": "<id>"}'


def users_represented(representations: Sequence[object]) -> list[str]:
    """The ids of `_entities`' representations, each checked: raises BadInputError, before
    anything is read, for more than MAX_REPRESENTATIONS, or for any that is not a User's."""
    if len(representations) > MAX_REPRESENTATIONS:
        raise BadInputError(
            f"_entities takes at most {MAX_REPRESENTATIONS:,} representations per call; got "
            f"{len(representations):,}."
        )
    user_ids = []
    for index, representation in enumerate(representations):
        fault = _representation_fault(representation)
        if fault is not None:
            raise BadInputError(
                f"representations[{index}] must be {REPRESENTATION}, the one entity this "
                f"subgraph resolves; {fault}."
            )
        assert isinstance(representation, dict)
        user_ids.append(check_id(representation["id"], f"representations[{index}].id"))
    return user_ids


def _representation_fault(representation: object) -> str | None:
    """What keeps a value from being a User's representation, or None."""
    if not isinstance(representation, dict):
        return f"got a JSON {_json_kind(representation)}"
    for field, wanted in (("__typename", "User"), ("id", None)):
        if field not in representation:
            return f"it has no {field}"
        value = representation[field]
        if not isinstance(value, str):
            return f"its {field} is a JSON {_json_kind(value)}, not a string"
        if wanted is not None and value != wanted:
            return f"its {field} is {json.dumps(value[:40])}"
    if len(representation) > 2:
        return "it has fields besides these two"
    return None


def _json_kind(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


@strawberry.type(name="_Service", description="This subgraph, as a gateway composes it.")
class SubgraphService:
    @strawberry.field(description="The subgraph's schema, in the federation's SDL.")
    def sdl(self, info: strawberry.Info[Context, None]) -> str:
        return print_schema(info.schema)


@strawberry.type(
    name="Query",
    description="Reading presence: who is online, who was active when, and how many.",
)
class FederatedQuery(Query):
    @strawberry.field(
        name="_service",
        description="The subgraph's schema for a gateway; with introspection off, for backends only.",
    )
    def service(self, info: strawberry.Info[Context, None]) -> SubgraphService:
        caller = info.context.caller
        caller.require_credentials()
        # The whole schema, as introspection would give it: not for end users while the
        # schema answers no introspection (PRESENCE_INTROSPECTION=false).
        if caller.kind is CallerKind.USER and DisableIntrospection in info.schema.extensions:
            raise ForbiddenError(
                "_service is for backend services while introspection is off "
                "(PRESENCE_INTROSPECTION=false): a gateway composes the supergraph with a "
                "backend token."
            )
        return SubgraphService()
