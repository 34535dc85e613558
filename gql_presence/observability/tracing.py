"""Traces with OpenTelemetry: off unless an OTLP endpoint is set.

What turns tracing on is `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` or `OTEL_EXPORTER_OTLP_ENDPOINT`
(and `OTEL_SDK_DISABLED` not `true`); everything else is the SDK's own standard `OTEL_*`
configuration (service name, sampler, batch delays, headers), read by the SDK itself. When off,
nothing of this module runs per request: no middleware, no schema extension, no span objects.

The spans, each named and attributed only by what the schema or the code bounds:
- `GET /graphql`, `POST /graphql`: one per HTTP request (aiohttp's server instrumentation),
  continuing an incoming `traceparent`; a WebSocket's lasts as long as its connection.
- `mutation:touch`: one per GraphQL operation (Strawberry's tracing extension, named by the
  operation's type and root fields: graphql/labels.py), with its parsing and validation as
  children.
- `script touch`: one per Lua script call, with the script's name and shard (but those of the
  webhooks' deliveries, which poll: store/quiet.py).
- `webhook POST`: one per request to a webhook (observability/webhooks.py).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping

from opentelemetry import context, trace
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import Span, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from gql_presence.store.quiet import UNTRACED

_ENDPOINTS = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
DEFAULT_SERVICE_NAME = "gql-presence"
# URL attributes of the HTTP instrumentation: a GET request's query string holds a GraphQL
# document and variables (ids), so only the path is kept.
_URL_ATTRIBUTES = ("http.target", "http.url", "url.full")

ObserveScript = Callable[[str, int, float], None]


def enabled(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether traces are to be exported: an OTLP endpoint is set and the SDK not disabled."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    return any(environ.get(name, "").strip() for name in _ENDPOINTS)


def start() -> None:
    """Sets up this process's tracer provider and the HTTP instrumentation, once, when
    tracing is enabled; a no-op otherwise. Call before the aiohttp application is made: the
    instrumentation adds its middleware to every application made after it."""
    if not enabled() or isinstance(trace.get_tracer_provider(), TracerProvider):
        return
    # Imported only when on: they bring protobuf and an HTTP client that nothing else uses.
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import (  # noqa: PLC0415
        OTLPSpanExporter,
    )
    from opentelemetry.instrumentation.aiohttp_server import (  # noqa: PLC0415
        AioHttpServerInstrumentor,
    )

    resource = Resource.create()
    if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        resource = resource.merge(Resource({SERVICE_NAME: DEFAULT_SERVICE_NAME}))
    # The sampler comes from OTEL_TRACES_SAMPLER, the exporter's endpoint and headers from
    # OTEL_EXPORTER_OTLP_*, the batching from OTEL_BSP_*; unsent spans are flushed at exit.
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(PathOnly())
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
    AioHttpServerInstrumentor().instrument(tracer_provider=provider)


def observing(observe_script: ObserveScript) -> ObserveScript:
    """`observe_script`, plus a span for each script call while tracing is on."""
    if not enabled():
        return observe_script
    tracer = trace.get_tracer("gql_presence.store")

    def observe_and_trace(script: str, shard: int, seconds: float) -> None:
        observe_script(script, shard, seconds)
        if UNTRACED.get():
            return
        # Told after the call returned, in the caller's context: the span is placed where
        # the call was, with its measured duration.
        ended_ns = time.time_ns()
        span = tracer.start_span(
            f"script {script}",
            kind=trace.SpanKind.CLIENT,
            start_time=ended_ns - int(seconds * 1e9),
            attributes={"db.system": "redis", "gqlp.script": script, "gqlp.shard": shard},
        )
        span.end(end_time=ended_ns)

    return observe_and_trace


class PathOnly(SpanProcessor):
    """Cuts the query string off the URL attributes of every span as it starts."""

    def on_start(self, span: Span, parent_context: context.Context | None = None) -> None:
        attributes = span.attributes or {}
        for name in _URL_ATTRIBUTES:
            value = attributes.get(name)
            if isinstance(value, str) and "?" in value:
                span.set_attribute(name, value.split("?", 1)[0])
        if attributes.get("url.query"):  # the newer conventions' query string alone
            span.set_attribute("url.query", "")
