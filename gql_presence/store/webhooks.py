"""The deployment's webhooks: their settings, secrets, recent attempts and delivery state.

They live in shard 0 with the deployment's other singletons: a ZSET of their ids (which the
cap is counted on), a HASH per webhook and a LIST of its recent attempts (keys.py). A
webhook's delivery of each shard of the feed is kept in its HASH too (ShardProgress, fields
named by PROGRESS_FIELDS and the shard's index), changed only by the process holding that
delivery's lease (lua/webhook_leases.lua, lua/advance_webhook.lua, lua/pass_webhooks.lua). The
URL's rules need the service's settings and are checked above the store
(gql_presence/webhooks/safety.py) before it is handed here; everything else is checked here.
"""

from __future__ import annotations

import base64
import json
import secrets
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import cache
from typing import Any

from gql_presence.store.days import from_ms
from gql_presence.store.errors import BadInputError
from gql_presence.store.feed import Feed
from gql_presence.store.models import ChangeKind, ShardProgress, Webhook, WebhookAttempt
from gql_presence.store.replies import text
from gql_presence.store.scripts import ScriptName
from gql_presence.store.shard import Shard, named
from gql_presence.store.validation import MAX_WEBHOOKS, check_id

MAX_ATTEMPTS = 20
# Longer than any cursor the feed makes: a bound on what a replay request stores.
MAX_CURSOR_LENGTH = 1024
MAX_DEBOUNCE_SECONDS = 60
MAX_PLACE_PATTERNS = 100
# How long a rotated secret keeps signing beside the new one.
PREVIOUS_SECRET_MS = 24 * 3600 * 1000
# At most this much of an answer, or of a connection's error, is kept with an attempt.
MAX_ERROR_BYTES = 1024
# Every kind but UPDATED, which is frequent and asked for by name.
DEFAULT_KINDS = tuple(kind for kind in ChangeKind if kind is not ChangeKind.UPDATED)
SECRET_PREFIX = "whsec_"  # noqa: S105 - the Standard Webhooks form's prefix, not a secret
# The HASH field of each part of a shard's ShardProgress: this, ':' and the shard's index.
PROGRESS_FIELDS = {
    "position": "p",
    "pending": "q",
    "gap": "g",
    "decided": "k",
    "replay_id": "r",
    "backlog": "b",
}
# The fields that say what a delivery sends, where and how it signs (Webhook.settings_read).
SETTINGS_FIELDS = (
    "url",
    "kinds",
    "places",
    "debounce_seconds",
    "enabled",
    "secret",
    "previous_secret",
    "previous_until_ms",
    "replay_id",
    "replay_after",
)
# The parts of a ShardProgress that a delivery decides from (its backlog is only counted).
DECIDING_FIELDS = ("position", "pending", "gap", "decided", "replay_id")
# The parts of a ShardProgress that lua/pass_webhooks.lua reads: the position, and what a
# delivery passed over must not have.
PASSED_OVER_FIELDS = ("position", "pending", "decided", "gap")
# The largest sequence of a feed entry id: "<ms - 1>-<this>" is just before the ms.
_LAST_SEQUENCE = "18446744073709551615"


def new_secret() -> str:
    """A signing secret in the Standard Webhooks form: whsec_ and base64 of 32 random bytes."""
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(32)).decode()


def check_kinds(kinds: Iterable[str] | None) -> tuple[ChangeKind, ...]:
    """The kinds given, each once, in the feed's order; None: the default kinds."""
    if kinds is None:
        return DEFAULT_KINDS
    allowed = ", ".join(ChangeKind)
    given = set()
    for kind in kinds:
        try:
            given.add(ChangeKind(kind))
        except ValueError:
            raise BadInputError(f"kinds may hold {allowed}; got {kind!r}.") from None
    if not given:
        raise BadInputError(f"kinds must name at least one of {allowed} (null: all but UPDATED).")
    return tuple(kind for kind in ChangeKind if kind in given)


def check_places(places: Iterable[str] | None) -> tuple[str, ...] | None:
    """Place patterns as a JWT's `places` claim: place ids, and prefixes ending in `*`."""
    if places is None:
        return None
    given = list(dict.fromkeys(places))
    if len(given) > MAX_PLACE_PATTERNS:
        raise BadInputError(
            f"places takes at most {MAX_PLACE_PATTERNS} place ids and prefixes ending in `*`; "
            f"got {len(given)}."
        )
    for pattern in given:
        check_id(pattern, "each of places (a place id, or a prefix ending in `*`)")
        if "*" in pattern[:-1]:
            raise BadInputError(
                "each of places is a place id, or a prefix ending in `*` (`*` alone: every "
                f"place); `*` may stand only at the end, as it does not in {pattern!r}."
            )
    return tuple(given)


def check_debounce(seconds: int) -> int:
    if not 0 <= seconds <= MAX_DEBOUNCE_SECONDS:
        raise BadInputError(f"debounceSeconds must be 0 to {MAX_DEBOUNCE_SECONDS}; got {seconds}.")
    return seconds


def bounded_error(message: str) -> str:
    """At most MAX_ERROR_BYTES of UTF-8 of the message, cut at a character's edge."""
    raw = message.encode("utf-8", "replace")
    if len(raw) <= MAX_ERROR_BYTES:
        return message
    return raw[:MAX_ERROR_BYTES].decode("utf-8", "ignore")


class Webhooks:
    """Create, change, read and delete webhooks; record their attempts."""

    def __init__(self, home: Shard, feed: Feed) -> None:
        self._home = home
        # What the deliveries read: where they stand is a position in each of its shards.
        self._feed = feed
        self._shards = feed.shards

    async def create(
        self,
        url: str,
        kinds: Iterable[str] | None,
        places: Iterable[str] | None,
        debounce_seconds: int,
    ) -> tuple[Webhook, str]:
        """A new webhook, enabled, and its secret (which is never shown again). `url` must
        already keep safety's rules. BadInputError past MAX_WEBHOOKS: nothing is made."""
        fields = _fields(
            url=url,
            kinds=check_kinds(kinds),
            places=check_places(places),
            debounce_seconds=check_debounce(debounce_seconds),
        )
        secret = new_secret()
        webhook_id = uuid.uuid4().hex
        k = self._home.keys
        await self._home.run(
            ScriptName.CREATE_WEBHOOK,
            named(webhooks=k.webhooks, webhook=k.webhook(webhook_id), changes=k.webhook_changes),
            named(
                webhook_id=webhook_id,
                max_webhooks=MAX_WEBHOOKS,
                fields=[*fields, "enabled", "1", "secret", secret],
            ),
        )
        webhook = await self.webhook(webhook_id)
        if webhook is None:  # deleted at once by another caller
            raise BadInputError("The webhook was deleted as soon as it was made.")
        return webhook, secret

    async def update(
        self,
        webhook_id: str,
        *,
        url: str | None = None,
        kinds: Iterable[str] | None = None,
        places: Iterable[str] | None = None,
        debounce_seconds: int | None = None,
        enabled: bool | None = None,
    ) -> Webhook | None:
        """Changes what is given (None: unchanged); None when there is no such webhook.
        Enabling or disabling clears the service's reason: a backend chose."""
        fields = _fields(
            url=url,
            kinds=None if kinds is None else check_kinds(kinds),
            places=None if places is None else check_places(places),
            debounce_seconds=None if debounce_seconds is None else check_debounce(debounce_seconds),
        )
        if enabled is not None:
            fields += ["enabled", "1" if enabled else "0", "disabled_reason", ""]
            if enabled:
                fields += ["failing_since_ms", ""]
        return await self._change(webhook_id, fields)

    async def disable(self, webhook_id: str, reason: str) -> Webhook | None:
        """Disabled by the service, saying why (disabledReason)."""
        return await self._change(webhook_id, ["enabled", "0", "disabled_reason", reason])

    async def request_replay(self, webhook_id: str, after: str | None) -> Webhook | None:
        """Asks its deliveries to send again every retained change after `after` (None: from
        the oldest retained): each shard's delivery takes a replay once, by its id.
        BadInputError for an `after` that is no cursor of the feed."""
        if after is not None and not (
            0 < len(after) <= MAX_CURSOR_LENGTH and after.isascii() and after.isprintable()
        ):
            raise BadInputError(
                "after is a change's cursor, as `changes` or an event gives it (or null)."
            )
        await self._feed.positions(after)  # BadInputError for what is no cursor of the feed
        return await self._change(
            webhook_id, ["replay_after", "0" + (after or ""), "replay_id", uuid.uuid4().hex]
        )

    async def _change(self, webhook_id: str, fields: list[str]) -> Webhook | None:
        if fields:
            k = self._home.keys
            changed = await self._home.run(
                ScriptName.UPDATE_WEBHOOK,
                named(webhook=k.webhook(check_id(webhook_id, "id")), changes=k.webhook_changes),
                named(fields=fields),
            )
            if not int(changed):
                return None
        return await self.webhook(webhook_id)

    async def rotate_secret(self, webhook_id: str) -> tuple[Webhook, str] | None:
        """A new secret; the one it had keeps signing beside it for PREVIOUS_SECRET_MS."""
        secret = new_secret()
        k = self._home.keys
        rotated = await self._home.run(
            ScriptName.ROTATE_WEBHOOK_SECRET,
            named(webhook=k.webhook(check_id(webhook_id, "id")), changes=k.webhook_changes),
            named(secret=secret, keep_ms=PREVIOUS_SECRET_MS),
        )
        webhook = await self.webhook(webhook_id) if int(rotated) else None
        return None if webhook is None else (webhook, secret)

    async def delete(self, webhook_id: str) -> bool:
        """Whether there was such a webhook."""
        k = self._home.keys
        check_id(webhook_id, "id")
        return bool(
            await self._home.run(
                ScriptName.DELETE_WEBHOOK,
                named(
                    webhooks=k.webhooks,
                    webhook=k.webhook(webhook_id),
                    attempts=k.webhook_attempts(webhook_id),
                    changes=k.webhook_changes,
                ),
                named(webhook_id=webhook_id),
            )
        )

    async def webhooks(self) -> list[Webhook]:
        """Every webhook of the deployment, oldest first."""
        return await self._read("")

    async def webhook(self, webhook_id: str) -> Webhook | None:
        found = await self._read(check_id(webhook_id, "id"))
        return found[0] if found else None

    async def for_deliveries(self, webhook_id: str = "") -> list[Webhook]:
        """Every webhook (or only this one) as deliveries read them, at each step and tick:
        settings and every shard's progress, without the attempts and with deliveredUpTo as
        kept (what a reader is shown costs a read of the attempts and a cursor sealed)."""
        return (await self.for_tick(webhook_id and check_id(webhook_id, "id")))[1]

    async def for_tick(self, webhook_id: str = "") -> tuple[str, list[Webhook]]:
        """As for_deliveries, with the count of changes made to the webhooks when they were
        read (take_leases returns it too: while it stays, they are as read)."""
        return await self._counted(webhook_id, max_attempts=0)

    async def _read(self, webhook_id: str) -> list[Webhook]:
        _, found = await self._counted(webhook_id, MAX_ATTEMPTS)
        return [await self._delivered(webhook) for webhook in found]

    async def _counted(self, webhook_id: str, max_attempts: int) -> tuple[str, list[Webhook]]:
        k = self._home.keys
        changes, reply = await self._home.run(
            ScriptName.WEBHOOKS,
            named(webhooks=k.webhooks, changes=k.webhook_changes),
            named(
                webhook_prefix=k.webhook(),
                attempts_prefix=k.webhook_attempts(),
                webhook_id=webhook_id,
                max_webhooks=MAX_WEBHOOKS,
                max_attempts=max_attempts,
            ),
        )
        now_ms = time.time_ns() // 1_000_000
        return text(changes), [_webhook_of(entry, now_ms, self._shards) for entry in reply]

    async def _delivered(self, webhook: Webhook) -> Webhook:
        """deliveredUpTo as its deliveries in every shard have moved it, once they have."""
        if webhook.delivered_up_to is None or not any(p.moved for p in webhook.progress):
            return webhook
        cursor = await self._feed.seal([p.position for p in webhook.progress])
        return replace(webhook, delivered_up_to=cursor)

    async def take_leases(
        self, token: str, ttl_ms: int, wanted: Sequence[tuple[str, int, bool]]
    ) -> tuple[int, list[bool], str]:
        """Keeps, takes or gives up the leases of deliveries (webhook id, shard, whether
        wanted) for the process of `token`: the fair share of one process, which of them it
        holds now, and the count of changes made to the webhooks (as for_tick returns it)."""
        k = self._home.keys
        reply = await self._home.run(
            ScriptName.WEBHOOK_LEASES,
            named(
                deliverers=k.webhook_deliverers,
                changes=k.webhook_changes,
                leases=[k.webhook_lease(webhook_id, shard) for webhook_id, shard, _ in wanted],
            ),
            named(token=token, ttl_ms=ttl_ms, wanted=[int(want) for *_, want in wanted]),
        )
        return int(reply[0]), [bool(int(held)) for held in reply[2:]], text(reply[1])

    async def advance(
        self,
        webhook_id: str,
        shard: int,
        token: str,
        progress: Mapping[str, str],
        acknowledged: AcknowledgedAttempt | None = None,
        *,
        unchanged: tuple[Webhook, ShardProgress] | None = None,
    ) -> bool:
        """Changes the parts of the webhook's ShardProgress given (by their names in
        PROGRESS_FIELDS; "" removes one), and any other fields named as they are kept, if the
        process of `token` still holds the delivery's lease; whether it did. An acknowledged
        attempt given is recorded in the same call, as record_attempt records it. With
        `unchanged` (the webhook as read, and the shard's progress as known since), nothing is
        written unless its settings and the parts of the progress it decides from are still
        those: ChangedError otherwise."""
        fields: list[str] = []
        for name, value in progress.items():
            part = PROGRESS_FIELDS.get(name)
            fields += [name if part is None else f"{part}:{shard}", value]
        checked, expected = "", ""
        if unchanged is not None:
            webhook, known = unchanged
            deciding = _raw_progress(known)
            names = [*SETTINGS_FIELDS]
            names += [f"{PROGRESS_FIELDS[name]}:{shard}" for name in DECIDING_FIELDS]
            checked = " ".join(names)
            expected = webhook.settings_read + _encoded(deciding[n] for n in DECIDING_FIELDS)
        k = self._home.keys
        moved = int(
            await self._home.run(
                ScriptName.ADVANCE_WEBHOOK,
                named(
                    webhook=k.webhook(webhook_id),
                    lease=k.webhook_lease(webhook_id, shard),
                    attempts=k.webhook_attempts(webhook_id),
                ),
                named(
                    token=token,
                    attempt="" if acknowledged is None else acknowledged.json,
                    max_attempts=MAX_ATTEMPTS,
                    delivered_up_to="" if acknowledged is None else acknowledged.delivered_up_to,
                    checked=checked,
                    expected=expected,
                    fields=fields,
                ),
            )
        )
        if moved < 0:
            raise ChangedError
        return bool(moved)

    async def pass_over(
        self, shard: int, token: str, moves: Sequence[tuple[Webhook, ShardProgress, str]]
    ) -> list[bool]:
        """Moves the positions of waiting deliveries of one shard (the webhook and its progress
        as read, the entry to pass to) in one call: each only if the process of `token` holds
        its lease, it still stands where it was read, with nothing pending, decided or missed,
        and its filters are still those read (what it passed over was judged by them). Which
        of them moved."""
        if not moves:
            return []
        k = self._home.keys
        deliveries: list[str] = []
        positions: list[str] = []
        for webhook, progress, to in moves:
            deliveries += [k.webhook(webhook.id), k.webhook_lease(webhook.id, shard)]
            filters = "\n".join(filters_of(webhook))
            positions += [progress.position if progress.moved else "", to, filters]
        fields = [f"{PROGRESS_FIELDS[name]}:{shard}" for name in PASSED_OVER_FIELDS]
        reply = await self._home.run(
            ScriptName.PASS_WEBHOOKS,
            named(deliveries=deliveries),
            named(token=token, fields=fields, moves=positions),
        )
        return [bool(int(moved)) for moved in reply]

    async def record_attempt(
        self,
        webhook_id: str,
        *,
        delivery_id: str,
        changes: int,
        status: int | None,
        error: str | None,
        duration_ms: float,
        acknowledged: bool,
        delivered_up_to: str | None = None,
    ) -> WebhookAttempt | None:
        """Keeps an attempt among the webhook's MAX_ATTEMPTS most recent; an acknowledged one
        also sets deliveredUpTo to `delivered_up_to`, the batch's end, and ends the time it
        was failing (one not acknowledged starts it). None when the webhook is gone."""
        attempt = _attempt_fields(delivery_id, changes, status, error, duration_ms)
        k = self._home.keys
        at_ms = int(
            await self._home.run(
                ScriptName.RECORD_WEBHOOK_ATTEMPT,
                named(webhook=k.webhook(webhook_id), attempts=k.webhook_attempts(webhook_id)),
                named(
                    attempt=json.dumps(attempt, separators=(",", ":")),
                    max_attempts=MAX_ATTEMPTS,
                    acknowledged=int(acknowledged),
                    delivered_up_to=(delivered_up_to or "") if acknowledged else "",
                ),
            )
        )
        return _attempt_of(f"{at_ms} {json.dumps(attempt)}") if at_ms else None


class ChangedError(Exception):
    """A webhook's settings or a shard's progress were not those its delivery went on from:
    nothing was written, and the delivery reads them again."""


def advanced(progress: ShardProgress, changes: Mapping[str, str]) -> ShardProgress:
    """The progress once Webhooks.advance has written these parts of it."""
    raw = _raw_progress(progress)
    raw.update((name, value) for name, value in changes.items() if name in PROGRESS_FIELDS)
    return _progress_parsed(raw, progress.position if not raw["position"] else "")


@dataclass(frozen=True)
class AcknowledgedAttempt:
    """An acknowledged attempt, recorded with the advance that follows it (Webhooks.advance)."""

    delivery_id: str
    changes: int
    status: int
    duration_ms: float
    # The batch's end cursor: the webhook's deliveredUpTo.
    delivered_up_to: str

    @property
    def json(self) -> str:
        fields = _attempt_fields(
            self.delivery_id, self.changes, self.status, None, self.duration_ms
        )
        return json.dumps(fields, separators=(",", ":"))


def _attempt_fields(
    delivery_id: str, changes: int, status: int | None, error: str | None, duration_ms: float
) -> dict[str, Any]:
    """An attempt as its LIST keeps it (without its time)."""
    return {
        "deliveryId": delivery_id,
        "changes": changes,
        "status": status,
        "error": None if error is None else bounded_error(error),
        "durationMs": round(duration_ms, 3),
    }


def filters_of(webhook: Webhook) -> tuple[str, str, str]:
    """Its kinds, places and debounce as its HASH keeps them (places: "" for every place)."""
    places = "" if webhook.places is None else json.dumps(list(webhook.places))
    return ",".join(webhook.kinds), places, str(webhook.debounce_seconds)


def _fields(
    *,
    url: str | None,
    kinds: Sequence[ChangeKind] | None,
    places: Sequence[str] | None,
    debounce_seconds: int | None,
) -> list[str]:
    """The HASH fields of what is given, as the scripts take them."""
    fields = []
    if url is not None:
        fields += ["url", url]
    if kinds is not None:
        fields += ["kinds", ",".join(kinds)]
    if places is not None:
        fields += ["places", json.dumps(list(places))]
    if debounce_seconds is not None:
        fields += ["debounce_seconds", str(debounce_seconds)]
    return fields


def _progress_of(fields: Mapping[str, str], shard: int, created_ms: int) -> ShardProgress:
    raw = {name: fields.get(field, "") for name, field in _progress_fields(shard)}
    return _progress_parsed(raw, f"{created_ms - 1}-{_LAST_SEQUENCE}")


@cache
def _progress_fields(shard: int) -> tuple[tuple[str, str], ...]:
    """Each part of a shard's ShardProgress, and its field: made once per shard, as every
    tick parses every webhook's progress in each shard."""
    return tuple((name, f"{part}:{shard}") for name, part in PROGRESS_FIELDS.items())


def _progress_parsed(raw: Mapping[str, str], unmoved: str) -> ShardProgress:
    """A ShardProgress from its parts as its fields keep them (by their PROGRESS_FIELDS
    names); `unmoved`: its position while it has none kept."""
    backlog, _, oldest_ms = raw["backlog"].partition(" ")
    return ShardProgress(
        position=raw["position"] or unmoved,
        moved=bool(raw["position"]),
        pending=raw["pending"],
        gap=raw["gap"],
        decided=tuple(raw["decided"].split()),
        replay_id=raw["replay_id"],
        backlog=int(backlog or 0),
        oldest_ms=int(oldest_ms or 0),
    )


def _raw_progress(progress: ShardProgress) -> dict[str, str]:
    """The parts of a ShardProgress as its fields keep them, by their PROGRESS_FIELDS names."""
    return {
        "position": progress.position if progress.moved else "",
        "pending": progress.pending,
        "gap": progress.gap,
        "decided": " ".join(progress.decided),
        "replay_id": progress.replay_id,
        "backlog": f"{progress.backlog} {progress.oldest_ms}" if progress.backlog else "",
    }


def _encoded(values: Iterable[str]) -> str:
    """Values as lua/advance_webhook.lua compares them: each "<bytes>:<value>"."""
    return "".join(f"{len(value.encode())}:{value}" for value in values)


def _webhook_of(entry: Sequence[Any], now_ms: int, shards: int) -> Webhook:
    """A webhook from an entry of lua/webhooks.lua's reply."""
    webhook_id, flat, attempts = entry
    fields = {text(flat[i]): text(flat[i + 1]) for i in range(0, len(flat), 2)}
    secrets_now = [fields["secret"]]
    previous = fields.get("previous_secret")
    if previous and int(fields.get("previous_until_ms", "0")) > now_ms:
        secrets_now.append(previous)
    replay = fields.get("replay_after")
    failing = fields.get("failing_since_ms")
    places = fields.get("places")
    return Webhook(
        id=text(webhook_id),
        url=fields["url"],
        kinds=tuple(ChangeKind(kind) for kind in fields["kinds"].split(",")),
        places=None if places is None else tuple(json.loads(places)),
        debounce_seconds=int(fields["debounce_seconds"]),
        enabled=fields["enabled"] == "1",
        disabled_reason=fields.get("disabled_reason"),
        created_at=from_ms(int(fields["created_ms"])),
        delivered_up_to=fields.get("delivered_up_to"),
        replay_after=None if replay is None else replay[1:],
        failing_since=None if failing is None else from_ms(int(failing)),
        attempts=tuple(_attempt_of(text(attempt)) for attempt in attempts),
        secrets=tuple(secrets_now),
        # Before its first delivery, a webhook stands where it was made: it delivers the
        # changes made after that.
        progress=tuple(
            _progress_of(fields, shard, int(fields["created_ms"])) for shard in range(shards)
        ),
        replay_id=fields.get("replay_id", ""),
        settings_read=_encoded(fields.get(name, "") for name in SETTINGS_FIELDS),
    )


def _attempt_of(stored: str) -> WebhookAttempt:
    at_ms, _, attempt = stored.partition(" ")
    fields = json.loads(attempt)
    return WebhookAttempt(
        at=from_ms(int(at_ms)),
        delivery_id=fields["deliveryId"],
        changes=int(fields["changes"]),
        status=fields["status"],
        error=fields["error"],
        duration_ms=float(fields["durationMs"]),
    )
