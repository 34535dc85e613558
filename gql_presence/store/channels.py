"""Every pub/sub channel name of the service, beside keys.py, and which connection (route) of
a process hears each.

A channel is not a key, but with sharded pub/sub (SPUBLISH) a channel must hash to the slot of
the script that publishes on it: the channels of shard i carry its hash tag `{i}`, as its keys
do. With classic PUBLISH, every node of a Redis Cluster hears every event, and one route
carries them all.
"""

from __future__ import annotations

from dataclasses import dataclass

from gql_presence.store.keys import shard_of, shard_of_name
from gql_presence.store.publishing import Publish

# Every shard announces every event on this one channel too (classic PUBLISH), for the
# processes where someone follows every user.
EVERY_USER = "gqlp:{0}:events"
# A channel nobody publishes on: a process's subscription holds it always, so that it stays
# subscribed (and answers PINGs as such) while it follows nobody.
QUIET = "gqlp:quiet"


@dataclass(frozen=True)
class Channels:
    """The channels of one shard: those in its hash tag, and the deployment's own."""

    prefix: str = "gqlp:{0}:"

    @classmethod
    def of_shard(cls, shard: int) -> Channels:
        return cls(f"gqlp:{{{shard}}}:")

    @property
    def events(self) -> str:
        """The presence events of every user of every shard, with classic PUBLISH; see
        lua/includes/events.lua and gql_presence/realtime/hub.py."""
        return EVERY_USER

    @property
    def shard_events(self) -> str:
        """With sharded pub/sub, the presence events of every user of this shard."""
        return self.prefix + "events"

    def every_user(self, publish: Publish) -> str:
        """The channel of every user that this shard's scripts publish on."""
        return EVERY_USER if publish is Publish.CLASSIC else self.shard_events

    def user_events(self, user_id: str) -> str:
        """The user's presence events (and FRIENDS, their friend set's changes), in this
        shard's hash tag."""
        return self.prefix + "events:" + user_id

    @property
    def quiet(self) -> str:
        return QUIET

    @property
    def shard_quiet(self) -> str:
        """As quiet, for a connection of sharded pub/sub: in this shard's slot, whose master
        alone takes its subscription."""
        return self.prefix + "quiet"

    def place_events(self, place_id: str) -> str:
        """The place's JOINED, UPDATED and LEFT events (and the REPLACED ones its holders act
        on), in the place's shard's hash tag."""
        return self.prefix + "pev:" + place_id


@dataclass(frozen=True)
class Routes:
    """Which channels a process subscribes to, over which connection (route): the only one
    with classic PUBLISH, one per shard with sharded pub/sub (to the master of the shard's
    slot, which alone hears its channels' events). Route i's channels are then those of
    shard i, all in the one slot of its hash tag."""

    shards: int
    sharded: bool

    @property
    def count(self) -> int:
        return self.shards if self.sharded else 1

    def route_of(self, user_or_place_id: str) -> int:
        """The route of a user's (or a place's) events."""
        return shard_of(user_or_place_id, self.shards) if self.sharded else 0

    def route_of_channel(self, channel: bytes) -> int:
        """The route of any channel named here."""
        return shard_of_name(channel) if self.sharded else 0

    def every_user(self, route: int) -> str:
        """The channel of every user's events that the route carries."""
        return Channels.of_shard(route).shard_events if self.sharded else EVERY_USER

    def quiet(self, route: int) -> str:
        return Channels.of_shard(route).shard_quiet if self.sharded else QUIET

    def user_events(self, user_id: str) -> str:
        """The channel of the user's events, and of their friend set's changes."""
        return Channels.of_shard(shard_of(user_id, self.shards)).user_events(user_id)

    def friend_set(self, user_id: str) -> list[str]:
        """The channels that announce changes of the user's friend set (FRIENDS): their own
        channel with classic PUBLISH; with sharded pub/sub, the user's channel in every shard,
        as each shard's script announces the links it changed on a channel of its own slot."""
        if not self.sharded:
            return [self.user_events(user_id)]
        return [Channels.of_shard(i).user_events(user_id) for i in range(self.shards)]

    def place_events(self, place_id: str) -> str:
        return Channels.of_shard(shard_of(place_id, self.shards)).place_events(place_id)
