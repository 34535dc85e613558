"""What a new user meets first, against `gql-presence serve` as the README starts it: every
refusal says what is allowed, and a client's mistake is logged and counted as the client's,
never as INTERNAL (which docs/operations.md says to alert on)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gql_presence.policy.limits import MAX_BODY_BYTES
from gql_presence.running.redis_server import free_port, redis_server_binary, start_redis_server
from tests.helpers import wait_until_serving

pytestmark = pytest.mark.slow  # starts the service in a process of its own


@dataclass(frozen=True)
class Served:
    port: int
    log: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/graphql"

    def log_lines(self) -> list[str]:
        return self.log.read_text(encoding="utf-8").splitlines()


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """`gql-presence serve` with no settings but its Redis, its log written to a file."""
    redis = start_redis_server(binary=redis_server_binary())
    folder = tmp_path_factory.mktemp("refusals")
    port = free_port()
    log = folder / "log"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("REDIS_", "PRESENCE_"))}
    env.update(REDIS_URL=redis.url, PRESENCE_WORKERS="1", PRESENCE_DATA_DIR=str(folder / "data"))
    with log.open("wb") as output:
        service = subprocess.Popen(
            [sys.executable, "-m", "gql_presence", "serve", "--port", str(port)],
            env=env,
            stdout=output,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_until_serving(service, port)
        yield Served(port, log)
    finally:
        service.terminate()  # SIGTERM: the service drains and stops
        service.wait(timeout=30)
        redis.stop()


def request(
    served: Served,
    method: str = "POST",
    body: bytes | None = None,
    headers: dict[str, str] | None = None,
    query: str = "",
) -> tuple[int, str]:
    """The status and body of one request, as curl would show them."""
    sent = urllib.request.Request(  # noqa: S310 - our own loopback
        served.url + query, data=body, method=method, headers=headers or {}
    )
    try:
        with urllib.request.urlopen(sent, timeout=10) as response:  # noqa: S310 - loopback
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def graphql(served: Served, document: str, variables: dict[str, Any] | None = None) -> str:
    """The one error message of an operation sent as the README's curl sends it."""
    body = json.dumps({"query": document, "variables": variables or {}}).encode()
    status, answer = request(served, body=body, headers={"Content-Type": "application/json"})
    assert status == 200, answer
    errors = json.loads(answer)["errors"]
    assert len(errors) == 1, errors
    assert errors[0]["extensions"]["code"] == "BAD_USER_INPUT"
    message: str = errors[0]["message"]
    return message


def counted(served: Served, outcome: str) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{served.port}/metrics", timeout=5) as response:
        text = response.read().decode()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "gqlp_graphql_requests_total" and sample.labels == {
                "operation": "none",
                "outcome": outcome,
            }:
                return sample.value
    return 0


def logged(served: Served, method: str, status: int) -> str:
    """The last request line logged for a request of `method` answered `status`."""
    line = re.compile(rf"INFO gql_presence\.requests: {method} /graphql \S+ (\S+) \S+ {status} ")
    found = [m[1] for m in map(line.search, served.log_lines()) if m]
    assert found, f"no line for {method} {status} in:\n" + "\n".join(served.log_lines())
    return found[-1]


TOO_LARGE = b'{"query": "' + b"a" * MAX_BODY_BYTES + b'"}'

# What a scanner or a confused client sends, what it is answered, what the log and the
# metrics call it, and what the answer must say.
REFUSALS = [
    pytest.param(
        "POST", TOO_LARGE, {"Content-Type": "application/json"}, "", 413,
        "REQUEST_ENTITY_TOO_LARGE", [f"{MAX_BODY_BYTES:,} bytes", "not a setting"],
        id="body over the limit",
    ),
    pytest.param(
        "POST", b"{}", {"Host": "rebinding.example"}, "", 421,
        "MISDIRECTED_REQUEST", ["PRESENCE_ALLOWED_HOSTS"], id="wrong Host",
    ),
    pytest.param(
        "PUT", b"{}", {}, "", 405, "METHOD_NOT_ALLOWED", ["POST", "GET"], id="PUT",
    ),
    pytest.param(
        "POST", b'{"query": "{ __typename }"}', {"Content-Type": "text/plain"}, "", 415,
        "UNSUPPORTED_MEDIA_TYPE", ["Content-Type: application/json"], id="not JSON",
    ),
    pytest.param(
        "GET", None, {}, "?query=%7B__typename%7D", 400, "BAD_USER_INPUT",
        ["POST", "PRESENCE_QUERIES_OVER_GET=true"], id="query over GET",
    ),
    pytest.param(
        "GET", None, {}, "?query=mutation%7B__typename%7D", 400, "BAD_USER_INPUT",
        ["POST"], id="mutation over GET",
    ),
    pytest.param(
        "POST", b"nope", {"Content-Type": "application/json"}, "", 400, "BAD_USER_INPUT",
        ["JSON"], id="body not JSON",
    ),
]  # fmt: skip


@pytest.mark.parametrize(
    ("method", "body", "headers", "query", "status", "outcome", "says"), REFUSALS
)
def test_an_http_refusal_is_logged_and_counted_as_the_clients_and_says_what_is_allowed(  # noqa: PLR0917
    served: Served,
    method: str,
    body: bytes | None,
    headers: dict[str, str],
    query: str,
    status: int,
    outcome: str,
    says: list[str],
) -> None:
    before = counted(served, outcome)
    answered, text = request(served, method, body, headers, query)
    assert answered == status
    for allowed in says:
        assert allowed in text
    assert logged(served, method, status) == outcome
    assert counted(served, outcome) == before + 1
    assert counted(served, "INTERNAL") == 0
    assert not [line for line in served.log_lines() if "INTERNAL" in line]


def test_a_document_over_the_token_limit_names_the_limit(served: Served) -> None:
    message = graphql(served, "{ " + "__typename " * 2100 + "}")
    assert "Syntax Error" not in message
    assert "2,000 tokens" in message
    assert "variables" in message


@pytest.mark.parametrize(
    ("document", "variables"),
    [
        ('mutation { setStatus(userId: "ann", status: SLEEPY) { status } }', {}),
        (
            'mutation($s: ChosenStatus!) { setStatus(userId: "ann", status: $s) { status } }',
            {"s": "SLEEPY"},
        ),
    ],
    ids=["literal", "variable"],
)
def test_an_unknown_enum_value_lists_the_allowed_ones(
    served: Served, document: str, variables: dict[str, Any]
) -> None:
    message = graphql(served, document, variables)
    assert "SLEEPY" in message
    assert "ChosenStatus takes one of: AUTO, AWAY, BUSY, INVISIBLE." in message


@pytest.mark.parametrize(
    ("document", "variables"),
    [
        ('mutation { touch(userId: "ann", at: "2026-11-21T09:30:00") { online } }', {}),
        (
            'mutation($at: DateTime) { touch(userId: "ann", at: $at) { online } }',
            {"at": "2026-11-21T09:30:00"},
        ),
    ],
    ids=["literal", "variable"],
)
def test_a_datetime_without_an_offset_is_one_clear_sentence(
    served: Served, document: str, variables: dict[str, Any]
) -> None:
    message = graphql(served, document, variables)
    sentence = (
        "A DateTime must end with its offset from UTC, as in 2026-11-21T09:30:00.250Z (Z for "
        "UTC) or 2026-11-21T10:30:00+01:00: 2026-11-21T09:30:00 has none."
    )
    assert message.endswith(sentence)
    assert message.count("'") <= 2  # the variable's name at most, no quotes within quotes
    assert "Expected value of type" not in message


@pytest.mark.parametrize(
    ("document", "variables"),
    [
        ('{ weeklyStats(endDate: "%s") { uniqueUsers } }' % ("21.11.2026" * 1000), {}),
        (
            "query($d: Date) { weeklyStats(endDate: $d) { uniqueUsers } }",
            {"d": "21.11.2026" * 1000},
        ),
    ],
    ids=["literal", "variable"],
)
def test_a_date_that_is_none_is_one_clear_sentence_of_bounded_length(
    served: Served, document: str, variables: dict[str, Any]
) -> None:
    message = graphql(served, document, variables)
    assert message.endswith(
        "A Date is ISO 8601, as in 2026-11-21: " + ("21.11.2026" * 4) + "... is not."
    )
    assert len(message) < 200
    assert "Expected value of type" not in message


@pytest.mark.parametrize("days_back", [36, 400])
def test_an_at_before_the_retention_gives_the_earliest_time_allowed(
    served: Served, days_back: int
) -> None:
    at = datetime.now(UTC) - timedelta(days=days_back)
    message = graphql(
        served,
        'mutation($at: DateTime) { touch(userId: "ann", at: $at) { online } }',
        {"at": at.isoformat()},
    )
    earliest = re.search(r"the earliest time allowed now is (\S+Z)\.$", message)
    assert earliest, message
    allowed = datetime.fromisoformat(earliest[1])
    expected = datetime.now(UTC) - timedelta(days=35)
    assert abs(allowed - expected) < timedelta(seconds=30)
    assert "PRESENCE_RETENTION_DAYS" in message
