"""Script calls made at the same moment share a round trip to Redis, and each caller still
gets its own reply or error, whatever the other callers do."""

from __future__ import annotations

import asyncio

import pytest
from redis.asyncio import Redis

from gql_presence.store import PresenceStore
from gql_presence.store.errors import SessionRevokedError
from gql_presence.store.replies import PresenceReply

# Holds Redis for a few hundred ms, as a slow command of another client would. (Counted, not
# timed: Valkey's TIME stands still while a script runs.)
BUSY = """
local sum = 0
for i = 1, 50000000 do sum = sum + i end
return 1
"""


async def connected_clients(redis: Redis) -> int:
    return int((await redis.info("clients"))["connected_clients"])


async def test_calls_made_together_share_a_connection_and_each_gets_its_own_answer(
    store: PresenceStore, redis: Redis
) -> None:
    await store.touch("kicked", "tab")
    await store.kick("kicked", "tab")
    before = await connected_clients(redis)
    users = [f"together-{i}" for i in range(30)]
    answers = await asyncio.gather(
        *(store.touch(user, "tab") for user in users),
        store.touch("kicked", "tab"),
        return_exceptions=True,
    )
    assert [a.user_id for a in answers[:-1] if isinstance(a, PresenceReply)] == users
    assert isinstance(answers[-1], SessionRevokedError)
    # Sent one by one, 31 calls at once would have opened about as many connections.
    assert await connected_clients(redis) - before <= 2


async def test_a_caller_that_stops_waiting_leaves_no_reply_for_the_next_ones(
    store: PresenceStore, redis: Redis
) -> None:
    async def hold_redis() -> None:
        await redis.eval(BUSY, 0)

    await asyncio.gather(redis.ping(), redis.ping())  # a connection ready beside the busy one
    busy = asyncio.create_task(hold_redis())
    await asyncio.sleep(0.05)  # the busy script has started
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.05):
            await store.touch("impatient", "tab")
    await busy
    answers = await asyncio.gather(*(store.presence(f"later-{i}") for i in range(5)))
    assert [a.user_id for a in answers] == [f"later-{i}" for i in range(5)]
    # A script sent before its caller stopped waiting runs to its end, whole.
    assert (await store.presence("impatient")).online


async def test_calls_of_several_scripts_together_load_them_again_after_a_flush(
    store: PresenceStore, redis: Redis
) -> None:
    await store.touch("flushed", "tab")
    await redis.script_flush()  # as after a restart of Redis
    touched, read, kicked = await asyncio.gather(
        store.touch("other", "tab"), store.presence("flushed"), store.kick("flushed")
    )
    assert (touched.user_id, touched.online) == ("other", True)
    assert read.online
    assert kicked.kicked_sessions == 1
