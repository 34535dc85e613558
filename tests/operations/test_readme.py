"""Every code snippet of README.md and of the pages of docs/ works as written, against
`gql-presence serve` on a free port with a Redis of its own: Python and shell snippets run,
JavaScript ones run under Node when it is installed, and GraphQL ones are valid against
schema.graphql and run. The snippets address the service's default 127.0.0.1:8080; here that
becomes the test service's port. A snippet that cannot run in a test carries a marker on the
line before it (see CONTRIBUTING.md). README.md stays short enough to read in one sitting."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from graphql import (
    DocumentNode,
    NonNullTypeNode,
    OperationDefinitionNode,
    OperationType,
    build_schema,
    parse,
    print_ast,
    validate,
)

from gql_presence.running.redis_server import free_port, redis_server_binary, start_redis_server
from tests.helpers import (
    DOCUMENTED,
    MARKER,
    README,
    Snippet,
    documented_snippets,
    eventually,
    post,
    run_service,
    stop,
    wait_until_serving,
)

# Those marked slow start the service, or pytest, in a process of their own.

ROOT = Path(__file__).parents[2]
DEFAULT_ADDRESS = "127.0.0.1:8080"
SNIPPETS = documented_snippets()
# What a new user reads in their first hour; the details are in docs/, linked from it.
README_MAX_LINES = 450


def by_language(*languages: str) -> list[Any]:
    return [
        pytest.param(snippet, id=snippet.where)
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
        pytest.skip(f"marked in {snippet.page.name}: {snippet.reason}")
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


def test_the_readme_stays_short() -> None:
    lines = README.read_text(encoding="utf-8").count("\n")
    assert lines <= README_MAX_LINES, (
        f"README.md has {lines} lines, more than {README_MAX_LINES}: move details to a page of"
        " docs/ and link to it from where they were"
    )


@pytest.mark.parametrize("page", DOCUMENTED, ids=lambda page: page.name)
def test_every_marker_names_a_known_kind_and_a_reason(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    markers = [line for line in text.splitlines() if "readme-test" in line]
    assert [m for m in markers if not MARKER.fullmatch(m.strip())] == []
    marked = sum(1 for s in SNIPPETS if s.marker and s.page == page)
    assert len(markers) == marked, f"{page.name}: a marker before no snippet"


def test_the_readme_marks_the_snippets_that_cannot_run() -> None:
    assert any(s.marker for s in SNIPPETS if s.page == README)


HEADING = re.compile(r"^#+ (.+)$", re.MULTILINE)
FENCED = re.compile(r"^```.*?^```$", re.MULTILINE | re.DOTALL)
LINK = re.compile(r"\]\(([^)\s]*\.md)#([^)\s]+)\)")


def anchors_of(page: Path) -> set[str]:
    """The anchors GitHub gives a page's headings: lower case, punctuation but `-` and `_`
    dropped, spaces as `-`."""
    headings = HEADING.findall(FENCED.sub("", page.read_text(encoding="utf-8")))
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}


@pytest.mark.parametrize("page", DOCUMENTED, ids=lambda page: page.name)
def test_every_link_to_a_section_finds_it(page: Path) -> None:
    """A section moved from README.md to docs/ leaves no link pointing where it was."""
    text = page.read_text(encoding="utf-8")
    own = [("", anchor) for anchor in re.findall(r"\]\(#([^)\s]+)\)", text)]
    broken = []
    for target, anchor in [*LINK.findall(text), *own]:
        linked = page.parent / target if target else page
        if not linked.is_file() or anchor not in anchors_of(linked):
            broken.append(f"{target}#{anchor}")
    assert broken == []


@pytest.mark.slow
@pytest.mark.parametrize("snippet", by_language("sh", "bash", "shell"))
def test_shell_snippet_runs(snippet: Snippet, port: int) -> None:
    bash = ["bash", "-euo", "pipefail", "-c", runnable(snippet, port)]
    done = run(bash, ROOT)
    assert done.returncode == 0, done.stderr
    assert '"errors"' not in done.stdout, done.stdout


@pytest.mark.slow
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


@pytest.mark.slow
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


def variables_of(snippet: Snippet) -> dict[str, Any]:
    """The variables its page gives a GraphQL snippet: the JSON snippet right after it,
    introduced by a paragraph that begins with "Variables"; none when there is no such one."""
    lines = snippet.page.read_text(encoding="utf-8").splitlines()
    following = SNIPPETS[SNIPPETS.index(snippet) + 1 :]
    if not following or following[0].language != "json" or following[0].page != snippet.page:
        return {}
    end = snippet.line + snippet.code.count("\n")  # the closing fence's index, 0-based
    between = " ".join(lines[end + 1 : following[0].line - 1]).strip()
    if not between.startswith("Variables"):
        return {}
    given: dict[str, Any] = json.loads(following[0].code)
    return given


async def run_operation(
    port: int, socket: aiohttp.ClientWebSocketResponse, document: str, variables: dict[str, Any]
) -> list[Any]:
    """The errors of one operation run as GraphiQL runs it: a query or mutation by POST, a
    subscription over the socket (left running until the snippet's end, so that a session it
    holds is there for the operations after it), its first message awaited briefly."""
    operation = parse(document).definitions[0]
    assert isinstance(operation, OperationDefinitionNode)
    if operation.operation is not OperationType.SUBSCRIPTION:
        body = {"query": document, "variables": variables}
        async with (
            aiohttp.ClientSession() as http,
            http.post(f"http://127.0.0.1:{port}/graphql", json=body) as response,
        ):
            answer = await response.json()
        return list(answer.get("errors") or ()) + ([] if response.status == 200 else [answer])
    operation_id = str(len(document)) + str(id(operation))
    payload = {"query": document, "variables": variables}
    await socket.send_json({"id": operation_id, "type": "subscribe", "payload": payload})
    try:
        message = await socket.receive_json(timeout=0.5)
    except TimeoutError:
        return []  # subscribed, and nothing has happened yet
    if message["type"] == "error":
        return list(message["payload"])
    return list(message.get("payload", {}).get("errors") or ())


@pytest.mark.slow
@pytest.mark.parametrize("snippet", by_language("graphql"))
async def test_graphql_snippet_runs_with_its_variables(snippet: Snippet, port: int) -> None:
    """Each operation of the snippet in turn, with the variables its page gives it, against
    the service as the README starts it (open, no credentials)."""
    definitions = parse(snippet.code).definitions
    given = variables_of(snippet)
    async with (
        aiohttp.ClientSession() as http,
        http.ws_connect(
            f"ws://127.0.0.1:{port}/graphql", protocols=["graphql-transport-ws"]
        ) as socket,
    ):
        await socket.send_json({"type": "connection_init", "payload": {}})
        assert (await socket.receive_json(timeout=3))["type"] == "connection_ack"
        for operation in definitions:
            assert isinstance(operation, OperationDefinitionNode)
            document = print_ast(DocumentNode(definitions=(operation,)))
            declared = {v.variable.name.value for v in operation.variable_definitions or ()}
            missing = (
                declared
                - given.keys()
                - {
                    v.variable.name.value
                    for v in operation.variable_definitions or ()
                    if v.default_value is not None or not isinstance(v.type, NonNullTypeNode)
                }
            )
            assert not missing, f"{snippet.where}: no variables given for {missing}"
            variables = {name: value for name, value in given.items() if name in declared}
            errors = await run_operation(port, socket, document, variables)
            assert errors == [], f"{snippet.where}: {document}"


@pytest.mark.slow
def test_run_it_says_how_to_choose_the_port_and_the_workers(tmp_path: Path) -> None:
    text = README.read_text(encoding="utf-8")
    run_it = text[text.index("**Run it**") : text.index("**Test it**")]
    assert "one worker process per CPU core" in run_it
    shown = re.search(r"`gql-presence serve --port (\d+) --workers 1`", run_it)
    assert shown, "Run it shows how to choose the port and the workers"
    port = free_port()
    command = shown[0].strip("`").replace(shown[1], str(port)).split()
    env = {**environment(), "PRESENCE_DATA_DIR": str(tmp_path)}
    service = subprocess.Popen(
        [str(Path(sys.executable).parent / command[0]), *command[1:]],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        wait_until_serving(service, port)
    finally:
        output = stop(service)
    assert f"http://127.0.0.1:{port}/graphql" in output
    assert "worker processes" not in output, output  # one process serves


@pytest.mark.slow
def test_test_it_gives_the_fast_subset() -> None:
    text = README.read_text(encoding="utf-8")
    test_it = text[text.index("**Test it**") : text.index("## Using the API")]
    [fast] = [s for s in SNIPPETS if s.code.strip() in test_it and "not slow" in s.code]
    python, *arguments = shlex.split(fast.code)  # the README's command, run by this Python
    assert python == ".venv/bin/python"
    counted = []
    for command in ([sys.executable, "-m", "pytest"], [sys.executable, *arguments]):
        done = run([*command, "--collect-only", "-q"], ROOT)
        assert done.returncode == 0, done.stdout[-2000:]
        collected = re.search(r"^(\d+)(?:/\d+)? tests collected", done.stdout, re.MULTILINE)
        assert collected, done.stdout[-2000:]
        counted.append(int(collected[1]))
    everything, fast_part = counted
    assert 0 < fast_part < everything
