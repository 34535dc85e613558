"""Script calls written to Redis as they are made, on one connection, their replies handed
over as they are read.

Under load many requests call a script at about the same time; sent one by one, each takes a
connection of the pool, a write and a read of its own. Here the calls of each turn of the
event loop are written together, at the turn's end or as soon as WRITE_EVERY wait, on one
connection that the queue holds, whatever earlier calls still wait for; a task of the
queue's own reads the replies, which come in the order the calls were written, and hands
each to its caller as it is read. No connection is taken from the pool and given back, and
no task or pipeline made, per turn: half the CPU a call cost when each turn's calls went as a
redis-py pipeline on a connection of the pool (bench/script_calls.py). Not a transaction:
each script runs on its own, and other clients are served between them.

A caller that stops waiting (its time budget ran out, or it was cancelled) before its call
was written has it dropped; after, its reply is read and dropped, so the connection never
holds a reply that nobody reads. When the connection breaks, the calls not answered yet are
written again on a new one, in order, by the client's retry rules (every script leaves the
same state when run twice), but for those whose callers stopped waiting: they may have run
once already, and a change nobody waits for should not be made later still. A reply that does
not come within the client's socket timeout fails every call not answered; a call that found
its script missing (Redis restarted, or its scripts flushed) is written again once the script
is loaded.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from typing import Any

from redis._parsers.hiredis import NOT_ENOUGH_DATA
from redis.asyncio import Redis
from redis.asyncio.connection import AbstractConnection
from redis.commands.core import AsyncScript
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError, ResponseError

# Calls of a turn are written as soon as this many wait, not only at the turn's end: Redis
# starts on them while the process still makes the turn's later calls, instead of each waiting
# for the other (touch against its peer, 1.06x to 1.13x the requests a second over writing at
# the turn's end only, in three runs of bench.peer; one call at a time was 1.06x at 1.03x the
# CPU).
WRITE_EVERY = 4

_Call = tuple[AsyncScript, list[str], list[str | int | bytes], "asyncio.Future[Any]"]


class AutoPipeline:
    def __init__(self, client: Redis) -> None:
        self._client = client
        self._queued: list[_Call] = []  # this turn's calls
        self._unwritten: deque[_Call] = deque()  # waiting for the connection
        self._written: deque[_Call] = deque()  # in the order written, waiting for replies
        self._connection: AbstractConnection | None = None
        self._reading: asyncio.Task[None] | None = None
        # Set by the reader once the connection is made and what waited is written: calls are
        # written as they come only then, never while the connection's handshake reads its
        # own replies.
        self._writable = False

    async def run(self, script: AsyncScript, keys: list[str], args: list[str | int | bytes]) -> Any:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        call = (script, keys, args, future)
        if not self._queued:
            loop.call_soon(self._write_queued)
        self._queued.append(call)
        if len(self._queued) >= WRITE_EVERY and self._writable and self._reading is not None:
            self._write_queued()  # the turn's end then finds the queue empty, or its later calls
        return await future

    def _write_queued(self) -> None:
        # A call whose caller stopped waiting before it was written is not written at all.
        self._unwritten.extend(call for call in self._queued if not call[3].done())
        self._queued = []
        if self._reading is None:
            # The reader connects (or reconnects) first, and writes what waits for it then.
            self._reading = asyncio.get_running_loop().create_task(self._read())
        elif self._writable and self._connection is not None and self._connection.is_connected:
            # If it broke, the calls are left waiting: the reader meets the broken connection
            # too, reconnects, and writes them then.
            with contextlib.suppress(RedisConnectionError):
                self._write_unwritten(self._connection)

    def _write_unwritten(self, connection: AbstractConnection) -> None:
        """Writes the calls waiting for the connection, now: no await, so that nothing is
        written between them and their place in `_written`."""
        if not self._unwritten:
            return
        writer = connection._writer
        if writer is None:  # closed by another task meanwhile
            raise RedisConnectionError("Error while writing to Redis: the connection is closed.")
        packed: list[bytes] = []
        written: list[_Call] = []
        for call in self._unwritten:
            script, keys, args, future = call
            try:
                packed += connection.pack_command("EVALSHA", script.sha, len(keys), *keys, *args)
            except Exception as error:  # an argument that cannot be sent: its caller's error
                _answer(future, error)
                continue
            written.append(call)
        # redis-py's own write (send_packed_command) must be awaited, and so could not keep
        # the order of calls written from two turns; the stream's write is immediate.
        try:
            writer.writelines(packed)
        except (RuntimeError, OSError) as error:  # its socket closed under it
            raise RedisConnectionError(f"Error while writing to Redis: {error}") from error
        self._written.extend(written)
        self._unwritten.clear()

    async def _read(self) -> None:
        """Connects, writes what waits, and reads replies for as long as calls are written or
        waiting; then ends (a new call starts it again), leaving the connection open."""
        try:
            if self._connection is None:
                pool = self._client.connection_pool
                self._connection = await pool.get_connection()  # type: ignore[no-untyped-call]
            connection = self._connection
            while self._written or self._unwritten:
                await connection.retry.call_with_retry(
                    lambda: self._read_replies(connection),
                    lambda _error: self._requeue(connection),
                )
        except BaseException as error:
            if self._connection is not None:  # it may hold replies that nobody will read
                await self._connection.disconnect(nowait=True)
            if isinstance(error, Exception):  # handed to every caller not answered, to raise
                self._fail_all(error)
            else:  # cancelled, as the service stops
                self._fail_all(RedisConnectionError("The service is stopping."))
                raise
        finally:
            self._writable = False
            self._reading = None

    async def _read_replies(self, connection: AbstractConnection) -> None:
        # The retries of `call_with_retry` count the breaks until this returns: on a connection
        # made again, it returns at the first reply, so that a later break, one of its own, gets
        # the client's retries afresh (under load, replies may be awaited without a pause).
        made_again = not connection.is_connected
        if made_again:
            self._writable = False
            await connection.connect()  # type: ignore[no-untyped-call]
        self._write_unwritten(connection)
        self._writable = True
        # Scripts loaded since a call of theirs was last answered: missing again after one
        # was, a script was flushed again, and is loaded again.
        loaded: set[AsyncScript] = set()
        written_again: set[asyncio.Future[Any]] = set()  # not answered yet
        while self._written:
            script, _, _, future = self._written[0]
            try:
                reply: Any = _read_already(connection)
                if reply is NOT_ENOUGH_DATA:
                    reply = await connection.read_response()
            except NoScriptError as missing:
                if future in written_again:  # missing again, after its load
                    self._written.popleft()
                    written_again.discard(future)
                    _answer(future, missing)
                    continue
                if script not in loaded:
                    # Should the load fail, the call is still first of those written: written
                    # again with them, or answered with them.
                    await self._client.script_load(script.script)
                    loaded.add(script)
                written_again.add(future)
                self._unwritten.append(self._written.popleft())
                self._write_unwritten(connection)
                continue
            except ResponseError as error:
                reply = error
            self._written.popleft()
            written_again.discard(future)
            loaded.discard(script)
            _answer(future, reply)
            if made_again:
                return

    async def _requeue(self, connection: AbstractConnection) -> None:
        """After the connection broke: the calls written and not answered go first again,
        but for those whose callers stopped waiting."""
        self._writable = False
        await connection.disconnect()
        self._unwritten.extendleft(reversed([call for call in self._written if not call[3].done()]))
        self._written.clear()

    def _fail_all(self, error: Exception) -> None:
        """Hands `error` to every caller written or waiting, to raise."""
        for *_, future in (*self._written, *self._unwritten):
            _answer(future, error)
        self._written.clear()
        self._unwritten.clear()


def _read_already(connection: AbstractConnection) -> Any:
    """The next reply when the bytes read from the socket already hold it whole, else
    NOT_ENOUGH_DATA; raised as read_response raises it when it is an error. Taken without the
    await and the timer that read_response sets for each read: replies come in batches (Redis
    runs every call it has read before writing any reply), and only a batch's first needs to
    wait for the socket."""
    parser = connection._parser
    reader = getattr(parser, "_reader", None)  # hiredis's (redis[hiredis] is required)
    if reader is None or not getattr(parser, "_connected", False):
        return NOT_ENOUGH_DATA
    reply = reader.gets()
    if isinstance(reply, (RedisConnectionError, ResponseError)):
        raise reply
    if isinstance(reply, list) and reply and isinstance(reply[0], RedisConnectionError):
        raise reply[0]
    return reply


def _answer(future: asyncio.Future[Any], reply: Any) -> None:
    """Gives a caller its reply, or its error to raise; nothing if it stopped waiting."""
    if future.done():
        return
    if isinstance(reply, Exception):
        future.set_exception(reply)
    else:
        future.set_result(reply)
