"""Prometheus metrics of one API process, served at /metrics."""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

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
            "Users online, as of this process's last sweep (every second).",
            registry=self.registry,
        )
        self.subscribers = Gauge(
            "gqlp_websocket_subscribers",
            "Subscriptions of this process's WebSocket clients.",
            registry=self.registry,
        )
        self.pool_in_use = Gauge(
            "gqlp_redis_connections_in_use",
            "Redis connections of this process busy with a call.",
            registry=self.registry,
        )
        self.pool_size = Gauge(
            "gqlp_redis_connections_max",
            "The most Redis connections this process opens; more calls wait.",
            registry=self.registry,
        )

    def observe_script(self, script: str, shard: int, seconds: float) -> None:
        self.script_seconds.labels(script).observe(seconds)

    def follow(self, subscribers: Callable[[], int], in_use: Callable[[], int], size: int) -> None:
        """Gauges read when scraped."""
        self.subscribers.set_function(subscribers)
        self.pool_in_use.set_function(in_use)
        self.pool_size.set(size)

    def render(self) -> bytes:
        return generate_latest(self.registry)
