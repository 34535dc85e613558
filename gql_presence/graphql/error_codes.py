"""Every error a client sees carries an `extensions.code` of docs/semantics.md.

- Refusals of ours (PresenceError) keep their message and code.
- Errors before execution (syntax, validation, a variable or literal of the wrong type) are
  the caller's: BAD_USER_INPUT, with graphql-core's message, which says what was expected.
- Anything else is unexpected: logged with its stack trace for operators, and shown to the
  client only as INTERNAL, with no detail.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator

from graphql import GraphQLError
from strawberry.extensions import SchemaExtension
from strawberry.schema.exceptions import CannotGetOperationTypeError, InvalidOperationTypeError
from strawberry.types import ExecutionResult

from gql_presence.policy.limits import MAX_TOKENS
from gql_presence.store.errors import ErrorCode, PresenceError

log = logging.getLogger("gql_presence.errors")

INTERNAL_MESSAGE = "Internal error: the operation failed on our side and was logged."


def code_of(error: GraphQLError) -> ErrorCode:
    given = str((error.extensions or {}).get("code"))
    if given in ErrorCode.__members__:  # coded already
        return ErrorCode(given)
    original = error.original_error
    if isinstance(original, PresenceError):
        return original.code
    # An operationName the document lacks, or an operation type the transport does not take:
    # Strawberry's refusals before parsing is done with (over HTTP, a 400 instead).
    if isinstance(original, CannotGetOperationTypeError | InvalidOperationTypeError):
        return ErrorCode.BAD_USER_INPUT
    # Outside execution, graphql-core reports the document's faults: with no original error
    # (syntax, validation), or with its own error or the scalar parser's (bad variables).
    document_fault = original is None or isinstance(original, GraphQLError | ValueError | TypeError)
    if error.path is None and document_fault:
        return ErrorCode.BAD_USER_INPUT
    # During execution, graphql-core coerces each field's and directive's arguments as it
    # reaches them: an explicit null for a variable with a default, in a place that takes no
    # null, is found only there, with a path, and is the caller's as much as a bad variable.
    if isinstance(original, GraphQLError) and original.message.startswith(_ARGUMENT_FAULTS):
        return ErrorCode.BAD_USER_INPUT
    return ErrorCode.INTERNAL


# How graphql-core's argument coercion (graphql.execution.values) begins its messages.
_ARGUMENT_FAULTS = ("Argument '", "Variable '$")


def is_unexpected(error: GraphQLError) -> bool:
    return "code" not in (error.extensions or {}) and code_of(error) is ErrorCode.INTERNAL


def with_code(error: GraphQLError) -> GraphQLError:
    if "code" in (error.extensions or {}):
        return error
    code = code_of(error)
    original = error.original_error
    extensions = {**(error.extensions or {}), "code": code.value}
    if isinstance(original, PresenceError):
        message = original.message
        extensions.update(original.extensions)
    elif code is ErrorCode.INTERNAL:
        message = INTERNAL_MESSAGE
    elif isinstance(original, GraphQLError) and isinstance(original.original_error, PresenceError):
        # A scalar's refusal of a variable's value (a DateTime without its offset): said
        # once, after the variable's name, not quoted inside graphql-core's own sentence.
        message = f"{error.message.partition(': ')[0]}: {original.original_error.message}"
    else:
        message = explained(error.message)
    return GraphQLError(
        message,
        nodes=error.nodes,
        source=error.source,
        positions=error.positions,
        path=error.path,
        extensions=extensions,
    )


# Each enum's values by its GraphQL name, from the schema as schema.py builds it: the refusal
# of a value not among them lists them.
ENUM_VALUES: dict[str, tuple[str, ...]] = {}
# graphql-core's refusals that do not say what is allowed, said again so that they do.
_UNKNOWN_ENUM_VALUE = re.compile(r"does not exist in '(\w+)' enum\.")
_TOO_MANY_TOKENS = "Syntax Error: Document contains more than"
_TOKEN_LIMIT = (
    f"The document has more than {MAX_TOKENS:,} tokens (names, punctuation and values), the "
    "most this service parses: a fixed limit (docs/operations.md#limits) that hand-written "
    "operations stay well under. Pass long lists of ids as variables, which it does not count."
)


def explained(message: str) -> str:
    """graphql-core's message, with what is allowed where it does not say."""
    if message.startswith(_TOO_MANY_TOKENS):
        return _TOKEN_LIMIT
    if (unknown := _UNKNOWN_ENUM_VALUE.search(message)) and unknown[1] in ENUM_VALUES:
        allowed = ", ".join(ENUM_VALUES[unknown[1]])
        return f"{message[: unknown.end()]} {unknown[1]} takes one of: {allowed}."
    return message


def log_unexpected(errors: list[GraphQLError], operation: str | None) -> None:
    """Logs the unexpected errors of the operation named `operation` (None: anonymous)."""
    for error in filter(is_unexpected, errors):
        log.error(
            "unexpected error in %r at %s",
            operation or "an anonymous operation",
            ".".join(map(str, error.path or ())),
            exc_info=error.original_error or error,
        )


def with_codes(errors: list[GraphQLError]) -> list[GraphQLError]:
    return [with_code(error) for error in errors]


def outcomes(errors: list[GraphQLError] | None) -> list[str]:
    """What a request came to, for logs and metrics: "ok", or its distinct error codes."""
    codes = {code_of(error).value for error in errors or ()}
    return sorted(codes) or ["ok"]


class ErrorCodes(SchemaExtension):
    """Codes the errors of every operation (over HTTP and, later, WebSocket alike). Errors
    Strawberry reports outside the operation (a document that does not parse) are coded by
    the HTTP view with the same with_codes()."""

    def on_operation(self) -> Iterator[None]:
        yield
        result = self.execution_context.result
        errors = getattr(result, "errors", None)
        if result is not None and errors:
            result.errors = with_codes(errors)


def refusal(error: PresenceError) -> GraphQLError:
    """A refusal made before the operation runs (credentials, limits), as a coded error."""
    return GraphQLError(error.message, extensions={"code": error.code.value, **error.extensions})


def retry_after(result: ExecutionResult) -> int | None:
    """The seconds a refusal for the caller's rate asks it to wait, when `result` is one:
    over HTTP it is also said as 429 with Retry-After."""
    for error in result.errors or ():
        seconds = (error.extensions or {}).get("retryAfterSeconds")
        if isinstance(seconds, int):
            return seconds
    return None
