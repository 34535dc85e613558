"""Who and when: active, new, returning, resurrected and dormant users by hour, day, week and
month, retention cohorts and stickiness, exact, from the bitmaps the scripts that record
activity keep (lua/includes/activity.lua; docs/design.md, "Who and when").

Each user lives in one shard, with their bit in that shard's bitmaps only: every figure is
the sum of the shards' figures."""

from __future__ import annotations

import asyncio
import bisect
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from enum import StrEnum
from zoneinfo import ZoneInfo

from gql_presence.store.days import DAY_MS, day_start_ms, from_ms, local_date, local_now_ms, to_ms
from gql_presence.store.errors import BadInputError
from gql_presence.store.keys import Keys
from gql_presence.store.scripts import ScriptName
from gql_presence.store.shard import Named, Shard, guarded, named
from gql_presence.store.validation import check_at

HOUR_MS = 3_600_000
MAX_PERIODS = 744
MAX_COHORTS = 52
MAX_STICKY_DAYS = 90
# The most periods one activity_periods call counts: a call holds Redis for well under a ms
# per hundred bitmaps of a million users.
PERIODS_PER_CALL = 200
# The most days of hourly peaks one peaks call reads.
PEAK_DAYS_PER_CALL = 100
# Dates whose periods, and the periods before and after them, are calendar dates.
FIRST_DATE = date(1971, 1, 1)
LAST_DATE = date(9998, 12, 31)
STICKINESS_SCRATCH = 17
# An hour is folded into counts (lua/fold_hour.lua) this long after it ends, leaving time for
# late writes (a lease's last renewal, the sweep's); its cohort's row of hourly retention is
# filled in as each of the 52 hours after it is folded.
FOLD_AFTER_MS = 2 * HOUR_MS
# How far back a fold looks for hours not folded yet (a sweeper stopped, an upgrade): older
# ones stay bitmaps until they expire, and are read as such.
FOLD_CATCH_UP_MS = 7 * DAY_MS


class Granularity(StrEnum):
    HOUR = "HOUR"
    DAY = "DAY"
    WEEK = "WEEK"
    MONTH = "MONTH"


@dataclass(frozen=True)
class ActivityPeriod:
    start: datetime
    active_users: int
    new_users: int
    returning_users: int
    resurrected_users: int
    dormant_users: int
    peak_online: int
    peak_at: datetime | None


@dataclass(frozen=True)
class RetentionCohort:
    start: datetime
    size: int
    retained: tuple[int, ...]


@dataclass(frozen=True)
class Stickiness:
    end_date: date
    days: int
    active_users: int
    ratio: float
    active_days: tuple[int, ...]


@dataclass(frozen=True)
class Period:
    """A period of the stats time zone: an hour (`hour` its place in the day) or a day, week
    or month (`first`: its first day)."""

    granularity: Granularity
    first: date
    hour: int
    start_ms: int

    def days(self) -> list[date]:
        """The days it covers (an hour: its own)."""
        if self.granularity in (Granularity.HOUR, Granularity.DAY):
            return [self.first]
        count = (self.after_first() - self.first).days
        return [self.first + timedelta(days=i) for i in range(count)]

    def after_first(self) -> date:
        if self.granularity is Granularity.WEEK:
            return self.first + timedelta(days=7)
        if self.granularity is Granularity.MONTH:
            month = self.first.month % 12 + 1
            return date(self.first.year + (month == 1), month, 1)
        return self.first + timedelta(days=1)

    def first_key(self, keys: Keys) -> str:
        """The bitmap of the users first active in it (for an hour: in its day)."""
        if self.granularity is Granularity.WEEK:
            return keys.first_week(self.first.isoformat())
        if self.granularity is Granularity.MONTH:
            return keys.first_month(self.first.isoformat()[:7])
        return keys.first_day(self.first.isoformat())

    def folds(self, keys: Keys) -> str:
        """An hour's: the record of its day's folded hours (lua/fold_hour.lua)."""
        return keys.hour_folds(self.first.isoformat())

    def pair(self, keys: Keys) -> list[str]:
        """An hour's bitmap, and its bitmap as it was folded (lua/fold_hour.lua)."""
        return [keys.hour(str(self.start_ms)), keys.folded_hour(str(self.start_ms))]

    def key(self, keys: Keys) -> str:
        """Its bitmap."""
        if self.granularity is Granularity.HOUR:
            return keys.hour(str(self.start_ms))
        if self.granularity is Granularity.DAY:
            return keys.day(self.first.isoformat())
        if self.granularity is Granularity.WEEK:
            return keys.week(self.first.isoformat())
        return keys.month(self.first.isoformat()[:7])


@dataclass(frozen=True)
class _Call:
    """One activity_periods call: its periods (the first is `first`), and the bitmaps of the
    users first active in each (for hours: in the day)."""

    first: Period
    periods: Sequence[Period]
    firsts: Sequence[str]


class Calendar:
    """Periods of one granularity in the stats time zone."""

    def __init__(self, granularity: Granularity, zone: ZoneInfo) -> None:
        self.granularity, self.zone = granularity, zone

    def _first_of(self, day: date) -> date:
        if self.granularity is Granularity.WEEK:
            return day - timedelta(days=day.weekday())
        if self.granularity is Granularity.MONTH:
            return day.replace(day=1)
        return day

    def hours_in(self, day: date) -> int:
        start = day_start_ms(day, self.zone)
        return -(-(day_start_ms(day + timedelta(days=1), self.zone) - start) // HOUR_MS)

    def _period(self, first: date, hour: int = 0) -> Period:
        return Period(
            self.granularity, first, hour, day_start_ms(first, self.zone) + hour * HOUR_MS
        )

    def holding(self, moment_ms: int) -> Period:
        day = local_date(moment_ms, self.zone)
        if self.granularity is not Granularity.HOUR:
            return self._period(self._first_of(day))
        return self._period(day, (moment_ms - day_start_ms(day, self.zone)) // HOUR_MS)

    def of_date(self, day: date) -> Period:
        """The period holding the start of the day."""
        return self._period(self._first_of(day))

    def after(self, period: Period) -> Period:
        if self.granularity is not Granularity.HOUR:
            return self._period(period.after_first())
        if period.hour + 1 < self.hours_in(period.first):
            return self._period(period.first, period.hour + 1)
        return self._period(period.first + timedelta(days=1))

    def before(self, period: Period) -> Period:
        if self.granularity is Granularity.HOUR:
            if period.hour > 0:
                return self._period(period.first, period.hour - 1)
            day = period.first - timedelta(days=1)
            return self._period(day, self.hours_in(day) - 1)
        return self._period(self._first_of(period.first - timedelta(days=1)))

    def starting_in(self, start_ms: int, end_ms: int) -> list[Period]:
        """The periods that start in [start_ms, end_ms], at most MAX_PERIODS."""
        period = self.holding(start_ms)
        if period.start_ms < start_ms:
            period = self.after(period)
        periods: list[Period] = []
        while period.start_ms <= end_ms:
            if len(periods) == MAX_PERIODS:
                raise BadInputError(
                    f"activity lists at most {MAX_PERIODS} periods, and from and to hold more "
                    f"{self.granularity.value.lower()}s than that: narrow the range or choose "
                    "a longer granularity."
                )
            periods.append(period)
            period = self.after(period)
        return periods

    def run(self, first: Period, count: int) -> Iterator[Period]:
        period = first
        for _ in range(count):
            yield period
            period = self.after(period)


class Analytics:
    """The figures of activity over the deployment's shards (PresenceStore.analytics)."""

    def __init__(self, shards: Sequence[Shard]) -> None:
        self._shards = shards
        settings = shards[0].settings
        self._zone = settings.stats_zone
        self._analytics_ms = settings.analytics_ms
        self._hourly_ms = settings.hourly_ms
        # The start of the newest hour this process has folded in every shard.
        self._folded_through = 0
        # How long after its start a period's bitmaps are all still kept: its own and that of
        # the users first active in it (for an hour: in its day, and its day's earlier hours).
        self._kept_ms = {
            Granularity.HOUR: HOUR_MS + min(settings.hourly_ms, settings.retention_ms),
            Granularity.DAY: DAY_MS + settings.retention_ms,
            Granularity.WEEK: DAY_MS + settings.analytics_ms,
            Granularity.MONTH: DAY_MS + settings.analytics_ms,
        }

    async def _now_ms(self) -> int:
        seconds, micros = await guarded(self._shards[0].redis.time())
        return int(seconds) * 1000 + int(micros) // 1000

    def _counted(self, period: Period, now_ms: int) -> bool:
        """Whether the period has begun and everything that counts it is kept; a period
        outside what is kept counts 0."""
        start = period.start_ms
        if period.granularity is Granularity.HOUR:
            start = day_start_ms(period.first, self._zone)
        return period.start_ms <= now_ms and start + self._kept_ms[period.granularity] > now_ms

    def periods_starting_in(
        self, start: datetime, end: datetime, granularity: Granularity
    ) -> list[Period]:
        """The periods activity lists, which its work grows with; BadInputError unless the
        range is allowed."""
        if start > end:
            raise BadInputError("from must not be later than to.")
        check_dates(start.date(), end.date())
        return Calendar(granularity, self._zone).starting_in(to_ms(start), to_ms(end))

    async def activity(
        self, start: datetime, end: datetime, granularity: Granularity
    ) -> list[ActivityPeriod]:
        periods = self.periods_starting_in(start, end, granularity)
        calendar = Calendar(granularity, self._zone)
        now_ms = await self._now_ms()
        counted = [p for p in periods if self._counted(p, now_ms)]
        parts = await asyncio.gather(
            *(self._activity_of(shard, calendar, counted, now_ms) for shard in self._shards)
        )
        figures: dict[int, list[int]] = {}
        for part in parts:
            for start_ms, values in part.items():
                total = figures.setdefault(start_ms, [0, 0, 0])
                for i, value in enumerate(values):
                    total[i] += value
        peaks = await self._peaks({d for p in counted for d in p.days()}, now_ms)
        rows = []
        for period in periods:
            peak_online, peak_at = 0, None
            if self._counted(period, now_ms):
                peak_online, peak_at = peaks.peak(period.start_ms, calendar.after(period).start_ms)
            active, returning, new = figures.get(period.start_ms, [0, 0, 0])
            if not self._counted(period, now_ms):
                active = returning = new = 0
            before = calendar.before(period)
            active_before = figures.get(before.start_ms, [0])[0]
            rows.append(
                ActivityPeriod(
                    start=from_ms(period.start_ms),
                    active_users=active,
                    new_users=new,
                    returning_users=returning,
                    resurrected_users=active - returning - new,
                    dormant_users=active_before - returning,
                    peak_online=peak_online,
                    peak_at=None if peak_at is None else from_ms(peak_at),
                )
            )
        return rows

    async def record_peak(self, online: int, at: datetime | None = None) -> None:
        """Records `online`, the users online now as the sweep of every shard counted them,
        into the peak of the hour: the sweeper does after each sweep, every second or so.
        `at` backfills a count of another moment, for sample data."""
        if online <= 0:
            return
        shard = self._shards[0]
        now_ms = local_now_ms()
        at_ms = None if at is None else check_at(to_ms(at), now_ms, self._analytics_ms)
        hour = Calendar(Granularity.HOUR, self._zone).holding(now_ms if at_ms is None else at_ms)
        after = day_start_ms(hour.first + timedelta(days=1), self._zone)
        await shard.run(
            ScriptName.RECORD_PEAK,
            named(peaks=shard.keys.peaks(hour.first.isoformat())),
            named(
                hour_ms=hour.start_ms,
                hour_end_ms=hour.start_ms + HOUR_MS,
                online=online,
                keep_until_ms=after + self._analytics_ms,
                at_ms="" if at_ms is None else at_ms,
            ),
        )

    async def compact_ended(self, at_ms: int | None = None) -> int:
        """Rewrites to their exact size the bitmaps of the hour that ended an hour before
        `at_ms` (this process's clock by default), and of the day, week and month that ended
        with it, leaving room an hour for late writes, the day's first-timers turned into a
        list (lua/includes/first_lists.lua): the sweeper does once an hour. A later write into
        one (a backfill, a lease's last renewal) only grows it again, or turns the list back
        into its bitmap. Returns how many bitmaps were rewritten."""
        hours = Calendar(Granularity.HOUR, self._zone)
        ended = hours.before(
            hours.before(hours.holding(local_now_ms() if at_ms is None else at_ms))
        )
        periods = [ended]
        next_day = ended.first + timedelta(days=1)
        if hours.after(ended).first == next_day:
            for granularity in (Granularity.DAY, Granularity.WEEK, Granularity.MONTH):
                calendar = Calendar(granularity, self._zone)
                period = calendar.of_date(ended.first)
                if calendar.after(period).first == next_day:
                    periods.append(period)
        # The day's first-timers go last: the script turns them into a list.
        firsts = [*periods[2:], *periods[1:2]]
        counts = await asyncio.gather(
            *(
                shard.run(
                    ScriptName.COMPACT_BITMAPS,
                    named(
                        bitmaps=[p.key(shard.keys) for p in periods]
                        + [p.first_key(shard.keys) for p in firsts]
                    ),
                    named(lists=len(periods[1:2])),
                )
                for shard in self._shards
            )
        )
        return sum(int(count) for count in counts)

    async def fold_ended(self, at_ms: int | None = None) -> int:
        """Folds into counts, in order, each hour that ended FOLD_AFTER_MS or more before
        `at_ms` (this process's clock by default) and is not folded yet, looking back
        FOLD_CATCH_UP_MS at most: the sweeper does once an hour. Each fold keeps the hour's
        figures of `activity` and its row of hourly `retention`, and deletes the bitmaps that
        no fold or figure needs any more. Returns how many hours were folded, over the
        shards."""
        hours = Calendar(Granularity.HOUR, self._zone)
        at = local_now_ms() if at_ms is None else at_ms
        last = hours.before(hours.holding(at - FOLD_AFTER_MS))
        first = hours.holding(max(last.start_ms - FOLD_CATCH_UP_MS, self._folded_through + 1))
        if first.start_ms <= self._folded_through:
            first = hours.after(first)
        now_ms = await self._now_ms()
        due = [p for p in _until(hours, first, last.start_ms) if self._counted(p, now_ms)]

        async def fold_in(shard: Shard) -> int:
            folded = 0
            for hour in due:
                keys, args = self._fold_call(shard, hours, hour, now_ms)
                reply = await shard.run(ScriptName.FOLD_HOUR, keys, args)
                folded += int(reply[0])
            return folded

        counts = await asyncio.gather(*(fold_in(shard) for shard in self._shards))
        self._folded_through = max(self._folded_through, last.start_ms)
        return sum(counts)

    def _fold_call(
        self, shard: Shard, hours: Calendar, hour: Period, now_ms: int
    ) -> tuple[Named, Named]:
        """fold_hour's KEYS and ARGV for the hour: the bitmaps it reads, the cohorts whose rows
        it fills a column of (those of the 52 hours before it), and the bitmaps that may go
        once it is folded (guarded by every hour still counted that reads them): the day's
        earlier hours, whose first-timers the day's seen bitmap holds from this fold on, the
        hour before when it is the day's first, and the seen bitmap when it is the day's
        last."""
        k = shard.keys
        count = hours.hours_in(hour.first)
        day = list(hours.run(hours.holding(day_start_ms(hour.first, self._zone)), count))
        back: list[Period] = []
        for _ in range(MAX_COHORTS):
            back.append(hours.before(back[-1] if back else hour))
        doomed = day[: hour.hour] if hour.hour > 0 else back[:1]
        seen = k.hour_seen(hour.first.isoformat())
        guard: list[Period] = []
        if doomed:
            # Whatever reads an hour's bitmap: its own fold and figures, the next hour's, and
            # those of the 52 cohorts before it (the day's later hours read seen instead).
            guard_start = doomed[0]
            for _ in range(MAX_COHORTS):
                guard_start = hours.before(guard_start)
            guard = [
                p for p in _until(hours, guard_start, hour.start_ms) if self._counted(p, now_ms)
            ]
        records = list(dict.fromkeys(p.folds(k) for p in [hour, *back, *guard]))
        after_day = day_start_ms(hour.first + timedelta(days=1), self._zone)
        return named(
            record=hour.folds(k),
            cohort=k.scratch,
            scratch=k.scratch_of("seen"),
            first_day=k.first_day(hour.first.isoformat()),
            day=k.day(hour.first.isoformat()),
            seen=seen,
            list=k.hour_cohort(str(hour.start_ms)),
            keys=[
                *(key for p in [hour, *back] for key in p.pair(k)),
                *(k.hour_cohort(str(p.start_ms)) for p in back),
                *records,
                *(key for p in doomed for key in reversed(p.pair(k))),
                *([seen] if hour.hour == count - 1 else []),
            ],
        ), named(
            start=hour.start_ms,
            keep_until_ms=after_day + self._hourly_ms + HOUR_MS,
            before=len(back),
            earlier=hour.hour,
            records=len(records),
            cohorts=[f"{records.index(p.folds(k)) + 1} {p.start_ms}" for p in back],
            guard=[f"{records.index(p.folds(k)) + 1} {p.start_ms}" for p in guard],
        )

    async def _peaks(self, days: Iterable[date], now_ms: int) -> Peaks:
        """The hourly peaks of the days still kept among these."""
        shard = self._shards[0]
        kept = sorted(
            d.isoformat()
            for d in days
            if day_start_ms(d, self._zone) + DAY_MS + self._analytics_ms > now_ms
        )
        calls = [
            named(peaks=[shard.keys.peaks(label) for label in kept[i : i + PEAK_DAYS_PER_CALL]])
            for i in range(0, len(kept), PEAK_DAYS_PER_CALL)
        ]
        replies = await asyncio.gather(*(shard.run(ScriptName.PEAKS, c, named()) for c in calls))
        hours: dict[int, tuple[int, int]] = {}
        for reply in replies:
            at = 0
            while at < len(reply):
                fields, at = int(reply[at]), at + 1
                for _ in range(fields):
                    count, when = _text(reply[at + 1]).split()
                    hours[int(_text(reply[at]))] = (int(count), int(when))
                    at += 2
        return Peaks(hours)

    async def _activity_of(
        self, shard: Shard, calendar: Calendar, periods: Sequence[Period], now_ms: int
    ) -> dict[int, list[int]]:
        """The shard's figures of each period, by its start: active, returning, new (and of
        the period before each call's first, its active users alone)."""
        k = shard.keys
        calls: list[_Call] = []
        if calendar.granularity is Granularity.HOUR:
            for day in dict.fromkeys(p.first for p in periods):
                first = calendar.holding(day_start_ms(day, self._zone))
                hours = calendar.run(first, calendar.hours_in(day))
                begun = [p for p in hours if p.start_ms <= now_ms]
                calls.append(_Call(first, begun, [k.first_day(day.isoformat())]))
        else:
            for at in range(0, len(periods), PERIODS_PER_CALL):
                chunk = periods[at : at + PERIODS_PER_CALL]
                calls.append(_Call(chunk[0], chunk, [p.first_key(k) for p in chunk]))
        replies = await asyncio.gather(
            *(self._periods_call(shard, calendar, call, now_ms) for call in calls)
        )
        figures: dict[int, list[int]] = {}
        for call, reply in zip(calls, replies, strict=True):
            before = calendar.before(call.first)
            if self._counted(before, now_ms) and before.start_ms not in figures:
                figures[before.start_ms] = [reply[0], 0, 0]
            for i, period in enumerate(call.periods):
                figures[period.start_ms] = list(reply[1 + 3 * i : 4 + 3 * i])
        return figures

    async def _periods_call(
        self, shard: Shard, calendar: Calendar, call: _Call, now_ms: int
    ) -> list[int]:
        k = shard.keys
        chunk, firsts = call.periods, call.firsts
        before = calendar.before(call.first)
        hours = calendar.granularity is Granularity.HOUR
        bitmaps = [*(p.key(k) for p in chunk), *firsts]
        starts: list[int] = []
        if hours:
            seen = k.hour_seen(chunk[0].first.isoformat())
            bitmaps = [chunk[0].folds(k), before.folds(k), *firsts, seen, before.pair(k)[1]]
            bitmaps += [p.pair(k)[0] for p in chunk] + [p.pair(k)[1] for p in chunk]
            starts = [before.start_ms, *(p.start_ms for p in chunk)]
        reply = await shard.run(
            ScriptName.ACTIVITY_PERIODS,
            named(
                scratch=k.scratch, seen=k.scratch_of("seen"), before=before.key(k), bitmaps=bitmaps
            ),
            named(
                mode="hours" if hours else "periods",
                before_counted=int(self._counted(before, now_ms)),
                starts=starts,
            ),
        )
        return [int(n) for n in reply]

    async def retention(
        self, start: date, cohorts: int, periods: int, granularity: Granularity
    ) -> list[RetentionCohort]:
        retention_periods(start, cohorts, periods, granularity)
        calendar = Calendar(granularity, self._zone)
        now_ms = await self._now_ms()
        heads = list(calendar.run(calendar.of_date(start), cohorts))
        follow = [list(calendar.run(head, periods + 1)) for head in heads]
        parts = await asyncio.gather(
            *(
                self._cohort(shard, calendar, row, now_ms)
                for row in follow
                for shard in self._shards
            )
        )
        result = []
        shards = len(self._shards)
        for i, row in enumerate(follow):
            begun = [p for p in row if p.start_ms <= now_ms]
            of_row = parts[i * shards : (i + 1) * shards]
            sums = [sum(column) for column in zip(*of_row, strict=True)]
            retained = [
                n if self._counted(p, now_ms) else 0 for p, n in zip(begun, sums, strict=False)
            ]
            result.append(
                RetentionCohort(
                    start=from_ms(row[0].start_ms),
                    size=retained[0] if retained else 0,
                    retained=tuple(retained),
                )
            )
        return result

    async def _cohort(
        self, shard: Shard, calendar: Calendar, row: Sequence[Period], now_ms: int
    ) -> list[int]:
        """The shard's cohort of row[0], and how many of it are in each later period begun."""
        head = row[0]
        if head.start_ms > now_ms:
            return [0] * len(row)
        k = shard.keys
        begun = [p for p in row[1:] if p.start_ms <= now_ms]
        earlier: list[Period] = []
        if calendar.granularity is Granularity.HOUR:
            first_hour = calendar.holding(day_start_ms(head.first, self._zone))
            earlier = list(calendar.run(first_hour, head.hour))
            seen = k.hour_seen(head.first.isoformat())
            cohort = [head.folds(k), k.first_day(head.first.isoformat()), seen]
            cohort += [k.hour_cohort(str(head.start_ms)), *head.pair(k)]
            cohort += [key for p in earlier for key in p.pair(k)]
            later = [key for p in begun for key in p.pair(k)]
        else:
            cohort = [head.first_key(k)]
            later = [p.key(k) for p in begun]
        hours = calendar.granularity is Granularity.HOUR
        reply = await shard.run(
            ScriptName.RETENTION,
            named(cohort=k.scratch, scratch=k.scratch_of("seen"), keys=[*cohort, *later]),
            named(
                mode="hours" if hours else "periods",
                cohort_keys=len(cohort),
                start=head.start_ms if hours else "",
                starts=[p.start_ms for p in earlier],
            ),
        )
        counts = [int(n) for n in reply]
        return counts + [0] * (len(row) - len(counts))

    async def stickiness(self, end_date: date | None, days: int) -> Stickiness:
        sticky_days(days)
        now_ms = await self._now_ms()
        end_date = local_date(now_ms, self._zone) if end_date is None else end_date
        check_dates(end_date, end_date)
        calendar = Calendar(Granularity.DAY, self._zone)
        first = calendar.of_date(end_date - timedelta(days=days - 1))
        counted = [p for p in calendar.run(first, days) if self._counted(p, now_ms)]
        parts = await asyncio.gather(
            *(self._sticky_of(shard, counted, days) for shard in self._shards)
        )
        sums = [sum(column) for column in zip(*parts, strict=True)]
        active, daily = sums[0], sums[1]
        return Stickiness(
            end_date=end_date,
            days=days,
            active_users=active,
            ratio=daily / days / active if active else 0.0,
            active_days=tuple(sums[2:]),
        )

    async def _sticky_of(self, shard: Shard, counted: Sequence[Period], days: int) -> list[int]:
        k = shard.keys
        reply = await shard.run(
            ScriptName.STICKINESS,
            named(
                scratch=[k.scratch_of(str(i)) for i in range(STICKINESS_SCRATCH)],
                days=[p.key(k) for p in counted],
            ),
            named(days=days),
        )
        return [int(n) for n in reply]


class Peaks:
    """Hourly peaks online, by the hour's start (ms): (count, when first reached, ms)."""

    def __init__(self, hours: dict[int, tuple[int, int]]) -> None:
        self._starts = sorted(hours)
        self._hours = hours

    def peak(self, start_ms: int, end_ms: int) -> tuple[int, int | None]:
        """The highest peak of the hours in [start_ms, end_ms), and when it was first reached;
        (0, None) when nobody was online."""
        first = bisect.bisect_left(self._starts, start_ms)
        last = bisect.bisect_left(self._starts, end_ms)
        best: tuple[int, int | None] = (0, None)
        for hour in self._starts[first:last]:
            count, when = self._hours[hour]
            if count > best[0] or (count == best[0] and best[1] is not None and when < best[1]):
                best = (count, when)
        return best


def _until(calendar: Calendar, first: Period, last_start_ms: int) -> Iterator[Period]:
    """The periods from `first` on that start by `last_start_ms`."""
    period = first
    while period.start_ms <= last_start_ms:
        yield period
        period = calendar.after(period)


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


def sticky_days(days: int) -> int:
    """The days stickiness counts, which its work grows with; BadInputError unless allowed."""
    if not 1 <= days <= MAX_STICKY_DAYS:
        raise BadInputError(f"days must be between 1 and {MAX_STICKY_DAYS}, not {days}.")
    return days


def retention_periods(start: date, cohorts: int, periods: int, granularity: Granularity) -> int:
    """How many periods retention reads (each cohort's own and those after it), which its
    work grows with; BadInputError unless the arguments are allowed."""
    for name, value in (("cohorts", cohorts), ("periods", periods)):
        if not 1 <= value <= MAX_COHORTS:
            raise BadInputError(f"{name} must be between 1 and {MAX_COHORTS}, not {value}.")
    check_dates(start, start)
    # At least the days that many periods span (an hour's day may have 25 hours).
    span = cohorts + periods
    days = {
        Granularity.HOUR: span // 24 + 2,
        Granularity.DAY: span,
        Granularity.WEEK: span * 7,
        Granularity.MONTH: span * 31,
    }[granularity]
    if start > LAST_DATE - timedelta(days=days):
        raise BadInputError(
            f"retention's cohorts, and the periods after them, must end by {LAST_DATE}: "
            "choose an earlier from, or fewer cohorts or periods."
        )
    return cohorts * (periods + 1)


def check_dates(first: date, last: date) -> None:
    if first < FIRST_DATE or last > LAST_DATE:
        raise BadInputError(f"Dates must lie between {FIRST_DATE} and {LAST_DATE}.")
