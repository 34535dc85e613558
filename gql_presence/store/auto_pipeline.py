"""Script calls made in the same turn of the event loop, sent to Redis together.

Under load many requests call a script in the same turn; sent one by one, each takes a
connection of the pool, a write and a read of its own. Queued instead, they leave in one
pipeline (not a transaction: each script runs on its own, and other clients are served
between them), sent and read by a task of the queue's own, which gives each caller its
reply or its error.

A caller that stops waiting (its time budget ran out, or it was cancelled) before its call
left the queue has it dropped; after, its reply is read by that task and dropped, so a
connection never holds a reply that nobody reads. redis-py's pipeline sends the whole of it
again when its connection breaks (every script leaves the same state when run twice), and a
reply timeout fails every call of it; calls that found their script missing (Redis
restarted, or its scripts flushed) are sent again once it is loaded.
"""

from __future__ import annotations

import asyncio
from typing import Any

from redis.asyncio import Redis
from redis.commands.core import AsyncScript
from redis.exceptions import NoScriptError, ResponseError

_Call = tuple[AsyncScript, list[str], list[str | int | bytes], "asyncio.Future[Any]"]


class AutoPipeline:
    def __init__(self, client: Redis) -> None:
        self._client = client
        self._queued: list[_Call] = []
        self._sending: set[asyncio.Task[None]] = set()

    async def run(self, script: AsyncScript, keys: list[str], args: list[str | int | bytes]) -> Any:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        if not self._queued:
            loop.call_soon(self._send_queued)
        self._queued.append((script, keys, args, future))
        return await future

    def _send_queued(self) -> None:
        # A call whose caller stopped waiting before it left is not sent at all.
        calls = [call for call in self._queued if not call[3].done()]
        self._queued = []
        if not calls:
            return
        task = asyncio.get_running_loop().create_task(self._send(calls))
        self._sending.add(task)  # held until done: the loop keeps only weak references
        task.add_done_callback(self._sending.discard)

    async def _send(self, calls: list[_Call]) -> None:
        try:
            replies = await self._pipelined(calls)
            missing = [i for i, reply in enumerate(replies) if isinstance(reply, NoScriptError)]
            if missing:
                for script in {id(calls[i][0]): calls[i][0] for i in missing}.values():
                    await self._client.script_load(script.script)
                again = await self._pipelined([calls[i] for i in missing])
                for i, reply in zip(missing, again, strict=True):
                    replies[i] = reply
        except Exception as error:  # handed to every caller, to raise
            for *_, future in calls:
                if not future.done():
                    future.set_exception(error)
            return
        for (*_, future), reply in zip(calls, replies, strict=True):
            if future.done():  # its caller stopped waiting
                continue
            if isinstance(reply, ResponseError):
                future.set_exception(reply)
            else:
                future.set_result(reply)

    async def _pipelined(self, calls: list[_Call]) -> list[Any]:
        if len(calls) == 1:  # no pipeline to build for one call
            script, keys, args, _ = calls[0]
            try:
                return [await self._client.evalsha(script.sha, len(keys), *keys, *args)]
            except ResponseError as error:
                return [error]
        pipeline = self._client.pipeline(transaction=False)
        for script, keys, args, _ in calls:
            pipeline.execute_command("EVALSHA", script.sha, len(keys), *keys, *args)
        return await pipeline.execute(raise_on_error=False)
