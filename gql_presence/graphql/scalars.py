"""The GraphQL scalars: DateTime and Date in ISO 8601, and small JSON objects."""

from __future__ import annotations

from datetime import UTC, date, datetime
from typing import NewType

import strawberry

from gql_presence.store.errors import BadInputError


def _serialize_datetime(value: datetime) -> str:
    # The store's times are in UTC already: no conversion to make for them.
    moment = value if value.tzinfo is UTC else value.astimezone(UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _parse_datetime(value: object) -> datetime:
    # Raised as the store's own refusal, so that the client reads this sentence alone, not
    # wrapped in graphql-core's quotes.
    if not isinstance(value, str):
        raise BadInputError(f"A DateTime is a string in ISO 8601, as in {_EXAMPLE_TIME}.")
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        parsed = None
    shown = _shown(value)
    if parsed is None:
        raise BadInputError(f"A DateTime is ISO 8601, as in {_EXAMPLE_TIME}: {shown} is not.")
    if parsed.tzinfo is None:
        raise BadInputError(
            f"A DateTime must end with its offset from UTC, as in {_EXAMPLE_TIME} (Z for UTC) "
            f"or 2026-11-21T10:30:00+01:00: {shown} has none."
        )
    return parsed


_EXAMPLE_TIME = "2026-11-21T09:30:00.250Z"
# How much of a client's text a refusal repeats.
_SHOWN_CHARS = 40


def _shown(value: str) -> str:
    return value if len(value) <= _SHOWN_CHARS else value[:_SHOWN_CHARS] + "..."


def _parse_date(value: object) -> date:
    # As a DateTime's: one sentence, repeating a bounded part of the client's text.
    if not isinstance(value, str):
        raise BadInputError("A Date is a string in ISO 8601, as in 2026-11-21.")
    try:
        return date.fromisoformat(value)
    except ValueError:
        raise BadInputError(
            f"A Date is ISO 8601, as in 2026-11-21: {_shown(value)} is not."
        ) from None


JSONObject = NewType("JSONObject", object)
JSONObjectScalar = strawberry.scalar(
    name="JSONObject",
    description="A JSON object, at most 1 KiB once encoded.",
    # Checked where it is used (store/validation.py), so that a bad one is BAD_USER_INPUT
    # with what is allowed, and changes nothing.
    serialize=lambda value: value,
    parse_value=lambda value: value,
)

DateTimeScalar = strawberry.scalar(
    name="DateTime",
    description="A point in time, ISO 8601 with an offset, e.g. 2026-11-21T09:30:00.250Z.",
    serialize=_serialize_datetime,
    parse_value=_parse_datetime,
)
DateScalar = strawberry.scalar(
    name="Date",
    description="A calendar date, ISO 8601, e.g. 2026-11-21.",
    serialize=date.isoformat,
    parse_value=_parse_date,
)
