"""The Redis client every part of the service uses: one Redis, or a Redis Cluster."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import logging
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, cast

from redis.asyncio import BlockingConnectionPool, ConnectionPool, Redis, RedisCluster
from redis.asyncio.client import PubSub
from redis.asyncio.cluster import ClusterNode
from redis.asyncio.connection import AbstractConnection, SSLConnection, UnixDomainSocketConnection
from redis.asyncio.connection import Connection as AsyncConnection
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff, NoBackoff
from redis.connection import HiredisRespSerializer
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.typing import EncodableT

from gql_presence.running.redis_server import start_embedded_redis
from gql_presence.settings import Settings, without_password
from gql_presence.store.client import AnyRedis
from gql_presence.store.cursor_secret import secret_kept_in

log = logging.getLogger("gql_presence")

# Enough for the concurrency of one process; a request that finds them all busy waits for
# one (up to POOL_WAIT_S) instead of failing at once or opening connections without bound.
MAX_CONNECTIONS = 64
POOL_WAIT_S = 5
CONNECT_TIMEOUT_S = 2
REPLY_TIMEOUT_S = 5
# A pooled connection found broken (Redis restarted) is replaced and the call sent again.
# Only on connection errors, never on a reply timeout; and every script leaves the same
# state when run twice (times only move forwards, sets and revocations are idempotent).
RETRY = Retry(
    ExponentialBackoff(cap=0.2, base=0.02), retries=2, supported_errors=(RedisConnectionError,)
)
# redis-py's cluster client does not wait for a free connection: it fails at once when a
# node's are all busy. A list query sends one script per shard at the same moment, so each
# node gets room for that fan-out.
MAX_CLUSTER_CONNECTIONS = 4 * MAX_CONNECTIONS

# How long closing the pub/sub connection may take before it is given up.
_SUBSCRIBER_CLOSE_S = 5


@dataclass(frozen=True)
class Connection:
    """The Redis of a deployment, as `connect` opened it."""

    # For commands and scripts.
    client: AnyRedis
    # For the one pub/sub subscription of a process; it connects when something subscribes.
    subscriber: Redis
    # Which Redis this is, for an operator (any password masked).
    where: str
    # The settings that name what to fix when this Redis cannot be reached.
    settings_to_check: str
    # On a Redis Cluster, for the connections of sharded pub/sub, one per shard, when the
    # deployment publishes events sharded (PresenceStore.choose_publish).
    sharded_subscriber: ShardedSubscriber | None = None

    def subscriber_for(self, *, sharded: bool) -> Redis | ShardedSubscriber:
        """What the event hub opens its pub/sub connections with."""
        if not sharded:
            return self.subscriber
        if self.sharded_subscriber is None:
            raise ValueError("sharded pub/sub needs a Redis Cluster")
        return self.sharded_subscriber


@contextlib.contextmanager
def started_if_embedded(settings: Settings) -> Iterator[Settings]:
    """The settings, with REDIS_URL pointing at the embedded Redis when they name no Redis:
    it is started here and stopped on leaving. Its cursor secret, unless set, is the one its
    data folder keeps."""
    if not settings.embedded_redis:
        yield settings
        return
    server = start_embedded_redis(settings.data_dir)
    try:
        log.info("embedded Redis at %s, data in %s", server.url, settings.data_dir)
        cursor_secret = settings.cursor_secret or secret_kept_in(settings.data_dir)
        yield dataclasses.replace(settings, redis_url=server.url, cursor_secret=cursor_secret)
    finally:
        server.stop()


def client_for(settings: Settings) -> AnyRedis:
    """A client of the Redis the settings name: the cluster of REDIS_CLUSTER_NODES, or else
    REDIS_URL (set: the embedded Redis is `connect`'s to start). Its caller closes it."""
    if settings.redis_cluster_nodes:
        return cluster_client(settings)
    if settings.redis_url is None:
        raise ValueError("no Redis is named: set REDIS_URL or REDIS_CLUSTER_NODES")
    return redis_client(settings.redis_url)


@contextlib.asynccontextmanager
async def connect(settings: Settings) -> AsyncIterator[Connection]:
    """The Redis Cluster of REDIS_CLUSTER_NODES, or the Redis of REDIS_URL, or else the
    embedded one (started now); every client and the embedded Redis are closed on leaving."""
    with started_if_embedded(settings) as reachable:
        client = client_for(reachable)
        if isinstance(client, RedisCluster):
            nodes = ",".join(f"{host}:{port}" for host, port in reachable.redis_cluster_nodes)
            connection = Connection(
                client=client,
                subscriber=cluster_subscriber(client, reachable.redis_cluster_nodes),
                sharded_subscriber=ShardedSubscriber(client),
                where=f"the Redis Cluster of {nodes}",
                settings_to_check=(
                    "REDIS_CLUSTER_NODES, REDIS_CLUSTER_USERNAME and REDIS_CLUSTER_PASSWORD"
                ),
            )
        else:
            url = str(reachable.redis_url)
            connection = Connection(
                client=client,
                subscriber=subscriber_client(url),
                where=without_password(url),
                settings_to_check="REDIS_URL",
            )
        try:
            yield connection
        finally:
            try:
                await asyncio.wait_for(connection.subscriber.aclose(), _SUBSCRIBER_CLOSE_S)
            except TimeoutError:
                log.warning(
                    "the event subscription's connection did not close in %d s",
                    _SUBSCRIBER_CLOSE_S,
                )
            await connection.client.aclose()


def redis_client(
    url: str, *, max_connections: int = MAX_CONNECTIONS, pool_wait_s: float = POOL_WAIT_S
) -> Redis:
    pool = BlockingConnectionPool.from_url(
        url,
        max_connections=max_connections,
        timeout=pool_wait_s,
        decode_responses=True,
        socket_connect_timeout=CONNECT_TIMEOUT_S,
        socket_timeout=REPLY_TIMEOUT_S,
        retry=RETRY,
    )
    pool.connection_class = _PACKED_BY_HIREDIS.get(pool.connection_class, pool.connection_class)
    return Redis.from_pool(pool)  # the client owns the pool: closing it closes every connection


# redis-py's asyncio connections pack each command in Python, where its synchronous ones use
# hiredis: a script call's 27 arguments (touch's) took 19 µs to pack in Python and 2.4 µs in
# hiredis, the same bytes. These pack as redis-py's synchronous connections do (its
# HiredisRespSerializer), which writes text as UTF-8, strictly: what these clients' encoder
# does (redis-py's default encoding), and tests/operations/test_redis_client.py compares the two.
_HIREDIS = HiredisRespSerializer()


class _PackedByHiredis:
    """Put before a redis-py connection class: its commands packed by hiredis."""

    def pack_command(self, *args: EncodableT) -> list[bytes]:
        # redis-py annotates its serializer's arguments as lists: they are a command's values.
        return cast("list[bytes]", _HIREDIS.pack(*cast("Any", args)))


class _HiredisConnection(_PackedByHiredis, AsyncConnection):
    pass


class _HiredisSSLConnection(_PackedByHiredis, SSLConnection):
    pass


class _HiredisUnixConnection(_PackedByHiredis, UnixDomainSocketConnection):
    pass


_PACKED_BY_HIREDIS: dict[type[AbstractConnection], type[AbstractConnection]] = {
    AsyncConnection: _HiredisConnection,
    SSLConnection: _HiredisSSLConnection,
    UnixDomainSocketConnection: _HiredisUnixConnection,
}


def cluster_client(settings: Settings) -> RedisCluster:
    """A client of the Redis Cluster of REDIS_CLUSTER_NODES: it starts from those nodes and
    finds the others (and follows failovers and moved slots) by itself."""
    return RedisCluster(
        startup_nodes=[ClusterNode(host, port) for host, port in settings.redis_cluster_nodes],
        username=settings.redis_cluster_username,
        password=settings.redis_cluster_password,
        decode_responses=True,
        max_connections=MAX_CLUSTER_CONNECTIONS,
        socket_connect_timeout=CONNECT_TIMEOUT_S,
        socket_timeout=REPLY_TIMEOUT_S,
    )


def subscriber_client(url: str) -> Redis:
    """For the one pub/sub connection of a process: it waits for events without a reply
    timeout (the event hub PINGs it and notices silence itself). Replies stay bytes: with
    decode_responses, redis-py 8 misreads the PONG of a subscribed connection."""
    return Redis.from_url(url, socket_connect_timeout=CONNECT_TIMEOUT_S)


class ClusterSubscriber(Redis):
    """The pub/sub client of a process on Redis Cluster. Classic PUBLISH reaches the
    subscribers of every node of a cluster, so one plain connection to any node hears every
    event; each new subscription (the event hub makes one again after a failure) goes to the
    next node the cluster client knows, so that a failed node is left behind."""

    def __init__(
        self, nodes: Callable[[], Sequence[tuple[str, int]]], credentials: dict[str, Any]
    ) -> None:
        super().__init__(socket_connect_timeout=CONNECT_TIMEOUT_S)
        self._nodes = nodes
        self._credentials = credentials
        self._turn = itertools.count()

    def pubsub(self, **kwargs: Any) -> PubSub:
        known = self._nodes()
        host, port = known[next(self._turn) % len(known)]
        pool = ConnectionPool(
            host=host, port=port, socket_connect_timeout=CONNECT_TIMEOUT_S, **self._credentials
        )
        return PubSub(pool, **kwargs)


def cluster_subscriber(client: RedisCluster, startup: Sequence[tuple[str, int]]) -> Redis:
    """The pub/sub client for the cluster of `client`: its known nodes, else the start-up
    ones, with the client's user and password."""
    used = client.get_connection_kwargs()

    def nodes() -> Sequence[tuple[str, int]]:
        return [(n.host, int(n.port)) for n in client.get_nodes()] or startup

    return ClusterSubscriber(nodes, {key: used.get(key) for key in ("username", "password")})


class ShardedSubscriber:
    """The pub/sub connections of a process whose events go by sharded pub/sub on a Redis
    Cluster: one per shard, each to the master that serves the shard's slot (which alone
    hears the shard's channels), with the cluster client's user and password.

    redis-py's own ClusterPubSub is not used: it moves a channel's subscription to a slot's
    new master by itself after a failover, and reconnects a dropped node's connection and
    subscribes it again without a word, so that the events published meanwhile would be
    missed unnoticed; the event hub must see every such loss to tell its subscribers."""

    def __init__(self, client: RedisCluster) -> None:
        self._client = client
        used = client.get_connection_kwargs()
        self._credentials: dict[str, Any] = {k: used.get(k) for k in ("username", "password")}

    async def pubsub_for(self, channel: str, *, again: bool) -> PubSub:
        """A connection (not opened yet) to the master of the channel's slot: as the cluster
        client knows it, or, `again` (after a loss: the slot may have moved), as the cluster
        says now."""
        if again:
            await self._client.nodes_manager.initialize()
        node = self._client.get_node_from_key(channel)
        if node is None:
            raise RedisConnectionError(f"no master serves the slot of {channel}")
        pool = ConnectionPool(
            host=node.host,
            port=node.port,
            socket_connect_timeout=CONNECT_TIMEOUT_S,
            # No retries: redis-py would reconnect a broken connection and subscribe it again
            # unnoticed; the hub must see the break.
            retry=Retry(NoBackoff(), 0),
            **self._credentials,
        )
        return PubSub(pool)
