"""Connection-bound sessions held by this process: opened by presenceSession subscriptions
under the process's lease in each shard, kept live by renewing those leases (one script call
per shard per tick, whatever their number), closed when their subscription ends, and ended
early when a kick or a newer opening of the same session is announced (through the event hub),
or when a lease is found lapsed.

A holder either waits in a task (`hold()`, `SessionHold.ended()`) or has none: it opens with
`open()`, is called back through `SessionHold.on_end` when the service ends the session, and
calls `release()` when its client leaves (graphql/session_rendering.py)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, Protocol, TypeVar

from gql_presence.store import (
    EventKind,
    HeldPlaceSession,
    HeldSession,
    Lease,
    OpenedPlaceSession,
    OpenedSession,
    PlaceKind,
    PresenceStore,
    PublishedEvent,
    PublishedPlaceEvent,
)
from gql_presence.store.days import from_ms
from gql_presence.store.errors import PresenceError, StoreUnavailableError

log = logging.getLogger("gql_presence.sessions")

# Renewals come at least this many times per TTL, so that one late or failed renewal still
# leaves time for the next before the sessions expire.
RENEWALS_PER_TTL = 3

T = TypeVar("T")

# What a hold holds: a presence session, or a session in a place.
Held = HeldSession | HeldPlaceSession
Announced = PublishedEvent | PublishedPlaceEvent


class EndReason(StrEnum):
    KICKED = "KICKED"  # the session, or every session of the user, was kicked
    REPLACED = "REPLACED"  # another connection opened the same session


@dataclass(frozen=True)
class Ended:
    reason: EndReason
    at: datetime


class SessionHold:
    """One holder's hold of its session, until it ends or is ended. Ended by the service, it
    calls `on_end` at once when one is set (a holder with no task of its own), and wakes
    whoever waits in `ended()`."""

    __slots__ = ("_outcome", "_waiter", "held", "on_end", "opened_at")

    def __init__(self, held: Held, opened_at: datetime) -> None:
        self.held = held
        self.opened_at = opened_at
        self._outcome: Ended | PresenceError | None = None
        # Made only for a holder that waits: most holders are called back instead.
        self._waiter: asyncio.Future[None] | None = None
        self.on_end: Callable[[Ended | PresenceError], None] | None = None

    def end(self, outcome: Ended | PresenceError) -> None:
        if self._outcome is not None:
            return
        self._outcome = outcome
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)
        if self.on_end is not None:
            self.on_end(outcome)

    def as_opened(self) -> SessionHold:
        """The hold as its session opened, live: what its first message tells, even when the
        service ended it before that message was written (its end is the next message)."""
        return SessionHold(self.held, self.opened_at)

    @property
    def ended_by_service(self) -> bool:
        return self._outcome is not None

    @property
    def outcome(self) -> Ended | PresenceError | None:
        """How the service ended the session: a kick or a replacement, or the error of a
        check that found it gone; None while it holds."""
        return self._outcome

    async def ended(self) -> Ended:
        """Waits until the service ends the session: a kick or a replacement (returned), or
        a check that found it gone (raised)."""
        if self._outcome is None:
            if self._waiter is None:
                self._waiter = asyncio.get_running_loop().create_future()
            await asyncio.shield(self._waiter)
        outcome = self._outcome
        if isinstance(outcome, PresenceError):
            raise outcome
        assert outcome is not None
        return outcome


class UserEvents(Protocol):
    """Who brings a user's kicks and replacements, and a place's replacements, to
    `HeldSessions.on_event` (the event hub)."""

    async def watch(self, user_id: str) -> None:
        """From when this returns, until `unwatch`: it undoes itself when it raises."""

    def unwatch(self, user_id: str) -> None: ...

    async def watch_place(self, place_id: str) -> None:
        """From when this returns, until `unwatch_place`: it undoes itself when it raises."""

    def unwatch_place(self, place_id: str) -> None: ...


class _Unwatched:
    async def watch(self, user_id: str) -> None:
        pass

    def unwatch(self, user_id: str) -> None:
        pass

    async def watch_place(self, place_id: str) -> None:
        pass

    def unwatch_place(self, place_id: str) -> None:
        pass


class HeldSessions:
    """Every connection-bound session of this process."""

    def __init__(self, store: PresenceStore, ttl_ms: int, events: UserEvents | None = None) -> None:
        self._store = store
        # From before a session's opening until its release, its user's kicks and
        # replacements reach on_event.
        self._events = events or _Unwatched()
        self._renew_every_s = ttl_ms / 1000 / RENEWALS_PER_TTL
        self._holds: dict[Held, SessionHold] = {}
        # The leases holds were opened under, until the store holds them no more.
        self._leases: set[Lease] = set()
        # Set when announcements may have been missed (the event stream was interrupted):
        # the next tick checks every session held, as a kick may have gone unheard.
        self._check_all = False
        # A user's holds: the one hold itself, as nearly always, or a set of several (a set
        # per user cost an idle session about 200 bytes more).
        self._by_user: dict[str, SessionHold | set[SessionHold]] = {}
        # Per user, the lists that collect the announcements made while one of their
        # sessions is being opened: a kick or a replacement can be announced before the
        # opening's reply arrives, and so before its hold is there to be ended.
        self._openings: dict[str, list[list[Announced]]] = {}
        # Closes under way, of holds ended and of openings their holders left.
        self._closing: set[asyncio.Task[None]] = set()

    @property
    def count(self) -> int:
        return len(self._holds)

    @contextlib.asynccontextmanager
    async def hold(
        self, user_id: str, session_id: str, device: str | None = None
    ) -> AsyncIterator[SessionHold]:
        """Opens the session and holds it until the block ends, then closes it at once
        (unless the service ended it first). Raises SessionRevokedError for a kicked id."""
        async with self._until_done(await self.open(user_id, session_id, device)) as hold:
            yield hold

    @contextlib.asynccontextmanager
    async def hold_place(
        self, place_id: str, user_id: str, session_id: str, state: object
    ) -> AsyncIterator[SessionHold]:
        """Holds the session in the place until the block ends, as `hold` does a presence
        session."""
        async with self._until_done(
            await self.open_place(place_id, user_id, session_id, state)
        ) as hold:
            yield hold

    @contextlib.asynccontextmanager
    async def _until_done(self, hold: SessionHold) -> AsyncIterator[SessionHold]:
        try:
            yield hold
        finally:
            closing = self.release(hold)
            if closing is not None:
                # The holder was cancelled (the client completed it, or the socket closed):
                # the close must still happen, so it is not cancelled with it.
                await asyncio.shield(closing)

    async def open(self, user_id: str, session_id: str, device: str | None = None) -> SessionHold:
        """Opens the session (its client says it is `device`) and holds it until `release`.
        Raises SessionRevokedError for a kicked id. Cancelled at any point, it leaves nothing
        live and nothing held."""
        opened, early = await self._opened(
            user_id,
            None,
            lambda: self._store.open_session(user_id, session_id, device),
            self._undo,
        )
        return await self._held(SessionHold(opened.held, opened.at), early)

    async def open_place(
        self, place_id: str, user_id: str, session_id: str, state: object
    ) -> SessionHold:
        """Opens the session in the place, with `state`, and holds it until `release`, as
        `open` holds a presence session: a kick of the user's session, or its opening in the
        same place elsewhere, ends it."""
        opened, early = await self._opened(
            user_id,
            place_id,
            lambda: self._store.open_place_session(place_id, user_id, session_id, state),
            self._undo_place,
        )
        return await self._held(SessionHold(opened.held, opened.joined_at), early)

    async def _opened(
        self,
        user_id: str,
        place_id: str | None,
        opening: Callable[[], Awaitable[T]],
        undo: Callable[[T], Awaitable[None]],
    ) -> tuple[T, list[Announced]]:
        """What `opening` opened (as `_owned` runs it), and what was announced of the user
        meanwhile. The user's (and a place's) events are heard from before the opening: one
        announced between the opening and the subscription to them would be missed. Raising,
        it leaves nothing watched."""
        events = self._events
        heard: list[Callable[[], None]] = []  # how to undo each watch begun
        try:
            await events.watch(user_id)
            heard.append(lambda: events.unwatch(user_id))
            if place_id is not None:
                await events.watch_place(place_id)
                heard.append(lambda: events.unwatch_place(place_id))
            early: list[Announced] = []
            openings = self._openings.setdefault(user_id, [])
            openings.append(early)
            try:
                opened = await self._owned(opening(), undo)
            finally:
                # By identity: another opening's list may equal this one (both empty, or
                # both with the same announcements), and removing that one instead would
                # leave this one collecting and the other hearing nothing more.
                openings[:] = [other for other in openings if other is not early]
                if not openings:
                    del self._openings[user_id]
        except BaseException:
            for unwatch in heard:
                unwatch()
            raise
        return opened, early

    async def _held(self, hold: SessionHold, early: list[Announced]) -> SessionHold:
        self._holds[hold.held] = hold
        self._leases.add(hold.held.lease)
        user_id = hold.held.user_id
        others = self._by_user.get(user_id)
        if others is None:
            self._by_user[user_id] = hold
        elif isinstance(others, set):
            others.add(hold)
        elif others is not hold:
            self._by_user[user_id] = {others, hold}
        try:
            await self._catch_up(hold, early)
        except BaseException:
            self.release(hold)
            raise
        return hold

    def release(self, hold: SessionHold) -> asyncio.Task[None] | None:
        """Holds the session no more, and closes it at once unless the service ended it: the
        close runs on its own (returned), so that a holder cancelled meanwhile does not
        cancel it. Once per hold."""
        self._forget(hold)
        # A kick ends a place session without taking it out of its place (that is in
        # another shard): its holder does, as for any end.
        if hold.ended_by_service and not isinstance(hold.held, HeldPlaceSession):
            return None
        return self._in_background(self._close(hold.held))

    async def _owned(self, opening: Awaitable[T], undo: Callable[[T], Awaitable[None]]) -> T:
        """What `opening` returns. Every kind of session this process holds is opened through
        here, so that its holder cancelled at any moment leaves nothing live that nobody
        holds: the opening is not cancelled with its holder (its script may have run, its
        reply not read yet), but ends without it, and then `undo` closes what it opened."""
        task = asyncio.ensure_future(opening)
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            self._in_background(_undo_when_opened(task, undo))
            raise

    async def _undo(self, opened: OpenedSession) -> None:
        await self._close(opened.held)

    async def _undo_place(self, opened: OpenedPlaceSession) -> None:
        await self._close(opened.held)

    def _in_background(self, closing: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = asyncio.ensure_future(closing)
        self._closing.add(task)  # held until done: the loop keeps only weak references
        task.add_done_callback(self._closing.discard)
        return task

    async def settle(self) -> None:
        """Waits for the closes under way: of holds ended, and of openings whose holder left
        before they ended."""
        while self._closing:
            await asyncio.gather(*self._closing, return_exceptions=True)

    async def _close(self, held: Held) -> None:
        try:
            if isinstance(held, HeldPlaceSession):
                await self._store.close_place_session(held)
            else:
                await self._store.close_session(held)
        except PresenceError as error:
            # The session ends by itself within the TTL once the lease is given up or lapses.
            log.warning("closing a connection-bound session failed: %s", error.message)

    def _forget(self, hold: SessionHold) -> None:
        if self._holds.pop(hold.held, None) is not None:
            self._events.unwatch(hold.held.user_id)
            if isinstance(hold.held, HeldPlaceSession):
                self._events.unwatch_place(hold.held.place_id)
        user_id = hold.held.user_id
        holds = self._by_user.get(user_id)
        if holds is hold:
            del self._by_user[user_id]
        elif isinstance(holds, set):
            holds.discard(hold)
            if len(holds) == 1:
                self._by_user[user_id] = holds.pop()

    def on_event(self, announced: Announced) -> None:
        """Ends the holds a kick or a newer opening of their session has ended."""
        kind, user_id = announced.kind, announced.user_id
        if kind not in {EventKind.KICKED, EventKind.REPLACED, EventKind.REVOKED}:
            return
        for early in self._openings.get(user_id, ()):
            early.append(announced)
        holds = self._by_user.get(user_id)
        for hold in [holds] if isinstance(holds, SessionHold) else list(holds or ()):
            ending = _ending(hold.held, announced)
            if ending is not None:
                hold.end(ending)

    async def _catch_up(self, hold: SessionHold, early: list[Announced]) -> None:
        """Applies what was announced while the session was being opened. A replacement
        names its generation, so it ends the hold only if it came after the opening; a
        kick does not, so the store says whether it ended this opening or one before it."""
        kicked: Ended | None = None
        for announced in early:
            ending = _ending(hold.held, announced)
            if ending is None:
                continue
            if ending.reason is EndReason.REPLACED:
                hold.end(ending)
                return
            kicked = ending
        if kicked is None:
            return
        held = hold.held
        if isinstance(held, HeldPlaceSession):
            # A place session's id is revoked by a kick made after its opening checked it.
            if await self._store.session_revoked(held):
                hold.end(kicked)
        elif await self._store.check_sessions([held]):
            hold.end(kicked)

    def missed_events(self) -> None:
        """The event stream was interrupted: kicks and replacements may have gone unheard."""
        self._check_all = True

    async def renew_forever(self) -> None:
        """Renews this process's leases every TTL/3, one script call per shard; ends the holds
        of a lease found lapsed, and checks every hold after the event stream was interrupted."""
        while True:
            await asyncio.sleep(self._renew_every_s)
            try:
                await self.renew()
            except PresenceError as error:
                log.warning("renewing connection-bound sessions failed: %s", error.message)
            except Exception:
                # The renewals must outlive any one failure; the next one tries again.
                log.exception("renewing connection-bound sessions failed")

    async def renew(self, at: datetime | None = None) -> None:
        """One tick of renew_forever (`at` backfills it)."""
        await self._store.renew_leases(at)
        # Not only the leases this renewal found lapsed: an opening that found its shard's
        # lease lapsed first took a new one, and the holds under the old one are as dead.
        lost = self._leases - set(self._store.leases)
        if lost:
            self._leases -= lost
            self._end_lapsed(lost)
        if self._check_all and self._holds:
            self._check_all = False
            try:
                gone = await self._store.check_sessions(list(self._holds))
                # A kick of a place session's id takes it out of no place: its id is revoked.
                for in_place in [h for h in self._holds if isinstance(h, HeldPlaceSession)]:
                    if in_place not in gone and await self._store.session_revoked(in_place):
                        gone.append(in_place)
            except BaseException:
                self._check_all = True
                raise
            for held in gone:
                # A kick or a replacement announced is usually here first, with its reason.
                if held in self._holds:
                    await self._end_lost(held)

    def _end_lapsed(self, lost: set[Lease]) -> None:
        """Ends every hold under a lease that lapsed: the process stood still (or could not
        reach Redis) for longer than the TTL, and the sweep ends, or has ended, the sessions."""
        for hold in [h for h in self._holds.values() if h.held.lease in lost]:
            hold.end(
                StoreUnavailableError(
                    "This session ended: the service could not keep it live for a while "
                    "(its process stood still or lost the store); subscribe again."
                )
            )

    async def release_leases(self) -> None:
        """Gives up this process's leases, once its holds are closed (at shutdown)."""
        try:
            await self._store.release_leases()
        except PresenceError as error:
            # Whatever is left under them ends within the TTL, as after a crash.
            log.warning("giving up the leases of held sessions failed: %s", error.message)

    async def _end_lost(self, held: Held) -> None:
        """Ends the hold of a session a check found gone with no announcement seen: a
        revoked id was kicked; otherwise why it ended is not known here."""
        try:
            kicked = await self._store.session_revoked(held)
        except PresenceError as error:
            log.warning("reading whether a lost session was kicked failed: %s", error.message)
            kicked = False
        hold = self._holds.get(held)
        if hold is None:
            return
        if kicked:
            hold.end(Ended(EndReason.KICKED, datetime.now(UTC)))
        else:
            hold.end(
                StoreUnavailableError(
                    "This session ended without this connection being told why (it expired "
                    "or was replaced meanwhile); subscribe again."
                )
            )


async def _undo_when_opened(
    opening: asyncio.Future[T], undo: Callable[[T], Awaitable[None]]
) -> None:
    """Undoes what an opening left by its holder opened, once it has ended."""
    try:
        opened = await opening
    except StoreUnavailableError as error:
        # Whatever the script did, if it ran, expires within the TTL, as after a crash.
        log.warning("an opening whose holder left failed: %s", error.message)
        return
    except PresenceError:
        return  # a refusal opened nothing
    except Exception:
        # Nobody else awaits it: a fault of ours is logged here or never.
        log.exception("an opening whose holder left failed")
        return
    await undo(opened)


def _ending(held: Held, announced: Announced) -> Ended | None:
    """How the announcement ends the held session, if it does: a kick of the session or of
    every session of its user, or an opening of it by a newer holder (of the same place,
    for a place session)."""
    if announced.user_id != held.user_id:
        return None
    at = from_ms(int(announced.at_ms))
    if isinstance(announced, PublishedPlaceEvent):
        if (
            isinstance(held, HeldPlaceSession)
            and announced.kind == PlaceKind.REPLACED
            and announced.place_id == held.place_id
            and announced.session_id == held.session_id
            and held.generation < int(announced.state)
        ):
            return Ended(EndReason.REPLACED, at)
        return None
    kind, _, _, session_id, generation = announced[:5]
    if kind in {EventKind.KICKED, EventKind.REVOKED} and session_id in {"", held.session_id}:
        return Ended(EndReason.KICKED, at)
    if (
        isinstance(held, HeldSession)
        and kind == EventKind.REPLACED
        and session_id == held.session_id
        and held.generation < int(generation)
    ):
        return Ended(EndReason.REPLACED, at)
    return None
