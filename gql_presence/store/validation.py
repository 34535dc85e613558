"""The input rules of the API, checked before anything is written."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from datetime import UTC, date, datetime, timedelta

from gql_presence.store.days import DAY_MS
from gql_presence.store.errors import BadInputError
from gql_presence.store.models import OnlineFilter

MAX_ID_LENGTH = 128
MAX_IDS_PER_CALL = 10_000
# The longest GraphQL document, in bytes of UTF-8: the service's document limit, and what one
# persisted document takes in Redis at most.
MAX_DOCUMENT_BYTES = 32 * 1024
MAX_PAGE_SIZE = 1000
# How far ahead of the server's clock a backfilled `at` may lie: clock skew between hosts.
MAX_FUTURE_MS = 5000
AT_IN_FUTURE = f"at may lie at most {MAX_FUTURE_MS // 1000} seconds ahead of the server's clock."


def at_before_retention(now_ms: int, retention_ms: int) -> str:
    """The refusal of an `at` older than the retention, with the earliest time allowed (by
    this host's clock, rounded up to the second: the script's is the server's)."""
    earliest_s = -((retention_ms - now_ms) // 1000)
    earliest = datetime.fromtimestamp(earliest_s, UTC).isoformat().replace("+00:00", "Z")
    days = retention_ms / DAY_MS
    return (
        f"at must lie within the retention of {days:g} days (PRESENCE_RETENTION_DAYS): the "
        f"earliest time allowed now is {earliest}."
    )


# Webhooks a deployment may have: each costs its deliveries' work in every process.
MAX_WEBHOOKS = 50
WEBHOOKS_FULL = (
    f"A deployment has at most {MAX_WEBHOOKS} webhooks: delete one (deleteWebhook) before "
    "creating another."
)

# The first and last end dates whose seven days can be written as dates.
FIRST_END_DATE = date.min + timedelta(days=6)
LAST_END_DATE = date.max - timedelta(days=1)
# Unicode's control characters (category Cc) and lone surrogates (Cs), as ranges: one regex
# search per id instead of a category look-up per character (10,000 ids of 128 emoji took
# ~250 ms that way).
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")
_SURROGATE = re.compile("[\ud800-\udfff]")
_SHA256_HEX = re.compile(r"[0-9a-f]{64}")


def check_id(value: str, name: str) -> str:
    """An id is 1 to 128 characters of Unicode text with no control characters."""
    if not 1 <= len(value) <= MAX_ID_LENGTH:
        raise BadInputError(
            f"{name} must be 1 to {MAX_ID_LENGTH} characters long; got {len(value)} characters."
        )
    if value.isascii() and value.isprintable():  # the common case, without a look-up per char
        return value
    if _CONTROL.search(value):
        raise BadInputError(
            f"{name} must not contain control characters (such as newlines or tabs)."
        )
    if _SURROGATE.search(value):
        raise BadInputError(f"{name} must be valid Unicode text; it holds a lone surrogate.")
    return value


def check_ids(values: Iterable[str], name: str) -> list[str]:
    """At most 10,000 ids, each valid; returned without duplicates, in their first order."""
    given = list(values)
    if len(given) > MAX_IDS_PER_CALL:
        raise BadInputError(
            f"{name} takes at most {MAX_IDS_PER_CALL:,} ids per call; got {len(given):,}."
        )
    for value in given:
        check_id(value, f"each of {name}")
    return list(dict.fromkeys(given))


def utf8_bytes(text: str) -> int:
    """How many bytes of UTF-8 the text takes; a lone surrogate, which is not UTF-8, is
    counted as the 3 bytes it would take."""
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


def check_document(document: str) -> str:
    """A document to keep: Unicode text of at most MAX_DOCUMENT_BYTES bytes of UTF-8."""
    size = utf8_bytes(document)
    if size > MAX_DOCUMENT_BYTES:
        raise BadInputError(
            f"The document takes {size:,} bytes of UTF-8; at most {MAX_DOCUMENT_BYTES:,} are kept."
        )
    if not document.isascii() and _SURROGATE.search(document):
        raise BadInputError("The document must be valid Unicode text; it holds a lone surrogate.")
    return document


def check_sha256(value: str) -> str:
    """A document's SHA-256, as 64 lowercase hex digits."""
    if not _SHA256_HEX.fullmatch(value):
        raise BadInputError("A document's SHA-256 is 64 lowercase hex digits.")
    return value


def check_page_size(first: int) -> int:
    if not 0 <= first <= MAX_PAGE_SIZE:
        raise BadInputError(f"first must be between 0 and {MAX_PAGE_SIZE}; got {first}.")
    return first


def check_at(at_ms: int, now_ms: int, retention_ms: int) -> int:
    """Refuses a backfilled time a day or more outside what the touch script accepts, by this
    host's clock (`now_ms`); the script checks the exact bounds by the server's clock."""
    if at_ms > now_ms + DAY_MS:
        raise BadInputError(AT_IN_FUTURE)
    if at_ms < now_ms - retention_ms - DAY_MS:
        raise BadInputError(at_before_retention(now_ms, retention_ms))
    return at_ms


def check_range(start: datetime, end: datetime) -> None:
    if start > end:
        raise BadInputError("from must not be later than to.")


def check_end_date(end_date: date) -> date:
    if not FIRST_END_DATE <= end_date <= LAST_END_DATE:
        raise BadInputError(
            f"endDate must lie between {FIRST_END_DATE} and {LAST_END_DATE}, "
            "so that its seven days are calendar dates."
        )
    return end_date


MAX_PLACE_STATE_BYTES = 1024
MAX_PLACE_IDS = 1000


def check_place_state(state: object) -> str:
    """A place state to keep: a JSON object of at most 1 KiB once encoded compactly (no
    whitespace, `,` and `:` as separators, characters outside ASCII as themselves), holding
    nothing JSON cannot (NaN, Infinity, a number beyond a double's range, a lone surrogate).
    Returns that encoding."""
    if not isinstance(state, dict):
        raise BadInputError(f"state must be a JSON object; got {_json_kind(state)}.")
    try:
        _check_json_numbers(state)
        text = json.dumps(state, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
        size = len(text.encode("utf-8"))
    except (ValueError, OverflowError, UnicodeEncodeError, RecursionError) as error:
        raise BadInputError(
            "state must hold only what JSON can: no NaN, Infinity, number beyond a double's "
            "range or lone surrogate."
        ) from error
    if size > MAX_PLACE_STATE_BYTES:
        raise BadInputError(
            f"state takes {size:,} bytes once encoded as compact JSON; at most "
            f"{MAX_PLACE_STATE_BYTES:,} are allowed."
        )
    return text


def _check_json_numbers(value: object) -> None:
    """Raises OverflowError for an integer no double can hold, at any depth."""
    if isinstance(value, dict):
        for item in value.values():
            _check_json_numbers(item)
    elif isinstance(value, list):
        for item in value:
            _check_json_numbers(item)
    elif isinstance(value, int) and not isinstance(value, bool):
        float(value)


def _json_kind(value: object) -> str:
    if isinstance(value, list):
        return "an array"
    if isinstance(value, str):
        return "a string"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    return "a number"


def check_place_ids(values: Iterable[str], name: str) -> list[str]:
    """At most 1,000 place ids, each valid; returned in their order, duplicates kept."""
    given = list(values)
    if len(given) > MAX_PLACE_IDS:
        raise BadInputError(f"{name} takes at most {MAX_PLACE_IDS:,} ids; got {len(given):,}.")
    for value in given:
        check_id(value, f"each of {name}")
    return given


MAX_STATUS_TEXT = 128
MAX_EMOJI = 16
MAX_DEVICE = 32
MAX_PRESENCES = 1000
# What could make a name or status display as something else: the bidirectional overrides
# and isolates, besides control characters (SEMANTICS, "Status").
_BIDI_CONTROL = re.compile("[\u202a-\u202e\u2066-\u2069]")


def check_shown_text(value: str, name: str, longest: int) -> str:
    """Text shown beside a user (a custom status, an emoji, a device): 1 to `longest`
    characters (code points), with no control characters, bidirectional overrides or
    isolates, or lone surrogates."""
    if not 1 <= len(value) <= longest:
        raise BadInputError(
            f"{name} must be 1 to {longest} characters long; got {len(value)} characters."
        )
    if value.isascii() and value.isprintable():
        return value
    if _CONTROL.search(value) or _BIDI_CONTROL.search(value):
        raise BadInputError(
            f"{name} must not contain control characters (such as newlines or tabs) or "
            "bidirectional overrides and isolates (U+202A-U+202E, U+2066-U+2069)."
        )
    if _SURROGATE.search(value):
        raise BadInputError(f"{name} must be valid Unicode text; it holds a lone surrogate.")
    return value


EXPIRES_NOT_AHEAD = (
    "expiresAt must lie in the future, and at most the retention (PRESENCE_RETENTION_DAYS) "
    "ahead; give null to show the custom status until it is changed."
)


def check_device(value: str | None) -> str | None:
    return None if value is None else check_shown_text(value, "device", MAX_DEVICE)


def check_online_filter(given: OnlineFilter) -> OnlineFilter:
    """A filter of the online list: a prefix and a device as ids and devices are written, and
    an onlineSince range that is not empty."""
    if given.user_id_prefix is not None:
        check_id(given.user_id_prefix, "filter.userIdPrefix")
    if given.device is not None:
        check_shown_text(given.device, "filter.device", MAX_DEVICE)
    start, end = given.online_since_from, given.online_since_to
    if start is not None and end is not None and end < start:
        raise BadInputError(
            "filter.onlineSinceTo must not be before filter.onlineSinceFrom (both are "
            "inclusive; give either alone for an open range)."
        )
    return given
