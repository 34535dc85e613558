"""What operators see of webhooks' deliveries: metrics per webhook, and a span per request
while tracing is on (`webhook POST`, with the webhook, the shard, the batch's id and size, and
the status answered; never the URL, whose query may hold the receiver's own secret)."""

from __future__ import annotations

import time
from functools import cache

from opentelemetry import trace

from gql_presence.observability.metrics import Metrics


class WebhookTelemetry:
    """Told of each request and each backlog counted by the deliveries of this process."""

    def __init__(self, metrics: Metrics, *, traced: bool) -> None:
        # The child of each set of labels, looked up once (as Metrics does): webhooks and
        # shards are bounded, and the metrics keep every child anyway.
        self._requests = cache(metrics.webhook_requests.labels)
        self._changes = cache(metrics.webhook_changes.labels)
        self._backlog = cache(metrics.webhook_backlog.labels)
        self._oldest_age = cache(metrics.webhook_oldest_age.labels)
        self._tracer = trace.get_tracer("gql_presence.webhooks") if traced else None

    def request(
        self,
        webhook_id: str,
        shard: int,
        *,
        delivery_id: str,
        changes: int,
        status: int | None,
        acknowledged: bool,
        started_ns: int,
        ended_ns: int,
    ) -> None:
        outcome = "acknowledged" if acknowledged else "unanswered" if status is None else "refused"
        self._requests(webhook_id, outcome).inc()
        if acknowledged:
            self._changes(webhook_id).inc(changes)
        if self._tracer is None:
            return
        attributes: dict[str, str | int] = {
            "gqlp.webhook": webhook_id,
            "gqlp.shard": shard,
            "gqlp.webhook_id": delivery_id,
            "gqlp.changes": changes,
        }
        if status is not None:
            attributes["http.response.status_code"] = status
        span = self._tracer.start_span(
            "webhook POST", kind=trace.SpanKind.CLIENT, start_time=started_ns, attributes=attributes
        )
        if not acknowledged:
            span.set_status(trace.StatusCode.ERROR)
        span.end(end_time=ended_ns)

    def backlog(self, webhook_id: str, shard: int, backlog: int, oldest_ms: int) -> None:
        self._backlog(webhook_id, str(shard)).set(backlog)
        age_s = max(0.0, time.time() - oldest_ms / 1000) if oldest_ms else 0.0
        self._oldest_age(webhook_id, str(shard)).set(age_s)
