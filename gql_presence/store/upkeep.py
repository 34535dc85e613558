"""The sweep: what no process is there to do, done in each shard by whichever process sweeps
(lua/sweep.lua)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from gql_presence.store.days import DAY_MS
from gql_presence.store.models import SweepResult
from gql_presence.store.places import PLACE_STATE_INTERVAL_MS
from gql_presence.store.scripts import ScriptName
from gql_presence.store.shard import Shard, named

# Users are forgotten (and their bit index reused) this long after the retention ends, so
# that every day bitmap that could hold their bit has expired first (a day, plus DST slack).
PURGE_SLACK_MS = 2 * DAY_MS
# A forgotten user's bit index is handed out again this long after the analytics' time, so
# that every bitmap of a week or month (kept that long after it ends) that could hold their
# bit has expired first: a month, plus DST slack.
COOLING_SLACK_MS = 32 * DAY_MS
# Users online looked at per sweep call by the pass that indexes those online since before the
# online list's indexes were kept: indexing one takes about 40 µs of Redis time, so a call that
# finds none of them indexed holds Redis for about 4 ms more.
INDEX_BATCH = 100


async def sweep(shards: Sequence[Shard], batch: int, lapsed_batch: int) -> SweepResult:
    """Each shard's sweep, in parallel, summed (PresenceStore.sweep)."""
    parts = await asyncio.gather(*(_sweep(shard, batch, lapsed_batch) for shard in shards))
    return SweepResult(*(sum(column) for column in zip(*parts, strict=True)))


async def _sweep(shard: Shard, batch: int, lapsed_batch: int) -> list[int]:
    settings, k = shard.settings, shard.keys
    days, boundaries = shard.days_around()
    await shard.announcing()
    reply = await shard.run(
        ScriptName.SWEEP,
        named(
            online=k.online,
            last_seen=k.last_seen,
            user_index=k.user_index,
            free_indexes=k.free_indexes,
            leases=k.leases,
            flushes=k.place_flushes,
            days=days,
            cooling=k.cooling_indexes,
            index_scan=k.index_scan,
        ),
        named(
            batch=batch,
            purge_after_ms=settings.retention_ms + PURGE_SLACK_MS,
            shard=shard.options,
            boundaries=boundaries,
            lapsed_batch=lapsed_batch,
            # Overdue: a state its process would have announced an interval ago.
            overdue_ms=PLACE_STATE_INTERVAL_MS,
            cooling_ms=settings.analytics_ms + COOLING_SLACK_MS,
            index_batch=INDEX_BATCH,
        ),
    )
    # offline, purged, online, lapsed, ended_statuses, flushed
    return [int(n) for n in reply]
