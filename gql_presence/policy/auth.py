"""Who is calling, and what they may do.

Backend services send a bearer token from PRESENCE_BACKEND_TOKENS; end users send a JWT whose
`sub` is their user id. With neither configured the service is open (local development), and
every caller may do everything.
"""

from __future__ import annotations

import hmac
import time
from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum, StrEnum
from typing import Any

import jwt
from cryptography.hazmat.primitives.serialization import load_pem_public_key

from gql_presence.settings import Settings, public_key_algorithm
from gql_presence.store import check_id
from gql_presence.store.errors import BadInputError, ForbiddenError, UnauthenticatedError

# How far apart the token issuer's clock and ours may be, for `exp`, `nbf` and `iat`.
CLOCK_SKEW_S = 30
_REQUIRED_CLAIMS = ["exp", "iss", "aud", "sub"]


class CallerKind(StrEnum):
    OPEN = "open"  # no credentials are configured: anyone may do anything
    BACKEND = "backend"
    USER = "user"
    ANONYMOUS = "anonymous"  # credentials are configured, and the caller sent none


class Need(Enum):
    """What an operation needs of its caller."""

    BACKEND = "backend"  # changes, and following everyone
    OWN = "own"  # one user's own data: a user may ask for their own id only
    # Given users' presence: a user may ask for themselves and their friends, which the
    # request's context checks against the store (Context.check_may_read).
    READ = "read"
    LISTING = "listing"  # everyone's presence and statistics


EXPIRED = "The JWT has expired: send a fresh one (over WebSocket, connect again with it)."
_NEEDS_CREDENTIALS = (
    "This operation needs credentials: send `Authorization: Bearer <token>` with a backend "
    "token or a user's JWT (over WebSocket, in connection_init's payload)."
)


@dataclass(frozen=True)
class Caller:
    kind: CallerKind
    # The backend's name, the user's id, or "" for open and anonymous callers.
    name: str = ""
    users_see_everyone: bool = False
    # When a user's credentials stop being valid (the JWT's `exp` plus the clock skew
    # allowed), in seconds since the epoch; None for credentials that do not expire.
    expires_at_s: float | None = None
    # The places a user's JWT lets them into (its `places` claim): exact ids, and prefixes
    # ending in `*`; none without the claim.
    places: tuple[str, ...] = ()

    def require_credentials(self) -> None:
        """Raises UnauthenticatedError for a caller who sent no credentials where they are
        required (every field needs them, so the request is refused before its document is
        even read), or whose credentials have expired since they were checked (a WebSocket
        outlives its JWT)."""
        if self.kind is CallerKind.ANONYMOUS:
            raise UnauthenticatedError(_NEEDS_CREDENTIALS)
        if self.expires_at_s is not None and time.time() >= self.expires_at_s:
            raise UnauthenticatedError(EXPIRED)

    def authorize(self, need: Need, operation: str, user_id: str | None = None) -> None:
        """Raises UnauthenticatedError or ForbiddenError unless the caller may do this."""
        self.require_credentials()
        if self.kind is not CallerKind.USER:
            return
        if need is Need.BACKEND:
            raise ForbiddenError(
                f"{operation} is for backend services; a user may read and follow their own "
                "presence and their friends' (presence, presences, presenceChanged with userIds "
                "or friendsOf), and read onlineFriends and friends."
            )
        if need is Need.OWN and user_id != self.name:
            raise ForbiddenError(
                f"A user may call {operation} for themselves only: give your own user id "
                "(your token's subject)."
            )
        if need is Need.LISTING and not self.users_see_everyone:
            raise ForbiddenError(
                f"{operation} is for backend services (PRESENCE_USERS_SEE_EVERYONE opens it "
                "to users)."
            )

    def authorize_places(self, operation: str, place_ids: Iterable[str]) -> None:
        """Raises UnauthenticatedError or ForbiddenError unless the caller may act in every
        place given: backends anywhere; users where their JWT's `places` claim allows."""
        self.require_credentials()
        if self.kind is not CallerKind.USER:
            return
        for place_id in place_ids:
            if not any(_place_matches(allowed, place_id) for allowed in self.places):
                raise ForbiddenError(
                    f"{operation}: your token does not let you into this place (its `places` "
                    "claim lists the place ids, and prefixes ending in `*`, you may use)."
                )

    @property
    def label(self) -> str:
        """For logs: the backend's name, or the kind of caller (never a user's id)."""
        return f"backend:{self.name}" if self.kind is CallerKind.BACKEND else self.kind.value


# Callers with no name or credentials: one of each, shared by every request and socket (a
# held socket kept one of its own).
OPEN_CALLER = Caller(CallerKind.OPEN)
ANONYMOUS_CALLER = Caller(CallerKind.ANONYMOUS)


class Authenticator:
    def __init__(self, settings: Settings) -> None:
        self._secured = settings.secured
        self._backends = [(name, secret.encode()) for name, secret in settings.backend_tokens]
        # Each key verifies exactly one algorithm, so a token cannot choose how it is checked
        # (no `none`, no HS256 signed with a public key).
        self._jwt_keys: dict[str, Any] = {}
        if settings.jwt_secret:
            self._jwt_keys["HS256"] = settings.jwt_secret
        if settings.jwt_public_key:
            algorithm = public_key_algorithm(settings.jwt_public_key)
            self._jwt_keys[algorithm] = load_pem_public_key(settings.jwt_public_key.encode())
        self._issuer = settings.jwt_issuer
        self._audience = settings.jwt_audience
        self._users_see_everyone = settings.users_see_everyone

    def caller(self, authorization: object) -> Caller:
        """The caller an Authorization value (header, or connection_init entry) names.

        Raises UnauthenticatedError for credentials that are sent but not valid."""
        if not self._secured:
            return OPEN_CALLER
        if authorization is None or authorization == "":
            return ANONYMOUS_CALLER
        scheme, _, token = str(authorization).strip().partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            raise UnauthenticatedError("Send credentials as `Authorization: Bearer <token>`.")
        backend = self._backend(token.encode())
        if backend is not None:
            return Caller(CallerKind.BACKEND, backend)
        if token.count(".") != 2:
            raise UnauthenticatedError("The bearer token is not valid.")
        subject, expires_at_s, places = self._user(token)
        return Caller(CallerKind.USER, subject, self._users_see_everyone, expires_at_s, places)

    def _backend(self, token: bytes) -> str | None:
        # Every secret is compared, in constant time, whichever matches.
        found = None
        for name, secret in self._backends:
            if hmac.compare_digest(token, secret):
                found = name
        return found

    def _user(self, token: str) -> tuple[str, float, tuple[str, ...]]:
        """The JWT's subject, when the token stops being valid here, and its places."""
        try:
            algorithm = jwt.get_unverified_header(token).get("alg")
        except jwt.InvalidTokenError as error:
            raise UnauthenticatedError("The bearer token is not valid.") from error
        key = self._jwt_keys.get(str(algorithm))
        if key is None:
            accepted = ", ".join(self._jwt_keys) or "none: no JWT key is configured"
            raise UnauthenticatedError(
                f"JWTs signed with {algorithm!r} are not accepted (accepted: {accepted})."
            )
        try:
            claims = jwt.decode(
                token,
                key,
                algorithms=[str(algorithm)],
                issuer=self._issuer,
                audience=self._audience,
                leeway=CLOCK_SKEW_S,
                options={"require": _REQUIRED_CLAIMS},
            )
        except jwt.ExpiredSignatureError as error:
            raise UnauthenticatedError(EXPIRED) from error
        except jwt.InvalidAudienceError as error:
            raise UnauthenticatedError("The JWT is not meant for this service (aud).") from error
        except jwt.InvalidIssuerError as error:
            raise UnauthenticatedError("The JWT comes from an unknown issuer (iss).") from error
        except jwt.ImmatureSignatureError as error:
            raise UnauthenticatedError(
                f"The JWT is not valid yet: its nbf or iat lies more than {CLOCK_SKEW_S} s "
                "ahead of this service's clock (check the issuer's clock)."
            ) from error
        except jwt.MissingRequiredClaimError as error:
            raise UnauthenticatedError(f"The JWT lacks the {error.claim!r} claim.") from error
        except jwt.InvalidTokenError as error:
            raise UnauthenticatedError("The JWT's signature or form is not valid.") from error
        subject = claims["sub"]
        try:
            user_id = check_id(subject if isinstance(subject, str) else "", "sub")
        except BadInputError as error:
            raise UnauthenticatedError(f"The JWT's subject is not a user id: {error}") from error
        places = claims.get("places", [])
        if not isinstance(places, list) or not all(isinstance(p, str) for p in places):
            raise UnauthenticatedError("The JWT's `places` claim must be a list of strings.")
        # As PyJWT counts it: valid while now < int(exp) + leeway.
        return user_id, int(claims["exp"]) + CLOCK_SKEW_S, tuple(places)


def _place_matches(allowed: str, place_id: str) -> bool:
    """Whether an entry of a `places` claim allows the place: the same id, or a prefix ending
    in `*` that the id starts with (`*` alone: every place). Case-sensitive."""
    if allowed.endswith("*"):
        return place_id.startswith(allowed[:-1])
    return place_id == allowed


def development_token(
    settings: Settings, user_id: str, places: Iterable[str], lifetime_s: int
) -> str:
    """An end user's JWT signed with PRESENCE_JWT_SECRET, for trying the secured service by
    hand (`gql-presence token`): its issuer and audience are the settings', `places` its
    claim when any is given. Raises ValueError saying what is missing."""
    if not settings.jwt_secret or not settings.jwt_issuer or not settings.jwt_audience:
        key = settings.jwt_public_key
        also = " (a public key verifies tokens; it cannot sign one)" if key else ""
        raise ValueError(
            "a token is signed with PRESENCE_JWT_SECRET, for PRESENCE_JWT_ISSUER and "
            f"PRESENCE_JWT_AUDIENCE: set all three as the service has them{also}"
        )
    try:
        check_id(user_id, "--user")
    except BadInputError as error:
        raise ValueError(error.message) from None
    now_s = int(time.time())
    claims: dict[str, Any] = {
        "sub": user_id,
        "iss": settings.jwt_issuer,
        "aud": settings.jwt_audience,
        "iat": now_s,
        "exp": now_s + lifetime_s,
    }
    if allowed := list(places):
        claims["places"] = allowed
    return jwt.encode(claims, settings.jwt_secret, algorithm="HS256")
