"""How the scripts publish events: classic PUBLISH, or sharded SPUBLISH on a Redis Cluster
whose every master has it.

A classic PUBLISH on a Redis Cluster is broadcast over the cluster bus to every node, which
looks for subscribers of the channel there; a sharded one stays on the nodes of its channel's
slot (its master and that master's replicas). On one Redis, sharded channels buy nothing, so
one Redis (however many shards it holds) keeps classic PUBLISH."""

from __future__ import annotations

from enum import StrEnum

from redis.asyncio import RedisCluster

# Sharded pub/sub came with Redis 7.0; Valkey reports the Redis version it matches (7.2.4).
SHARDED_SINCE = 7


class Publish(StrEnum):
    """The command the scripts publish with (their `publish` argument)."""

    CLASSIC = "PUBLISH"
    SHARDED = "SPUBLISH"


async def sharded_everywhere(client: RedisCluster) -> bool:
    """Whether every master of the cluster has sharded pub/sub (by its Redis version: a
    rolling upgrade may leave masters of two versions for a while)."""
    replies = await client.info("server", target_nodes=RedisCluster.PRIMARIES)
    # One node answers with its INFO, several with their INFO by node name.
    infos = [replies] if "redis_version" in replies else list(replies.values())
    return bool(infos) and all(
        int(str(info["redis_version"]).split(".", 1)[0]) >= SHARDED_SINCE for info in infos
    )
