"""What the deployment keeps once, whatever its shards: how events are published, the cursor
secret, rate-limit buckets and persisted documents. None of it is users' data: it all lives
in shard 0."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import secrets
from collections.abc import Sequence

from redis.asyncio import RedisCluster

from gql_presence.store.cursor import Cursors
from gql_presence.store.cursor_secret import new_secret
from gql_presence.store.errors import WritesRefusedError
from gql_presence.store.publishing import Publish, sharded_everywhere
from gql_presence.store.replies import text
from gql_presence.store.scripts import ScriptName
from gql_presence.store.shard import Shard, guarded, named
from gql_presence.store.validation import MAX_DOCUMENT_BYTES, check_document, check_sha256

# Automatic persisted queries kept at most: an app has tens to hundreds of documents, a few
# versions of it a few times that; each is at most MAX_DOCUMENT_BYTES (32 KiB of UTF-8), so
# Redis holds 32 MiB of documents at the very worst and well under 1 MiB for real apps.
MAX_PERSISTED_DOCUMENTS = 1000
# A registration counts as a use this long before it (lua/persist_document.lua): any caller
# may register documents, so a flood of them must forget first what nobody has used, not the
# documents in use, whose uses reach Redis up to 10 s late. Ten minutes: any document used
# within them outranks every registration; a new one still outranks those unused for longer.
REGISTERED_AGE_MS = 10 * 60 * 1000
# Documents refreshed per script call (refresh_documents): one ZMSCORE and one ZADD of 250
# members, about a millisecond of Redis time (1,000 took 2 to 5 ms; bench/persisted.py).
REFRESH_BATCH = 250
# The most operations one call of take_token.lua admits at once (its work is bounded by it).
MAX_ADMISSIONS = 1000


class Deployment:
    """The deployment's singletons, over its shards (`shards[0]` keeps them)."""

    def __init__(self, shards: Sequence[Shard], cursor_secret: str | None) -> None:
        self._shards = shards
        self._home = shards[0]
        # Without PRESENCE_CURSOR_SECRET, the deployment's own, read from Redis when first used.
        self._cursors = None if cursor_secret is None else Cursors(cursor_secret)
        # On a Redis Cluster, events are published as the deployment chose: its record is read
        # at start-up (choose_publish), or by the first change of a store that did not ask.
        self._on_cluster = isinstance(self._home.redis, RedisCluster)
        self.publish: Publish | None = None if self._on_cluster else Publish.CLASSIC
        self._choosing = asyncio.Lock()
        # Ids of this process's token takings, each unique in the deployment (a random prefix
        # made by each process, then a count): a uuid4 per request costs a few µs of the OS's
        # randomness for no more uniqueness than this.
        self._taking_prefix = secrets.token_hex(8)
        self._takings = itertools.count()

    async def choose_publish(self) -> None:
        """At start-up: how events are published, the same for every process of the
        deployment. On a Redis Cluster whose every master has sharded pub/sub, with SPUBLISH
        on channels of the publishing shard, so that an event stays on its shard's master
        instead of crossing the cluster bus to every node; else with classic PUBLISH. The
        deployment's first process chooses, and every later one follows its record
        (lua/choose_publish.lua). One Redis keeps classic PUBLISH and records nothing."""
        cluster = self._home.redis
        if not isinstance(cluster, RedisCluster):
            return
        async with self._choosing:
            if self.publish is None:
                await self._choose_publish(cluster)

    async def _choose_publish(self, cluster: RedisCluster) -> None:
        able = await guarded(sharded_everywhere(cluster))
        key = self._home.keys.publish
        candidate = Publish.SHARDED if able else Publish.CLASSIC
        recorded = text(
            await self._home.run(
                ScriptName.CHOOSE_PUBLISH, named(publish=key), named(candidate=candidate)
            )
        )
        try:
            chosen = Publish(recorded)
        except ValueError:
            raise RuntimeError(
                f"{key} holds {recorded!r}: it must be PUBLISH or SPUBLISH"
            ) from None
        if chosen is Publish.SHARDED and not able:
            raise RuntimeError(
                "this deployment publishes events with SPUBLISH (sharded pub/sub), which a "
                "master of the cluster lacks (Redis before 7.0): upgrade it, or stop every "
                f"process, set {key} to PUBLISH and start them again"
            )
        self.publish = chosen
        for shard in self._shards:
            shard.publish_with(chosen)

    # --- page cursors ----------------------------------------------------------------------

    async def make_cursor_secret(self) -> None:
        """At start-up: makes sure the deployment's cursor secret is in Redis (with no
        PRESENCE_CURSOR_SECRET), so that a replica holds it too when it serves reads during a
        failover. While Redis takes no writes, it is left to the first cursor made."""
        with contextlib.suppress(WritesRefusedError):
            await self.cursors(make=True)

    async def cursors(self, *, make: bool) -> Cursors:
        """What makes and reads this deployment's cursors. Without PRESENCE_CURSOR_SECRET, the
        secret kept in Redis, made by the first process that makes a cursor: every process
        reads the same, so a cursor from one is valid on all. Read once, then kept. Reading a
        cursor makes no secret (bad input changes nothing): with none yet, none is valid."""
        if self._cursors is not None:
            return self._cursors
        secret = text(
            await self._home.run(
                ScriptName.CURSOR_SECRET,
                named(secret=self._home.keys.cursor_secret),
                named(candidate=new_secret() if make else ""),
            )
        )
        if not secret:
            return Cursors(new_secret())  # one that no cursor was made with
        self._cursors = Cursors(secret)
        return self._cursors

    # --- rate limits -----------------------------------------------------------------------

    async def take_token(
        self, caller: str, rate: float, burst: int, cost: int = 1, *, owed: bool = False
    ) -> int:
        """Takes `cost` tokens from the caller's bucket (rate per second, at most burst):
        while one is there, or, `owed`, whatever is left (lua/take_token.lua). Returns 0 when
        granted, else how many ms until a token is there."""
        _, wait_ms = await self.take_tokens(caller, rate, burst, cost, owed=owed)
        return wait_ms

    async def take_tokens(
        self,
        caller: str,
        rate: float,
        burst: int,
        cost: int = 1,
        *,
        owed: bool = False,
        admissions: int = 1,
    ) -> tuple[int, int]:
        """As take_token for `admissions` operations at once (1 to MAX_ADMISSIONS; 1 when
        `owed`), each granted in turn while a token is there: how many were granted (the
        first ones), and 0 when all were, else how many ms until a token is there."""
        if not 1 <= admissions <= (1 if owed else MAX_ADMISSIONS):
            raise ValueError(f"admissions must be 1 to {MAX_ADMISSIONS}; got {admissions}")
        granted, retry_after_ms = await self._home.run(
            ScriptName.TAKE_TOKEN,
            named(bucket=self._home.keys.rate_bucket(caller)),
            named(
                rate=repr(rate),
                burst=burst,
                request_id=f"{self._taking_prefix}-{next(self._takings):x}",
                cost=cost,
                owed=int(owed),
                admissions=admissions,
            ),
        )
        granted = int(granted)
        return granted, 0 if granted >= admissions else max(1, int(retry_after_ms))

    # --- persisted documents ---------------------------------------------------------------

    async def persist_document(self, sha256: str, document: str) -> None:
        """Keeps a GraphQL document (Unicode text of at most MAX_DOCUMENT_BYTES bytes of
        UTF-8) under its SHA-256 (lowercase hex; that it is the document's is the caller's
        to check) for every process of the deployment; beyond MAX_PERSISTED_DOCUMENTS the
        least recently used are forgotten, a registration counting as a use REGISTERED_AGE_MS
        before it."""
        check_sha256(sha256)
        check_document(document)
        k = self._home.keys
        await self._home.run(
            ScriptName.PERSIST_DOCUMENT,
            named(documents=k.persisted_documents, used=k.persisted_documents_used),
            named(
                sha256=sha256,
                document=document,
                max_count=MAX_PERSISTED_DOCUMENTS,
                max_bytes=MAX_DOCUMENT_BYTES,
                registered_age_ms=REGISTERED_AGE_MS,
            ),
        )

    async def persisted_document(self, sha256: str) -> str | None:
        """The document kept under this SHA-256, or None (never kept, or forgotten)."""
        k = self._home.keys
        document = await self._home.run(
            ScriptName.PERSISTED_DOCUMENT,
            named(documents=k.persisted_documents, used=k.persisted_documents_used),
            named(sha256=check_sha256(sha256)),
        )
        return None if document is None else text(document)

    async def refresh_documents(self, sha256s: Sequence[str]) -> int:
        """Marks the documents kept under these SHA-256s as just used, as reading one does, in
        one script call per REFRESH_BATCH of them; those no longer kept stay forgotten.
        Returns how many were still kept."""
        hashes = [check_sha256(sha256) for sha256 in dict.fromkeys(sha256s)]
        used = self._home.keys.persisted_documents_used
        refreshed = 0
        for start in range(0, len(hashes), REFRESH_BATCH):
            batch = hashes[start : start + REFRESH_BATCH]
            refreshed += int(
                await self._home.run(
                    ScriptName.REFRESH_DOCUMENTS, named(used=used), named(sha256=batch)
                )
            )
        return refreshed
