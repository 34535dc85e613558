"""Prometheus metrics, served at /metrics: of the process, or of every worker of the service.

With several workers, the parent gives them a private folder in PROMETHEUS_MULTIPROC_DIR
(prometheus-client's multiprocess mode): each worker writes its values there, and /metrics on
any worker reads them all, counters and histograms summed, each gauge as its
`multiprocess_mode` says. A single process without the variable keeps its values in memory.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from functools import cache

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.multiprocess import MultiProcessCollector

# prometheus-client's own variable, read when it is imported: workers get it from their parent.
MULTIPROCESS_FOLDER = "PROMETHEUS_MULTIPROC_DIR"

CONTENT_TYPE = CONTENT_TYPE_LATEST
_LATENCY_BUCKETS_S = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5)


class Metrics:
    """Every metric of the process, in a registry of its own (one per application)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "gqlp_graphql_requests",
            "GraphQL requests, by operation (type and root fields) and outcome (ok or error code).",
            ["operation", "outcome"],
            registry=self.registry,
        )
        self.request_seconds = Histogram(
            "gqlp_graphql_request_duration_seconds",
            "Time to answer a GraphQL request over HTTP, by operation.",
            ["operation"],
            buckets=_LATENCY_BUCKETS_S,
            registry=self.registry,
        )
        self.script_seconds = Histogram(
            "gqlp_script_duration_seconds",
            "Time of one Lua script call, round trip included, by script.",
            ["script"],
            buckets=_LATENCY_BUCKETS_S,
            registry=self.registry,
        )
        self.users_online = Gauge(
            "gqlp_users_online",
            "Users online, as of the last sweep of any worker (each sweeps every second).",
            registry=self.registry,
            # Every worker counts the same users: the latest count is the truest.
            multiprocess_mode="mostrecent",
        )
        self.subscribers = Gauge(
            "gqlp_websocket_subscribers",
            "Subscriptions of this process's WebSocket clients.",
            registry=self.registry,
            # A `pid` label per worker: how evenly the subscribers are spread shows.
            multiprocess_mode="all",
        )
        self.pool_in_use = Gauge(
            "gqlp_redis_connections_in_use",
            "Redis connections of this process busy with a call.",
            registry=self.registry,
            # Per worker (`pid`): each has a pool of its own, and one full pool makes its
            # requests wait even while the others idle.
            multiprocess_mode="all",
        )
        self.pool_size = Gauge(
            "gqlp_redis_connections_max",
            "The most Redis connections a process opens; more calls wait.",
            registry=self.registry,
            multiprocess_mode="max",  # the same figure in every worker
        )
        self.webhook_requests = Counter(
            "gqlp_webhook_requests",
            "Requests to each webhook, by outcome: acknowledged (2xx), refused (another status "
            "answered) or unanswered (a timeout, a refused connection, an address refused).",
            ["webhook", "outcome"],
            registry=self.registry,
        )
        self.webhook_changes = Counter(
            "gqlp_webhook_changes_delivered",
            "Changes acknowledged by each webhook's receiver.",
            ["webhook"],
            registry=self.registry,
        )
        self.webhook_backlog = Gauge(
            "gqlp_webhook_backlog",
            "Changes waiting for each webhook in each shard of the feed, as the process "
            "delivering them last counted (at most 200 a shard, 1,000 with a debounce).",
            ["webhook", "shard"],
            registry=self.registry,
            multiprocess_mode="mostrecent",
        )
        self.webhook_oldest_age = Gauge(
            "gqlp_webhook_oldest_undelivered_age_seconds",
            "How long the oldest change waiting for each webhook in each shard has waited.",
            ["webhook", "shard"],
            registry=self.registry,
            multiprocess_mode="mostrecent",
        )
        self._followed: list[tuple[Gauge, Callable[[], int]]] = []
        # The child of each set of labels, looked up once: `labels()` checks its arguments and
        # takes a lock every time. Labels are bounded (operations, outcomes, scripts), and the
        # metrics keep every child anyway.
        self.request_counter = cache(self.requests.labels)
        self.request_timer = cache(self.request_seconds.labels)
        self._script_timer = cache(self.script_seconds.labels)

    def observe_script(self, script: str, shard: int, seconds: float) -> None:
        self._script_timer(script).observe(seconds)

    def follow(self, subscribers: Callable[[], int], in_use: Callable[[], int], size: int) -> None:
        """Gauges read from the process's state by `refresh`."""
        self._followed = [(self.subscribers, subscribers), (self.pool_in_use, in_use)]
        self.pool_size.set(size)

    def refresh(self) -> None:
        """Writes the followed gauges: when this process is scraped, and (for scrapes that
        other workers answer) every second, by the sweeper. A gauge's function
        (`set_function`) would be read only by a scrape of its own process."""
        for gauge, read in self._followed:
            gauge.set(read())

    def render(self) -> bytes:
        self.refresh()
        if MULTIPROCESS_FOLDER not in os.environ:
            return generate_latest(self.registry)
        service = CollectorRegistry()
        MultiProcessCollector(service)  # type: ignore[no-untyped-call] # the library's own
        return generate_latest(service)
