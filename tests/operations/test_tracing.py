"""Traces as an operator's OpenTelemetry collector receives them: OTLP over HTTP, decoded from
the real protobuf payload, from `gql-presence serve` configured by the standard variables."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web
from gql import Client, GraphQLRequest
from gql.transport.aiohttp_websockets import AIOHTTPWebsocketsTransport
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span
from redis.asyncio import Redis

from gql_presence.observability.tracing import enabled
from gql_presence.running.redis_server import RedisServer, free_port
from tests.helpers import (
    eventually,
    post,
    run_service,
    stop,
    wait_until_serving,
    webhook_receiver,
)

USER, SESSION, ALIAS = "otel-user-4f1c", "otel-session-9b2e", "otel_alias_77d0"


@dataclass
class Received:
    """What the collector was sent: every span, and every attribute value of spans and
    resources, flattened to text."""

    spans: list[Span]
    values: list[str]

    def named(self, name: str) -> list[Span]:
        return [s for s in self.spans if s.name == name]


def _texts(value: AnyValue) -> Iterator[str]:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        for item in value.array_value.values:
            yield from _texts(item)
    elif kind == "kvlist_value":
        for pair in value.kvlist_value.values:
            yield pair.key
            yield from _texts(pair.value)
    elif kind is not None:
        yield str(getattr(value, kind))


def _attributes(attributes: Iterable[KeyValue]) -> dict[str, str]:
    return {a.key: ",".join(_texts(a.value)) for a in attributes}


@pytest.fixture
async def collector() -> AsyncIterator[tuple[int, Received]]:
    """A tiny OTLP/HTTP receiver on a free port."""
    received = Received([], [])

    async def traces(request: web.Request) -> web.Response:
        export = ExportTraceServiceRequest.FromString(await request.read())
        for resource_spans in export.resource_spans:
            received.values += _attributes(resource_spans.resource.attributes).values()
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    received.spans.append(span)
                    received.values += _attributes(span.attributes).values()
                    for event in span.events:
                        received.values += _attributes(event.attributes).values()
        return web.Response(
            body=ExportTraceServiceResponse().SerializeToString(),
            content_type="application/x-protobuf",
        )

    app = web.Application()
    app.router.add_post("/v1/traces", traces)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        yield port, received
    finally:
        await runner.cleanup()


def test_tracing_is_off_unless_an_endpoint_is_set() -> None:
    assert not enabled({})
    assert not enabled({"OTEL_SERVICE_NAME": "presence", "OTEL_TRACES_SAMPLER": "always_on"})
    assert enabled({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"})
    assert enabled({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"})
    assert not enabled(
        {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318", "OTEL_SDK_DISABLED": "true"}
    )


@pytest.mark.slow
# The HTTP attributes of the older conventions (the default), then of both old and new.
@pytest.mark.parametrize("conventions", ["", "http/dup"])
async def test_a_request_is_traced_from_the_caller_to_the_script_without_ids(
    collector: tuple[int, Received], redis_server: RedisServer, tmp_path: Path, conventions: str
) -> None:
    collector_port, received = collector
    port = free_port()
    service = run_service(
        tmp_path,
        port,
        REDIS_URL=redis_server.url,
        PRESENCE_WORKERS="1",
        OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{collector_port}",
        OTEL_SERVICE_NAME="presence-under-test",
        OTEL_BSP_SCHEDULE_DELAY="50",
        PRESENCE_QUERIES_OVER_GET="true",
        OTEL_SEMCONV_STABILITY_OPT_IN=conventions,
    )
    try:
        await asyncio.to_thread(wait_until_serving, service, port)
        # A backend's trace, continued through the service.
        trace_id, caller_span_id = secrets.token_hex(16), secrets.token_hex(8)
        async with aiohttp.ClientSession() as http:
            response = await http.post(
                f"http://127.0.0.1:{port}/graphql",
                json={
                    "query": "mutation Touch($user: ID!, $session: ID!) {"
                    f" touch(userId: $user, sessionId: $session) {{ online }} {ALIAS}: __typename }}",
                    "variables": {"user": USER, "session": SESSION},
                },
                headers={"traceparent": f"00-{trace_id}-{caller_span_id}-01"},
            )
            touched = await response.json()
            assert touched["data"]["touch"]["online"] is True
            # A query over GET: the id is in the URL's query string.
            query = f'{{ friends(userId: "{USER}") }}'
            response = await http.get(f"http://127.0.0.1:{port}/graphql", params={"query": query})
            assert (await response.json())["data"]["friends"] == []
        # An operation over WebSocket, with the id written into the document.
        transport = AIOHTTPWebsocketsTransport(
            url=f"ws://127.0.0.1:{port}/graphql", subprotocols=["graphql-transport-ws"]
        )
        async with Client(transport=transport) as session:
            document = f'{{ presence(userId: "{USER}") {{ online }} }}'
            presence = await session.execute(GraphQLRequest(document))
            assert presence["presence"]["online"] is True

        await eventually(
            lambda: bool(
                received.named("query:presence") and len(received.named("GET /graphql")) == 2
            ),
            within_s=10,
            what="the spans of both requests",
        )
    finally:
        output = stop(service)

    assert "Traceback" not in output, output
    assert "Failed to detach context" not in output, output
    by_id = {s.span_id: s for s in received.spans}
    # Over HTTP: the request, continuing the caller's trace; the operation; the script.
    (http_span,) = [s for s in received.named("POST /graphql") if s.trace_id.hex() == trace_id]
    assert http_span.parent_span_id.hex() == caller_span_id
    assert http_span.kind == Span.SPAN_KIND_SERVER
    # Named by its root fields (the alias is not one), never by the client's operation name.
    (operation,) = received.named("mutation:__typename,touch")
    assert operation.parent_span_id == http_span.span_id
    assert _attributes(operation.attributes)["graphql.operation.type"] == "mutation"
    (script,) = [s for s in received.named("script touch") if s.trace_id.hex() == trace_id]
    assert script.parent_span_id == operation.span_id
    assert _attributes(script.attributes)["gqlp.script"] == "touch"
    assert _attributes(script.attributes)["gqlp.shard"] == "0"
    assert script.start_time_unix_nano >= operation.start_time_unix_nano
    assert script.end_time_unix_nano <= operation.end_time_unix_nano
    parsing = by_id[received.named("GraphQL Parsing")[0].parent_span_id]
    assert parsing.name.startswith(("mutation:", "query:"))

    # Over WebSocket: the operation under the connection's span, its script under it.
    (query,) = received.named("query:presence")
    (websocket,) = [s for s in received.named("GET /graphql") if s.trace_id == query.trace_id]
    assert query.parent_span_id == websocket.span_id
    (read,) = [s for s in received.named("script presence") if s.trace_id == query.trace_id]
    assert read.parent_span_id == query.span_id

    assert "presence-under-test" in received.values
    # No id and no client-chosen text (the alias, the operation's name) in any attribute.
    leaked = [v for v in received.values if any(x in v for x in (USER, SESSION, ALIAS, "Touch"))]
    assert leaked == []
    assert all(USER not in s.name and "Touch" not in s.name for s in received.spans)


@pytest.mark.slow
async def test_each_request_to_a_webhook_is_a_span_and_its_polling_none(
    collector: tuple[int, Received], flushed_redis: Redis, redis_server: RedisServer, tmp_path: Path
) -> None:
    collector_port, received = collector
    port = free_port()
    service = run_service(
        tmp_path,
        port,
        REDIS_URL=redis_server.url,
        PRESENCE_WORKERS="1",
        PRESENCE_WEBHOOK_ALLOWED_NETWORKS="127.0.0.0/8",
        PRESENCE_WEBHOOK_POLL_SECONDS="0.02",
        OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{collector_port}",
        OTEL_BSP_SCHEDULE_DELAY="50",
    )
    try:
        await asyncio.to_thread(wait_until_serving, service, port)
        async with webhook_receiver() as receiver:
            url = receiver.url + "?token=receivers-own-secret"
            create = f'mutation {{ createWebhook(url: "{url}") {{ secret webhook {{ id }} }} }}'
            # Off the event loop, which the collector and the receiver answer on.
            made = await asyncio.to_thread(post, port, create)
            receiver.secret = made["data"]["createWebhook"]["secret"]
            webhook_id = made["data"]["createWebhook"]["webhook"]["id"]
            await asyncio.to_thread(
                post, port, f'mutation {{ touch(userId: "{USER}") {{ online }} }}'
            )
            await eventually(
                lambda: bool(received.named("webhook POST")), within_s=10, what="the span"
            )
    finally:
        # Off the event loop too: the service's last spans are sent as it stops.
        output = await asyncio.to_thread(stop, service)
    assert "Traceback" not in output, output
    [span] = received.named("webhook POST")
    attributes = _attributes(span.attributes)
    assert attributes["gqlp.webhook"] == webhook_id
    assert attributes["gqlp.webhook_id"] == receiver.requests[0].webhook_id
    assert (attributes["gqlp.changes"], attributes["http.response.status_code"]) == ("1", "204")
    assert span.kind == Span.SPAN_KIND_CLIENT
    # The deliveries poll the feed many times a second: none of that is traced.
    assert received.named("script feed_page") == []
    assert received.named("script feed_tip") == []
    assert not [v for v in received.values if "receivers-own-secret" in v]
