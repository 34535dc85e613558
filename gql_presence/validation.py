"""The input rules of the API, checked before anything is written."""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable

from gql_presence.errors import BadInputError

MAX_ID_LENGTH = 128
MAX_IDS_PER_CALL = 10_000
MAX_PAGE_SIZE = 1000


def check_id(value: str, name: str) -> str:
    """An id is 1 to 128 characters of Unicode text with no control characters."""
    if not 1 <= len(value) <= MAX_ID_LENGTH:
        raise BadInputError(
            f"{name} must be 1 to {MAX_ID_LENGTH} characters long; got {len(value)} characters."
        )
    if value.isascii() and value.isprintable():  # the common case, without a look-up per char
        return value
    categories = {unicodedata.category(char) for char in value}
    if "Cc" in categories:
        raise BadInputError(
            f"{name} must not contain control characters (such as newlines or tabs)."
        )
    if "Cs" in categories:
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


def check_page_size(first: int) -> int:
    if not 0 <= first <= MAX_PAGE_SIZE:
        raise BadInputError(f"first must be between 0 and {MAX_PAGE_SIZE}; got {first}.")
    return first
