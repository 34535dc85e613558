"""The limits every request meets, each sized by what a valid request needs.

docs/operations.md's "Limits" gives the reason for each figure.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass

from gql_presence.policy.auth import Caller, CallerKind
from gql_presence.settings import Settings
from gql_presence.store import MAX_DOCUMENT_BYTES as KEPT_DOCUMENT_BYTES
from gql_presence.store import MAX_ID_LENGTH, MAX_IDS_PER_CALL, PresenceStore
from gql_presence.store.deployment import MAX_ADMISSIONS
from gql_presence.store.errors import RateLimitedError, WritesRefusedError

# The largest valid request: 10,000 ids of 128 characters (each up to 4 bytes of UTF-8, and
# quotes and a comma), plus the document and the JSON around it.
MAX_BODY_BYTES = MAX_IDS_PER_CALL * (MAX_ID_LENGTH * 4 + 3) + 64 * 1024
# A WebSocket's `subscribe` message carries what a request body does (a document and its
# variables): its messages are bounded alike (aiohttp closes the socket with 1009 above).
MAX_SOCKET_MESSAGE_BYTES = MAX_BODY_BYTES
# Documents are short; long lists belong in variables, which neither limit counts. Counted in
# bytes of UTF-8, not characters: a document sent with its hash is kept in Redis as it is, and
# this is the store's own bound on what it keeps (32 KiB), so that the two cannot differ.
MAX_DOCUMENT_BYTES = KEPT_DOCUMENT_BYTES
MAX_TOKENS = 2000
# The deepest useful selection is 4 levels (onlineUsers > nodes > sessions > lastSeen).
MAX_DEPTH = 10
# Each alias of a root field is one more script call in the same request.
MAX_ALIASES = 15
# Fragments let a short document stand for a huge one (each spreading the one before it
# twice doubles it): the selections it stands for, every spread expanded, are bounded. The
# largest document a client sends is GraphiQL's introspection query, 487 selections once
# expanded; an operation using every alias and every field is about 200.
MAX_SELECTIONS = 1000
# Fields of one response name at one place are compared in pairs to check that they can be
# merged. Fragments that overlap make a few pairs (a page spreading three fragments that
# each select userId under every alias: 136); 300 pairs cost about as much to validate as
# the largest valid operation.
MAX_SAME_FIELD_PAIRS = 300
# Representations one `_entities` takes: a gateway asks for the users of one page of its own,
# and the service's largest page (onlineUsers' `first`) is 1,000.
MAX_REPRESENTATIONS = 1000
# An operation costs one token of its caller's rate per this many ids or representations its
# fields are given, in all (and at least one): a touchMany of 10,000 ids is 100 operations'
# worth of Redis work (its scripts touch every id), and costs as much.
IDS_PER_TOKEN = 100
MAX_SUBSCRIPTIONS_PER_SOCKET = 20
# An operation's id goes back in every message of the operation, each event of a subscription
# included: unbounded, a subscribe of a few megabytes would make every event that large, and
# the events a slow reader may have waiting that many times larger. Clients use a counter or
# a UUID (graphql-ws: 36 characters).
MAX_OPERATION_ID_BYTES = 128

# How many of a process's own rate buckets may be kept before the full ones are looked for.
_FORGET_ABOVE = 1024

log = logging.getLogger("gql_presence")


class RateLimiter:
    """A token bucket per caller, kept in Redis so that every API process shares it. While
    Redis takes no writes (a read-only replica during a failover), each process counts with
    buckets of its own, of the same rate and burst, so that reads are still served within a
    limit; the shared bucket is tried first on every request, so it is back in use as soon as
    Redis takes writes again."""

    def __init__(self, store: PresenceStore, settings: Settings, *, together: bool = True) -> None:
        self._store = store
        self._buckets = {
            CallerKind.USER: (settings.user_rate, settings.user_burst),
            CallerKind.BACKEND: (settings.backend_rate, settings.backend_burst),
        }
        self._own_buckets = LocalBuckets()
        self._shared = True
        # Admissions to one bucket asked in the same turn of the event loop are taken in one
        # script call (`together`; off while tracing, where each request's trace shows its
        # own call): bucket -> the admissions waiting for that call.
        self._together = together
        self._waiting: dict[str, list[asyncio.Future[int]]] = {}
        self._taking: set[asyncio.Task[None]] = set()

    async def admit(self, caller: Caller) -> None:
        """Takes the operation's first token, and starts counting what its fields are given
        (charge()); raises RateLimitedError when the caller has no token left."""
        wait_ms = await self._admission(caller)
        if wait_ms:
            raise RateLimitedError(math.ceil(wait_ms / 1000))
        _COST.set(_Cost())

    async def _admission(self, caller: Caller) -> int:
        rate, burst = self._buckets.get(caller.kind, (0.0, 0))
        if not rate or not self._together:
            return await self._take(caller, 1, owed=False)
        bucket = f"{caller.kind.value}:{caller.name}"
        loop = asyncio.get_running_loop()
        joined = self._waiting.get(bucket)
        if joined is not None:  # another operation takes for this bucket once this turn ends
            admission: asyncio.Future[int] = loop.create_future()
            joined.append(admission)
            return await admission
        joined = self._waiting[bucket] = []
        own: asyncio.Future[int] | None = None
        try:
            await asyncio.sleep(0)  # the operations admitted in this turn join
            if joined:
                own = loop.create_future()
        finally:
            del self._waiting[bucket]
            # Those that joined are answered even when this operation was cancelled.
            if joined:
                self._take_soon(bucket, rate, burst, [own, *joined] if own else joined)
        if own is None:  # alone: taken as ever, without a task of its own
            return await self._take(caller, 1, owed=False)
        return await own

    def _take_soon(
        self, bucket: str, rate: float, burst: int, waiting: list[asyncio.Future[int]]
    ) -> None:
        for start in range(0, len(waiting), MAX_ADMISSIONS):
            admissions = waiting[start : start + MAX_ADMISSIONS]
            task = asyncio.get_running_loop().create_task(
                self._take_together(bucket, rate, burst, admissions)
            )
            self._taking.add(task)  # held until done: the loop keeps only weak references
            task.add_done_callback(self._taking.discard)

    async def _take_together(
        self, bucket: str, rate: float, burst: int, admissions: list[asyncio.Future[int]]
    ) -> None:
        """Admits the operations in turn, as that many takes of a token at that moment
        would: each future gets 0 when granted, else the ms until a token is there. One
        whose caller stopped waiting takes its token all the same, as a call already sent
        would."""
        try:
            try:
                granted, wait_ms = await self._store.take_tokens(
                    bucket, rate, burst, len(admissions)
                )
                self._note_shared(shared=True)
                answers = [0] * granted + [wait_ms] * (len(admissions) - granted)
            except WritesRefusedError:
                self._note_shared(shared=False)
                answers = [self._own_buckets.take(bucket, rate, burst) for _ in admissions]
        except Exception as error:  # handed to every admission, to raise
            for admission in admissions:
                if not admission.done():
                    admission.set_exception(error)
            return
        for admission, answer in zip(admissions, answers, strict=True):
            if not admission.done():  # else its caller stopped waiting
                admission.set_result(answer)

    async def charge(self, caller: Caller, items: int) -> None:
        """Counts `items` ids or representations that a field of the running operation was
        given, before its Redis work: the operation costs one token per IDS_PER_TOKEN of them
        in all, and at least one (its admission's). What is due beyond the tokens taken
        already is taken now, whatever is left in the bucket: it may go below zero, and the
        caller's next operation waits until the rate has paid that back. Never refuses: the
        operation was admitted, and its cost is known only as its fields run."""
        cost = _COST.get()
        if cost is None:  # a field run without admission: nothing taken for it yet
            cost = _Cost(tokens=0)
            _COST.set(cost)
        cost.items += items
        due = max(1, math.ceil(cost.items / IDS_PER_TOKEN)) - cost.tokens
        if due > 0:
            # Counted before the await: fields running at the same time each take their share.
            cost.tokens += due
            await self._take(caller, due, owed=True)

    async def _take(self, caller: Caller, tokens: int, *, owed: bool) -> int:
        # Open and anonymous callers have no bucket: they name no one to count against.
        rate, burst = self._buckets.get(caller.kind, (0.0, 0))
        if not rate:
            return 0
        bucket = f"{caller.kind.value}:{caller.name}"
        try:
            wait_ms = await self._store.take_token(bucket, rate, burst, tokens, owed=owed)
            self._note_shared(shared=True)
        except WritesRefusedError:
            self._note_shared(shared=False)
            wait_ms = self._own_buckets.take(bucket, rate, burst, tokens, owed=owed)
        return wait_ms

    def _note_shared(self, *, shared: bool) -> None:
        if shared == self._shared:
            return
        self._shared = shared
        if shared:
            log.info("rate limits: Redis takes writes again, the shared buckets are back in use")
        else:
            log.warning(
                "rate limits: Redis takes no writes (a read-only replica?); this process "
                "counts with buckets of its own until it does"
            )


@dataclass
class _Cost:
    """What one admitted operation has been charged: the ids and representations its fields
    were given, and the tokens taken for them (its admission's included)."""

    items: int = 0
    tokens: int = 1


# The operation being run: a WebSocket's operations share one Context, so the tally cannot
# live there. Each operation runs in a task of its own (over HTTP, its request's), and the
# tasks graphql-core starts for its fields share the tally through their copies.
_COST: ContextVar[_Cost | None] = ContextVar("operation_cost", default=None)


class LocalBuckets:
    """Token buckets of this process alone. A bucket that would be full again is forgotten
    (it means the same as no bucket), so idle callers cost no memory."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        # caller -> (tokens left, when counted, when it is full again), in seconds of the clock
        self._buckets: dict[str, tuple[float, float, float]] = {}
        self._forget_above = _FORGET_ABOVE

    def __len__(self) -> int:
        """How many callers' buckets are kept."""
        return len(self._buckets)

    def take(
        self, caller: str, rate: float, burst: int, cost: int = 1, *, owed: bool = False
    ) -> int:
        """Takes `cost` tokens (rate per second, at most burst) while one is there, or,
        `owed`, whatever is left, as lua/take_token.lua does. Returns 0 when granted, else
        how many ms until a token is there."""
        now = self._clock()
        tokens, at, _ = self._buckets.get(caller, (burst, now, now))
        tokens = min(burst, tokens + max(0.0, now - at) * rate)
        wait_ms = 0
        if owed or tokens >= 1:
            tokens -= cost
        else:
            wait_ms = max(1, math.ceil((1 - tokens) * 1000 / rate))
        self._buckets[caller] = (tokens, now, now + (burst - tokens) / rate)
        if len(self._buckets) > self._forget_above:
            self._forget_full(now)
        return wait_ms

    def _forget_full(self, now: float) -> None:
        self._buckets = {c: b for c, b in self._buckets.items() if b[2] > now}
        # Checked again once the callers still counting have doubled: amortised O(1) a take.
        self._forget_above = max(_FORGET_ABOVE, 2 * len(self._buckets))
