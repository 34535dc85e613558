"""Settings, read once from the environment at start-up.

Every setting is checked before anything starts: a bad value stops the service with a
message that names the variable, so it never runs on a half-understood configuration.
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from zoneinfo import ZoneInfo

from gql_presence.settings.read import (
    ANY,
    FEED_RETENTION_MAX_MS,
    MAX_FRIENDS_ALLOWED,
    MAX_SHARDS,
    MS_PER_SECOND,
    SettingsError,
    allowed_hosts,
    backend_tokens,
    burst,
    choice,
    cluster_credential,
    cluster_nodes,
    cors_origins,
    count,
    cursor_secret,
    data_dir,
    duration_ms,
    durations_ms,
    flag,
    is_loopback_address,
    jwt_keys,
    max_friends,
    networks,
    public_key_algorithm,
    rate,
    redis_url,
    shards,
    timezone,
    trusted_documents,
    without_password,
)
from gql_presence.store.days import DAY_MS

__all__ = [
    "ANY",
    "FEED_RETENTION_MAX_MS",
    "MAX_FRIENDS_ALLOWED",
    "MAX_SHARDS",
    "Settings",
    "SettingsError",
    "is_loopback_address",
    "public_key_algorithm",
    "without_password",
]


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
    window_ms: int = 600 * MS_PER_SECOND
    # How long last-seen times and daily activity are kept.
    retention_ms: int = 35 * DAY_MS
    # How long the statistics beyond weeklyStats are kept: online time per user and day, the
    # lengths of online periods, activity by week and month, and the users new in each.
    analytics_ms: int = 400 * DAY_MS
    # How long a kicked session id is refused.
    revoke_ms: int = 600 * MS_PER_SECOND
    # How long the feed keeps each announced change (at most FEED_RETENTION_MAX_MS), and how
    # many it keeps at most per shard: whichever is less.
    feed_retention_ms: int = 3600 * MS_PER_SECOND
    feed_max_changes: int = 1_000_000
    # How long hourly activity is kept (daily activity is kept for retention_ms, weekly and
    # monthly for analytics_ms): what activity by HOUR can count.
    hourly_ms: int = 14 * DAY_MS
    # A connection-bound session (presenceSession) ends this long after its process's last
    # lease renewal when the process stops renewing; the process renews three times per TTL.
    connection_ttl_ms: int = 30 * MS_PER_SECOND
    # A WebSocket that has not sent connection_init by then is closed with 4408. Not read
    # from the environment: a client sends it as soon as the socket opens.
    connection_init_wait_ms: int = 10 * MS_PER_SECOND
    # Where a day starts and ends, for weeklyStats.
    stats_timezone: str = "UTC"
    # Where the embedded Redis keeps its append-only file.
    data_dir: Path = Path.home() / ".local" / "share" / "gql-presence"
    # How long a place that emptied keeps its one key left (the number of its last event)
    # before it expires, ms. Not read from the environment: a place that is used again after
    # it expired starts its numbers above the old ones (lua/includes/places.lua), so this
    # only bounds what emptied places leave in Redis.
    empty_place_ttl_ms: int = 60 * 60 * MS_PER_SECOND
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
    # A webhook failing with no success for this long is disabled, ms.
    webhook_disable_after_ms: int = 86_400_000
    # The waits before each retry of a webhook's batch, ms, the last one repeated (each with
    # up to 20% added at random).
    webhook_retry_ms: tuple[int, ...] = (
        1000,
        5000,
        30_000,
        120_000,
        600_000,
        1_800_000,
        3_600_000,
    )
    # A webhook delivery's lease lapses this long after its process last renewed it: what a
    # process that died was sending is sent again by another within it, ms.
    webhook_lease_ms: int = 10_000
    # How often each process looks for new entries at the end of each shard's feed, for its
    # webhook deliveries with nothing to send (one look per shard, however many webhooks), ms.
    webhook_poll_ms: int = 250
    # How long a webhook delivery woken by a change waits, from the change's time, before it
    # sends, so that the changes made meanwhile go in the same request: each change arrives up
    # to this much later, and a trickle of changes costs fewer requests, ms.
    webhook_batch_wait_ms: int = 1000

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
        window_ms = duration_ms(env, "PRESENCE_WINDOW_SECONDS", 600, MS_PER_SECOND)
        retention_ms = duration_ms(env, "PRESENCE_RETENTION_DAYS", 35, DAY_MS)
        if retention_ms < window_ms:
            raise SettingsError(
                "PRESENCE_RETENTION_DAYS must be at least the presence window "
                f"(PRESENCE_WINDOW_SECONDS={window_ms / MS_PER_SECOND:g})."
            )
        revoke_ms = duration_ms(
            env,
            "PRESENCE_REVOKE_SECONDS",
            window_ms / MS_PER_SECOND,
            MS_PER_SECOND,
            allow_zero=True,
        )
        feed_retention_ms = duration_ms(env, "PRESENCE_FEED_RETENTION_SECONDS", 3600, MS_PER_SECOND)
        if feed_retention_ms > FEED_RETENTION_MAX_MS:
            raise SettingsError(
                "PRESENCE_FEED_RETENTION_SECONDS may be at most 604800 (7 days), "
                f"not {feed_retention_ms / MS_PER_SECOND:g}."
            )
        user_rate = rate(env, "PRESENCE_USER_RATE_LIMIT")
        backend_rate = rate(env, "PRESENCE_BACKEND_RATE_LIMIT")
        jwt_secret, jwt_public_key = jwt_keys(env)
        jwt_issuer, jwt_audience = env.get("PRESENCE_JWT_ISSUER"), env.get("PRESENCE_JWT_AUDIENCE")
        if (jwt_secret or jwt_public_key) and not (jwt_issuer and jwt_audience):
            raise SettingsError(
                "PRESENCE_JWT_ISSUER and PRESENCE_JWT_AUDIENCE must be set with a JWT key: "
                "every user token is checked for both."
            )
        return cls(
            backend_tokens=backend_tokens(env),
            jwt_secret=jwt_secret,
            jwt_public_key=jwt_public_key,
            jwt_issuer=jwt_issuer,
            jwt_audience=jwt_audience,
            cursor_secret=cursor_secret(env),
            users_see_everyone=flag(env, "PRESENCE_USERS_SEE_EVERYONE", default=False),
            allow_open=flag(env, "PRESENCE_ALLOW_OPEN", default=False),
            allowed_hosts=allowed_hosts(env),
            graphiql=flag(env, "PRESENCE_GRAPHIQL", default=True),
            introspection=flag(env, "PRESENCE_INTROSPECTION", default=True),
            queries_over_get=flag(env, "PRESENCE_QUERIES_OVER_GET", default=False),
            planned_execution=flag(env, "PRESENCE_PLANNED_EXECUTION", default=True),
            request_timeout_ms=duration_ms(
                env, "PRESENCE_REQUEST_TIMEOUT_SECONDS", 5, MS_PER_SECOND
            ),
            cors_origins=cors_origins(env),
            trusted_documents=trusted_documents(env),
            federation=flag(env, "PRESENCE_FEDERATION", default=False),
            webhook_allowed_networks=networks(env, "PRESENCE_WEBHOOK_ALLOWED_NETWORKS"),
            webhook_timeout_ms=duration_ms(
                env, "PRESENCE_WEBHOOK_TIMEOUT_SECONDS", 5, MS_PER_SECOND
            ),
            webhook_disable_after_ms=duration_ms(
                env, "PRESENCE_WEBHOOK_DISABLE_AFTER_SECONDS", 86400, MS_PER_SECOND
            ),
            webhook_retry_ms=durations_ms(
                env,
                "PRESENCE_WEBHOOK_RETRY_SECONDS",
                (1, 5, 30, 120, 600, 1800, 3600),
                MS_PER_SECOND,
            ),
            webhook_lease_ms=duration_ms(env, "PRESENCE_WEBHOOK_LEASE_SECONDS", 10, MS_PER_SECOND),
            webhook_poll_ms=duration_ms(env, "PRESENCE_WEBHOOK_POLL_SECONDS", 0.25, MS_PER_SECOND),
            webhook_batch_wait_ms=duration_ms(
                env, "PRESENCE_WEBHOOK_BATCH_WAIT_SECONDS", 1, MS_PER_SECOND, allow_zero=True
            ),
            user_rate=user_rate,
            user_burst=burst(env, "PRESENCE_USER_RATE_BURST", user_rate),
            backend_rate=backend_rate,
            backend_burst=burst(env, "PRESENCE_BACKEND_RATE_BURST", backend_rate),
            redis_url=redis_url(env),
            redis_cluster_nodes=cluster_nodes(env),
            redis_cluster_username=cluster_credential(env, "REDIS_CLUSTER_USERNAME"),
            redis_cluster_password=cluster_credential(env, "REDIS_CLUSTER_PASSWORD"),
            shards=shards(env),
            window_ms=window_ms,
            retention_ms=retention_ms,
            analytics_ms=duration_ms(env, "PRESENCE_ANALYTICS_DAYS", 400, DAY_MS),
            revoke_ms=revoke_ms,
            feed_retention_ms=feed_retention_ms,
            feed_max_changes=count(env, "PRESENCE_FEED_MAX_CHANGES", 1_000_000),
            hourly_ms=duration_ms(env, "PRESENCE_HOURLY_DAYS", 14, DAY_MS),
            connection_ttl_ms=duration_ms(
                env, "PRESENCE_CONNECTION_TTL_SECONDS", 30, MS_PER_SECOND
            ),
            stats_timezone=timezone(env),
            data_dir=data_dir(env),
            subscriber_buffer=count(env, "PRESENCE_SUBSCRIBER_BUFFER", 1000),
            max_friends=max_friends(env),
            max_sessions=count(env, "PRESENCE_MAX_SESSIONS", 100),
            log_format=choice(env, "PRESENCE_LOG_FORMAT", ("text", "json")),
            log_level=choice(env, "PRESENCE_LOG_LEVEL", ("info", "warning", "error", "debug")),
            event_loop=choice(env, "PRESENCE_EVENT_LOOP", ("uvloop", "asyncio")),
            workers=count(env, "PRESENCE_WORKERS", os.cpu_count() or 1),
        )
