"""Connection-bound sessions held by this process: opened by presenceSession subscriptions,
renewed together in one batched task, closed when their subscription ends, and ended early
when a kick or a newer opening of the same session is announced (through the event hub)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum

from gql_presence.store import Announced, EventKind, HeldSession, PresenceStore
from gql_presence.store.days import from_ms
from gql_presence.store.errors import PresenceError, StoreUnavailableError

log = logging.getLogger("gql_presence.realtime.held")

# Renewals come at least this many times per TTL, so that one late or failed renewal still
# leaves time for the next before the sessions expire.
RENEWALS_PER_TTL = 3


class EndReason(StrEnum):
    KICKED = "KICKED"  # the session, or every session of the user, was kicked
    REPLACED = "REPLACED"  # another connection opened the same session


@dataclass(frozen=True)
class Ended:
    reason: EndReason
    at: datetime


class Holding:
    """One subscription's hold of its session, until it ends or is ended."""

    def __init__(self, held: HeldSession, opened_at: datetime) -> None:
        self.held = held
        self.opened_at = opened_at
        self._ended: asyncio.Future[Ended] = asyncio.get_running_loop().create_future()

    def end(self, outcome: Ended | PresenceError) -> None:
        if self._ended.done():
            return
        if isinstance(outcome, PresenceError):
            self._ended.set_exception(outcome)
        else:
            self._ended.set_result(outcome)

    @property
    def ended_by_service(self) -> bool:
        return self._ended.done()

    async def ended(self) -> Ended:
        """Waits until the service ends the session: a kick or a replacement (returned), or
        a renewal that found it gone (raised)."""
        return await asyncio.shield(self._ended)


class HeldSessions:
    """Every connection-bound session of this process."""

    def __init__(self, store: PresenceStore, ttl_ms: int) -> None:
        self._store = store
        self._renew_every_s = ttl_ms / 1000 / RENEWALS_PER_TTL
        self._holdings: dict[HeldSession, Holding] = {}
        self._by_user: dict[str, set[Holding]] = {}
        # Per user, the lists that collect the announcements made while one of their
        # sessions is being opened: a kick or a replacement can be announced before the
        # opening's reply arrives, and so before its holding is there to be ended.
        self._openings: dict[str, list[list[Announced]]] = {}

    @property
    def count(self) -> int:
        return len(self._holdings)

    @contextlib.asynccontextmanager
    async def hold(self, user_id: str, session_id: str) -> AsyncIterator[Holding]:
        """Opens the session and holds it until the block ends, then closes it at once
        (unless the service ended it first). Raises SessionRevokedError for a kicked id."""
        early: list[Announced] = []
        openings = self._openings.setdefault(user_id, [])
        openings.append(early)
        try:
            opened = await self._store.open_session(user_id, session_id)
        finally:
            openings.remove(early)
            if not openings:
                del self._openings[user_id]
        assert opened.held is not None  # an opening at the current time is always live
        holding = Holding(opened.held, opened.at)
        self._holdings[opened.held] = holding
        self._by_user.setdefault(user_id, set()).add(holding)
        try:
            await self._catch_up(holding, early)
            yield holding
        finally:
            self._forget(holding)
            if not holding.ended_by_service:
                # The subscription was cancelled (the client completed it, or the socket
                # closed): the close must still happen, so it is not cancelled with it.
                await asyncio.shield(self._close(holding.held))

    async def _close(self, held: HeldSession) -> None:
        try:
            await self._store.close_session(held)
        except PresenceError as error:
            # The session expires by itself within the TTL, as after a crash.
            log.warning("closing a connection-bound session failed: %s", error.message)

    def _forget(self, holding: Holding) -> None:
        self._holdings.pop(holding.held, None)
        holdings = self._by_user.get(holding.held.user_id)
        if holdings is not None:
            holdings.discard(holding)
            if not holdings:
                del self._by_user[holding.held.user_id]

    def on_event(self, announced: Announced) -> None:
        """Ends the holdings a kick or a newer opening of their session has ended."""
        kind, user_id, _, _, _ = announced
        if kind not in {EventKind.KICKED, EventKind.REPLACED}:
            return
        for early in self._openings.get(user_id, ()):
            early.append(announced)
        for holding in list(self._by_user.get(user_id, ())):
            ending = _ending(holding.held, announced)
            if ending is not None:
                holding.end(ending)

    async def _catch_up(self, holding: Holding, early: list[Announced]) -> None:
        """Applies what was announced while the session was being opened. A replacement
        names its generation, so it ends the holding only if it came after the opening; a
        kick does not, so the store says whether it ended this opening or one before it."""
        kicked: Ended | None = None
        for announced in early:
            ending = _ending(holding.held, announced)
            if ending is None:
                continue
            if ending.reason is EndReason.REPLACED:
                holding.end(ending)
                return
            kicked = ending
        if kicked is not None and await self._store.renew_sessions([holding.held]):
            holding.end(kicked)

    async def renew_forever(self) -> None:
        """Renews every held session, all in one batched call per shard, every TTL/3."""
        while True:
            await asyncio.sleep(self._renew_every_s)
            if not self._holdings:
                continue
            try:
                lost = await self._store.renew_sessions(list(self._holdings))
            except PresenceError as error:
                log.warning("renewing connection-bound sessions failed: %s", error.message)
                continue
            except Exception:
                # The renewals must outlive any one failure; the next one tries again.
                log.exception("renewing connection-bound sessions failed")
                continue
            for held in lost:
                # A kick or a replacement announced is usually here first, with its reason.
                if held in self._holdings:
                    await self._end_lost(held)

    async def _end_lost(self, held: HeldSession) -> None:
        """Ends the holding of a session a renewal found gone with no announcement seen: a
        revoked id was kicked; otherwise why it ended is not known here."""
        try:
            kicked = await self._store.session_revoked(held)
        except PresenceError as error:
            log.warning("reading whether a lost session was kicked failed: %s", error.message)
            kicked = False
        holding = self._holdings.get(held)
        if holding is None:
            return
        if kicked:
            holding.end(Ended(EndReason.KICKED, datetime.now(UTC)))
        else:
            holding.end(
                StoreUnavailableError(
                    "This session ended without this connection being told why (it expired "
                    "or was replaced meanwhile); subscribe again."
                )
            )


def _ending(held: HeldSession, announced: Announced) -> Ended | None:
    """How the announcement ends the held session, if it does: a kick of the session or of
    every session of its user, or an opening of it by a newer holder."""
    kind, user_id, at_ms, session_id, generation = announced
    if user_id != held.user_id:
        return None
    at = from_ms(int(at_ms))
    if kind == EventKind.KICKED and session_id in {"", held.session_id}:
        return Ended(EndReason.KICKED, at)
    if (
        kind == EventKind.REPLACED
        and session_id == held.session_id
        and held.generation < int(generation)
    ):
        return Ended(EndReason.REPLACED, at)
    return None
