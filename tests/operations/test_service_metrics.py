"""/metrics of `gql-presence serve` with several workers: one scrape, whichever worker answers
it, reports the whole service."""

from __future__ import annotations

import urllib.request
from pathlib import Path
from stat import S_IMODE

import pytest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from gql_presence.running.redis_server import RedisServer, free_port
from tests.helpers import eventually, post, run_service, stop, wait_until_serving

pytestmark = pytest.mark.slow


def scrape(port: int) -> list[Sample]:
    """Every sample of one scrape, over a connection of its own."""
    url = f"http://127.0.0.1:{port}/metrics"
    with urllib.request.urlopen(url, timeout=5) as response:
        text = response.read().decode()
    return [sample for family in text_string_to_metric_families(text) for sample in family.samples]


def value(samples: list[Sample], name: str, **labels: str) -> float:
    matching = [s.value for s in samples if s.name == name and labels.items() <= s.labels.items()]
    assert len(matching) == 1, (name, labels, matching)
    return matching[0]


def metrics_folders(parent: Path) -> list[tuple[Path, int]]:
    """The workers' metrics folders in `parent`, with their permissions."""
    return [(p, S_IMODE(p.stat().st_mode)) for p in parent.glob("gql-presence-metrics-*")]


def worker_pids(samples: list[Sample]) -> set[str]:
    """The workers whose gauges a scrape shows (each labels its own with its pid)."""
    return {s.labels["pid"] for s in samples if s.name == "gqlp_redis_connections_in_use"}


async def test_any_workers_metrics_count_the_requests_of_every_worker(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    port = free_port()
    service = run_service(
        tmp_path / "data",
        port,
        REDIS_URL=redis_server.url,
        PRESENCE_WORKERS="2",
        TMPDIR=str(tmp_path),  # where the parent makes the workers' metrics folder
    )
    try:
        wait_until_serving(service, port)
        (folder,) = metrics_folders(tmp_path)
        assert folder[1] == 0o700, "the folder is the service's alone"
        # Both workers listen once each has written its gauges (at its first sweep).
        await eventually(lambda: len(worker_pids(scrape(port))) == 2, what="both workers")
        sent = 40
        for i in range(sent):  # each over a new connection, which the kernel gives either worker
            assert post(port, f'{{ presence(userId: "u{i}") {{ online }} }}')["data"]
        scrapes = [scrape(port) for _ in range(6)]
    finally:
        output = stop(service)
    assert service.returncode == 0, output
    assert metrics_folders(tmp_path) == [], "the parent removes the metrics folder when it stops"

    for samples in scrapes:
        requests = value(
            samples, "gqlp_graphql_requests_total", operation="query:presence", outcome="ok"
        )
        assert requests == sent
        timed = value(
            samples, "gqlp_graphql_request_duration_seconds_count", operation="query:presence"
        )
        assert timed == sent
        assert value(samples, "gqlp_script_duration_seconds_count", script="presence") == sent
        assert len(worker_pids(samples)) == 2
        assert value(samples, "gqlp_redis_connections_max") == 64
