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
    UNAVAILABLE = "UNAVAILABLE"
    INTERNAL = "INTERNAL"


class PresenceError(Exception):
    """A refusal whose message is written for the person who made the call."""

    code: ErrorCode = ErrorCode.INTERNAL

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class BadInputError(PresenceError):
    code = ErrorCode.BAD_USER_INPUT


class SessionRevokedError(PresenceError):
    code = ErrorCode.SESSION_REVOKED


class StoreUnavailableError(PresenceError):
    code = ErrorCode.UNAVAILABLE
