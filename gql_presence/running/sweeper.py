"""The bounded sweep of expired presence, run by every API process on its own."""

from __future__ import annotations

import asyncio
import logging

from gql_presence.observability.metrics import Metrics
from gql_presence.store import LAPSED_BATCH, SWEEP_BATCH, PresenceStore
from gql_presence.store.days import local_now_ms
from gql_presence.store.errors import PresenceError

log = logging.getLogger("gql_presence")
HOUR_MS = 3_600_000


async def sweep_forever(store: PresenceStore, interval_s: float, metrics: Metrics) -> None:
    """Runs the bounded sweep every interval, and at once again while a batch came back full.

    Every API process runs one; they need no coordination, as each sweep is one script. Once
    an hour it also rewrites the bitmaps of periods that ended to their exact size, and folds
    the hours old enough into counts and the online time of days that ended into its compact
    layout."""
    compacted_hour = None
    while True:
        try:
            result = await store.sweep()
        except PresenceError as error:
            log.warning("sweep skipped: %s", error.message)
        except Exception:
            # The sweeper must outlive any one failed sweep; the next one tries again.
            log.exception("sweep failed")
        else:
            metrics.users_online.set(result.online)
            await record_peak(store, result.online)
            if compacted_hour != local_now_ms() // HOUR_MS:
                compacted_hour = local_now_ms() // HOUR_MS
                await compact_ended(store)
                await carry_online_time(store)
                await fold_online_time(store)
            if (
                max(result.offline, result.purged, result.ended_statuses) >= SWEEP_BATCH
                or max(result.lapsed, result.flushed) >= LAPSED_BATCH
            ):
                await asyncio.sleep(0)
                continue
        metrics.refresh()  # for /metrics answered by another worker
        await asyncio.sleep(interval_s)


async def record_peak(store: PresenceStore, online: int) -> None:
    """Records the users online now into the hour's peak: each sweep measures it."""
    try:
        await store.analytics.record_peak(online)
    except PresenceError as error:
        log.warning("peak online not recorded: %s", error.message)


async def compact_ended(store: PresenceStore) -> None:
    """Rewrites the bitmaps of the periods that ended to their exact size, and folds the hours
    old enough into counts."""
    try:
        await store.analytics.compact_ended()
        await store.analytics.fold_ended()
    except PresenceError as error:
        log.warning("bitmaps not compacted or folded: %s", error.message)


async def carry_online_time(store: PresenceStore) -> None:
    """Carries the online time kept in the layout of earlier versions into each day's keys,
    before the fold, so that the days it adds to fold with the rest."""
    try:
        await store.online_time.carry_over()
    except PresenceError as error:
        log.warning("online time of the earlier layout not carried over: %s", error.message)


async def fold_online_time(store: PresenceStore) -> None:
    """Folds the online time of the days that ended a day ago into its compact layout."""
    try:
        await store.online_time.fold_closed()
    except PresenceError as error:
        log.warning("online time not folded: %s", error.message)
