"""`gql-presence serve` as a user runs it: no settings, an embedded Redis whose data outlives
the service, and a clear refusal of bad settings."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from gql_presence.redis_server import free_port


def run_service(data_dir: Path, port: int, **env: str) -> subprocess.Popen[bytes]:
    environment = {k: v for k, v in os.environ.items() if not k.startswith(("REDIS_", "PRESENCE_"))}
    environment.update(PRESENCE_DATA_DIR=str(data_dir), **env)
    return subprocess.Popen(
        [sys.executable, "-m", "gql_presence", "serve", "--port", str(port)],
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )


def post(port: int, query: str) -> dict[str, Any]:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/graphql",
        data=json.dumps({"query": query}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=5) as response:  # noqa: S310 - our own loopback
        body: dict[str, Any] = json.load(response)
        return body


def wait_until_serving(service: subprocess.Popen[bytes], port: int) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        assert service.poll() is None, service.stdout.read().decode() if service.stdout else ""
        try:
            post(port, "{ __typename }")
        except OSError:
            time.sleep(0.1)
        else:
            return
    pytest.fail("the service did not start within 20 s")


def stop(service: subprocess.Popen[bytes]) -> str:
    service.send_signal(signal.SIGTERM)
    output, _ = service.communicate(timeout=15)
    return output.decode()


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "data"


def test_serve_with_no_settings_keeps_its_data_across_restarts(data_dir: Path) -> None:
    port = free_port()
    service = run_service(data_dir, port)
    try:
        wait_until_serving(service, port)
        touched = post(port, 'mutation { touch(userId: "alice") { lastSeen } }')
        assert touched["data"]["touch"]["lastSeen"]
    finally:
        output = stop(service)
    assert service.returncode == 0, output
    assert (data_dir / "appendonly.aof").stat().st_size > 0
    assert not (data_dir / "redis.sock").exists(), "the embedded Redis was stopped"

    service = run_service(data_dir, port)
    try:
        wait_until_serving(service, port)
        presence = post(port, '{ presence(userId: "alice") { lastSeen } }')
        assert presence["data"]["presence"]["lastSeen"] == touched["data"]["touch"]["lastSeen"]
    finally:
        stop(service)


def test_a_second_service_on_the_same_data_refuses_to_start(data_dir: Path) -> None:
    port = free_port()
    first = run_service(data_dir, port)
    try:
        wait_until_serving(first, port)
        second = run_service(data_dir, free_port())
        output, _ = second.communicate(timeout=20)
        assert second.returncode != 0
        assert "Another gql-presence is using the embedded Redis" in output.decode()
    finally:
        stop(first)


def test_a_bad_setting_stops_the_start_naming_it(data_dir: Path) -> None:
    service = run_service(data_dir, free_port(), PRESENCE_WINDOW_SECONDS="soon")
    output, _ = service.communicate(timeout=20)
    assert service.returncode == 2
    assert "PRESENCE_WINDOW_SECONDS='soon'" in output.decode()
    assert not data_dir.exists(), "nothing was started"
