"""The one admission step of every operation, whatever its transport: an HTTP POST or GET,
or a WebSocket's `subscribe` message (queries, mutations and subscriptions alike). It runs
before the document is parsed, so a refused operation costs next to nothing."""

from __future__ import annotations

import functools

from graphql import GraphQLError, OperationType, parse

from gql_presence.graphql.context import Context
from gql_presence.http.app_keys import CREDENTIALS_REFUSED
from gql_presence.observability.request_log import chosen_operation
from gql_presence.policy.limits import MAX_DOCUMENT_CHARS
from gql_presence.store import MAX_IDS_PER_CALL
from gql_presence.store.errors import BadInputError, StoreUnavailableError


async def admit(context: Context, document: str | None, variables: object) -> None:
    """Raises the refusal (a PresenceError) of an operation whose caller sent bad or no
    credentials, or whose credentials have expired; whose document is too long; whose list
    variables are longer than any argument takes; or whose caller is over its rate."""
    refused = context.request.get(CREDENTIALS_REFUSED)
    if refused is not None:
        raise refused
    context.caller.require_credentials()
    size = len(document or "")
    if size > MAX_DOCUMENT_CHARS:
        raise BadInputError(
            f"The document is {size:,} characters long; at most {MAX_DOCUMENT_CHARS:,} "
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
