"""What operators see: Prometheus metrics that move, and one parseable log line per request
with no secrets in it."""

from __future__ import annotations

import asyncio
import dataclasses
import io
import json
import logging
from datetime import datetime
from typing import Any

import pytest
from aiohttp.test_utils import TestClient
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from gql_presence.app import create_app
from gql_presence.observability import request_log
from gql_presence.observability.logs import (
    REQUEST_FIELDS,
    JsonLines,
    configure_logging,
    json_line,
    request_fields,
    request_line,
)
from gql_presence.running.redis_server import RedisServer
from gql_presence.settings import Settings, SettingsError
from tests.conftest import ClientFactory, graphql
from tests.helpers import (
    BACKEND_TOKEN,
    SECURED,
    eventually,
    feeds_above,
    ids,
    subscribed,
    subscription,
    user_token,
    ws_url,
)

Service = TestClient[Any, Any]


async def scrape(api: Service) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    response = await api.get("/metrics")
    assert response.status == 200
    assert response.headers["Content-Type"].startswith("text/plain")
    samples = {}
    for family in text_string_to_metric_families(await response.text()):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


async def test_with_credentials_only_a_backend_token_reads_the_metrics(
    aiohttp_client: ClientFactory, redis_server: RedisServer, http_redis: Any
) -> None:
    # They count the users online, invisible ones included: not for end users, nor for
    # anyone who reaches the port.
    api = await aiohttp_client(create_app(dataclasses.replace(SECURED, redis_url=redis_server.url)))
    for refused in ({}, {"Authorization": f"Bearer {user_token('ann')}"}, {"Authorization": "x"}):
        response = await api.get("/metrics", headers=refused)
        assert response.status == 401
        assert response.headers["WWW-Authenticate"] == "Bearer"
        text = await response.text()
        assert "backend tokens only" in text
        assert "gqlp_users_online" not in text
    response = await api.get("/metrics", headers={"Authorization": f"Bearer {BACKEND_TOKEN}"})
    assert response.status == 200
    assert "gqlp_users_online" in await response.text()


async def test_metrics_count_requests_by_operation_and_outcome_and_time_scripts(
    api: Service,
) -> None:
    await graphql(api, 'mutation { touch(userId: "a") { online } }')
    await graphql(api, 'mutation { touch(userId: "b") { online } }')
    await graphql(api, 'mutation { touch(userId: "") { online } }')
    await graphql(api, '{ onlineUsers { totalCount } presence(userId: "a") { online } }')
    await graphql(api, "{ nonsense }")
    await graphql(api, "{ secretSounding }")  # client text never becomes a label
    # With no operationName, the first operation runs, and names the request.
    await graphql(api, 'mutation M { touch(userId: "c") { online } } query Q { __typename }')
    batch = await api.post("/graphql", json=[{"query": "{ __typename }"}])
    assert batch.status == 400
    metrics = await scrape(api)

    def requests(operation: str, outcome: str) -> float:
        labels = (("operation", operation), ("outcome", outcome))
        return metrics.get(("gqlp_graphql_requests_total", labels), 0)

    assert requests("mutation:touch", "ok") == 3
    assert requests("mutation:touch", "BAD_USER_INPUT") == 1
    assert requests("query:onlineUsers,presence", "ok") == 1
    assert requests("invalid", "BAD_USER_INPUT") == 2
    assert requests("none", "BAD_USER_INPUT") == 1
    assert not any(
        "nonsense" in str(labels) or "secretSounding" in str(labels) for _, labels in metrics
    )
    assert (
        metrics[("gqlp_graphql_request_duration_seconds_count", (("operation", "mutation:touch"),))]
        == 4
    )
    assert metrics[("gqlp_script_duration_seconds_count", (("script", "touch"),))] == 3
    assert metrics[("gqlp_redis_connections_max", ())] == 64


@pytest.mark.slow
async def test_gauges_follow_users_online_and_subscribers(api: Service) -> None:
    await graphql(api, 'mutation { touchMany(userIds: ["a", "b", "c"]) }')

    async def gauge(name: str) -> float | None:
        return (await scrape(api)).get((name, ()))

    async def three_online() -> bool:
        return await gauge("gqlp_users_online") == 3

    # The sweep runs every second and counts who is online.
    await eventually(three_online, 2, "the sweep's count")
    async with subscribed(ws_url(api), subscription(f"userIds: {ids('a')}"), feeds_above(api, 0)):
        assert (await scrape(api))[("gqlp_websocket_subscribers", ())] == 1

    async def none_subscribed() -> bool:
        return await gauge("gqlp_websocket_subscribers") == 0

    await eventually(none_subscribed, 2, "the subscriber's leaving")


async def test_one_json_log_line_per_request_without_secrets(
    api: Service, caplog: pytest.LogCaptureFixture
) -> None:
    secret = "s3cr3t-value-that-must-not-be-logged"  # noqa: S105 - the point of the test
    with caplog.at_level(logging.INFO, logger="gql_presence.requests"):
        await api.post(
            "/graphql",
            json={
                "query": "mutation($u: ID!) { touch(userId: $u) { online } }",
                "variables": {"u": secret},
            },
            headers={"Authorization": f"Bearer {secret}"},
        )
        await graphql(api, 'mutation { kick(userId: "") { online } }')
    lines = [
        json.loads(JsonLines().format(r))
        for r in caplog.records
        if r.name == "gql_presence.requests"
    ]
    assert len(lines) == 2
    first, second = lines
    assert (first["operation"], first["outcome"], first["status"]) == ("mutation:touch", "ok", 200)
    assert (second["operation"], second["outcome"]) == ("mutation:kick", "BAD_USER_INPUT")
    assert first["caller"] == "open"  # no credentials are configured here
    assert first["duration_ms"] > 0
    assert first["level"] == "info"
    assert all(secret not in json.dumps(line) for line in lines)


async def test_json_request_lines_are_the_lines_logging_writes(api: Service) -> None:
    # With the JSON handler alone on the root logger, as `serve` configures it, a request's
    # line is written without a LogRecord: byte for byte what logging and JsonLines write.
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    written = io.StringIO()
    handler = logging.StreamHandler(written)
    handler.setFormatter(JsonLines())
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO)
    try:
        await graphql(api, 'mutation { touch(userId: "é\\"") { online } }')
        await graphql(api, 'mutation { kick(userId: "") { online } }')
        await api.post("/graphql", json=[{"query": "{ __typename }"}])
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
    lines = [line for line in written.getvalue().splitlines() if "gql_presence.requests" in line]
    assert len(lines) == 3
    for line in lines:
        fields = json.loads(line)
        record = logging.LogRecord(
            "gql_presence.requests", logging.INFO, "", 0, fields["message"], None, None
        )
        record.created = datetime.fromisoformat(fields["time"]).timestamp()
        record.__dict__.update({k: fields[k] for k in REQUEST_FIELDS})
        assert JsonLines().format(record) == line
    ended = [(f["operation"], f["outcome"], f["status"]) for f in map(json.loads, lines)]
    assert ended == [
        ("mutation:touch", "ok", 200),
        ("mutation:kick", "BAD_USER_INPUT", 200),
        ("none", "BAD_USER_INPUT", 400),
    ]


@given(
    # Any moment from 1970 to 2100, to the float's last bit, and the next second's edge.
    st.floats(0, 4_102_444_800) | st.integers(0, 4_102_444_800).map(lambda s: s - 5e-7),
    st.text(),
    st.tuples(
        st.text(),
        st.text(),
        st.text(),
        st.text(),
        st.text(),
        st.integers(100, 599),
        st.floats(0, 1e7),
    ),
)
def test_a_request_line_is_the_json_line_of_its_fields(
    created: float, message: str, args: tuple[str, str, str, str, str, int, float]
) -> None:
    fields = request_fields(args)
    expected = json_line(created, "INFO", "gql_presence.requests", message, fields)
    assert request_line(created, "gql_presence.requests", message, args) == expected


class _Writes(io.StringIO):
    """A stream that keeps what each write was given."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[str] = []

    def write(self, text: str) -> int:
        self.writes.append(text)
        return super().write(text)


async def test_request_lines_ending_together_are_written_together(api: Service) -> None:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    stream = _Writes()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonLines())
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO)
    users = [f"together-{i}" for i in range(20)]
    try:
        await asyncio.gather(
            *(
                graphql(api, f'mutation {{ touch(userId: "{user}") {{ online }} }}')
                for user in users
            )
        )
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    requests = [line for line in lines if line["logger"] == "gql_presence.requests"]
    assert [line["operation"] for line in requests] == ["mutation:touch"] * len(users)
    # Their script calls answered in one read, the requests end in one turn or a few.
    assert len([w for w in stream.writes if "gql_presence.requests" in w]) < len(users)


def test_request_lines_whose_stream_fails_are_handed_to_logging(
    caplog: pytest.LogCaptureFixture,
) -> None:
    class Failing(io.StringIO):
        def write(self, text: str) -> int:
            raise OSError("the disk is full")

    args = ("POST", "/graphql", "query:presence", "ok", "open", 200, 1.25)
    with caplog.at_level(logging.INFO, logger="gql_presence.requests"):
        request_log._LinesOfATurn().add(logging.StreamHandler(Failing()), "{}", args)
    (record,) = [r for r in caplog.records if r.name == "gql_presence.requests"]
    assert record.getMessage() == "POST /graphql query:presence ok open 200 1.2 ms"
    assert record.__dict__["operation"] == "query:presence"


def test_log_format_is_a_setting() -> None:
    assert Settings.from_env({"PRESENCE_LOG_FORMAT": "json"}).log_format == "json"
    assert Settings.from_env({}).log_format == "text"
    with pytest.raises(SettingsError, match="PRESENCE_LOG_FORMAT"):
        Settings.from_env({"PRESENCE_LOG_FORMAT": "xml"})


def test_log_level_is_a_setting_and_warning_leaves_the_request_lines_out() -> None:
    assert Settings.from_env({}).log_level == "info"
    assert Settings.from_env({"PRESENCE_LOG_LEVEL": "warning"}).log_level == "warning"
    with pytest.raises(SettingsError, match="PRESENCE_LOG_LEVEL"):
        Settings.from_env({"PRESENCE_LOG_LEVEL": "verbose"})
    root = logging.getLogger()
    level, handlers = root.level, root.handlers[:]
    # What configure_logging switches off, kept for the reports of later tests.
    switches = ("_srcfile", "logThreads", "logProcesses", "logMultiprocessing")
    saved = {name: getattr(logging, name) for name in switches}
    try:
        configure_logging("text", "warning")
        requests = logging.getLogger("gql_presence.requests")
        assert not requests.isEnabledFor(logging.INFO)
        assert requests.isEnabledFor(logging.WARNING)
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
        for name, value in saved.items():
            setattr(logging, name, value)
