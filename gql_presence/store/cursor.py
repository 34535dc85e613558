"""Opaque page cursors: the (score, user id) of the last user on a page, with a tag keyed by
the deployment's secret, so that a cursor made or altered by anyone else is refused rather than
read as some other position. Every process of a deployment holds the same secret, so a cursor
from one is valid on all."""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json

from gql_presence.store.errors import BadInputError

_BAD_CURSOR = "after must be an endCursor returned by this service (or null for the first page)."
_TAG_BYTES = 8


class Cursors:
    """Makes and reads cursors, their tags keyed by one secret."""

    def __init__(self, secret: str) -> None:
        # BLAKE2b takes a key of at most 64 bytes: a secret of any length is hashed to one.
        self._key = hashlib.sha256(b"gql-presence cursor v2\0" + secret.encode()).digest()

    def _tag(self, payload: bytes) -> bytes:
        return hashlib.blake2b(payload, key=self._key, digest_size=_TAG_BYTES).digest()

    def encode(self, score: int, user_id: str, order: str = "") -> str:
        """A cursor of a list in its default order, or of the one `order` names."""
        position: list[object] = [score, user_id, order] if order else [score, user_id]
        payload = json.dumps(position, separators=(",", ":"), ensure_ascii=False).encode()
        return base64.urlsafe_b64encode(self._tag(payload) + payload).decode().rstrip("=")

    def decode(self, cursor: str, order: str = "") -> tuple[int, str]:
        """The position a cursor of this order holds; BadInputError for anything this secret
        did not tag, or a cursor of another order."""
        try:
            raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
            tag, payload = raw[:_TAG_BYTES], raw[_TAG_BYTES:]
            if not hmac.compare_digest(tag, self._tag(payload)):
                raise BadInputError(_BAD_CURSOR)
            score, user_id, *ordered = json.loads(payload)
        except (binascii.Error, UnicodeDecodeError, ValueError, TypeError) as error:
            raise BadInputError(_BAD_CURSOR) from error
        if type(score) is not int or not isinstance(user_id, str) or not user_id:
            raise BadInputError(_BAD_CURSOR)
        if ordered != ([order] if order else []):
            raise BadInputError(
                "after must be an endCursor of this list in the same order (orderBy); a "
                "cursor of one order means nothing in another."
            )
        return score, user_id
