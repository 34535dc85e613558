"""Script replies read into the store's plain dataclasses (models.py): each reply's shape is
the one its script's header gives under "Returns"."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import cached_property
from typing import Any

from gql_presence.store.days import from_ms
from gql_presence.store.models import (
    ChosenStatus,
    CustomStatus,
    ListedUser,
    PlaceMember,
    Presence,
    Session,
    Status,
    Visibility,
)
from gql_presence.store.wire import custom_status_of


def text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def presence_of(user_id: str, entry: Sequence[Any]) -> Presence:
    """A user's presence from a presence_entry of lua/includes/status.lua."""
    last_seen_ms, live, status, chosen, custom, visible, hidden_ms, since_ms, version = entry
    sessions = _sessions_of(live)
    return Presence(
        user_id,
        online=bool(sessions),
        last_seen=_time_or_none(last_seen_ms),
        sessions=sessions,
        status=Status(text(status)),
        custom=custom_status_of(custom),
        chosen=ChosenStatus(text(chosen)),
        visible_to=Visibility(text(visible)),
        online_since=_time_or_none(since_ms),
        hidden_last_seen=_time_or_none(hidden_ms),
        version=int(version),
    )


class PresenceReply:
    """The fields of `presence_of(user_id, entry)`, each read from the entry when first asked
    for: an answer that asks for `online` alone (most touches') decodes no time, status or
    session."""

    def __init__(self, user_id: str, entry: Sequence[Any]) -> None:
        self.user_id = user_id
        self._entry = entry

    @cached_property
    def online(self) -> bool:
        return len(self._entry[1]) > 0

    @cached_property
    def last_seen(self) -> datetime | None:
        return _time_or_none(self._entry[0])

    @cached_property
    def sessions(self) -> tuple[Session, ...]:
        return _sessions_of(self._entry[1])

    @cached_property
    def status(self) -> Status:
        return Status(text(self._entry[2]))

    @cached_property
    def chosen(self) -> ChosenStatus:
        return ChosenStatus(text(self._entry[3]))

    @cached_property
    def custom(self) -> CustomStatus | None:
        return custom_status_of(self._entry[4])

    @cached_property
    def visible_to(self) -> Visibility:
        return Visibility(text(self._entry[5]))

    @cached_property
    def hidden_last_seen(self) -> datetime | None:
        return _time_or_none(self._entry[6])

    @cached_property
    def online_since(self) -> datetime | None:
        return _time_or_none(self._entry[7])

    @cached_property
    def version(self) -> int:
        return int(self._entry[8])

    def presence(self) -> Presence:
        return presence_of(self.user_id, self._entry)


def _sessions_of(live: Sequence[Any]) -> tuple[Session, ...]:
    """Live sessions ({session_id, activity_ms, started_ms, idle, device} flat), most
    recently active first."""
    sessions = []
    for i in range(0, len(live), 5):
        session_id, activity_ms, started_ms, idle, device = live[i : i + 5]
        sessions.append(
            Session(
                text(session_id),
                from_ms(int(activity_ms)),
                from_ms(int(started_ms)),
                bool(int(idle)),
                text(device) or None,
            )
        )
    sessions.sort(key=lambda session: (-session.last_seen.timestamp(), session.session_id))
    return tuple(sessions)


def _time_or_none(ms: Any) -> datetime | None:
    whole = int(ms)
    return None if whole < 0 else from_ms(whole)


@dataclass(frozen=True)
class ShardPage:
    """One shard's part of a page: the store merges them and makes the cursor."""

    total_count: int
    nodes: tuple[ListedUser, ...]
    has_next_page: bool


def page_of(reply: Sequence[Any]) -> ShardPage:
    """A page of users (includes/page.lua's page_reply): {total, more, then for each user
    user_id, score, last_seen_ms, online 0|1}."""
    nodes = tuple(
        ListedUser(
            text(reply[i]), bool(reply[i + 3]), from_ms(int(reply[i + 2])), int(reply[i + 1])
        )
        for i in range(2, len(reply), 4)
    )
    return ShardPage(int(reply[0]), nodes, bool(reply[1]))


@dataclass(frozen=True, slots=True)
class FilteredPart:
    """One call of lua/online_filtered.lua: its part of a shard's page and of its count, and
    where each walk stopped (None: it did not; the next call goes on from there)."""

    page: ShardPage
    page_stop: tuple[int, str] | None
    count_stop: tuple[int, str] | None


def filtered_part_of(reply: Sequence[Any]) -> FilteredPart:
    """lua/online_filtered.lua's reply: {total, more, page's stop (score, user_id or two ""),
    count's stop, then the users as page_of reads them}."""
    page = page_of([reply[0], reply[1], *reply[6:]])
    return FilteredPart(page, _stop(reply[2], reply[3]), _stop(reply[4], reply[5]))


def _stop(score: Any, member: Any) -> tuple[int, str] | None:
    return None if text(score) == "" else (int(score), text(member))


def place_members_of(
    place_id: str, reply: Sequence[Any]
) -> tuple[int, int, tuple[PlaceMember, ...], bool, int, int]:
    """lua/place_members.lua's reply: (sessions, users, members of the page, whether more
    follow, the number of the place's last event that the page reflects, and its version)."""
    nodes = []
    for i in range(4, len(reply), 3):
        user_id, _, session_id = text(reply[i]).partition("\0")
        score = int(reply[i + 1])
        state = None if reply[i + 2] is None else text(reply[i + 2])
        nodes.append(PlaceMember(place_id, user_id, session_id, from_ms(-score), state, score))
    sequence, version = reply[3]
    return int(reply[0]), int(reply[1]), tuple(nodes), bool(reply[2]), int(sequence), int(version)
