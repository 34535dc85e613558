"""A process asked to stop stops: its background tasks end even when one of them loses a cancel
(Python 3.11's asyncio.wait_for returns instead of raising when what it waits for ends just as
its task is cancelled)."""

from __future__ import annotations

import asyncio
import logging

import pytest

from gql_presence.tasks import stop


async def test_a_task_that_lost_its_cancel_is_cancelled_again() -> None:
    lost = 0

    async def loses_one_cancel() -> None:
        nonlocal lost
        while True:
            try:
                await asyncio.sleep(10)
            except asyncio.CancelledError:
                if lost:
                    raise
                lost += 1  # as wait_for does when its inner result comes with the cancel

    task = asyncio.create_task(loses_one_cancel())
    await asyncio.sleep(0)
    await asyncio.wait_for(stop(task, again_s=0.05), 2)
    assert task.cancelled()
    assert lost == 1


async def test_a_task_that_never_ends_is_left_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    release = asyncio.Event()

    async def never_ends() -> None:
        while not release.is_set():
            try:
                await asyncio.sleep(10)
            except asyncio.CancelledError:
                continue

    task = asyncio.create_task(never_ends(), name="stubborn")
    await asyncio.sleep(0)
    with caplog.at_level(logging.WARNING, logger="gql_presence"):
        await asyncio.wait_for(stop(task, again_s=0.02), 2)
    assert not task.done()
    assert "'stubborn' did not end when cancelled" in caplog.text
    release.set()
    task.cancel()
    await asyncio.wait({task}, timeout=1)
    assert task.done()


async def test_a_task_that_had_failed_is_logged_at_its_stop(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def fails() -> None:
        raise RuntimeError("the reason")

    task = asyncio.create_task(fails(), name="failing")
    await asyncio.wait({task})
    with caplog.at_level(logging.ERROR, logger="gql_presence"):
        await stop(task)
    assert "'failing' had failed" in caplog.text
    assert "the reason" in caplog.text
