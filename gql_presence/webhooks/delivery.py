"""The delivery of webhooks, run by every `serve` process: the deployment's processes share the
webhooks' deliveries among them, one lease per webhook and shard of the feed, so that no two
send one webhook's batches of one shard at once.

A process holding a lease reads the shard's feed after the webhook's position, sends one
batch at a time, and moves the position only once the receiver has acknowledged the batch,
under the lease (lua/advance_webhook.lua): whatever a process was sending when it died is
sent again, with the same `webhook-id` and body, by the process that takes its lease after it
lapsed. Before sending, the end of the batch is kept (ShardProgress.pending), so that the one
who sends it again sends the same changes, not more. A delivery with nothing after its position
waits, with no Redis work, until the process's one look per shard at the feed's new entries
(ShardTips) sees one it may want, or a replay is asked for; the look passes it over the others
(and, on a quiet feed, on to the present, so that its position never grows older than what the
feed keeps), for all the waiting deliveries of a shard in one call now and then; what the looks
read after its position is the page it wakes to. As the lease's holder alone moves its
position, a delivery goes on from the webhook as it read it and the position as it wrote it,
with no read of its own: each of its writes checks that both are unchanged (a change made
meanwhile, a secret rotated, a lease lost and taken again), and it reads them again if not.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Protocol

from gql_presence.store.errors import BadInputError, CursorExpiredError, PresenceError
from gql_presence.store.feed import EXAMINED_PER_SHARD, Change, EventCursors, Feed
from gql_presence.store.models import ShardProgress, Webhook
from gql_presence.store.quiet import UNTRACED
from gql_presence.store.webhooks import (
    AcknowledgedAttempt,
    ChangedError,
    Webhooks,
    advanced,
    filters_of,
)
from gql_presence.tasks import stop
from gql_presence.webhooks.batches import (
    Entry,
    Renderings,
    batch_id,
    ms_of,
    plan,
    waking,
)
from gql_presence.webhooks.sender import MAX_BATCH, Batch, Outcome, Sender

log = logging.getLogger("gql_presence")
# Entries of the feed read at each step: enough for a full batch and what its filters pass
# over (a webhook with a debounce reads EXAMINED_PER_SHARD, as its decisions look ahead).
READ_PER_STEP = 2 * MAX_BATCH


@dataclass(frozen=True)
class DeliverySettings:
    # A lease lapses this long after its holder's last renewal: what a dead process was
    # sending is sent again by another within it (and a tick).
    lease_ms: int = 10_000
    # How often a delivery with nothing to send looks at the feed again.
    poll_ms: int = 250
    # The waits before each retry of a batch, the last one repeated; each with up to 20% added.
    retry_ms: tuple[int, ...] = (1000, 5000, 30_000, 120_000, 600_000, 1_800_000, 3_600_000)
    # A webhook failing with no success for this long is disabled.
    disable_after_ms: int = 86_400_000
    # How old the first change a waiting delivery may send is when it wakes (unless a full
    # batch waits): the changes made meanwhile go in the same request. What it trades is
    # latency (a change alone arrives this much later) for fewer requests when changes trickle
    # in.
    batch_wait_ms: int = 0
    # How often the waiting deliveries' positions are moved past what they passed over (at
    # most a quarter of the feed's retention).
    pass_ms: int = 10_000
    # How often a tick reads every webhook although no change to them was counted: a change
    # made by a process of an earlier release (which counts none), or a count that went back
    # with a failover, is taken within this.
    reread_ms: int = 30_000


class Observer(Protocol):
    """Who is told of each request and of each backlog counted (metrics, traces)."""

    def request(
        self,
        webhook_id: str,
        shard: int,
        *,
        delivery_id: str,
        changes: int,
        status: int | None,
        acknowledged: bool,
        started_ns: int,
        ended_ns: int,
    ) -> None: ...

    def backlog(self, webhook_id: str, shard: int, backlog: int, oldest_ms: int) -> None: ...


class Unobserved:
    def request(
        self,
        webhook_id: str,
        shard: int,
        *,
        delivery_id: str,
        changes: int,
        status: int | None,
        acknowledged: bool,
        started_ns: int,
        ended_ns: int,
    ) -> None:
        pass

    def backlog(self, webhook_id: str, shard: int, backlog: int, oldest_ms: int) -> None:
        pass


# Entries of a shard read at most by one look of ShardTips.
LOOK_COUNT = 1000


@dataclass
class _Waiting:
    """A delivery waiting for new entries it may want."""

    webhook: Webhook
    wants: Callable[[Change], bool]
    # Where it stands, as kept in Redis.
    progress: ShardProgress
    # The entries up to here are none it wants.
    checked: str
    # The entries up to here have been looked at.
    seen: str
    wake: asyncio.Event
    # The first entry it may want ("": none yet), and how many it may want have been seen.
    first: str = ""
    wanted: int = 0
    # Every entry after its position up to `seen`, as the looks read them: its step's page of
    # the feed, with no read of its own (None once more than a step reads).
    entries: list[Entry] | None = field(default_factory=list)


class ShardTips:
    """The new entries of each shard's feed, for the deliveries with nothing left to send:
    they wait here, with no Redis work, and one look at each shard they wait on, every poll,
    wakes only those that may want an entry it found, once the first of those is
    batch_wait_ms old (or a full batch of them waits), so that the changes made meanwhile go in
    the same request. The others pass over those entries: the look moves their positions, now
    and then, in one call a shard. Their cost does not grow with webhooks."""

    def __init__(
        self, feed: Feed, webhooks: Webhooks, token: str, settings: DeliverySettings
    ) -> None:
        self._feed = feed
        self._webhooks = webhooks
        self._token = token
        self._poll_s = settings.poll_ms / 1000
        self._batch_wait_ms = settings.batch_wait_ms
        # Often enough that no waiting delivery's position grows older than the feed keeps.
        self._pass_s = min(settings.pass_ms, feed.retention_ms // 4) / 1000
        # Per shard: each waiting delivery, by its wake-up, and when their positions last moved.
        self._waiting: list[dict[asyncio.Event, _Waiting]] = [{} for _ in range(feed.shards)]
        self._passed_at = [time.monotonic()] * feed.shards

    async def wait_past(
        self, shard: int, webhook: Webhook, progress: ShardProgress, wake: asyncio.Event
    ) -> tuple[ShardProgress, list[Entry] | None]:
        """Returns once the shard has entries after `progress.position` that the webhook may
        want, the first of them batch_wait_ms old or MAX_BATCH of them, or once `wake` is set
        otherwise: the progress then, moved past what it passed over, and every entry after
        its position as the looks read them (None: too many, or the feed's read failed)."""
        at = progress.position
        waiting = _Waiting(webhook, waking(webhook), progress, at, at, wake)
        self._waiting[shard][wake] = waiting
        try:
            await wake.wait()
        finally:
            self._waiting[shard].pop(wake, None)
        return waiting.progress, waiting.entries

    async def run_forever(self) -> None:
        while True:
            # At once: on one Redis, the looks at its shards leave in one round trip.
            looks = [self._look(shard, waiting) for shard, waiting in enumerate(self._waiting)]
            full = any(await asyncio.gather(*looks))
            # A look that read all it may has more to read at once.
            await asyncio.sleep(0 if full else self._poll_s)

    async def _look(self, shard: int, waiting: dict[asyncio.Event, _Waiting]) -> bool:
        """Wakes the deliveries that may want a new entry; whether the look was full."""
        if not waiting:
            return False
        try:
            after = min((w.seen for w in waiting.values()), key=_sort_key)
            try:
                bound, entries = await self._feed.shard_look(shard, after, LOOK_COUNT)
            except CursorExpiredError:
                # Entries after a position may be gone: each delivery's step finds out.
                for one in list(waiting.values()):
                    one.entries = None
                    one.wake.set()
                return False
            # The moment of the look, by the clock of the entries' ids where it is behind.
            now_ms = max(time.time_ns() // 1_000_000, ms_of(bound) + 1)
            read_from = _sort_key(after)
            for one in list(waiting.values()):
                # One that began to wait during the read, from before where it read, would
                # skip what lies between: the next look reads from its position.
                if _sort_key(one.seen) < read_from:
                    continue
                _checked(one, bound, entries)
                if one.first and (
                    ms_of(one.first) + self._batch_wait_ms <= now_ms or one.wanted >= MAX_BATCH
                ):
                    one.wake.set()
            await self._pass(shard, waiting)
        except PresenceError as error:
            log.warning("webhook deliveries of shard %s: %s", shard, error.message)
        except (ConnectionError, OSError) as error:
            log.warning("webhook deliveries of shard %s: %s", shard, error)
        except Exception:
            # A fault of ours: logged, and the looks go on (the deliveries wait on them).
            log.exception("webhook deliveries of shard %s: no look at the feed", shard)
        else:
            return len(entries) == LOOK_COUNT
        return False

    async def _pass(self, shard: int, waiting: dict[asyncio.Event, _Waiting]) -> None:
        """Moves the positions of the deliveries still waiting to what they have passed over,
        once every pass interval."""
        if time.monotonic() - self._passed_at[shard] < self._pass_s:
            return
        self._passed_at[shard] = time.monotonic()
        due = [
            one
            for one in waiting.values()
            if not one.wake.is_set() and _sort_key(one.checked) > _sort_key(one.progress.position)
        ]
        moves = [(one.webhook, one.progress, one.checked) for one in due]
        moved = await self._webhooks.pass_over(shard, self._token, moves)
        for one, now in zip(due, moved, strict=True):
            if now:
                one.progress = replace(one.progress, position=one.checked, moved=True)
                if one.entries is not None and not one.first:
                    one.entries = []  # every entry it holds was passed over
                elif one.entries is not None:
                    passed = _sort_key(one.checked)
                    one.entries = [e for e in one.entries if _sort_key(e[0]) > passed]


def _checked(one: _Waiting, bound: str, entries: Sequence[Entry]) -> None:
    """Counts the entries after what a waiting delivery has seen that it may want; it has
    seen up to `bound`, and checked up to it if it wants none of them so far."""
    if one.wake.is_set():
        return
    seen = _sort_key(one.seen)
    for entry in entries:
        entry_id, change = entry
        if _sort_key(entry_id) <= seen:
            continue
        if one.entries is not None:
            one.entries.append(entry)
            if len(one.entries) >= READ_PER_STEP:
                one.entries = None  # its step reads a page of its own
        if change is not None and one.wants(change):
            one.first = one.first or entry_id
            one.wanted += 1
    if _sort_key(bound) > seen:
        one.seen = bound
        if not one.first:
            one.checked = bound


def _sort_key(entry_id: str) -> tuple[int, int]:
    ms, _, sequence = entry_id.partition("-")
    return int(ms), int(sequence or 0)


class Deliveries:
    """This process's share of the webhooks' deliveries: its leases, renewed every tick, and a
    task per lease held."""

    def __init__(
        self,
        webhooks: Webhooks,
        feed: Feed,
        sender: Sender,
        settings: DeliverySettings,
        observe: Observer | None = None,
    ) -> None:
        self.webhooks = webhooks
        self.feed = feed
        self.sender = sender
        self.settings = settings
        self.observe: Observer = observe or Unobserved()
        self.token = uuid.uuid4().hex
        self._running: dict[tuple[str, int], asyncio.Task[None]] = {}
        # Deliveries told to stop after their request in flight, given up once they have.
        self._stopping: dict[tuple[str, int], ShardDelivery] = {}
        self._deliveries: dict[tuple[str, int], ShardDelivery] = {}
        self.tips = ShardTips(feed, webhooks, self.token, settings)
        self._renderings: Renderings | None = None
        # The enabled webhooks as the ticks last read them, the count of changes to the
        # webhooks then, and when (monotonic s): a tick reads them again only when the count
        # it is given with the leases has moved, or now and then.
        self._enabled: list[Webhook] = []
        self._changes: str | None = None
        self._read_at = 0.0

    def renderings(self, cursors: EventCursors) -> Renderings:
        """The changes rendered lately, for every delivery of this process."""
        if self._renderings is None:
            self._renderings = Renderings(cursors)
        return self._renderings

    @property
    def held(self) -> list[tuple[str, int]]:
        """The deliveries (webhook id, shard) this process holds now."""
        return sorted(self._running)

    async def run_forever(self) -> None:
        UNTRACED.set(True)  # for this task, and the deliveries it starts
        tick_s = min(self.settings.lease_ms / 3, 1000) / 1000
        tips = asyncio.create_task(self.tips.run_forever(), name="webhook feed tips")
        try:
            while True:
                try:
                    await self.tick()
                except PresenceError as error:
                    log.warning("webhook deliveries not shared out: %s", error.message)
                except Exception:
                    log.exception("webhook deliveries not shared out")
                await asyncio.sleep(tick_s)
        finally:
            tips.cancel()

    async def tick(self) -> None:
        """Keeps this process's leases, takes its share of the free ones, gives up what it
        holds beyond its share (once the request in flight is done), and starts or ends the
        deliveries accordingly."""
        # Those told to stop that have: given up now.
        done = [key for key, task in self._running.items() if task.done()]
        give_up = {key for key in done if key in self._stopping}
        for key in done:
            self._forget(key)
        if not self._enabled or time.monotonic() - self._read_at >= self.settings.reread_ms / 1000:
            await self._read_webhooks()
        taken = await self._take_leases(give_up)
        if taken is None:
            return  # a deployment without webhooks: nothing written, nothing to share
        fair, holding = taken
        for key in list(self._running):
            if key not in holding:
                # Lapsed (this process stood still), given up, or its webhook is gone or
                # disabled: someone else may send its batches now.
                self._running[key].cancel()
                self._forget(key)
        for key in sorted(holding):
            if key not in self._running:
                delivery = ShardDelivery(self, *key)
                self._deliveries[key] = delivery
                self._running[key] = asyncio.create_task(
                    delivery.run(), name=f"webhook {key[0]} shard {key[1]}"
                )
        extra = len(holding) - fair
        for key in sorted(holding - set(self._stopping), reverse=True)[: max(0, extra)]:
            self._stopping[key] = self._deliveries[key]
            self._deliveries[key].stop()
        # A replay asked for is taken by deliveries waiting for new entries too, and new
        # filters by those that wait with the ones they had.
        for webhook in self._enabled:
            for shard in range(self.feed.shards):
                waiting = self._deliveries.get((webhook.id, shard))
                if waiting is not None and waiting.outdated(webhook):
                    waiting.wake()

    async def _take_leases(
        self, give_up: set[tuple[str, int]]
    ) -> tuple[int, set[tuple[str, int]]] | None:
        """Takes the leases of the enabled webhooks' deliveries, keeps those held, gives up
        the others: the fair share, and the deliveries held (None: no lease wanted or held)."""
        holding: set[tuple[str, int]] = set()
        leaving = give_up | set(self._stopping)
        for again in (False, True):
            wanted = {
                (webhook.id, shard): (webhook.id, shard) not in leaving
                for webhook in self._enabled
                for shard in range(self.feed.shards)
            }
            # Held ones the webhooks read again no longer want (taken by the first call, from
            # the list it had) are given up.
            for key in [*self._running, *give_up, *holding]:
                wanted.setdefault(key, False)
            if not wanted:
                return None
            keys = sorted(wanted)
            fair, held, changes = await self.webhooks.take_leases(
                self.token, self.settings.lease_ms, [(*key, wanted[key]) for key in keys]
            )
            holding = {key for key, now in zip(keys, held, strict=True) if now}
            if again or changes == self._changes:
                break
            # Changed since they were read: read again, and the leases kept or given up as
            # they say, in this tick (changed again meanwhile: read at the next).
            await self._read_webhooks()
        return fair, holding

    async def _read_webhooks(self) -> None:
        self._changes, webhooks = await self.webhooks.for_tick()
        self._enabled = [webhook for webhook in webhooks if webhook.enabled]
        self._read_at = time.monotonic()

    def _forget(self, key: tuple[str, int]) -> None:
        self._running.pop(key, None)
        self._deliveries.pop(key, None)
        self._stopping.pop(key, None)

    async def close(self) -> None:
        """Ends every delivery and gives up every lease: other processes take them at once."""
        await stop(*self._running.values())
        keys = sorted(self._running)
        self._running.clear()
        self._deliveries.clear()
        self._stopping.clear()
        if keys:
            await self.webhooks.take_leases(
                self.token, self.settings.lease_ms, [(w, s, False) for w, s in keys]
            )


class ShardDelivery:
    """One webhook's delivery of one shard, while this process holds its lease."""

    def __init__(self, deliveries: Deliveries, webhook_id: str, shard: int) -> None:
        self._d = deliveries
        self._webhook_id = webhook_id
        self._shard = shard
        self._stopped = asyncio.Event()
        self._failures = 0
        # The webhook as last read, and where its delivery stands since (as this lease's
        # holder alone moves it): each step goes on from there with no read, and each write
        # checks both are unchanged (None: read at the next step).
        self._known: tuple[Webhook, ShardProgress] | None = None
        # Set by a wake: the next step reads the webhook again. A step under way goes on
        # checking its writes against what it knows, so that a request it is about to make
        # still finds out about a url, secret or filters changed since its read.
        self._read_again = False
        # Whether the step under way read them: a request needs no check of them then.
        self._fresh = False
        # The entries after a position, as the looks read them while it waited there.
        self._handed: tuple[str, list[Entry]] | None = None
        # Set by a step that left nothing after the position: the webhook it read, and where
        # it stands, to wait for new entries there.
        self._idle: tuple[Webhook, ShardProgress] | None = None
        self._wake = asyncio.Event()

    def stop(self) -> None:
        """Ends the delivery after its request in flight, if any."""
        self._stopped.set()
        self._wake.set()

    def wake(self) -> None:
        """Takes a step now, if it waits for new entries, with the webhook read again (a
        replay or new filters were asked for)."""
        self._read_again = True
        self._wake.set()

    def outdated(self, webhook: Webhook) -> bool:
        """Whether it goes on without a replay of the webhook's now (waiting for new entries,
        out a debounce or for a retry), or waits for new entries with other filters than its
        now."""
        known = self._idle or self._known
        if known is None:
            return False  # its next step reads the webhook
        waited, progress = known
        if webhook.replay_id != progress.replay_id:
            return True
        return self._idle is not None and filters_of(waited) != filters_of(webhook)

    async def _wait(self, ms: float) -> None:
        # Not asyncio.wait_for, which in Python 3.11 can lose a cancel (gql_presence/tasks.py).
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(ms / 1000):
                await self._stopped.wait()

    async def _advance(self, **progress: str) -> bool:
        """Webhooks.advance, only from where it stands as known (ChangedError otherwise)."""
        moved = await self._d.webhooks.advance(
            self._webhook_id, self._shard, self._d.token, progress, unchanged=self._known
        )
        if moved:
            self._moved(progress)
        return moved

    def _moved(self, progress: dict[str, str]) -> None:
        if self._known is not None:
            self._known = (self._known[0], advanced(self._known[1], progress))

    def _idle_here(self) -> None:
        """Waits for new entries once this step ends, where it stands now."""
        self._idle = self._known

    async def run(self) -> None:
        while not self._stopped.is_set():
            try:
                again = await self._step()
            except ChangedError:
                again = True  # read again, and decided afresh
            except PresenceError as error:
                log.warning("webhook %s: %s", self._webhook_id, error.message)
                again = False
            except (ConnectionError, OSError) as error:
                log.warning("webhook %s: %s", self._webhook_id, error)
                again = False
            except Exception:
                # A fault of ours: logged, and the delivery goes on (the batch is sent again).
                log.exception("webhook %s: delivery failed", self._webhook_id)
                again = False
            if again is None:
                return  # the lease is no longer this process's
            if not again and self._idle is not None:
                self._wake.clear()
                if not self._stopped.is_set():
                    moved, entries = await self._d.tips.wait_past(
                        self._shard, *self._idle, self._wake
                    )
                    if self._known is not None and not self._read_again:
                        self._known = (self._known[0], moved)
                        self._handed = None if entries is None else (moved.position, entries)
            elif not again:
                await self._wait(self._d.settings.poll_ms)

    async def _step(self) -> bool | None:
        """One step of the delivery: True to go on at once, False to wait (for new entries,
        when it sets _idle), None to end."""
        self._idle = None
        try:
            return await self._step_from_known()
        except BaseException:
            self._known = None  # what it wrote before it failed is not known
            raise

    async def _step_from_known(self) -> bool | None:
        if self._read_again:
            self._read_again, self._known = False, None
        known = self._known
        handed, self._handed = self._handed, None
        # During a rotation, the read says whether the previous secret still signs.
        self._fresh = known is None or len(known[0].secrets) > 1
        if known is None or self._fresh:
            found = await self._d.webhooks.for_deliveries(self._webhook_id)
            if not found or not found[0].enabled:
                return False  # the next tick gives the lease up
            known = self._known = (found[0], found[0].progress[self._shard])
        webhook, progress = known
        if webhook.replay_id and progress.replay_id != webhook.replay_id:
            return await self._replay(webhook) or None
        feed = self._d.feed
        count = EXAMINED_PER_SHARD if webhook.debounce_seconds else READ_PER_STEP
        # What the looks read while it waited is its page (a debounce reads further ahead).
        if handed is not None and handed[0] == progress.position and count == READ_PER_STEP:
            entries: Sequence[Entry] = handed[1]
        else:
            try:
                entries = await feed.shard_page(self._shard, progress.position, count)
            except CursorExpiredError:
                return await self._skip_gap(progress) or None
        backlog = self._backlog(webhook, progress, entries)
        again = await self._deliver(
            webhook, progress, entries, backlog, read_all=len(entries) < count
        )
        if again is False and not entries and not progress.gap:
            self._idle_here()
        return again

    async def _deliver(
        self,
        webhook: Webhook,
        progress: ShardProgress,
        entries: Sequence[Entry],
        backlog: dict[str, str],
        *,
        read_all: bool,
    ) -> bool | None:
        """Sends the next batch of these entries, or passes over those it has nothing for
        (`read_all`: they were every entry after the position when read)."""
        feed = self._d.feed
        cutoff_ms = time.time_ns() // 1_000_000 - webhook.debounce_seconds * 1000
        planned = plan(
            webhook,
            entries,
            cutoff_ms=cutoff_ms,
            pending=progress.pending,
            decided=progress.decided,
        )
        if planned.end is None and not progress.gap:
            if backlog:
                await self._advance(**backlog)
            return False
        end = planned.end or progress.position
        decided = " ".join(planned.decided)
        if not planned.changes and not progress.gap:
            # Nothing for it among these entries: passed over with no request. When they were
            # all there was, it waits for new entries at once, with nothing left waiting.
            caught_up = read_all and end == entries[-1][0] and not planned.decided
            if caught_up:
                backlog = self._backlog(webhook, progress, [])
            if not await self._advance(position=end, pending="", decided=decided, **backlog):
                return None
            if caught_up:
                self._idle_here()
                return False
            return True
        # A full batch is the same whoever makes it from this position (the first MAX_BATCH
        # changes after it); one that is not is kept, so that it is sent again as it was. What
        # is sent is decided from the webhook as read: unless read in this step, this write
        # (with nothing else to write) checks it is unchanged before the request.
        pending = {} if planned.full or progress.pending == end else {"pending": end}
        if (pending or backlog or not self._fresh) and not await self._advance(
            **pending, **backlog
        ):
            return None
        cursors = await feed.event_cursors()
        batch = Batch(
            self._d.renderings(cursors).of(planned, self._shard),
            end_cursor=cursors.of_shard(self._shard, end),
            gap=json.loads(progress.gap) if progress.gap else None,
            id=batch_id(webhook.id, self._shard, progress.position, end),
            made_at=datetime.fromtimestamp(ms_of(end) / 1000, UTC),
        )
        # When the batch takes every entry read, and they were all there was, it waits for new
        # entries once it is acknowledged, with no step to find that nothing is left.
        caught_up = read_all and not planned.full and end == entries[-1][0] and not planned.decided
        return await self._send(webhook, progress, batch, end, decided, caught_up=caught_up)

    async def _send(
        self,
        webhook: Webhook,
        progress: ShardProgress,
        batch: Batch,
        end: str,
        decided: str,
        *,
        caught_up: bool,
    ) -> bool | None:
        d = self._d
        started_ns = time.time_ns()
        outcome = await d.sender.post(webhook, batch)
        d.observe.request(
            webhook.id,
            self._shard,
            delivery_id=batch.id,
            changes=len(batch.changes),
            status=outcome.status,
            acknowledged=outcome.acknowledged,
            started_ns=started_ns,
            ended_ns=time.time_ns(),
        )
        if outcome.acknowledged and outcome.status is not None:
            self._failures = 0
            backlog = {}
            if caught_up:  # nothing waits after it (as read)
                d.observe.backlog(webhook.id, self._shard, 0, 0)
                backlog = {"backlog": "0 0"}
            acknowledged = AcknowledgedAttempt(
                delivery_id=batch.id,
                changes=len(batch.changes),
                status=outcome.status,
                duration_ms=outcome.duration_ms,
                # Read as the positions of every shard's delivery, once they have moved.
                delivered_up_to=batch.end_cursor,
            )
            written = {"position": end, "pending": "", "gap": "", "decided": decided, **backlog}
            moved = await d.webhooks.advance(
                webhook.id, self._shard, d.token, written, acknowledged
            )
            if not moved:
                return None
            self._moved(written)
            if caught_up:
                self._idle_here()
                return False
            return True
        await d.webhooks.record_attempt(
            webhook.id,
            delivery_id=batch.id,
            changes=len(batch.changes),
            status=outcome.status,
            error=outcome.error,
            duration_ms=outcome.duration_ms,
            acknowledged=False,
        )
        await self._failed(webhook, outcome)
        return True

    async def _failed(self, webhook: Webhook, outcome: Outcome) -> None:
        """Disables a webhook failing for too long; else waits for the next retry."""
        settings = self._d.settings
        found = await self._d.webhooks.for_deliveries(webhook.id)
        since = found[0].failing_since if found else None
        if since is not None:
            failing_ms = (datetime.now(UTC) - since).total_seconds() * 1000
            if failing_ms >= settings.disable_after_ms:
                await self._d.webhooks.disable(
                    webhook.id,
                    f"No request was acknowledged for {failing_ms / 1000:.0f} s; the last "
                    f"failed with {_what(outcome)}.",
                )
                return
        delays = settings.retry_ms
        delay = delays[min(self._failures, len(delays) - 1)]
        self._failures += 1
        await self._wait(delay * (1 + random.random() * 0.2))  # noqa: S311 - jitter, not secrecy

    async def _replay(self, webhook: Webhook) -> bool:
        """Takes the replay asked for: the shard's delivery starts again after its cursor."""
        after = webhook.replay_after or None
        try:
            position = (await self._d.feed.positions(after))[self._shard]
        except BadInputError as error:
            log.warning("webhook %s: replay refused: %s", webhook.id, error.message)
            position = webhook.progress[self._shard].position
        if not position:
            position = await self._d.feed.shard_start(self._shard)
        return await self._advance(
            position=position, pending="", gap="", decided="", replay_id=webhook.replay_id
        )

    async def _skip_gap(self, progress: ShardProgress) -> bool:
        """What the webhook missed is no longer kept: its next batch says so, and it goes on
        from the oldest change kept."""
        start = await self._d.feed.shard_start(self._shard)
        cursors = await self._d.feed.event_cursors()
        gap = {
            "after": cursors.of_shard(self._shard, progress.position),
            "until": cursors.of_shard(self._shard, start),
        }
        return await self._advance(
            position=start, pending="", decided="", gap=json.dumps(gap, separators=(",", ":"))
        )

    def _backlog(
        self, webhook: Webhook, progress: ShardProgress, entries: Sequence[Entry]
    ) -> dict[str, str]:
        """The changes waiting, as read (for metrics, and for `backlog` when it changed)."""
        waiting = [entry_id for entry_id, change in entries if change is not None]
        oldest_ms = ms_of(waiting[0]) if waiting else 0
        self._d.observe.backlog(webhook.id, self._shard, len(waiting), oldest_ms)
        if (len(waiting), oldest_ms) == (progress.backlog, progress.oldest_ms):
            return {}
        return {"backlog": f"{len(waiting)} {oldest_ms}"}


def _what(outcome: Outcome) -> str:
    if outcome.status is not None:
        return f"HTTP {outcome.status}"
    return outcome.error or "no answer"
