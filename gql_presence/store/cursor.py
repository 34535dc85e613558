"""Opaque page cursors: the (score, user id) of the last user on a page, with a short tag so
that a cursor made or altered by hand is refused rather than read as some other position."""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json

from gql_presence.errors import BadInputError

_BAD_CURSOR = "after must be an endCursor returned by this service (or null for the first page)."
_TAG_BYTES = 8
# Cursors carry no secret (only a position in a list anyone may read), so a fixed key is
# enough to tell our cursors from anything else, in every process alike.
_KEY = b"gql-presence cursor v1"


def _tag(payload: bytes) -> bytes:
    return hashlib.blake2b(payload, key=_KEY, digest_size=_TAG_BYTES).digest()


def encode_cursor(score: int, user_id: str) -> str:
    payload = json.dumps([score, user_id], separators=(",", ":"), ensure_ascii=False).encode()
    return base64.urlsafe_b64encode(_tag(payload) + payload).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[int, str]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        tag, payload = raw[:_TAG_BYTES], raw[_TAG_BYTES:]
        if not hmac.compare_digest(tag, _tag(payload)):
            raise BadInputError(_BAD_CURSOR)
        score, user_id = json.loads(payload)
    except (binascii.Error, UnicodeDecodeError, ValueError, TypeError) as error:
        raise BadInputError(_BAD_CURSOR) from error
    if type(score) is not int or not isinstance(user_id, str) or not user_id:
        raise BadInputError(_BAD_CURSOR)
    return score, user_id
