"""The refusals a client can receive, each with its `extensions.code`.

Plain Python so that the store can raise them; the GraphQL layer turns them into errors.
"""

from __future__ import annotations

from enum import StrEnum


class ErrorCode(StrEnum):
    BAD_USER_INPUT = "BAD_USER_INPUT"
    SESSION_REVOKED = "SESSION_REVOKED"
    UNAUTHENTICATED = "UNAUTHENTICATED"
    FORBIDDEN = "FORBIDDEN"
    RATE_LIMITED = "RATE_LIMITED"
    UNAVAILABLE = "UNAVAILABLE"
    INTERNAL = "INTERNAL"
    # Apollo's automatic persisted queries: the client sends the document with its hash next.
    PERSISTED_QUERY_NOT_FOUND = "PERSISTED_QUERY_NOT_FOUND"
    # A feed cursor older than what the feed keeps: read afresh, and go on without it.
    CURSOR_EXPIRED = "CURSOR_EXPIRED"


class PresenceError(Exception):
    """A refusal whose message is written for the person who made the call."""

    code: ErrorCode = ErrorCode.INTERNAL

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    @property
    def extensions(self) -> dict[str, object]:
        """What the error adds to `extensions` besides its code."""
        return {}


class BadInputError(PresenceError):
    code = ErrorCode.BAD_USER_INPUT


class CursorExpiredError(PresenceError):
    code = ErrorCode.CURSOR_EXPIRED


class SessionRevokedError(PresenceError):
    code = ErrorCode.SESSION_REVOKED


class StoreUnavailableError(PresenceError):
    code = ErrorCode.UNAVAILABLE


class WritesRefusedError(StoreUnavailableError):
    """Redis answers but takes no writes: a read-only replica (during a failover), or full."""


class LeaseLostError(StoreUnavailableError):
    """This process's lease in a shard has lapsed (it stopped renewing for longer than the
    connection TTL) or is no longer its own: the sessions it held there have ended."""


class UnauthenticatedError(PresenceError):
    code = ErrorCode.UNAUTHENTICATED


class ForbiddenError(PresenceError):
    code = ErrorCode.FORBIDDEN


class PersistedQueryNotFoundError(PresenceError):
    """The exact message Apollo clients look for before they send the document itself."""

    code = ErrorCode.PERSISTED_QUERY_NOT_FOUND

    def __init__(self) -> None:
        super().__init__("PersistedQueryNotFound")


class RateLimitedError(PresenceError):
    code = ErrorCode.RATE_LIMITED

    def __init__(self, retry_after_s: int) -> None:
        super().__init__(f"Too many requests from this caller: try again in {retry_after_s} s.")
        self.retry_after_s = retry_after_s

    @property
    def extensions(self) -> dict[str, object]:
        return {"retryAfterSeconds": self.retry_after_s}
