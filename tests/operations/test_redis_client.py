"""The client of one Redis (running/connection.py): its commands packed by hiredis, byte for
byte as redis-py's own asyncio connections pack them in Python."""

from __future__ import annotations

import pytest
from redis.asyncio.connection import Connection
from redis.exceptions import DataError

from gql_presence.running.connection import redis_client
from gql_presence.running.redis_server import RedisServer

# What the store sends: names, ids of any script, packed options, counts, times, rates.
VALUES = ("EVALSHA", "0" * 40, 3, "gqlp:{0}:é", "😀 x", b"\x00\xff\x80", -5, 2**70, 0.1, "")


@pytest.mark.parametrize(
    "url", ["redis://127.0.0.1:1", "rediss://127.0.0.1:1", "unix:///tmp/no-redis.sock"]
)
async def test_every_kind_of_connection_packs_as_redis_py_does(url: str) -> None:
    client = redis_client(url)
    try:
        pool = client.connection_pool
        connection = pool.connection_class(**pool.connection_kwargs)
        assert type(connection).pack_command is not Connection.pack_command
        packed = b"".join(connection.pack_command(*VALUES))
        assert packed == b"".join(Connection().pack_command(*VALUES))
        with pytest.raises(DataError):
            connection.pack_command("SET", "k", True)
    finally:
        await client.aclose()


async def test_text_and_script_calls_go_through_unchanged(redis_server: RedisServer) -> None:
    client = redis_client(redis_server.url)
    try:
        await client.set("gqlp:é😀", "value é😀")
        assert await client.get("gqlp:é😀") == "value é😀"
        script = "return {KEYS[1], ARGV[1], ARGV[2]}"
        assert await client.eval(script, 1, "k-é", "a-😀", 7) == ["k-é", "a-😀", "7"]
        pipeline = client.pipeline(transaction=False)
        pipeline.get("gqlp:é😀")
        pipeline.strlen("gqlp:é😀")
        assert await pipeline.execute() == ["value é😀", len("value é😀".encode())]
    finally:
        await client.aclose()
