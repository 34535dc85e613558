"""Opaque page cursors: the (score, user id) of the last user on a page."""

from __future__ import annotations

import base64
import binascii
import json

from gql_presence.errors import BadInputError

_BAD_CURSOR = "after must be an endCursor returned by this service (or null for the first page)."


def encode_cursor(score: int, user_id: str) -> str:
    raw = json.dumps([score, user_id], separators=(",", ":"), ensure_ascii=False)
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[int, str]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        score, user_id = json.loads(raw)
    except (binascii.Error, UnicodeDecodeError, ValueError, TypeError) as error:
        raise BadInputError(_BAD_CURSOR) from error
    if type(score) is not int or not isinstance(user_id, str) or not user_id:
        raise BadInputError(_BAD_CURSOR)
    return score, user_id
