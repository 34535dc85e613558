"""The time budget of HTTP operations, kept by one timer (graphql/budget.py), against what
asyncio.timeout does: the whole service's budget is in test_limits.py."""

from __future__ import annotations

import asyncio

import pytest

from gql_presence.graphql.budget import Budgets


async def test_an_operation_over_its_budget_gets_timeout_error_at_its_deadline() -> None:
    budgets = Budgets(0.05)
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(TimeoutError):
        async with budgets.within():
            await asyncio.sleep(5)
    assert 0.05 <= loop.time() - started < 1


async def test_operations_that_end_in_time_leave_the_later_ones_their_own_budget() -> None:
    budgets = Budgets(0.1)

    async def operation(pause_s: float) -> str:
        try:
            async with budgets.within():
                await asyncio.sleep(pause_s)
        except TimeoutError:
            return "over"
        return "done"

    quick = [operation(0.01) for _ in range(20)]
    assert await asyncio.gather(*quick) == ["done"] * 20
    # Begun after the quick ones ended: their deadlines passed meanwhile, theirs has not.
    await asyncio.sleep(0.1)
    assert list(await asyncio.gather(operation(0.05), operation(0.3))) == ["done", "over"]
    assert await operation(0.01) == "done"


async def test_a_cancellation_from_elsewhere_is_not_taken_for_the_budget() -> None:
    budgets = Budgets(0.05)
    ended: list[str] = []

    async def operation() -> None:
        async with budgets.within():
            try:
                await asyncio.sleep(5)
            except asyncio.CancelledError:
                ended.append("cancelled")
                await asyncio.sleep(0.1)  # the budget passes while it cleans up
                raise

    task = asyncio.create_task(operation())
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert ended == ["cancelled"]


async def test_a_task_that_ends_as_its_budget_passes_is_not_left_cancelling() -> None:
    budgets = Budgets(0.01)
    task = asyncio.current_task()
    assert task is not None
    with pytest.raises(TimeoutError):
        async with budgets.within():
            await asyncio.sleep(1)
    assert task.cancelling() == 0
