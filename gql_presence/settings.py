"""Settings, read once from the environment at start-up.

Every setting is checked before anything starts: a bad value stops the service with a
message that names the variable, so it never runs on a half-understood configuration.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from urllib.parse import urlsplit
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.hazmat.primitives.serialization import load_pem_public_key
from redis.connection import parse_url

from gql_presence.store.days import DAY_MS

_MS_PER_SECOND = 1000
# The feed keeps a change at most this long (PRESENCE_FEED_RETENTION_SECONDS).
FEED_RETENTION_MAX_MS = 7 * 24 * 3600 * _MS_PER_SECOND
# Alone in PRESENCE_ALLOWED_HOSTS or PRESENCE_CORS_ORIGINS: every host name, every origin.
ANY = "*"
_REDIS_SCHEMES = ("redis", "rediss", "unix")


class SettingsError(ValueError):
    """A setting has a value the service cannot run with."""


@dataclass(frozen=True)
class Settings:
    # The Redis to use; None starts the embedded Redis that keeps its data in data_dir. It may
    # hold a password, so it is left out of the repr, as are the other secrets.
    redis_url: str | None = field(default=None, repr=False)
    # A Redis Cluster to use instead, as (host, port) of some of its nodes: the client finds
    # the others itself.
    redis_cluster_nodes: tuple[tuple[str, int], ...] = ()
    # The cluster's ACL user (None: "default") and password (None: no AUTH). A single Redis
    # takes both in REDIS_URL.
    redis_cluster_username: str | None = None
    redis_cluster_password: str | None = field(default=None, repr=False)
    # How many shards users are spread over (each a hash tag, so a Redis Cluster slot). Fixed
    # for a deployment's data: a user's shard is a hash of their id modulo this count.
    shards: int = 1
    # A session is live while its last activity is at most this old.
    window_ms: int = 600 * _MS_PER_SECOND
    # How long last-seen times and daily activity are kept.
    retention_ms: int = 35 * DAY_MS
    # How long a kicked session id is refused.
    revoke_ms: int = 600 * _MS_PER_SECOND
    # How long the feed keeps each announced change (at most FEED_RETENTION_MAX_MS), and how
    # many it keeps at most per shard: whichever is less.
    feed_retention_ms: int = 3600 * _MS_PER_SECOND
    feed_max_changes: int = 1_000_000
    # A connection-bound session (presenceSession) ends this long after its process's last
    # lease renewal when the process stops renewing; the process renews three times per TTL.
    connection_ttl_ms: int = 30 * _MS_PER_SECOND
    # A WebSocket that has not sent connection_init by then is closed with 4408. Not read
    # from the environment: a client sends it as soon as the socket opens.
    connection_init_wait_ms: int = 10 * _MS_PER_SECOND
    # Where a day starts and ends, for weeklyStats.
    stats_timezone: str = "UTC"
    # Where the embedded Redis keeps its append-only file.
    data_dir: Path = Path.home() / ".local" / "share" / "gql-presence"
    # How long a place that emptied keeps its one key left (the number of its last event)
    # before it expires, ms. Not read from the environment: a place that is used again after
    # it expired starts its numbers above the old ones (lua/includes/places.lua), so this
    # only bounds what emptied places leave in Redis.
    empty_place_ttl_ms: int = 60 * 60 * _MS_PER_SECOND
    # The most friends one user's friend set may hold: addFriends beyond it is refused.
    # onlineFriends pages them, but its cost and a friendsOf subscription grow with the set.
    max_friends: int = 5000
    # The most live sessions one user may have (touched within the window, or held), and the
    # most one user may hold in one place: a new one beyond it is refused. What a user's
    # presence reads, and a change of it rewrites, grows with their sessions.
    max_sessions: int = 100
    # How often each API process runs the bounded sweep of expired presence, ms.
    sweep_interval_ms: int = 1000
    # How many events may wait for one subscriber before it is dropped as too slow.
    subscriber_buffer: int = 1000
    # "text" for people, "json" for log collectors: one JSON object per line.
    log_format: str = "text"
    # The least severe log lines written: "info" writes a line per request; "warning" leaves
    # those out (and the time they take), keeping what needs an operator.
    log_level: str = "info"
    # "uvloop" runs each serving process on uvloop's event loop where uvloop is installed (not
    # on Windows); "asyncio" on Python's own.
    event_loop: str = "uvloop"
    # Backend services' bearer tokens, (name, secret) each; the name shows in logs.
    backend_tokens: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    # End users' JWTs: an HS256 secret and/or a PEM public key (RS256 or ES256), and the
    # issuer and audience every token must name.
    jwt_secret: str | None = field(default=None, repr=False)
    jwt_public_key: str | None = None
    jwt_issuer: str | None = None
    jwt_audience: str | None = None
    # The secret that keys page cursors' tags, the same for every process of a deployment;
    # None: the embedded Redis's data folder keeps a generated one, else Redis keeps one.
    cursor_secret: str | None = field(default=None, repr=False)
    # Whether end users may list everyone (onlineUsers, activeInRange, weeklyStats).
    users_see_everyone: bool = False
    # Whether the service may run without credentials on an address other than loopback.
    allow_open: bool = False
    # Host names (lower-case; IPv6 addresses without brackets) that requests may be addressed
    # to besides localhost, *.localhost and loopback addresses, which are always answered:
    # the defence against DNS rebinding (hosts.py). Empty: in open mode only loopback names
    # are answered, with credentials any name. ANY alone answers any name.
    allowed_hosts: tuple[str, ...] = ()
    # Development conveniences that production turns off.
    graphiql: bool = True
    introspection: bool = True
    # Whether queries (never mutations) may be sent with GET.
    queries_over_get: bool = False
    # How long one request may take before the client gets UNAVAILABLE, ms.
    request_timeout_ms: int = 5000
    # Whether HTTP POST queries and mutations seen before run from their plan (planned.py)
    # rather than through graphql-core's executor; off with tracing on.
    planned_execution: bool = True
    # Token buckets per caller: requests per second, and how many may come at once (0: none).
    user_rate: float = 0.0
    user_burst: int = 0
    backend_rate: float = 0.0
    backend_burst: int = 0
    # Origins of browser pages on other sites that may call the API (CORS) and open its
    # WebSockets, exactly as browsers send them ("https://app.example.com"); ("*",) for any;
    # empty: only pages served by the service itself.
    cors_origins: tuple[str, ...] = ()
    # The trusted-documents manifest {sha256 hex: document}: when set, end users and anonymous
    # callers may run only these documents. Not hashed or shown: it may be large.
    trusted_documents: Mapping[str, str] | None = field(
        default=None, repr=False, hash=False, compare=False
    )
    # Whether the schema is an Apollo Federation 2 subgraph (User @key(fields: "id")).
    federation: bool = False
    # Networks that webhooks may reach although the safety rules refuse them otherwise
    # (loopback, private, link-local, ...), and the only ones an http (not https) URL may.
    webhook_allowed_networks: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...] = ()
    # How long a webhook's receiver has to connect and to answer a request, ms.
    webhook_timeout_ms: int = 5000

    @property
    def secured(self) -> bool:
        """Whether callers must authenticate (any credential is configured)."""
        return bool(self.backend_tokens or self.jwt_secret or self.jwt_public_key)

    # Worker processes of `gql-presence serve`, sharing one port; 1 serves in one process.
    workers: int = 1

    @property
    def embedded_redis(self) -> bool:
        """Whether the service runs its own Redis: neither REDIS_URL nor a cluster is set."""
        return self.redis_url is None and not self.redis_cluster_nodes

    @property
    def stats_zone(self) -> ZoneInfo:
        return ZoneInfo(self.stats_timezone)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if environ is None else environ
        window_ms = _duration_ms(env, "PRESENCE_WINDOW_SECONDS", 600, _MS_PER_SECOND)
        retention_ms = _duration_ms(env, "PRESENCE_RETENTION_DAYS", 35, DAY_MS)
        if retention_ms < window_ms:
            raise SettingsError(
                "PRESENCE_RETENTION_DAYS must be at least the presence window "
                f"(PRESENCE_WINDOW_SECONDS={window_ms / _MS_PER_SECOND:g})."
            )
        revoke_ms = _duration_ms(
            env,
            "PRESENCE_REVOKE_SECONDS",
            window_ms / _MS_PER_SECOND,
            _MS_PER_SECOND,
            allow_zero=True,
        )
        feed_retention_ms = _duration_ms(
            env, "PRESENCE_FEED_RETENTION_SECONDS", 3600, _MS_PER_SECOND
        )
        if feed_retention_ms > FEED_RETENTION_MAX_MS:
            raise SettingsError(
                "PRESENCE_FEED_RETENTION_SECONDS may be at most 604800 (7 days), "
                f"not {feed_retention_ms / _MS_PER_SECOND:g}."
            )
        user_rate = _rate(env, "PRESENCE_USER_RATE_LIMIT")
        backend_rate = _rate(env, "PRESENCE_BACKEND_RATE_LIMIT")
        jwt_secret, jwt_public_key = _jwt_keys(env)
        jwt_issuer, jwt_audience = env.get("PRESENCE_JWT_ISSUER"), env.get("PRESENCE_JWT_AUDIENCE")
        if (jwt_secret or jwt_public_key) and not (jwt_issuer and jwt_audience):
            raise SettingsError(
                "PRESENCE_JWT_ISSUER and PRESENCE_JWT_AUDIENCE must be set with a JWT key: "
                "every user token is checked for both."
            )
        return cls(
            backend_tokens=_backend_tokens(env),
            jwt_secret=jwt_secret,
            jwt_public_key=jwt_public_key,
            jwt_issuer=jwt_issuer,
            jwt_audience=jwt_audience,
            cursor_secret=_cursor_secret(env),
            users_see_everyone=_flag(env, "PRESENCE_USERS_SEE_EVERYONE", default=False),
            allow_open=_flag(env, "PRESENCE_ALLOW_OPEN", default=False),
            allowed_hosts=_allowed_hosts(env),
            graphiql=_flag(env, "PRESENCE_GRAPHIQL", default=True),
            introspection=_flag(env, "PRESENCE_INTROSPECTION", default=True),
            queries_over_get=_flag(env, "PRESENCE_QUERIES_OVER_GET", default=False),
            planned_execution=_flag(env, "PRESENCE_PLANNED_EXECUTION", default=True),
            request_timeout_ms=_duration_ms(
                env, "PRESENCE_REQUEST_TIMEOUT_SECONDS", 5, _MS_PER_SECOND
            ),
            cors_origins=_cors_origins(env),
            trusted_documents=_trusted_documents(env),
            federation=_flag(env, "PRESENCE_FEDERATION", default=False),
            webhook_allowed_networks=_networks(env, "PRESENCE_WEBHOOK_ALLOWED_NETWORKS"),
            webhook_timeout_ms=_duration_ms(
                env, "PRESENCE_WEBHOOK_TIMEOUT_SECONDS", 5, _MS_PER_SECOND
            ),
            user_rate=user_rate,
            user_burst=_burst(env, "PRESENCE_USER_RATE_BURST", user_rate),
            backend_rate=backend_rate,
            backend_burst=_burst(env, "PRESENCE_BACKEND_RATE_BURST", backend_rate),
            redis_url=_redis_url(env),
            redis_cluster_nodes=_cluster_nodes(env),
            redis_cluster_username=_cluster_credential(env, "REDIS_CLUSTER_USERNAME"),
            redis_cluster_password=_cluster_credential(env, "REDIS_CLUSTER_PASSWORD"),
            shards=_shards(env),
            window_ms=window_ms,
            retention_ms=retention_ms,
            revoke_ms=revoke_ms,
            feed_retention_ms=feed_retention_ms,
            feed_max_changes=_count(env, "PRESENCE_FEED_MAX_CHANGES", 1_000_000),
            connection_ttl_ms=_duration_ms(
                env, "PRESENCE_CONNECTION_TTL_SECONDS", 30, _MS_PER_SECOND
            ),
            stats_timezone=_timezone(env),
            data_dir=_data_dir(env),
            subscriber_buffer=_count(env, "PRESENCE_SUBSCRIBER_BUFFER", 1000),
            max_friends=_max_friends(env),
            max_sessions=_count(env, "PRESENCE_MAX_SESSIONS", 100),
            log_format=_choice(env, "PRESENCE_LOG_FORMAT", ("text", "json")),
            log_level=_choice(env, "PRESENCE_LOG_LEVEL", ("info", "warning", "error", "debug")),
            event_loop=_choice(env, "PRESENCE_EVENT_LOOP", ("uvloop", "asyncio")),
            workers=_count(env, "PRESENCE_WORKERS", os.cpu_count() or 1),
        )


def _duration_ms(
    env: Mapping[str, str], name: str, default: float, unit_ms: int, *, allow_zero: bool = False
) -> int:
    raw = env.get(name, "").strip()
    if not raw:
        return round(default * unit_ms)
    allowed = "0 or more" if allow_zero else "a positive number"
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0 or (value == 0 and not allow_zero):
        raise SettingsError(f"{name}={raw!r} is not valid: use {allowed}, e.g. {default:g}.")
    ms = round(value * unit_ms)
    if ms == 0 and not allow_zero:
        raise SettingsError(f"{name}={raw!r} is shorter than one millisecond.")
    return ms


def _networks(
    env: Mapping[str, str], name: str
) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
    """CIDRs separated by commas or spaces; none when unset."""
    networks = []
    for entry in env.get(name, "").replace(",", " ").split():
        try:
            networks.append(ipaddress.ip_network(entry, strict=False))
        except ValueError:
            raise SettingsError(
                f"{name}: {entry!r} is not a network: use CIDRs separated by commas, e.g. "
                "10.0.0.0/8,fd00::/8."
            ) from None
    return tuple(networks)


def _count(env: Mapping[str, str], name: str, default: int) -> int:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    if not raw.isdigit() or int(raw) < 1:
        raise SettingsError(
            f"{name}={raw!r} is not valid: use a whole number of 1 or more, e.g. {default}."
        )
    return int(raw)


def _choice(env: Mapping[str, str], name: str, choices: tuple[str, ...]) -> str:
    raw = env.get(name, "").strip() or choices[0]
    if raw not in choices:
        raise SettingsError(f"{name}={raw!r} is not valid: use one of {', '.join(choices)}.")
    return raw


def without_password(url: str) -> str:
    """The URL to show an operator: any password in it (before the host, or a `password=`
    parameter) replaced by ***, whether or not the rest is a valid URL."""
    scheme, slashes, rest = url.partition("//")
    netloc, slash, path = rest.partition("/")
    userinfo, at, host = netloc.rpartition("@")
    if at and ":" in userinfo:
        netloc = f"{userinfo.partition(':')[0]}:***@{host}"
    return _PASSWORD_PARAMETER.sub(r"\1***", f"{scheme}{slashes}{netloc}{slash}{path}")


_PASSWORD_PARAMETER = re.compile(r"([?&]password=)[^&#]*", re.IGNORECASE)


def _redis_url(env: Mapping[str, str]) -> str | None:
    raw = env.get("REDIS_URL", "").strip()
    if not raw:
        return None
    try:
        parts = urlsplit(raw)
        valid = parts.scheme in _REDIS_SCHEMES and bool(parts.hostname or parts.path)
        # What the Redis client will make of it: a port or a db that is not a number...
        valid = valid and bool(parse_url(raw))  # type: ignore[no-untyped-call]
    except ValueError:  # "[::1" and other malformed forms; not said: it may hold a password
        valid = False
    if not valid:
        raise SettingsError(
            f"REDIS_URL={without_password(raw)!r} is not a Redis URL: use redis://host:port/db, "
            "rediss://host:port/db or unix:///path/to/redis.sock, or leave it unset "
            "for the embedded Redis."
        )
    return raw


def _cluster_nodes(env: Mapping[str, str]) -> tuple[tuple[str, int], ...]:
    name = "REDIS_CLUSTER_NODES"
    raw = env.get(name, "").strip()
    if not raw:
        return ()
    if env.get("REDIS_URL", "").strip():
        raise SettingsError(
            f"Set REDIS_URL or {name}, not both: one is a Redis, the other a cluster."
        )
    nodes = []
    for entry in filter(None, (e.strip() for e in raw.split(","))):
        host, _, port = entry.rpartition(":")
        host = host.removeprefix("[").removesuffix("]")  # [::1]:7000
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise SettingsError(
                f"{name} must list host:port of cluster nodes, separated by commas (e.g. "
                f"redis-1:6379,redis-2:6379); {entry!r} is not one."
            )
        nodes.append((host, int(port)))
    return tuple(nodes)


_HOST_NAME = re.compile(r"[a-z0-9_]([a-z0-9_-]*[a-z0-9_])?(\.[a-z0-9_]([a-z0-9_-]*[a-z0-9_])?)*")


def _allowed_hosts(env: Mapping[str, str]) -> tuple[str, ...]:
    name = "PRESENCE_ALLOWED_HOSTS"
    hosts = []
    for entry in filter(None, (e.strip() for e in env.get(name, "").split(","))):
        host = entry.lower().removeprefix("[").removesuffix("]").rstrip(".")
        if host == ANY:
            hosts.append(host)
            continue
        try:
            host = str(ipaddress.ip_address(host))  # as hosts.host_name writes it
        except ValueError:
            if not _HOST_NAME.fullmatch(host):
                raise SettingsError(
                    f"{name} must list host names or addresses as clients address the service, "
                    "without scheme or port, separated by commas (e.g. "
                    f"presence.internal,10.0.0.5), or be * for any; {entry!r} is not one."
                ) from None
        hosts.append(host)
    if ANY in hosts and len(hosts) > 1:
        raise SettingsError(f"{name}=* answers any host name: list no others beside it.")
    return tuple(hosts)


def _cluster_credential(env: Mapping[str, str], name: str) -> str | None:
    value = env.get(name) or None
    if value is not None and not env.get("REDIS_CLUSTER_NODES", "").strip():
        raise SettingsError(
            f"{name} is for a Redis Cluster (REDIS_CLUSTER_NODES); a single Redis takes the "
            "user and password in REDIS_URL: redis://user:password@host:6379/0."
        )
    return value


# A friendsOf subscription follows at most this many users (realtime/hub.py), the most ids
# any call takes: a larger friend set could not be followed.
MAX_FRIENDS_ALLOWED = 10_000


def _max_friends(env: Mapping[str, str]) -> int:
    most = _count(env, "PRESENCE_MAX_FRIENDS", 5000)
    if most > MAX_FRIENDS_ALLOWED:
        raise SettingsError(
            f"PRESENCE_MAX_FRIENDS={most} is more than {MAX_FRIENDS_ALLOWED:,}: a friendsOf "
            f"subscription follows at most {MAX_FRIENDS_ALLOWED:,} users."
        )
    return most


MAX_SHARDS = 1024


def _shards(env: Mapping[str, str]) -> int:
    shards = _count(env, "PRESENCE_SHARDS", 1)
    if shards > MAX_SHARDS:
        raise SettingsError(
            f"PRESENCE_SHARDS={shards} is more than {MAX_SHARDS}: every list reads every shard."
        )
    return shards


def _timezone(env: Mapping[str, str]) -> str:
    raw = env.get("PRESENCE_STATS_TIMEZONE", "").strip() or "UTC"
    try:
        ZoneInfo(raw)
    except (ZoneInfoNotFoundError, ValueError) as error:
        raise SettingsError(
            f"PRESENCE_STATS_TIMEZONE={raw!r} is not an IANA time zone name "
            "(for example UTC, Europe/Berlin, America/New_York)."
        ) from error
    return raw


def _data_dir(env: Mapping[str, str]) -> Path:
    raw = env.get("PRESENCE_DATA_DIR", "").strip()
    if raw:
        return Path(raw).expanduser()
    xdg = env.get("XDG_DATA_HOME", "").strip()
    base = Path(xdg).expanduser() if xdg else Path.home() / ".local" / "share"
    return base / "gql-presence"


_DEFAULT_PORTS = {"http": 80, "https": 443}


def is_loopback_address(host: str) -> bool:
    """localhost, 127.0.0.0/8 and ::1: what only this machine reaches. A host name other
    than localhost may resolve to anything."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _cors_origins(env: Mapping[str, str]) -> tuple[str, ...]:
    name = "PRESENCE_CORS_ORIGINS"
    entries = [e.strip() for e in env.get(name, "").split(",") if e.strip()]
    if entries == [ANY]:
        return (ANY,)
    for entry in entries:
        if not _is_origin(entry):
            raise SettingsError(
                f"{name} must list origins exactly as browsers send them, separated by commas "
                "(scheme, host and any non-default port, lowercase, no path or trailing "
                f"slash: https://app.example.com,http://localhost:5173), or be *; {entry!r} "
                "is not one."
            )
    return tuple(entries)


def _is_origin(text: str) -> bool:
    """Whether `text` is an origin in the form a browser's Origin header has it, which is
    compared with it character for character."""
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError:
        return False
    if parts.scheme not in _DEFAULT_PORTS or not parts.hostname:
        return False
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    shown_port = "" if port in (None, _DEFAULT_PORTS[parts.scheme]) else f":{port}"
    return text == f"{parts.scheme}://{host}{shown_port}"


def _trusted_documents(env: Mapping[str, str]) -> Mapping[str, str] | None:
    name = "PRESENCE_TRUSTED_DOCUMENTS"
    path = env.get(name, "").strip()
    if not path:
        return None
    try:
        manifest = json.loads(Path(path).expanduser().read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as error:
        raise SettingsError(f"{name}={path!r} cannot be read as JSON: {error}") from error
    if not isinstance(manifest, dict) or not all(
        isinstance(d, str) and hashlib.sha256(d.encode("utf-8", "surrogatepass")).hexdigest() == h
        for h, d in manifest.items()
    ):
        raise SettingsError(
            f"{name}={path!r} must be a JSON object mapping each document's sha256 (lowercase "
            'hex) to the document: {"<sha256>": "query ..."}, as GraphQL Code Generator\'s '
            "client preset writes it (persisted-documents.json)."
        )
    return MappingProxyType(manifest)


_MIN_SECRET_CHARS = 32
_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


def _flag(env: Mapping[str, str], name: str, *, default: bool) -> bool:
    raw = env.get(name, "").strip().lower()
    if not raw:
        return default
    if raw not in _TRUE + _FALSE:
        raise SettingsError(f"{name}={raw!r} is not valid: use true or false.")
    return raw in _TRUE


def _rate(env: Mapping[str, str], name: str) -> float:
    raw = env.get(name, "").strip()
    try:
        value = float(raw or 0)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0:
        raise SettingsError(
            f"{name}={raw!r} is not valid: use requests per second, e.g. 20 or 0.5 (0: no limit)."
        )
    return value


def _burst(env: Mapping[str, str], name: str, rate: float) -> int:
    """How many requests may come at once; by default one second's worth (at least one)."""
    if not rate:
        return 0
    return _count(env, name, max(1, math.ceil(rate)))


def _backend_tokens(env: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    name = "PRESENCE_BACKEND_TOKENS"
    rule = (
        f"{name} lists name:token pairs, separated by commas, each token at least "
        f"{_MIN_SECRET_CHARS} characters (e.g. api:$(python3 -c 'import secrets; "
        "print(secrets.token_urlsafe(32))'))"
    )
    tokens = []
    # Never repeated in a message: any part of an entry may be a token.
    for number, entry in enumerate(
        filter(None, (e.strip() for e in env.get(name, "").split(","))), 1
    ):
        backend, colon, secret = entry.partition(":")
        if not colon or not backend:
            raise SettingsError(f"{rule}; its entry {number} has no name before a colon.")
        if len(secret) < _MIN_SECRET_CHARS:
            raise SettingsError(
                f"{rule}; the token of {backend[:_SHOWN_NAME_CHARS]!r} is too short: "
                f"{len(secret)} characters."
            )
        tokens.append((backend, secret))
    return tuple(tokens)


# How much of a backend's name a message repeats.
_SHOWN_NAME_CHARS = 40


def _cursor_secret(env: Mapping[str, str]) -> str | None:
    secret = env.get("PRESENCE_CURSOR_SECRET", "").strip() or None
    if secret is not None and len(secret) < _MIN_SECRET_CHARS:
        raise SettingsError(
            f"PRESENCE_CURSOR_SECRET is too short: use at least {_MIN_SECRET_CHARS} random "
            "characters (e.g. made by `python3 -c 'import secrets; "
            "print(secrets.token_urlsafe(32))'`), the same for every process, or leave it "
            "unset for one the service makes and keeps itself."
        )
    return secret


def _jwt_keys(env: Mapping[str, str]) -> tuple[str | None, str | None]:
    secret = env.get("PRESENCE_JWT_SECRET", "").strip() or None
    if secret is not None and len(secret) < _MIN_SECRET_CHARS:
        raise SettingsError(
            "PRESENCE_JWT_SECRET is too short: HS256 needs at least "
            f"{_MIN_SECRET_CHARS} characters."
        )
    path = env.get("PRESENCE_JWT_PUBLIC_KEY_FILE", "").strip()
    if not path:
        return secret, None
    try:
        pem = Path(path).expanduser().read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise SettingsError(
            f"PRESENCE_JWT_PUBLIC_KEY_FILE={path!r} cannot be read: {error}"
        ) from error
    try:
        public_key_algorithm(pem)
    except ValueError as error:
        raise SettingsError(f"PRESENCE_JWT_PUBLIC_KEY_FILE={path!r}: {error}") from error
    return secret, pem


_MIN_RSA_BITS = 2048


def public_key_algorithm(pem: str) -> str:
    """The one JWT algorithm a public key verifies: RS256 for RSA, ES256 for EC P-256."""
    try:
        key = load_pem_public_key(pem.encode())
    except ValueError as error:
        raise ValueError("not a PEM public key (-----BEGIN PUBLIC KEY-----)") from error
    if isinstance(key, rsa.RSAPublicKey) and key.key_size >= _MIN_RSA_BITS:
        return "RS256"
    if isinstance(key, ec.EllipticCurvePublicKey) and isinstance(key.curve, ec.SECP256R1):
        return "ES256"
    raise ValueError(f"use an RSA key of {_MIN_RSA_BITS} bits or more, or an EC P-256 key")
