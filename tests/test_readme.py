"""Every code snippet of README.md works as written, against `gql-presence serve` on a free port
with a Redis of its own: Python and shell snippets run, JavaScript ones run under Node when it
is installed, and GraphQL ones are valid against schema.graphql. The snippets address the
service's default 127.0.0.1:8080; here that becomes the test service's port. A snippet that
cannot run in a test carries a marker on the line before it (see CONTRIBUTING.md)."""

from __future__ import annotations

import asyncio
import itertools
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from graphql import DocumentNode, OperationDefinitionNode, build_schema, parse, validate

from gql_presence.running.redis_server import free_port, redis_server_binary, start_redis_server
from tests.helpers import (
    MARKER,
    README,
    Snippet,
    eventually,
    post,
    readme_snippets,
    run_service,
    stop,
    wait_until_serving,
)

pytestmark = pytest.mark.slow  # starts the service in a process of its own

ROOT = Path(__file__).parent.parent
DEFAULT_ADDRESS = "127.0.0.1:8080"
SNIPPETS = readme_snippets()


def by_language(*languages: str) -> list[Any]:
    return [
        pytest.param(snippet, id=f"README.md:{snippet.line}")
        for snippet in SNIPPETS
        if snippet.language in languages
    ]


@pytest.fixture(scope="module")
def port(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """The service as a user runs it, on a Redis that no other test uses."""
    redis = start_redis_server(binary=redis_server_binary())
    port = free_port()
    service = run_service(
        tmp_path_factory.mktemp("data"), port, REDIS_URL=redis.url, PRESENCE_WORKERS="1"
    )
    try:
        wait_until_serving(service, port)
        yield port
    finally:
        stop(service)
        redis.stop()


def runnable(snippet: Snippet, port: int) -> str:
    if snippet.marker == "skip":
        pytest.skip(f"marked in README.md: {snippet.reason}")
    return snippet.code.replace(DEFAULT_ADDRESS, f"127.0.0.1:{port}")


def environment() -> dict[str, str]:
    """This shell's environment without the service's settings, as a user's shell has."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("REDIS_", "PRESENCE_"))}


def run(command: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """Runs a snippet to its end, with a user's environment."""
    return subprocess.run(
        command,
        cwd=cwd,
        env=environment(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_every_marker_names_a_known_kind_and_a_reason() -> None:
    text = README.read_text(encoding="utf-8")
    markers = [line for line in text.splitlines() if "readme-test" in line]
    assert markers, "README.md has snippets that cannot run in a test"
    assert [m for m in markers if not MARKER.fullmatch(m.strip())] == []
    assert len(markers) == sum(1 for s in SNIPPETS if s.marker), "a marker before no snippet"


@pytest.mark.parametrize("snippet", by_language("sh", "bash", "shell"))
def test_shell_snippet_runs(snippet: Snippet, port: int) -> None:
    bash = ["bash", "-euo", "pipefail", "-c", runnable(snippet, port)]
    done = run(bash, ROOT)
    assert done.returncode == 0, done.stderr
    assert '"errors"' not in done.stdout, done.stdout


@pytest.mark.parametrize("snippet", by_language("python"))
async def test_python_snippet_runs(snippet: Snippet, port: int, tmp_path: Path) -> None:
    code = runnable(snippet, port)
    if snippet.marker != "until-output":
        done = await asyncio.to_thread(run, [sys.executable, "-c", code], tmp_path)
        assert done.returncode == 0, done.stderr
        return
    # A snippet that runs until stopped: make "bob" come and go until it prints.
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        code,
        cwd=tmp_path,
        env=environment(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert process.stdout is not None
    first_line = asyncio.create_task(process.stdout.readline())
    sessions = itertools.count()

    async def printed() -> bool:
        session = f"readme-{next(sessions)}"
        change = f'mutation {{ touch(userId: "bob", sessionId: "{session}") {{ online }} kick(userId: "bob") {{ online }} }}'
        assert "errors" not in await asyncio.to_thread(post, port, change)
        await asyncio.wait({first_line}, timeout=0.2)
        return first_line.done()  # a line, or the end of a snippet that failed

    try:
        await eventually(printed, 15, "an event printed by the snippet")
    finally:
        if process.returncode is None:
            process.terminate()
        _, errors = await process.communicate()
    assert "'userId': 'bob'" in first_line.result().decode(), errors.decode()


@pytest.mark.parametrize("snippet", by_language("js", "javascript"))
def test_javascript_snippet_runs(snippet: Snippet, port: int, tmp_path: Path) -> None:
    node = shutil.which("node")
    if node is None:
        pytest.skip("runs JavaScript snippets with Node 18 or later: apt-get install nodejs")
    done = run([node, "--input-type=module", "-e", runnable(snippet, port)], tmp_path)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("snippet", by_language("graphql"))
def test_graphql_snippet_is_valid_against_the_schema(snippet: Snippet) -> None:
    schema = build_schema((ROOT / "schema.graphql").read_text(encoding="utf-8"))
    operations = parse(snippet.code).definitions
    assert operations
    for operation in operations:
        assert isinstance(operation, OperationDefinitionNode)
        assert validate(schema, DocumentNode(definitions=(operation,))) == []
