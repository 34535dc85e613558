"""Every Redis key name of the service, and nothing else (channels are in channels.py).

The keys of one shard share one hash tag, `{i}` for shard i, so that every script call (which
touches one shard) touches one Redis Cluster slot. Shard 0 is `gqlp:{0}:`, the keys of a
deployment of one shard. A user id is always the last part of a key, so any id (even one with
':' or braces) is safe.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass


@dataclass(frozen=True)
class Keys:
    prefix: str = "gqlp:{0}:"
    # Which shard: for the traces and logs that name it.
    shard: int = 0

    @classmethod
    def of_shard(cls, shard: int) -> Keys:
        """The keys of shard `shard` (0, 1, ...): all in the slot of the hash tag `{shard}`."""
        return cls(f"gqlp:{{{shard}}}:", shard=shard)

    @property
    def last_seen(self) -> str:
        """ZSET member=user_id score=-(last activity, ms), or while a session is held minus a
        score past every time: newest first in rank order."""
        return self.prefix + "lastseen"

    @property
    def online(self) -> str:
        """ZSET member=user_id score=moment the user's newest live session expires, ms, or
        while a session is held a score past every time (lua/includes/live.lua)."""
        return self.prefix + "online"

    @property
    def online_since(self) -> str:
        """ZSET of the users online: -(when their online period began, ms), for the list by
        login time (lua/includes/status.lua)."""
        return self.prefix + "since"

    def online_index(self, rest: str) -> str:
        """The online list's indexes, `rest` naming one (lua/includes/online_index.lua):
        "users" (HASH user_id -> what they are indexed under, for all but plain users), then
        for a group g (v, r, h) and an order o (l: by lastSeen, s: by onlineSince)
        "g:o:st:STATUS" and "g:o:dev:DEVICE" (ZSETs), "g:ids" (ZSET by id), "rh:since" (ZSET
        by onlineSince of groups r and h) and "due" (ZSET: when a session of several expires)."""
        return self.prefix + "ix:" + rest

    @property
    def index_scan(self) -> str:
        """STRING: the sweep's ZSCAN cursor over `online` in its pass that indexes the users
        online with no index entry (online since before the indexes were kept), "done" once a
        pass has ended (lua/sweep.lua)."""
        return self.prefix + "ixscan"

    @property
    def invisible(self) -> str:
        """SET of the users who chose INVISIBLE (lua/includes/status.lua)."""
        return self.prefix + "invisible"

    @property
    def hidden(self) -> str:
        """ZSET: the online entries of the users who chose INVISIBLE, as in `online`."""
        return self.prefix + "hidden"

    @property
    def status_expiries(self) -> str:
        """ZSET member=user_id score=when their custom status ends, ms."""
        return self.prefix + "stexp"

    @property
    def away_expiries(self) -> str:
        """ZSET member=user_id score=when they turn AWAY by time alone, ms."""
        return self.prefix + "awayexp"

    def status(self, user_id: str) -> str:
        """HASH: the user's choices (chosen status, custom status, lastSeen visibility)."""
        return self.prefix + "st:" + user_id

    @property
    def feed(self) -> str:
        """STREAM: the shard's announced changes, each one entry (a field "u" for a user's
        event, "p" for a place's: its values as published, JSON), trimmed to the feed's
        retention and length (lua/includes/feed.lua)."""
        return self.prefix + "feed"

    @property
    def versions(self) -> str:
        """HASH user_id -> "<version> <expiry, ms>": the user's presence version, how many of
        their changes were announced, kept until the user's retention (or the feed's, if
        longer) after their last change; the sweep removes it then, or when it forgets the
        user. Its field "\tlegacy" (no user id holds a control character) says until when
        `version` keys may be left, and "\tscan" where the sweep's walk of it for lapsed
        versions left off (lua/includes/feed.lua)."""
        return self.prefix + "vers"

    def version(self, user_id: str) -> str:
        """STRING counter: the user's presence version as releases before `versions` kept it,
        expiring with the user's retention (or the feed's, if longer) after their last change;
        read, never written, until the last of them has expired."""
        return self.prefix + "ver:" + user_id

    def session_extras(self, user_id: str) -> str:
        """HASH session_id -> "started_ms idle device" of the user's sessions."""
        return self.prefix + "sx:" + user_id

    @property
    def user_index(self) -> str:
        """HASH user_id -> small integer: the user's bit in every day's activity bitmap."""
        return self.prefix + "uidx"

    @property
    def next_index(self) -> str:
        """STRING counter: the next never-used bit index."""
        return self.prefix + "uidx:next"

    @property
    def free_indexes(self) -> str:
        """LIST of bit indexes of purged users, handed out again before new ones."""
        return self.prefix + "uidx:free"

    @property
    def publish(self) -> str:
        """STRING "PUBLISH" or "SPUBLISH": how the deployment publishes events, chosen by its
        first process (lua/choose_publish.lua; shard 0 only)."""
        return self.prefix + "publish"

    @property
    def scratch(self) -> str:
        """Temporary key a script may use; every script deletes it before it returns."""
        return self.prefix + "scratch"

    def scratch_of(self, name: str) -> str:
        """Another temporary key, for a script that needs several; deleted as `scratch`."""
        return self.prefix + "scratch:" + name

    @property
    def persisted_documents(self) -> str:
        """HASH sha256 hex -> GraphQL document: automatic persisted queries (shard 0 only)."""
        return self.prefix + "docs"

    @property
    def persisted_documents_used(self) -> str:
        """ZSET member=sha256 hex score=last registration or use, ms: which to forget first."""
        return self.prefix + "docs:used"

    def sessions(self, user_id: str) -> str:
        """ZSET member=session_id score=last activity, ms (live while score + window >= now),
        or for a held session a score past every time that names its lease (live while the
        lease is; lua/includes/live.lua). A user whose only live session is the default one
        may have none: their online entry alone keeps that session then."""
        return self.prefix + "sess:" + user_id

    @property
    def leases(self) -> str:
        """ZSET member=slot score=the moment the lease lapses, ms: one lease per process that
        holds sessions in this shard (lua/includes/connections.lua)."""
        return self.prefix + "leases"

    @property
    def lease_owners(self) -> str:
        """HASH slot -> the token of the process that owns the lease."""
        return self.prefix + "leases:owners"

    @property
    def lease_next(self) -> str:
        """STRING counter: the last lease slot handed out (a slot is never reused)."""
        return self.prefix + "leases:next"

    def lease_users(self, slot: str) -> str:
        """SET of the users the lease holds sessions of."""
        return self.prefix + "leases:users:" + slot

    def lease_bits(self, slot: str) -> str:
        """Bitmap of those users' day-bitmap bits, which each renewal ORs into its day's."""
        return self.prefix + "leases:bits:" + slot

    def lease_places(self, slot: str) -> str:
        """SET of the places the lease holds sessions in (lua/includes/places.lua)."""
        return self.prefix + "leases:places:" + slot

    def lease_members(self, slot: str, place_id: str = "") -> str:
        """SET of the members the lease holds in the place; lua/includes/places.lua names it
        from lease_members("") followed by the slot, ':' and the place id."""
        return self.prefix + "leases:pm:" + (slot + ":" + place_id if slot else "")

    @property
    def generations(self) -> str:
        """STRING counter: the last holder generation of a connection-bound session handed
        out in this shard (see conn)."""
        return self.prefix + "conngen"

    def conn(self, user_id: str) -> str:
        """HASH session_id -> "generation slot" of the user's held sessions (see
        lua/includes/connections.lua)."""
        return self.prefix + "conn:" + user_id

    def place_members(self, place_id: str) -> str:
        """ZSET "user_id \\0 session_id" -> -(joined, ms): the sessions in a place (this
        shard is the place's; lua/includes/places.lua)."""
        return self.prefix + "pm:" + place_id

    def place_holders(self, place_id: str) -> str:
        """HASH member -> "generation slot": the subscription holding each place session."""
        return self.prefix + "ph:" + place_id

    def place_states(self, place_id: str) -> str:
        """HASH member -> its state, JSON; member + "\\0" -> when its last UPDATED was
        announced, ms, and whether a later state waits (lua/includes/places.lua)."""
        return self.prefix + "ps:" + place_id

    def place_users(self, place_id: str) -> str:
        """HASH user_id -> how many of the user's sessions are in the place."""
        return self.prefix + "pu:" + place_id

    @property
    def place_flushes(self) -> str:
        """ZSET "place_id \\0 user_id \\0 session_id" -> when the place session's state, left
        waiting by set_place_state, is due to be announced, ms (lua/includes/places.lua)."""
        return self.prefix + "pflush"

    def revoked(self, user_id: str) -> str:
        """ZSET member=session_id score=moment the revocation ends, ms."""
        return self.prefix + "revoked:" + user_id

    def friends(self, user_id: str) -> str:
        """SET of the user's friends' ids: those who live in this key's shard."""
        return self.prefix + "friends:" + user_id

    def online_time(self) -> str:
        """The prefix each day's online time keys are named from (lua/includes/online_time.lua):
        online_day, and once folded online_folded."""
        return self.prefix + "ot:"

    def online_day(self, day: int, block: int) -> str:
        """STRING of a u16 per bit index of `block` (index over 4,096): the 2-second units
        users were online on open day `day` (days since 1970-01-01 in the stats time zone)."""
        return f"{self.online_time()}d{day}:{block}"

    def online_folded(self, day: int) -> tuple[str, str, str, str]:
        """A folded day's marker (STRING: the blocks its fold covers), bitmap, counters in
        index order and rank directory (STRINGs; lua/includes/online_time.lua)."""
        p = self.online_time()
        return f"{p}m{day}", f"{p}b{day}", f"{p}c{day}", f"{p}r{day}"

    def online_late(self, day: int) -> str:
        """HASH bit index -> units a period added to `day` after its fold began."""
        return f"{self.online_time()}l{day}"

    def old_online_time(self, span: int, block: int) -> str:
        """STRING of earlier versions: a u16 of 2-second units per bit index of `block` (index
        over 1,024) and day of `span` (days since 1970-01-01 in the stats time zone, over 32),
        a user's 32 days next to each other. lua/carry_online_time.lua carries each into the
        day's keys, then deletes it."""
        return f"{self.online_time()}{span}:{block}"

    @property
    def old_online_time_match(self) -> str:
        """A SCAN pattern that matches every old_online_time key, and few others."""
        return self.online_time() + "[0-9]*:[0-9]*"

    @property
    def online_time_carried(self) -> str:
        """STRING "done" once a whole SCAN of the shard found no old_online_time key."""
        return self.prefix + "otcarried"

    def period_lengths(self, hour: int | str) -> str:
        """HASH n, ms, and log bucket -> count: the online periods that ended in the hour,
        `hour` hours after the epoch (lua/includes/online_time.lua)."""
        return self.prefix + "op:" + str(hour)

    def period_lengths_by_day(self, day: int) -> str:
        """HASH as period_lengths, of the UTC day `day` days after the epoch."""
        return self.prefix + "op:d" + str(day)

    def day(self, label: str) -> str:
        """Bitmap: bit i is set when the user with index i was active that day (YYYY-MM-DD)."""
        return self.prefix + "day:" + label

    def hour(self, start_ms: str) -> str:
        """Bitmap: bit i is set when the user with index i was active in the hour of the stats
        time zone that starts then (ms since the epoch); kept until it is folded
        (lua/fold_hour.lua), two hours after its end, or PRESENCE_HOURLY_DAYS after it at
        most."""
        return self.prefix + "hour:" + start_ms

    def folded_hour(self, start_ms: str) -> str:
        """Bitmap: `hour`'s bitmap as it was when the hour was folded (lua/fold_hour.lua),
        where no write reaches it; kept while a neighbouring hour's fold or figure needs it."""
        return self.prefix + "hourf:" + start_ms

    def hour_folds(self, label: str) -> str:
        """HASH hour start (ms) -> "active returning new retained_1 ...": the folded hours of
        that day (YYYY-MM-DD) of the stats time zone, a row open ("... +") until the 52 hours
        after its hour are folded (lua/fold_hour.lua); kept as long as the day's last hour
        would have been."""
        return self.prefix + "hfold:" + label

    def hour_cohort(self, start_ms: str) -> str:
        """STRING: the users first active in the hour that starts then (ms), its cohort of
        hourly retention: their bit indexes in runs of consecutive ones, packed
        (lua/includes/cohorts.lua); kept while its row in `hour_folds` is open, until the 52nd
        hour after it is folded."""
        return self.prefix + "hcoh:" + start_ms

    def hour_seen(self, label: str) -> str:
        """Bitmap of the users first active that day (YYYY-MM-DD) who were active in one of
        its folded hours (lua/fold_hour.lua): what a later hour of the day leaves out of its
        new users, in place of the folded hours' bitmaps; kept until the day's last hour is
        folded, or as `hour_folds` at most."""
        return self.prefix + "hseen:" + label

    def week(self, monday: str) -> str:
        """Bitmap as `day`'s, of the week (Monday to Sunday) that starts on that day
        (YYYY-MM-DD); kept PRESENCE_ANALYTICS_DAYS after it."""
        return self.prefix + "week:" + monday

    def month(self, label: str) -> str:
        """Bitmap as `day`'s, of the calendar month (YYYY-MM); kept PRESENCE_ANALYTICS_DAYS
        after it."""
        return self.prefix + "month:" + label

    def first_day(self, label: str) -> str:
        """Bitmap: bit i is set when that day (YYYY-MM-DD) is the first on which the user
        with index i was active; kept as long as `day`'s."""
        return self.prefix + "first:" + label

    def first_week(self, monday: str) -> str:
        """Bitmap as first_day's, of the week that starts on that Monday; kept as `week`'s."""
        return self.prefix + "firstw:" + monday

    def first_month(self, label: str) -> str:
        """Bitmap as first_day's, of the month (YYYY-MM); kept as `month`'s."""
        return self.prefix + "firstm:" + label

    @property
    def first_days(self) -> str:
        """Bit field of u16s: the one at offset 16 * i is the first day the user with index i
        was active (days since 1970-01-01), or 0 for none (lua/includes/activity.lua)."""
        return self.prefix + "firstdays"

    @property
    def cooling_indexes(self) -> str:
        """ZSET member=bit index of a forgotten user score=when it may be handed out again,
        ms: once no kept bitmap can hold its bit."""
        return self.prefix + "uidx:cooling"

    def peaks(self, label: str) -> str:
        """HASH hour start (ms) -> "count at_ms": the most users online at once in each hour
        of that day (YYYY-MM-DD) of the stats time zone, and when it was first reached (shard
        0 only; lua/record_peak.lua); kept PRESENCE_ANALYTICS_DAYS after the day."""
        return self.prefix + "peaks:" + label

    def rate_bucket(self, caller: str) -> str:
        """HASH: a caller's token bucket for rate limiting (see lua/take_token.lua)."""
        return self.prefix + "rate:" + caller

    @property
    def cursor_secret(self) -> str:
        """STRING: the secret that keys page cursors' tags, when no PRESENCE_CURSOR_SECRET is
        set (see lua/cursor_secret.lua). Kept in shard 0."""
        return self.prefix + "cursor-secret"

    @property
    def webhooks(self) -> str:
        """ZSET member=webhook id  score=when it was made, ms: the deployment's webhooks."""
        return self.prefix + "webhooks"

    def webhook(self, webhook_id: str = "") -> str:
        """HASH: one webhook's settings, secrets and delivery state (store/webhooks.py)."""
        return self.prefix + "wh:" + webhook_id

    @property
    def webhook_changes(self) -> str:
        """STRING int: a count of the changes made to the webhooks (created, changed, deleted,
        secrets rotated), moved by the script that makes each and begun from the clock
        (lua/includes/webhook_changes.lua): a delivering process reads every webhook again
        only when it has moved (gql_presence/webhooks/delivery.py)."""
        return self.prefix + "whc"

    def webhook_attempts(self, webhook_id: str = "") -> str:
        """LIST of a webhook's most recent attempts, newest first: "<at ms> <JSON>" each."""
        return self.prefix + "wha:" + webhook_id

    def webhook_lease(self, webhook_id: str, shard: int) -> str:
        """STRING, with a TTL: the token of the process that delivers the webhook's changes of
        one shard of the feed (store/webhooks.py)."""
        return self.prefix + f"whl:{webhook_id}:{shard}"

    @property
    def webhook_deliverers(self) -> str:
        """ZSET member=a process's token  score=when it lapses, ms: the processes that deliver
        webhooks, among which their leases are shared."""
        return self.prefix + "whd"


def shard_of(user_id: str, shards: int) -> int:
    """The shard a user (or a place) lives in: a hash of the id that every process and release
    agrees on (never Python's hash(), which differs between processes). An id that is not
    valid text still hashes, so that the id's check refuses it with its usual message."""
    return zlib.crc32(user_id.encode("utf-8", "surrogatepass")) % shards


def shard_of_name(name: bytes) -> int:
    """The shard whose hash tag a key or channel of `Keys.of_shard` carries (gqlp:{i}:...)."""
    return int(name[name.index(b"{") + 1 : name.index(b"}")])
