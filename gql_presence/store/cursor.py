"""Opaque page cursors: the (score, user id) of the last user on a page, sealed with a key
derived from the deployment's secret (AES-GCM), so that a cursor reveals neither the time nor
the id it holds (a reader may not be allowed to see either: a user's lastSeen visibility), and
one made or altered by anyone else is refused rather than read as some other position. Every
process of a deployment holds the same secret, so a cursor from one is valid on all."""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import os

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from gql_presence.store.errors import BadInputError

_BAD_CURSOR = "after must be an endCursor returned by this service (or null for the first page)."
_NONCE_BYTES = 12


class Cursors:
    """Makes and reads cursors, their tags keyed by one secret."""

    def __init__(self, secret: str) -> None:
        # A key of AES-256's size from a secret of any length.
        self._aead = AESGCM(hashlib.sha256(b"gql-presence cursor v3\0" + secret.encode()).digest())
        # Keys the nonces of fixed cursors, apart from the cipher's key.
        self._nonce_key = hashlib.sha256(b"gql-presence fixed nonce\0" + secret.encode()).digest()

    def seal(self, position: list[object]) -> str:
        """Any position (JSON values), sealed."""
        payload = json.dumps(position, separators=(",", ":"), ensure_ascii=False).encode()
        nonce = os.urandom(_NONCE_BYTES)
        sealed = nonce + self._aead.encrypt(nonce, payload, None)
        return base64.urlsafe_b64encode(sealed).decode().rstrip("=")

    def seal_fixed(self, position: list[object]) -> str:
        """A position sealed always the same way: its nonce derived from it (as SIV does),
        so that every process gives one position one cursor. For positions a receiver
        compares, such as a change's: a webhook's batch sent again by another process has the
        same body, and its changes the same cursors."""
        payload = json.dumps(position, separators=(",", ":"), ensure_ascii=False).encode()
        nonce = hmac.new(self._nonce_key, payload, hashlib.sha256).digest()[:_NONCE_BYTES]
        sealed = nonce + self._aead.encrypt(nonce, payload, None)
        return base64.urlsafe_b64encode(sealed).decode().rstrip("=")

    def unseal(self, cursor: str, refusal: str = _BAD_CURSOR) -> list[object]:
        """The position `seal` sealed; BadInputError(refusal) for anything this secret did
        not seal."""
        try:
            raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
            nonce, sealed = raw[:_NONCE_BYTES], raw[_NONCE_BYTES:]
            if len(nonce) < _NONCE_BYTES:
                raise BadInputError(refusal)
            position = json.loads(self._aead.decrypt(nonce, sealed, None))
        except (binascii.Error, InvalidTag, UnicodeDecodeError, ValueError, TypeError) as error:
            raise BadInputError(refusal) from error
        if not isinstance(position, list):
            raise BadInputError(refusal)
        return position

    def encode(self, score: int, user_id: str, order: str = "", kept: str = "") -> str:
        """A cursor of a list in its default order, or of the one `order` names, of all its
        users or of those a filter keeps (`kept` names the filter)."""
        if kept:
            return self.seal([score, user_id, order, kept])
        return self.seal([score, user_id, order] if order else [score, user_id])

    def decode(self, cursor: str, order: str = "", kept: str = "") -> tuple[int, str]:
        """The position a cursor of this order and filter holds; BadInputError for anything
        this secret did not seal, or a cursor of another order or filter."""
        position = self.unseal(cursor)
        if len(position) < 2 or len(position) > 4:
            raise BadInputError(_BAD_CURSOR)
        score, user_id, *rest = position
        if type(score) is not int or not isinstance(user_id, str) or not user_id:
            raise BadInputError(_BAD_CURSOR)
        if (rest[0] if rest else "") != order:
            raise BadInputError(
                "after must be an endCursor of this list in the same order (orderBy); a "
                "cursor of one order means nothing in another."
            )
        if (rest[1] if len(rest) > 1 else "") != kept:
            raise BadInputError(
                "after must be an endCursor of this list with the same filter; a cursor of "
                "one filter means nothing with another (give null to start over)."
            )
        return score, user_id
