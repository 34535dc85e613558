"""Script calls made at the same moment share a round trip to Redis, and each caller still
gets its own reply or error, whatever the other callers do."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Coroutine
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import pytest
from redis.asyncio import Redis
from redis.commands.core import AsyncScript
from redis.exceptions import ConnectionError as RedisConnectionError

from gql_presence.running.connection import redis_client
from gql_presence.running.redis_server import RedisServer
from gql_presence.store import PresenceStore
from gql_presence.store.auto_pipeline import AutoPipeline
from gql_presence.store.errors import SessionRevokedError
from gql_presence.store.replies import PresenceReply
from tests.helpers import eventually

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


async def test_calls_of_many_turns_in_flight_share_one_connection(
    store: PresenceStore, redis: Redis
) -> None:
    await store.presence("warm")  # the connection made
    await asyncio.gather(redis.ping(), redis.ping())  # a connection ready beside the busy one
    before = await connected_clients(redis)

    async def hold_redis() -> None:
        await redis.eval(BUSY, 0)

    busy = asyncio.create_task(hold_redis())
    await asyncio.sleep(0.05)  # the busy script has started: no reply comes while it runs
    calls = []
    for i in range(10):  # ten turns of the event loop, each with a call of its own
        calls.append(asyncio.create_task(store.touch(f"turn-{i}", "tab")))
        await asyncio.sleep(0)
    await busy
    answers = await asyncio.gather(*calls)
    assert [a.user_id for a in answers] == [f"turn-{i}" for i in range(10)]
    # Each turn's calls are written on the connection the earlier ones wait on, not on a
    # connection of their own.
    assert await connected_clients(redis) == before


async def passed_on(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
    """What comes from `source`, written to `sink` as it comes, until it ends."""
    while data := await source.read(65536):
        sink.write(data)
        await sink.drain()


class RedisProxy:
    """A TCP proxy to Redis: what a client sends passes as it is, what Redis answers passes
    through `replies`, which each test's proxy makes its own. When either way ends, the
    connection is closed both ways."""

    def __init__(self, redis_port: int) -> None:
        self.redis_port = redis_port
        self.connections = 0
        self.server: asyncio.Server | None = None

    async def start(self) -> int:
        self.server = await asyncio.start_server(self.accept, "127.0.0.1", 0)
        return int(self.server.sockets[0].getsockname()[1])

    async def accept(
        self, client_in: asyncio.StreamReader, client_out: asyncio.StreamWriter
    ) -> None:
        self.connections += 1
        number = self.connections
        redis_in, redis_out = await asyncio.open_connection("127.0.0.1", self.redis_port)

        async def one_way(way: Coroutine[Any, Any, None]) -> None:
            try:
                await way
            finally:
                for writer in (client_out, redis_out):
                    writer.close()

        await asyncio.gather(
            one_way(passed_on(client_in, redis_out)),
            one_way(self.replies(redis_in, client_out, number)),
            return_exceptions=True,
        )

    async def replies(
        self, source: asyncio.StreamReader, sink: asyncio.StreamWriter, connection: int
    ) -> None:
        """Redis's replies on the proxy's `connection`-th connection (from 1), passed on."""
        await passed_on(source, sink)


class CutAfterFirstReply(RedisProxy):
    """A proxy whose first connection is cut once the reply that ends with MARK has passed
    and `cut` is set: the replies after it, though Redis sent them, never arrive."""

    MARK = b"first-reply\r\n"

    def __init__(self, redis_port: int) -> None:
        super().__init__(redis_port)
        self.cut = asyncio.Event()

    async def replies(
        self, source: asyncio.StreamReader, sink: asyncio.StreamWriter, connection: int
    ) -> None:
        if connection > 1:
            await passed_on(source, sink)
            return
        seen = b""
        while data := await source.read(65536):
            seen += data
            if self.MARK in seen:
                end = len(data) - (len(seen) - seen.index(self.MARK) - len(self.MARK))
                sink.write(data[:end])
                await sink.drain()
                await self.cut.wait()
                return
            sink.write(data)
            await sink.drain()


@dataclass(frozen=True)
class Cutting:
    """A queue on a client through a CutAfterFirstReply proxy, two scripts that count their
    runs in `{t}:first` and `{t}:second` (the first answers the proxy's MARK), and a second
    client beside it, of the same Redis."""

    proxy: CutAfterFirstReply
    pipeline: AutoPipeline
    first: AsyncScript
    second: AsyncScript
    direct: Redis


@pytest.fixture
async def cutting(redis_server: RedisServer) -> AsyncIterator[Cutting]:
    proxy = CutAfterFirstReply(int(urlsplit(redis_server.url).port or 0))
    client = redis_client(f"redis://127.0.0.1:{await proxy.start()}")
    direct = redis_client(redis_server.url)
    await direct.delete("{t}:first", "{t}:second")
    first = client.register_script("redis.call('INCR', KEYS[1]) return 'first-reply'")
    second = client.register_script("return redis.call('INCR', KEYS[1])")
    for script in (first, second):
        await direct.script_load(script.script)
    yield Cutting(proxy, AutoPipeline(client), first, second, direct)
    await client.aclose()
    await direct.aclose()
    assert proxy.server is not None
    proxy.server.close()


async def test_a_broken_connection_runs_again_only_the_calls_not_answered(
    cutting: Cutting,
) -> None:
    pipeline, first, second = cutting.pipeline, cutting.first, cutting.second
    cutting.proxy.cut.set()  # as soon as the first reply has passed
    replies = await asyncio.gather(
        pipeline.run(first, ["{t}:first"], []), pipeline.run(second, ["{t}:second"], [])
    )
    # The second's reply was lost with the connection, so it ran once more on a new one:
    # every script leaves the same state when run twice (this one, made to show it, does
    # not). The first was answered before the break and did not run again.
    assert list(replies) == ["first-reply", 2]
    assert await cutting.direct.get("{t}:first") == "1"


async def test_a_call_whose_caller_stopped_waiting_does_not_run_again_after_a_break(
    cutting: Cutting,
) -> None:
    pipeline, first, second = cutting.pipeline, cutting.first, cutting.second
    answered = asyncio.ensure_future(pipeline.run(first, ["{t}:first"], []))
    given_up = asyncio.ensure_future(pipeline.run(second, ["{t}:second"], []))
    assert await answered == "first-reply"
    # The second ran, and its reply is held back by the proxy: its caller stops waiting
    # (a request's time budget ran out), then the connection breaks.
    given_up.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await given_up
    cutting.proxy.cut.set()
    await eventually(lambda: cutting.proxy.connections == 2, 3, "the connection made again")
    # It ran once, before the break: had it been written again, this would say 3.
    assert await pipeline.run(second, ["{t}:second"], []) == 2


async def test_a_connection_that_redis_closed_while_idle_is_replaced_by_the_next_call(
    store: PresenceStore, redis: Redis
) -> None:
    await store.touch("before", "tab")
    # As a Redis `timeout`, or an operator's CLIENT KILL, would: every connection but this one.
    assert await redis.client_kill_filter(_type="normal", skipme=True) >= 1
    answers = await asyncio.gather(*(store.presence(u) for u in ("before", "nobody")))
    assert [a.online for a in answers] == [True, False]


@dataclass(frozen=True)
class Echoing:
    """A queue of its own, warmed by a call of `echo` (a script that returns its argument),
    and a second client beside it, of the same Redis."""

    pipeline: AutoPipeline
    echo: AsyncScript
    direct: Redis


@pytest.fixture
async def echoing(redis_server: RedisServer) -> AsyncIterator[Echoing]:
    client = redis_client(redis_server.url)
    direct = redis_client(redis_server.url)
    echo = client.register_script("return ARGV[1]")
    await direct.script_load(echo.script)
    pipeline = AutoPipeline(client)
    assert await pipeline.run(echo, [], ["warm"]) == "warm"
    yield Echoing(pipeline, echo, direct)
    await client.aclose()
    await direct.aclose()


async def test_calls_made_while_a_connection_is_made_again_each_get_their_own_reply(
    echoing: Echoing,
) -> None:
    pipeline, echo, direct = echoing.pipeline, echoing.echo, echoing.direct
    # As a Redis `timeout`, a restart or an operator's CLIENT KILL would.
    assert await direct.client_kill_filter(_type="normal", skipme=True) >= 1
    loop = asyncio.get_running_loop()
    calls: list[asyncio.Future[Any]] = []
    end = loop.time() + 0.2  # a call each turn, while the connection is made again and after
    while loop.time() < end:
        calls.append(asyncio.ensure_future(pipeline.run(echo, [], [str(len(calls))])))
        await asyncio.sleep(0)
    replies = await asyncio.gather(*calls, return_exceptions=True)
    wrong = [(i, reply) for i, reply in enumerate(replies) if reply != str(i)]
    assert (len(wrong), wrong[:3]) == (0, [])


async def test_a_call_whose_script_could_not_be_loaded_gets_the_error(
    redis_server: RedisServer,
) -> None:
    # One connection in all: the one the calls are written on, so that loading the script
    # (on another) finds none free and fails.
    client = redis_client(redis_server.url, max_connections=1, pool_wait_s=0.1)
    direct = redis_client(redis_server.url)
    echo = client.register_script("return ARGV[1]")
    await direct.script_load(echo.script)
    pipeline = AutoPipeline(client)
    assert await pipeline.run(echo, [], ["warm"]) == "warm"
    await direct.script_flush()
    with pytest.raises(RedisConnectionError):
        async with asyncio.timeout(3):  # never answered, it would wait forever
            await pipeline.run(echo, [], ["flushed"])
    await client.aclose()
    await direct.aclose()


class HoldFromMark(RedisProxy):
    """A proxy that holds back the replies of its connections from the one that holds MARK
    on, until `release()`."""

    MARK = b"plug"

    def __init__(self, redis_port: int) -> None:
        super().__init__(redis_port)
        self.released = asyncio.Event()
        self.waiting: asyncio.Future[Any] | None = None

    def release(self) -> None:
        self.released.set()

    async def replies(
        self, source: asyncio.StreamReader, sink: asyncio.StreamWriter, connection: int
    ) -> None:
        held: list[bytes] = []

        def flush() -> None:
            sink.write(b"".join(held))
            held.clear()

        while data := await source.read(65536):
            if not self.released.is_set() and (held or self.MARK in data):
                if not held:
                    sink.write(data[: data.index(self.MARK)])
                    data = data[data.index(self.MARK) :]
                    self.waiting = asyncio.ensure_future(self.released.wait())
                    self.waiting.add_done_callback(lambda _: flush())
                held.append(data)
                continue
            if held:
                flush()
            sink.write(data)
            await sink.drain()


async def test_calls_load_their_script_again_after_each_flush(
    redis_server: RedisServer,
) -> None:
    proxy = HoldFromMark(int(urlsplit(redis_server.url).port or 0))
    client = redis_client(f"redis://127.0.0.1:{await proxy.start()}")
    direct = redis_client(redis_server.url)
    echo = client.register_script("redis.call('INCR', KEYS[1]) return ARGV[1]")
    other = client.register_script("return ARGV[1]")
    pipeline = AutoPipeline(client)
    await direct.delete("{t}:ran")
    await direct.script_flush()  # the first flush
    await direct.script_load(other.script)
    # The reply to `plugged` is held back, and those after it: calls wait for replies from
    # then until the end.
    first = asyncio.ensure_future(pipeline.run(echo, ["{t}:ran"], ["first"]))
    plugged = asyncio.ensure_future(pipeline.run(other, [], ["plug"]))

    async def first_ran() -> bool:
        return await direct.get("{t}:ran") == "1"

    # `first` found its script missing, loaded it, and ran.
    await eventually(first_ran, what="the first call to run")
    await direct.script_flush()  # the second flush
    second = asyncio.ensure_future(pipeline.run(echo, ["{t}:ran"], ["second"]))
    await asyncio.sleep(0.1)
    proxy.release()
    async with asyncio.timeout(3):
        assert list(await asyncio.gather(first, plugged, second)) == ["first", "plug", "second"]
    await client.aclose()
    await direct.aclose()
    assert proxy.server is not None
    proxy.server.close()


async def test_a_call_whose_arguments_cannot_be_sent_fails_alone(echoing: Echoing) -> None:
    pipeline, echo, direct = echoing.pipeline, echoing.echo, echoing.direct
    busy = asyncio.ensure_future(direct.eval(BUSY, 0))
    await asyncio.sleep(0.05)  # the busy script has started: replies wait from now on
    before = asyncio.ensure_future(pipeline.run(echo, [], ["before"]))
    await asyncio.sleep(0)
    # A lone surrogate cannot be UTF-8: this call cannot be written, the others can.
    unsendable = asyncio.ensure_future(pipeline.run(echo, [], ["\ud800"]))
    beside = asyncio.ensure_future(pipeline.run(echo, [], ["beside"]))
    await asyncio.sleep(0)
    after = asyncio.ensure_future(pipeline.run(echo, [], ["after"]))
    await busy
    replies = await asyncio.gather(before, unsendable, beside, after, return_exceptions=True)
    assert isinstance(replies[1], UnicodeEncodeError)
    assert [replies[0], *replies[2:]] == ["before", "beside", "after"]


async def test_each_break_of_the_connection_gets_the_retries_afresh(echoing: Echoing) -> None:
    pipeline, echo, direct = echoing.pipeline, echoing.echo, echoing.direct

    async def break_three_times() -> None:
        for _ in range(3):  # more breaks than the client's two retries, each on its own
            await asyncio.sleep(0.2)
            assert await direct.client_kill_filter(_type="normal", skipme=True) >= 1

    breaking = asyncio.ensure_future(break_three_times())
    calls: list[asyncio.Future[Any]] = []
    while not breaking.done():  # a call each turn: some always wait for their replies
        calls.append(asyncio.ensure_future(pipeline.run(echo, [], [str(len(calls))])))
        await asyncio.sleep(0)
    await breaking
    replies = await asyncio.gather(*calls, return_exceptions=True)
    failed = [reply for reply in replies if isinstance(reply, Exception)]
    assert (len(failed), failed[:1]) == (0, [])
    assert replies == [str(i) for i in range(len(calls))]
