"""What a webhook's next batch of one shard holds: the entries of the feed after where it
stands, filtered by its kinds and places, debounced, at most MAX_BATCH changes, and each
change as a backend reads it in GraphQL.

A batch is a function of the feed and of the delivery's kept state alone (its position, the
end of a batch being sent, the debounce's decisions), never of the process or the moment once
it is made: another process that sends it again sends the same changes, in the same body,
under the same `webhook-id`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from gql_presence.lru import LeastRecentlyUsed
from gql_presence.store.days import from_ms
from gql_presence.store.feed import Change, EventCursors, place_matcher
from gql_presence.store.models import ChangeKind, Webhook
from gql_presence.store.wire import PublishedEvent, PublishedPlaceEvent, custom_status_of
from gql_presence.webhooks.sender import MAX_BATCH

# A decision of the debounce about a later entry, kept in ShardProgress.decided.
DROPPED = ""
AS_UPDATED = "!"

Entry = tuple[str, Change | None]


def ms_of(entry_id: str) -> int:
    return int(entry_id.partition("-")[0])


def _after(a: str, b: str) -> bool:
    """Whether entry id `a` comes after `b`."""
    a_ms, _, a_seq = a.partition("-")
    b_ms, _, b_seq = b.partition("-")
    return (int(a_ms), int(a_seq)) > (int(b_ms), int(b_seq))


@dataclass(frozen=True)
class Plan:
    """The entries of the next batch, and where it ends."""

    # (entry id, change, kind sent), in the feed's order.
    changes: tuple[tuple[str, Change, str], ...]
    # The last entry the batch covers (its changes and the entries passed over); None: none.
    end: str | None
    # The debounce's decisions about entries after `end`, as ShardProgress.decided keeps them.
    decided: tuple[str, ...]
    # Whether it ends because it holds MAX_BATCH changes (not at the cutoff or the feed's end).
    full: bool = False


def plan(
    webhook: Webhook,
    entries: Sequence[Entry],
    *,
    cutoff_ms: int,
    pending: str,
    decided: Sequence[str],
) -> Plan:
    """The next batch from `entries` (the feed after the webhook's position): up to
    `pending`, the end of a batch being sent, when there is one; else up to the entries made
    by `cutoff_ms` (now less the debounce) and at most MAX_BATCH changes."""
    debounce_ms = webhook.debounce_seconds * 1000
    kinds = {kind.value for kind in webhook.kinds}
    decisions = {d.removesuffix(AS_UPDATED): d.endswith(AS_UPDATED) for d in decided}
    taken: list[tuple[str, Change, str]] = []
    end = None
    full = False
    for index, (entry_id, change) in enumerate(entries):
        if pending:
            if _after(entry_id, pending):
                break
        elif len(taken) == MAX_BATCH:
            full = True
            break
        elif ms_of(entry_id) > cutoff_ms:
            break
        end = entry_id
        if change is None:
            continue
        kind = change.kind
        if entry_id in decisions:
            if not decisions[entry_id]:
                continue
            kind = ChangeKind.UPDATED
        elif debounce_ms and _cancelled(entries, index, debounce_ms, decisions):
            continue
        if _wanted(webhook, kinds, change, kind):
            taken.append((entry_id, change, kind))
    return Plan(
        _coalesced(taken),
        end,
        tuple(
            entry_id + (AS_UPDATED if as_updated else DROPPED)
            for entry_id, as_updated in decisions.items()
            if end is None or _after(entry_id, end)
        ),
        full,
    )


def _cancelled(
    entries: Sequence[Entry], index: int, debounce_ms: int, decisions: dict[str, bool]
) -> bool:
    """Whether the entry at `index` is an OFFLINE (LEFT) that the same user's ONLINE (the same
    place session's JOINED) follows within the debounce; if so, what becomes of that one is
    decided too (in `decisions`)."""
    entry_id = entries[index][0]
    follower = _follower(entries, index)
    if follower is None or ms_of(follower[0]) - ms_of(entry_id) > debounce_ms:
        return False
    follower_id, follower_change = follower
    as_updated = False
    if isinstance(follower_change, PublishedPlaceEvent):
        # Sent as UPDATED unless it comes back in the state it left with (as far as the
        # entries read tell: when they do not, it is sent).
        before = _next_of(
            entries, index, lambda c: _same_place_session(c, follower_change), backwards=True
        )
        as_updated = before is None or getattr(before[1], "state", None) != follower_change.state
    decisions[follower_id] = as_updated
    return True


def _follower(entries: Sequence[Entry], index: int) -> tuple[str, Change] | None:
    """For an OFFLINE, the same user's next change if it is an ONLINE; for a LEFT, the same
    place session's next event if it is a JOINED; else None."""
    change = entries[index][1]
    if isinstance(change, PublishedEvent) and change.kind == ChangeKind.OFFLINE:
        follower = _next_of(entries, index, lambda c: _same_user(c, change))
        wanted = ChangeKind.ONLINE
    elif isinstance(change, PublishedPlaceEvent) and change.kind == ChangeKind.LEFT:
        follower = _next_of(entries, index, lambda c: _same_place_session(c, change))
        wanted = ChangeKind.JOINED
    else:
        return None
    return follower if follower is not None and follower[1].kind == wanted else None


def _next_of(
    entries: Sequence[Entry], index: int, same: Any, *, backwards: bool = False
) -> tuple[str, Change] | None:
    others = reversed(entries[:index]) if backwards else entries[index + 1 :]
    for entry_id, change in others:
        if change is not None and same(change):
            return entry_id, change
    return None


def _same_user(change: Change, of: PublishedEvent) -> bool:
    return isinstance(change, PublishedEvent) and change.user_id == of.user_id


def _same_place_session(change: Change, of: PublishedPlaceEvent) -> bool:
    return isinstance(change, PublishedPlaceEvent) and (
        change.place_id,
        change.user_id,
        change.session_id,
    ) == (of.place_id, of.user_id, of.session_id)


def _wanted(webhook: Webhook, kinds: set[str], change: Change, kind: str) -> bool:
    # A JOINED sent as UPDATED is sent to those that asked for either.
    if change.kind not in kinds and kind not in kinds:
        return False
    if webhook.places is not None and isinstance(change, PublishedPlaceEvent):
        return place_matcher(webhook.places)(change.place_id)
    return True


def waking(webhook: Webhook) -> Callable[[Change], bool]:
    """Whether a change wakes the webhook's delivery waiting for new entries: one it may send,
    or, with a debounce, one whose decisions may change what it sends (an OFFLINE or LEFT
    that cancels what follows it, a JOINED sent as UPDATED). It passes over the others with
    no step of its own."""
    kinds = {kind.value for kind in webhook.kinds}
    if webhook.debounce_seconds:
        kinds |= {ChangeKind.OFFLINE, ChangeKind.LEFT}
        if ChangeKind.UPDATED in kinds:
            kinds.add(ChangeKind.JOINED)
    return lambda change: _wanted(webhook, kinds, change, change.kind)


def _coalesced(taken: list[tuple[str, Change, str]]) -> tuple[tuple[str, Change, str], ...]:
    """Within one batch, only the latest UPDATED of each place session."""
    latest: dict[tuple[str, str, str], str] = {}
    for entry_id, change, kind in taken:
        if kind == ChangeKind.UPDATED and isinstance(change, PublishedPlaceEvent):
            latest[(change.place_id, change.user_id, change.session_id)] = entry_id
    return tuple(
        (entry_id, change, kind)
        for entry_id, change, kind in taken
        if kind != ChangeKind.UPDATED
        or not isinstance(change, PublishedPlaceEvent)
        or latest[(change.place_id, change.user_id, change.session_id)] == entry_id
    )


def batch_id(webhook_id: str, shard: int, position: str, end: str) -> str:
    """The `webhook-id` of the batch after `position` up to `end`: the same for every process
    that sends it."""
    digest = hashlib.sha256(f"{webhook_id}\0{shard}\0{position}\0{end}".encode()).hexdigest()
    return "msg_" + digest[:32]


def rendered(change: Change, kind: str, cursor: str) -> dict[str, Any]:
    """A change as a backend reads it in GraphQL (every field of PresenceEvent or PlaceEvent),
    with its `type`."""
    if isinstance(change, PublishedPlaceEvent):
        return {
            "type": "place",
            "placeId": change.place_id,
            "kind": kind,
            "userId": change.user_id,
            "sessionId": change.session_id,
            "at": _time(int(change.at_ms)),
            "state": json.loads(change.state) if isinstance(change.state, str) else None,
            "cursor": cursor,
            "version": int(change.version),
        }
    custom = custom_status_of(change.custom)
    return {
        "type": "presence",
        "userId": change.user_id,
        "kind": kind,
        "at": _time(int(change.at_ms)),
        "sessionId": change.session_id or None,
        "online": bool(change.online_or_generation),
        "status": change.status,
        "customStatus": None
        if custom is None
        else {
            "text": custom.text,
            "emoji": custom.emoji,
            "expiresAt": None if custom.expires_at is None else _iso(custom.expires_at),
        },
        "cursor": cursor,
        "version": int(change.version),
    }


class Renderings:
    """The changes rendered lately, shared by every webhook that sends them (each sealed
    cursor costs a cipher's work): by shard, entry and kind sent."""

    def __init__(self, cursors: EventCursors, size: int = 4 * MAX_BATCH) -> None:
        self._cursors = cursors
        self._recent: LeastRecentlyUsed[tuple[int, str, str], Mapping[str, Any]] = (
            LeastRecentlyUsed(size)
        )

    def of(self, planned: Plan, shard: int) -> list[Mapping[str, Any]]:
        found = []
        for entry_id, change, kind in planned.changes:
            key = (shard, entry_id, kind)
            one = self._recent.get(key)
            if one is None:
                # Sealed once for the subscriptions and the webhooks both.
                one = rendered(change, kind, self._cursors.of_change(change, entry_id))
                self._recent.put(key, one)
            found.append(one)
        return found


def _time(ms: int) -> str:
    return _iso(from_ms(ms))


def _iso(moment: datetime) -> str:
    """As the DateTime scalar shows a time."""
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")
