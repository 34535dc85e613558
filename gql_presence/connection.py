"""The Redis client every part of the service uses."""

from __future__ import annotations

from redis.asyncio import BlockingConnectionPool, Redis
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff
from redis.exceptions import ConnectionError as RedisConnectionError

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
    return Redis.from_pool(pool)  # the client owns the pool: closing it closes every connection


def subscriber_client(url: str) -> Redis:
    """For the one pub/sub connection of a process: it waits for events without a reply
    timeout (the event hub PINGs it and notices silence itself). Replies stay bytes: with
    decode_responses, redis-py 8 misreads the PONG of a subscribed connection."""
    return Redis.from_url(url, socket_connect_timeout=CONNECT_TIMEOUT_S)
