"""Online time per user and day, and the lengths of online periods: read from what the scripts
keep as periods end (lua/includes/online_time.lua), over every shard."""

from __future__ import annotations

import asyncio
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, datetime, timedelta

from redis.asyncio import RedisCluster

from gql_presence.store.days import day_number, day_start_ms, local_date, local_now_ms, to_ms
from gql_presence.store.errors import BadInputError
from gql_presence.store.scripts import ScriptName
from gql_presence.store.shard import Shard, by_shard, guarded, named
from gql_presence.store.validation import check_ids

MAX_USERS = 1000
MAX_DAYS = 92
HOUR_MS = 3_600_000
# Online time is counted in 2-second units of the clock (lua/includes/online_time.lua).
UNIT_MS = 2000
MAX_HOURS = MAX_DAYS * 24
# As lua/includes/online_time.lua buckets lengths (ms): bucket b holds (RATIO^(b-1), RATIO^b].
RATIO = 1.1
LAST_BUCKET = 260
QUANTILES = (0.5, 0.9, 0.99)
# A day is folded into the compact layout once the day after it has ended too, so that the
# periods still open at its midnight have mostly ended (lua/fold_online_time.lua); the sweeper
# looks this many days back from there, to catch up after a while with no sweeper running
# (lua/includes/online_time.lua's FORGET_DAYS reaches past them).
FOLD_DAYS = 8
# Blocks of 4,096 indexes folded per call: about 1.5 ms of Redis time each.
FOLD_BLOCKS = 4
# Keys a SCAN call of the carry-over of the earlier layout looks at (a hint), and the days of
# an old key carried per call: about 5 ms of Redis time at most (lua/carry_online_time.lua).
CARRY_SCAN = 1000
CARRY_DAYS = 8


@dataclass(frozen=True)
class DailyOnlineTime:
    date: date
    seconds: float


@dataclass(frozen=True)
class UserOnlineTime:
    user_id: str
    days: tuple[DailyOnlineTime, ...]
    total_seconds: float


@dataclass(frozen=True)
class LengthBucket:
    """Periods with lengths up to up_to_seconds (None: the last, unbounded) and above the
    bucket before's bound."""

    up_to_seconds: float | None
    count: int


@dataclass(frozen=True)
class PeriodLengths:
    count: int
    mean: float | None
    # Each quantile of QUANTILES, within 5% of the true length; None when count is 0.
    quantiles: tuple[float | None, ...]
    buckets: tuple[LengthBucket, ...]


def bucket_bound_ms(bucket: int) -> float | None:
    """The upper bound of a bucket's lengths, ms (None for the last)."""
    return None if bucket >= LAST_BUCKET else float(RATIO**bucket)


def _middle_ms(bucket: int) -> float:
    """The length that stands for a bucket's: its geometric middle, within 4.9% of any."""
    if bucket == 0:
        return 1.0
    return float(RATIO ** (bucket - 0.5))


def check_days(start: date, end: date) -> int:
    if start > end:
        raise BadInputError("from must not be later than to.")
    if end >= date.max:
        # The last day's end, the next day's start, must be a date.
        raise BadInputError(f"to may be at most {date.max - timedelta(days=1)}.")
    count = (end - start).days + 1
    if count > MAX_DAYS:
        raise BadInputError(f"from and to may span at most {MAX_DAYS} days; got {count}.")
    return count


def check_asked(user_ids: Sequence[str], start: date, end: date) -> int:
    """The number of days of [start, end], once the days and the users asked for are within
    their limits; BadInputError otherwise."""
    count = check_days(start, end)
    if len(user_ids) > MAX_USERS:
        raise BadInputError(f"userIds takes at most {MAX_USERS:,} ids; got {len(user_ids):,}.")
    return count


def check_hours(start: datetime, end: datetime) -> list[int]:
    """The hours (since the epoch) that overlap [start, end]: whole hours are kept."""
    if start > end:
        raise BadInputError("from must not be later than to.")
    first = to_ms(start) // HOUR_MS
    last = max(first, (to_ms(end) - 1) // HOUR_MS)
    if last - first + 1 > MAX_HOURS:
        raise BadInputError(
            f"from and to may span at most {MAX_DAYS} days ({MAX_HOURS:,} hours); "
            f"got {last - first + 1:,} hours."
        )
    return list(range(first, last + 1))


class OnlineTime:
    """onlineTime and onlinePeriods over the shards."""

    def __init__(self, shards: Sequence[Shard]) -> None:
        self._shards = shards

    async def online_time(
        self, user_ids: Sequence[str], start: date, end: date
    ) -> list[UserOnlineTime]:
        """Each user's seconds online on each day of [start, end], in the order given."""
        count = check_asked(user_ids, start, end)
        distinct = check_ids(user_ids, "userIds")
        groups = by_shard(distinct, len(self._shards))
        parts = await asyncio.gather(
            *(self._shard_time(self._shards[i], g, start, count) for i, g in groups.items())
        )
        ms_of: dict[str, list[int]] = {}
        for part in parts:
            ms_of.update(part)
        dates = [start + timedelta(days=d) for d in range(count)]
        result = []
        for user_id in user_ids:
            daily = tuple(
                DailyOnlineTime(day, ms / 1000)
                for day, ms in zip(dates, ms_of[user_id], strict=True)
            )
            result.append(UserOnlineTime(user_id, daily, sum(ms_of[user_id]) / 1000))
        return result

    async def _shard_time(
        self, shard: Shard, user_ids: list[str], start: date, count: int
    ) -> dict[str, list[int]]:
        """Each user's ms online on each day: what ended periods left (2-second units), and
        the part of their current period in the day, counted in the same units."""
        k = shard.keys
        reply = await shard.run(
            ScriptName.ONLINE_TIME,
            named(user_index=k.user_index, since=k.online_since, online=k.online, leases=k.leases),
            named(
                shard=shard.options,
                first_day=day_number(start),
                day_count=count,
                user_ids=user_ids,
            ),
        )
        zone = shard.settings.stats_zone
        starts = [day_start_ms(start + timedelta(days=d), zone) for d in range(count + 1)]
        n = len(user_ids)
        days: list[list[int]] = [[0] * count for _ in range(n)]
        # After each user's current period: (day offset * 65536 + place from 1, units) of
        # every day and user with time that day.
        for j in range(2 * n, len(reply), 2):
            at, units = int(reply[j]), int(reply[j + 1])
            days[at % 65536 - 1][at // 65536] = units * UNIT_MS
        ms_of = {}
        for i, user_id in enumerate(user_ids):
            since, until, ms = int(reply[2 * i]), int(reply[2 * i + 1]), days[i]
            if since >= 0:
                for d in range(count):
                    a, b = max(since, starts[d]), min(until, starts[d + 1])
                    if a < b:
                        ms[d] += (b // UNIT_MS - a // UNIT_MS) * UNIT_MS
            ms_of[user_id] = ms
        # A span's counters outlive its first days by up to a span: those days read 0, as
        # every day past what is kept.
        kept_from = local_now_ms() - shard.settings.analytics_ms
        for ms in ms_of.values():
            for d in range(count):
                if starts[d + 1] <= kept_from:
                    ms[d] = 0
        return ms_of

    async def fold_closed(self, at_ms: int | None = None) -> int:
        """Folds into the compact layout the days that ended a day or more before `at_ms`
        (this process's clock by default), looking FOLD_DAYS back: the sweeper does once an
        hour. Returns how many blocks of indexes were folded."""
        now = local_now_ms() if at_ms is None else at_ms
        counts = await asyncio.gather(*(self._fold_closed(shard, now) for shard in self._shards))
        return sum(counts)

    async def _fold_closed(self, shard: Shard, now_ms: int) -> int:
        last = local_date(now_ms, shard.settings.stats_zone) - timedelta(days=2)
        folded = 0
        for back in range(FOLD_DAYS - 1, -1, -1):
            folded += await self._fold(shard, last - timedelta(days=back))
        return folded

    async def fold(self, day: date) -> int:
        """Folds a day that has ended into the compact layout on every shard, a few blocks of
        indexes a call; a period that ends later adds to it apart. Returns how many blocks
        were folded by this call (0 if it was folded already)."""
        return sum(await asyncio.gather(*(self._fold(shard, day) for shard in self._shards)))

    async def _fold(self, shard: Shard, day: date) -> int:
        number = day_number(day)
        marker, bitmap, counters, directory = shard.keys.online_folded(number)
        expire_ms = (
            day_start_ms(day + timedelta(days=1), shard.settings.stats_zone)
            + shard.settings.analytics_ms
        )
        folded = 0
        while True:
            reply = await shard.run(
                ScriptName.FOLD_ONLINE_TIME,
                named(
                    next_index=shard.keys.next_index,
                    marker=marker,
                    bitmap=bitmap,
                    counters=counters,
                    directory=directory,
                ),
                named(shard=shard.options, day=number, blocks=FOLD_BLOCKS, expire_ms=expire_ms),
            )
            now_folded, done, blocks = (int(n) for n in reply)
            folded += now_folded
            if done >= blocks:
                return folded

    async def carry_over(self) -> int:
        """Carries the online time kept in the layout of earlier versions (ot:<span>:<block>)
        into each day's keys, a few script calls per old key, the last of which deletes it:
        the sweeper does
        once an hour, until a whole SCAN of a shard finds none, then never again there.
        Returns how many old keys this call carried."""
        return sum(await asyncio.gather(*(self._carry_over(shard) for shard in self._shards)))

    async def _carry_over(self, shard: Shard) -> int:
        k = shard.keys
        if await guarded(shard.redis.get(k.online_time_carried)) is not None:
            return 0
        # A shard that never handed out an index kept no online time, in any layout: nothing
        # to carry, and nothing written (its pass runs once it has users).
        if not await guarded(shard.redis.exists(k.next_index)):
            return 0
        old = re.compile(re.escape(k.online_time()) + r"(\d+):(\d+)")
        redis = shard.redis
        node = (
            redis.get_node_from_key(k.online_time_carried)
            if isinstance(redis, RedisCluster)
            else None
        )
        cursor, found = 0, 0
        while True:
            if node is None:
                cursor, names = await guarded(
                    redis.scan(cursor, match=k.old_online_time_match, count=CARRY_SCAN)
                )
            else:
                cursors, names = await guarded(
                    redis.scan(
                        cursor, match=k.old_online_time_match, count=CARRY_SCAN, target_nodes=node
                    )
                )
                cursor = cursors[node.name]
            for name in names:
                match = old.fullmatch(name.decode() if isinstance(name, bytes) else name)
                if match is None:
                    continue
                found += 1
                while True:
                    _, left = await shard.run(
                        ScriptName.CARRY_ONLINE_TIME,
                        named(old=match.group(0)),
                        named(
                            shard=shard.options,
                            span=int(match.group(1)),
                            block=int(match.group(2)),
                            days=CARRY_DAYS,
                        ),
                    )
                    if int(left) == 0:
                        break
            if int(cursor) == 0:
                break
        if found == 0:
            # Not after a pass that found some: a process of the earlier version still running
            # may write more, which the next pass carries.
            await guarded(shard.redis.set(k.online_time_carried, "done"))
        return found

    async def online_periods(self, start: datetime, end: datetime) -> PeriodLengths:
        """The online periods that ended in the hours overlapping [start, end]."""
        hours = check_hours(start, end)
        replies = await asyncio.gather(
            *(
                shard.run(
                    ScriptName.ONLINE_PERIODS, named(periods=_period_keys(shard, hours)), named()
                )
                for shard in self._shards
            )
        )
        totals = [sum(int(r[i]) for r in replies) for i in range(LAST_BUCKET + 3)]
        return period_lengths(totals[0], totals[1], totals[2:])


def _period_keys(shard: Shard, hours: list[int]) -> list[str]:
    """The keys of these consecutive hours: a UTC day's for each whole day among them, an
    hour's for the rest."""
    keys, hour = [], hours[0]
    while hour <= hours[-1]:
        if hour % 24 == 0 and hour + 23 <= hours[-1]:
            keys.append(shard.keys.period_lengths_by_day(hour // 24))
            hour += 24
        else:
            keys.append(shard.keys.period_lengths(hour))
            hour += 1
    return keys


def period_lengths(count: int, length_ms: int, buckets: Sequence[int]) -> PeriodLengths:
    """The figures of `count` periods of `length_ms` in all, whose buckets hold `buckets`."""
    if count == 0:
        return PeriodLengths(0, None, (None,) * len(QUANTILES), ())
    used = [b for b, n in enumerate(buckets) if n]
    shown = tuple(
        LengthBucket(None if (ms := bucket_bound_ms(b)) is None else ms / 1000, buckets[b])
        for b in range(used[0], used[-1] + 1)
    )
    return PeriodLengths(
        count,
        length_ms / count / 1000,
        tuple(_quantile(buckets, count, q) for q in QUANTILES),
        shown,
    )


def _quantile(buckets: Sequence[int], count: int, q: float) -> float:
    """The length at rank ceil(q * count) (seconds), from its bucket."""
    rank = max(1, math.ceil(q * count))
    seen = 0
    for b, n in enumerate(buckets):
        seen += n
        if seen >= rank:
            return _middle_ms(b) / 1000
    raise RuntimeError("the buckets hold fewer periods than their count")
