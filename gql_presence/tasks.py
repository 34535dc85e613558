"""Stopping this process's own background tasks at shutdown."""

from __future__ import annotations

import asyncio
import logging

log = logging.getLogger("gql_presence")

# Python 3.11's asyncio.wait_for returns the result of what it waits for when that ends just as
# its task is cancelled, and the cancel is lost: a task that loops over it runs on. So a task
# that outlives a cancel is cancelled again, this often, and given up after a few tries.
CANCEL_AGAIN_S = 1.0
CANCEL_TRIES = 5


async def stop(*tasks: asyncio.Task[None], again_s: float = CANCEL_AGAIN_S) -> None:
    """Cancels the tasks and waits until each has ended; one that ended by failing is logged."""
    pending = {task for task in tasks if not task.done()}
    for _ in range(CANCEL_TRIES):
        if not pending:
            break
        for task in pending:
            task.cancel()
        _, pending = await asyncio.wait(pending, timeout=again_s)
    for task in pending:
        log.warning("the task %r did not end when cancelled; left running", task.get_name())
    for task in tasks:
        if task.done() and not task.cancelled() and (error := task.exception()) is not None:
            log.error("the task %r had failed", task.get_name(), exc_info=error)
