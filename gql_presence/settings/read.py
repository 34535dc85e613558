"""Reading each setting from the environment: a function per kind of value, each refusing a
bad value with a message that names the variable and says what is allowed, never the secret it
holds."""

from __future__ import annotations

import hashlib
import ipaddress
import json
import math
import re
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from urllib.parse import urlsplit
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.hazmat.primitives.serialization import load_pem_public_key
from redis.connection import parse_url

MS_PER_SECOND = 1000
# The feed keeps a change at most this long (PRESENCE_FEED_RETENTION_SECONDS).
FEED_RETENTION_MAX_MS = 7 * 24 * 3600 * MS_PER_SECOND
# Alone in PRESENCE_ALLOWED_HOSTS or PRESENCE_CORS_ORIGINS: every host name, every origin.
ANY = "*"
_REDIS_SCHEMES = ("redis", "rediss", "unix")


class SettingsError(ValueError):
    """A setting has a value the service cannot run with."""


def duration_ms(
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


def durations_ms(
    env: Mapping[str, str], name: str, default: tuple[float, ...], unit_ms: int
) -> tuple[int, ...]:
    """Positive numbers separated by commas; `default` when unset."""
    raw = env.get(name, "").strip()
    if not raw:
        return tuple(round(value * unit_ms) for value in default)
    example = ",".join(f"{value:g}" for value in default)
    parts = [part.strip() for part in raw.split(",")]
    try:
        durations = tuple(duration_ms({name: part}, name, 1, unit_ms) for part in parts if part)
    except SettingsError:
        durations = ()
    if not durations:
        raise SettingsError(
            f"{name}={raw!r} is not valid: use positive numbers separated by commas, e.g. "
            f"{example}."
        )
    return durations


def networks(
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


def count(env: Mapping[str, str], name: str, default: int) -> int:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    if not raw.isdigit() or int(raw) < 1:
        raise SettingsError(
            f"{name}={raw!r} is not valid: use a whole number of 1 or more, e.g. {default}."
        )
    return int(raw)


def choice(env: Mapping[str, str], name: str, choices: tuple[str, ...]) -> str:
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


def redis_url(env: Mapping[str, str]) -> str | None:
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


def cluster_nodes(env: Mapping[str, str]) -> tuple[tuple[str, int], ...]:
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


def allowed_hosts(env: Mapping[str, str]) -> tuple[str, ...]:
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


def cluster_credential(env: Mapping[str, str], name: str) -> str | None:
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


def max_friends(env: Mapping[str, str]) -> int:
    most = count(env, "PRESENCE_MAX_FRIENDS", 5000)
    if most > MAX_FRIENDS_ALLOWED:
        raise SettingsError(
            f"PRESENCE_MAX_FRIENDS={most} is more than {MAX_FRIENDS_ALLOWED:,}: a friendsOf "
            f"subscription follows at most {MAX_FRIENDS_ALLOWED:,} users."
        )
    return most


MAX_SHARDS = 1024


def shards(env: Mapping[str, str]) -> int:
    shards = count(env, "PRESENCE_SHARDS", 1)
    if shards > MAX_SHARDS:
        raise SettingsError(
            f"PRESENCE_SHARDS={shards} is more than {MAX_SHARDS}: every list reads every shard."
        )
    return shards


def timezone(env: Mapping[str, str]) -> str:
    raw = env.get("PRESENCE_STATS_TIMEZONE", "").strip() or "UTC"
    try:
        ZoneInfo(raw)
    except (ZoneInfoNotFoundError, ValueError) as error:
        raise SettingsError(
            f"PRESENCE_STATS_TIMEZONE={raw!r} is not an IANA time zone name "
            "(for example UTC, Europe/Berlin, America/New_York)."
        ) from error
    return raw


def data_dir(env: Mapping[str, str]) -> Path:
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


def cors_origins(env: Mapping[str, str]) -> tuple[str, ...]:
    name = "PRESENCE_CORS_ORIGINS"
    entries = [e.strip() for e in env.get(name, "").split(",") if e.strip()]
    if entries == [ANY]:
        return (ANY,)
    for entry in entries:
        if not is_origin(entry):
            raise SettingsError(
                f"{name} must list origins exactly as browsers send them, separated by commas "
                "(scheme, host and any non-default port, lowercase, no path or trailing "
                f"slash: https://app.example.com,http://localhost:5173), or be *; {entry!r} "
                "is not one."
            )
    return tuple(entries)


def is_origin(text: str) -> bool:
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


def trusted_documents(env: Mapping[str, str]) -> Mapping[str, str] | None:
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


def flag(env: Mapping[str, str], name: str, *, default: bool) -> bool:
    raw = env.get(name, "").strip().lower()
    if not raw:
        return default
    if raw not in _TRUE + _FALSE:
        raise SettingsError(f"{name}={raw!r} is not valid: use true or false.")
    return raw in _TRUE


def rate(env: Mapping[str, str], name: str) -> float:
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


def burst(env: Mapping[str, str], name: str, rate: float) -> int:
    """How many requests may come at once; by default one second's worth (at least one)."""
    if not rate:
        return 0
    return count(env, name, max(1, math.ceil(rate)))


def backend_tokens(env: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
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


def cursor_secret(env: Mapping[str, str]) -> str | None:
    secret = env.get("PRESENCE_CURSOR_SECRET", "").strip() or None
    if secret is not None and len(secret) < _MIN_SECRET_CHARS:
        raise SettingsError(
            f"PRESENCE_CURSOR_SECRET is too short: use at least {_MIN_SECRET_CHARS} random "
            "characters (e.g. made by `python3 -c 'import secrets; "
            "print(secrets.token_urlsafe(32))'`), the same for every process, or leave it "
            "unset for one the service makes and keeps itself."
        )
    return secret


def jwt_keys(env: Mapping[str, str]) -> tuple[str | None, str | None]:
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
