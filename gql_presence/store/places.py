"""Places: each lives in the shard of its id, with its sessions (held under this process's
lease there), their members, counts and states (lua/includes/places.lua). A state set within
PLACE_STATE_INTERVAL_MS of its session's last UPDATED waits, and this process announces it at
the end of that interval; should it die first, the sweep does."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any

from gql_presence.store.days import from_ms
from gql_presence.store.deployment import Deployment
from gql_presence.store.errors import PresenceError, SessionRevokedError
from gql_presence.store.keys import shard_of
from gql_presence.store.leases import Leases
from gql_presence.store.models import (
    HeldPlaceSession,
    Lease,
    OpenedPlaceSession,
    PlaceCount,
    PlaceMember,
    PlacePage,
)
from gql_presence.store.replies import place_members_of
from gql_presence.store.scripts import ScriptName
from gql_presence.store.shard import REVOKED_SESSION, Named, Shard, by_shard, named
from gql_presence.store.validation import (
    check_id,
    check_page_size,
    check_place_ids,
    check_place_state,
)

log = logging.getLogger("gql_presence")

# The least time between two UPDATED of one place session: one that sets its state more often
# has the states between merged, the last of them announced at the end of the interval
# (docs/semantics.md, "Places").
PLACE_STATE_INTERVAL_MS = 50
# A waiting place state is announced this long after it is due by Redis's clock, which counts
# whole ms: never before, which would find it not yet due.
FLUSH_SLACK_S = 0.002

# A place session: (place_id, user_id, session_id).
PlaceSessionKey = tuple[str, str, str]


def place_keys(shard: Shard, place_id: str) -> Named:
    """The keys of a place, as every place script's header names them first."""
    k = shard.keys
    return named(
        members=k.place_members(place_id),
        holders=k.place_holders(place_id),
        states=k.place_states(place_id),
        users=k.place_users(place_id),
    )


class Places:
    def __init__(self, shards: Sequence[Shard], leases: Leases, deployment: Deployment) -> None:
        self._shards = shards
        self._leases = leases
        self._deployment = deployment
        # The announcements of place states this process's calls left waiting, each at the
        # end of its session's interval; should this process die first, the sweep makes them.
        self._flushes: dict[PlaceSessionKey, asyncio.TimerHandle] = {}
        self._flushing: set[asyncio.Task[None]] = set()

    def _shard(self, place_or_user_id: str) -> Shard:
        return self._shards[shard_of(place_or_user_id, len(self._shards))]

    async def open_session(
        self, place_id: str, user_id: str, session_id: str, state: object = None
    ) -> OpenedPlaceSession:
        """Holds the session in the place under this process's lease in the place's shard, with
        `state` (a JSON object, or None), until closed, kicked or replaced: as open_session
        holds a presence session. Raises SessionRevokedError for a kicked session id."""
        check_id(place_id, "placeId")
        check_id(user_id, "userId")
        check_id(session_id, "sessionId")
        text = None if state is None else check_place_state(state)
        user_shard = self._shard(user_id)
        revoked = await user_shard.run(
            ScriptName.SESSION_REVOKED,
            named(revoked=user_shard.keys.revoked(user_id)),
            named(session_id=session_id),
        )
        if revoked:
            raise SessionRevokedError(REVOKED_SESSION)
        shard = self._shard(place_id)

        async def opening(lease: Lease) -> OpenedPlaceSession:
            await shard.announcing()
            generation, joined_ms = await shard.run(
                ScriptName.OPEN_PLACE_SESSION,
                named(
                    **place_keys(shard, place_id),
                    generations=shard.keys.generations,
                    leases=shard.keys.leases,
                ),
                named(
                    place_id=place_id,
                    user_id=user_id,
                    session_id=session_id,
                    slot=lease.slot,
                    token=lease.token,
                    state=text or "",
                    channel=shard.channels.place_events(place_id),
                    shard=shard.options,
                ),
            )
            held = HeldPlaceSession(place_id, user_id, session_id, int(generation), lease)
            return OpenedPlaceSession(held, from_ms(int(joined_ms)))

        return await self._leases.holding(shard.index, opening)

    async def close_session(self, held: HeldPlaceSession) -> bool:
        """Takes the session out of the place at once if `held` still holds it (LEFT)."""
        shard = self._shard(held.place_id)
        await shard.announcing()
        left = await shard.run(
            ScriptName.CLOSE_PLACE_SESSION,
            named(**place_keys(shard, held.place_id), leases=shard.keys.leases),
            named(
                place_id=held.place_id,
                user_id=held.user_id,
                session_id=held.session_id,
                generation=held.generation,
                channel=shard.channels.place_events(held.place_id),
                shard=shard.options,
            ),
        )
        return bool(left)

    async def check_sessions(
        self, shard: Shard, held: Sequence[HeldPlaceSession]
    ) -> list[HeldPlaceSession]:
        """Of the place sessions (at most CHECK_BATCH, all in `shard`), those no longer held
        by their holder."""
        triples: list[str | int] = []
        for one in held:
            triples += [one.place_id, f"{one.user_id}\0{one.session_id}", one.generation]
        lost = await shard.run(
            ScriptName.CHECK_PLACE_SESSIONS,
            named(leases=shard.keys.leases),
            named(holders_prefix=shard.keys.place_holders(""), held=triples),
        )
        return [held[int(position) - 1] for position in lost]

    async def set_state(
        self, place_id: str, user_id: str, session_id: str, state: object
    ) -> PlaceMember:
        """Replaces the state of a session that is in the place, read so from now on; and
        announces it (UPDATED) at once, or, within PLACE_STATE_INTERVAL_MS of the session's
        last UPDATED, at the end of that interval, with whatever state is the latest then.
        BadInputError when the session is not in the place."""
        check_id(place_id, "placeId")
        check_id(user_id, "userId")
        check_id(session_id, "sessionId")
        text = check_place_state(state)
        joined_ms, flush_in_ms = await self._run_state(
            ScriptName.SET_PLACE_STATE, place_id, user_id, session_id, text
        )
        if int(flush_in_ms) > 0:
            self._plan_flush((place_id, user_id, session_id), int(flush_in_ms))
        return PlaceMember(
            place_id, user_id, session_id, from_ms(int(joined_ms)), text, -int(joined_ms)
        )

    def _plan_flush(self, key: PlaceSessionKey, in_ms: int) -> None:
        earlier = self._flushes.pop(key, None)
        if earlier is not None:
            earlier.cancel()  # an interval's that has passed: this one is the session's now
        loop = asyncio.get_running_loop()
        self._flushes[key] = loop.call_later(in_ms / 1000 + FLUSH_SLACK_S, self._flush_due, key)

    def _flush_due(self, key: PlaceSessionKey) -> None:
        del self._flushes[key]
        task = asyncio.get_running_loop().create_task(self._flush(key))
        self._flushing.add(task)
        task.add_done_callback(self._flushing.discard)

    async def _flush(self, key: PlaceSessionKey) -> None:
        try:
            due_in_ms = await self._flush_state(*key)
        except PresenceError as error:
            log.warning("a waiting place state is left to the sweep to announce: %s", error.message)
            return
        except Exception:
            # A fault of ours; the sweep still announces the state, a second or so late.
            log.exception("announcing a waiting place state failed")
            return
        if due_in_ms > 0 and key not in self._flushes:
            self._plan_flush(key, due_in_ms)

    async def _flush_state(self, place_id: str, user_id: str, session_id: str) -> int:
        """Announces the session's waiting state, if it still waits and is due; when it waits
        for a later moment, in how many ms it is due, else 0."""
        _, due_in_ms = await self._run_state(
            ScriptName.FLUSH_PLACE_STATE, place_id, user_id, session_id, None
        )
        return int(due_in_ms)

    async def _run_state(
        self,
        script: ScriptName,
        place_id: str,
        user_id: str,
        session_id: str,
        state: str | None,
    ) -> Any:
        """Runs one of the two scripts that set or announce a session's place state; they take
        the same KEYS and ARGV, the setting one with the new state after the session's id."""
        shard = self._shard(place_id)
        await shard.announcing()
        args = named(place_id=place_id, user_id=user_id, session_id=session_id)
        if state is not None:
            args["state"] = state
        args.update(
            channel=shard.channels.place_events(place_id),
            shard=shard.options,
            interval_ms=PLACE_STATE_INTERVAL_MS,
        )
        keys = named(
            **place_keys(shard, place_id),
            leases=shard.keys.leases,
            flushes=shard.keys.place_flushes,
        )
        return await shard.run(script, keys, args)

    async def flush_planned(self) -> None:
        """Announces at once every waiting place state this process planned to announce: at
        shutdown, rather than leave them to another process's sweep."""
        planned, self._flushes = self._flushes, {}
        for timer in planned.values():
            timer.cancel()
        await asyncio.gather(*map(self._flush, planned), *self._flushing)

    async def members(self, place_id: str, first: int = 50, after: str | None = None) -> PlacePage:
        check_id(place_id, "placeId")
        check_page_size(first)
        position = None
        if after is not None:
            position = (await self._deployment.cursors(make=False)).decode(after)
        shard = self._shard(place_id)
        reply = await shard.run(
            ScriptName.PLACE_MEMBERS,
            named(**place_keys(shard, place_id), leases=shard.keys.leases),
            named(
                place_id=place_id,
                first=first,
                after_score=position[0] if position else "",
                after_member=position[1] if position else "",
                shard=shard.options,
            ),
        )
        sessions, users, nodes, more, sequence, version = place_members_of(place_id, reply)
        end_cursor = None
        if nodes:
            last = nodes[-1]
            end_cursor = (await self._deployment.cursors(make=True)).encode(
                last.position, f"{last.user_id}\0{last.session_id}"
            )
        return PlacePage(sessions, users, nodes, more, end_cursor, sequence, version)

    async def counts(self, place_ids: Sequence[str]) -> list[PlaceCount]:
        """Counts of up to 1,000 places, in the order given: one script call per shard."""
        given = check_place_ids(place_ids, "placeIds")
        groups = by_shard(given, len(self._shards))
        parts = await asyncio.gather(
            *(self._counts(self._shards[i], ids) for i, ids in groups.items())
        )
        counts: dict[str, tuple[int, int]] = {}
        for ids, part in zip(groups.values(), parts, strict=True):
            counts.update(zip(ids, part, strict=True))
        return [PlaceCount(place_id, *counts[place_id]) for place_id in given]

    async def _counts(self, shard: Shard, place_ids: Sequence[str]) -> list[tuple[int, int]]:
        k = shard.keys
        reply = await shard.run(
            ScriptName.PLACE_COUNTS,
            named(
                members=[k.place_members(p) for p in place_ids],
                users=[k.place_users(p) for p in place_ids],
                leases=k.leases,
            ),
            named(place_id=list(place_ids), shard=shard.options),
        )
        return [(int(reply[i]), int(reply[i + 1])) for i in range(0, len(reply), 2)]
