"""The time budget of HTTP operations (PRESENCE_REQUEST_TIMEOUT_SECONDS), kept by one timer.

`asyncio.timeout` schedules a timer for each operation and cancels it at the operation's end:
a heap push and a cancelled handle per request, which a request that ends in milliseconds
never needed. Every HTTP operation has the same budget, so their deadlines come in the order
they began: they wait in a queue, and one timer, set for the oldest still running, cancels
each operation that passes its deadline. What an operation sees is what `asyncio.timeout`
gives it: its task cancelled at the deadline, and TimeoutError raised where the budget ends
unless the task was also cancelled from elsewhere (the steps of Python 3.11's
`asyncio.Timeout.__aexit__`).
"""

from __future__ import annotations

import asyncio
from collections import deque
from types import TracebackType


class _Operation:
    __slots__ = ("cancelling", "deadline", "expired", "task")

    def __init__(self, task: asyncio.Task[object] | None, deadline: float) -> None:
        self.task = task  # None once the operation has ended
        self.deadline = deadline
        self.cancelling = 0 if task is None else task.cancelling()
        self.expired = False


class Budgets:
    """One budget, `budget_s`, for every operation run `within()` it on one event loop."""

    def __init__(self, budget_s: float) -> None:
        self.budget_s = budget_s
        # Operations in the order they began, so in the order of their deadlines; those that
        # ended are dropped from the front as soon as they get there.
        self._running: deque[_Operation] = deque()
        self._timer: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def within(self) -> _Within:
        """An async context manager: the operation it holds is cancelled once its budget is
        spent, and TimeoutError raised at its end, as `asyncio.timeout(budget_s)` does."""
        return _Within(self)

    def _begin(self) -> _Operation:
        task = asyncio.current_task()
        if task is None:
            raise RuntimeError("a time budget is kept for a task")
        loop = task.get_loop()
        if loop is not self._loop:  # a loop of its own (tests run one each): start afresh
            self._loop, self._timer, self._running = loop, None, deque()
        operation = _Operation(task, loop.time() + self.budget_s)
        self._running.append(operation)
        if self._timer is None:
            self._timer = loop.call_at(operation.deadline, self._expire, loop)
        return operation

    def _end(self, operation: _Operation) -> None:
        operation.task = None
        running = self._running
        while running and running[0].task is None:
            running.popleft()

    def _expire(self, loop: asyncio.AbstractEventLoop) -> None:
        """Cancels every operation past its deadline, then waits for the next deadline."""
        self._timer = None
        running, now = self._running, loop.time()
        while running:
            operation = running[0]
            if operation.task is None or operation.expired:
                running.popleft()
                continue
            if operation.deadline > now:
                self._timer = loop.call_at(operation.deadline, self._expire, loop)
                return
            operation.expired = True  # read at its end
            operation.task.cancel()
            running.popleft()


class _Within:
    __slots__ = ("_budgets", "_operation")

    def __init__(self, budgets: Budgets) -> None:
        self._budgets = budgets
        self._operation = _Operation(None, 0.0)

    async def __aenter__(self) -> None:
        self._operation = self._budgets._begin()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc_val: BaseException | None,
        exc_tb: TracebackType | None,
    ) -> None:
        operation = self._operation
        task = operation.task
        self._budgets._end(operation)
        # As asyncio.Timeout: the cancellation is the budget's only if no other came.
        if (
            operation.expired
            and task is not None
            and task.uncancel() <= operation.cancelling
            and exc_type is asyncio.CancelledError
        ):
            raise TimeoutError from exc_val
