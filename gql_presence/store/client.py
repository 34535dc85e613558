"""The Redis clients the store runs on: one Redis, or a Redis Cluster."""

from __future__ import annotations

from redis.asyncio import Redis, RedisCluster

# Either client: they take the same commands, and route a script by its keys' slot on a cluster.
AnyRedis = Redis | RedisCluster


def connections_in_use(client: AnyRedis) -> int:
    """How many of the client's connections are busy now (redis-py has no public count)."""
    if isinstance(client, RedisCluster):
        return sum(len(node._connections) - len(node._free) for node in client.get_nodes())
    return len(list(client.connection_pool._get_in_use_connections()))
