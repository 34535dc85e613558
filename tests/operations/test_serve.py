"""`gql-presence serve` as a user runs it: no settings, an embedded Redis whose data outlives
the service, and a clear refusal of bad settings."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import secrets
import shlex
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor, as_completed
from importlib import metadata
from pathlib import Path
from stat import S_IMODE
from typing import Any

import aiohttp
import pytest
from redis import Redis

from gql_presence.running.redis_server import (
    RedisServer,
    free_port,
    redis_server_binary,
    start_embedded_redis,
)
from tests.conftest import CLUSTER_PASSWORD
from tests.helpers import (
    FIELDS,
    Subscriber,
    post,
    readme_snippets,
    run_service,
    stop,
    subscribed,
    wait_until_serving,
)
from tests.redis_cluster import LocalCluster, start_redis_cluster

# Every test starts a process of its own, some of them several.
pytestmark = pytest.mark.slow


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "data"


FIRST_PAGE = "{ onlineUsers(first: 1) { nodes { userId } pageInfo { endCursor } } }"


def next_page(cursor: str) -> str:
    return f'{{ onlineUsers(first: 1, after: "{cursor}") {{ nodes {{ userId }} }} }}'


def test_serve_with_no_settings_keeps_its_data_and_cursors_across_restarts(data_dir: Path) -> None:
    port = free_port()
    service = run_service(data_dir, port)
    try:
        wait_until_serving(service, port)
        touched = post(port, 'mutation { touch(userId: "alice") { lastSeen } }')
        assert touched["data"]["touch"]["lastSeen"]
        post(port, 'mutation { touch(userId: "bob") { lastSeen } }')
        cursor = post(port, FIRST_PAGE)["data"]["onlineUsers"]["pageInfo"]["endCursor"]
        post(port, 'mutation { setStatus(userId: "alice", status: BUSY) { status } }')
        post(
            port, 'mutation { setCustomStatus(userId: "alice", text: "Away on a trip") { status } }'
        )
        post(
            port,
            'mutation { setLastSeenVisibility(userId: "alice", visibleTo: NOBODY) { status } }',
        )
    finally:
        output = stop(service)
    assert service.returncode == 0, output
    assert (data_dir / "appendonly.aof").stat().st_size > 0
    assert not (data_dir / "redis.sock").exists(), "the embedded Redis was stopped"
    # The generated cursor secret, this user's alone, beside the embedded Redis's data.
    assert S_IMODE((data_dir / "cursor-secret").stat().st_mode) == 0o600

    service = run_service(data_dir, port)
    try:
        wait_until_serving(service, port)
        chosen = "chosenStatus customStatus { text } lastSeenVisibleTo"
        presence = post(port, f'{{ presence(userId: "alice") {{ lastSeen {chosen} }} }}')
        assert presence["data"]["presence"] == {
            "lastSeen": touched["data"]["touch"]["lastSeen"],
            "chosenStatus": "BUSY",
            "customStatus": {"text": "Away on a trip"},
            "lastSeenVisibleTo": "NOBODY",
        }
        assert post(port, next_page(cursor)) == {
            "data": {"onlineUsers": {"nodes": [{"userId": "alice"}]}}
        }
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


SECRET = "Secret0Value0That0Must0Not0Show0Anywhere"  # noqa: S105 - a test value


@pytest.mark.parametrize(
    ("settings", "says"),
    [
        ({"PRESENCE_BACKEND_TOKENS": SECRET}, "no name before a colon"),
        ({"PRESENCE_BACKEND_TOKENS": f"api:{SECRET},{SECRET}"}, "entry 2 has no name"),
        ({"PRESENCE_BACKEND_TOKENS": f":{SECRET}"}, "no name before a colon"),
        ({"PRESENCE_BACKEND_TOKENS": "api:short"}, "the token of 'api' is too short"),
        ({"PRESENCE_BACKEND_TOKENS": f"api:{SECRET[:20]}"}, "the token of 'api' is too short"),
        ({"PRESENCE_JWT_SECRET": SECRET[:20]}, "PRESENCE_JWT_SECRET is too short"),
        ({"PRESENCE_JWT_SECRET": SECRET}, "PRESENCE_JWT_ISSUER"),
        ({"PRESENCE_CURSOR_SECRET": SECRET[:20]}, "PRESENCE_CURSOR_SECRET is too short"),
        ({"REDIS_URL": f"redis://app:{SECRET}@[::1/0"}, "is not a Redis URL"),
        ({"REDIS_URL": f"redis://app:{SECRET}@host:port/0"}, "is not a Redis URL"),
        ({"REDIS_URL": f"http://app:{SECRET}@host/0"}, "is not a Redis URL"),
        ({"REDIS_URL": f"unix:///redis.sock?password={SECRET}&db=x"}, "is not a Redis URL"),
        ({"REDIS_CLUSTER_PASSWORD": SECRET}, "REDIS_CLUSTER_PASSWORD is for a Redis Cluster"),
    ],
    ids=lambda value: next(iter(value)) if isinstance(value, dict) else "",
)
def test_a_bad_secret_setting_stops_the_start_without_repeating_the_secret(
    data_dir: Path, settings: dict[str, str], says: str
) -> None:
    service = run_service(data_dir, free_port(), **settings)
    output, _ = service.communicate(timeout=20)
    assert service.returncode == 2, output.decode()
    assert says in output.decode()
    assert SECRET[:8] not in output.decode()


def test_a_redis_that_does_not_answer_stops_the_start_saying_why(data_dir: Path) -> None:
    unreachable = f"redis://127.0.0.1:{free_port()}/0"
    service = run_service(data_dir, free_port(), REDIS_URL=unreachable, PRESENCE_WORKERS="1")
    output, _ = service.communicate(timeout=30)
    assert service.returncode == 1
    assert "cannot start: The presence store cannot be reached" in output.decode()
    assert "Traceback" not in output.decode()
    assert "OPEN MODE" not in output.decode(), "a service that did not start warns of nothing"


@pytest.mark.parametrize("workers", ["1", "2"])
def test_serve_refuses_a_port_another_process_serves(data_dir: Path, workers: str) -> None:
    with socket.socket() as other:
        # As the workers of a service already running there bind it.
        other.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        other.bind(("127.0.0.1", 0))
        other.listen()
        port = other.getsockname()[1]
        service = run_service(data_dir, port, PRESENCE_WORKERS=workers)
        try:
            output, _ = service.communicate(timeout=20)
        finally:
            if service.poll() is None:
                stop(service)
    assert service.returncode == 1
    assert output.decode().splitlines() == [
        f"gql-presence: cannot start: port {port} of 127.0.0.1 is in use by another process; "
        "stop it, or choose another --port."
    ]
    assert not data_dir.exists(), "nothing was started"


def test_the_embedded_data_is_this_users_alone(data_dir: Path) -> None:
    umask = os.umask(0o022)  # a usual umask, under which files are readable by all
    try:
        server = start_embedded_redis(data_dir)
    finally:
        os.umask(umask)
    try:
        with Redis.from_url(server.url) as client:
            client.set("presence", "of someone")
    finally:
        server.stop()
    paths = [data_dir, *data_dir.rglob("*")]
    assert {p.name for p in paths} >= {"data", "appendonly.aof", "redis.log", "lock"}
    for path in paths:
        expected = 0o700 if path.is_dir() else 0o600
        assert S_IMODE(path.stat().st_mode) == expected, path


def test_version_is_the_installed_one() -> None:
    done = run_command("--version")
    assert done.returncode == 0
    assert done.stdout == f"gql-presence {metadata.version('gql-presence')}\n"


def run_command(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if not k.startswith(("REDIS_", "PRESENCE_"))}
    environment.update(env)
    return subprocess.run(
        [sys.executable, "-m", "gql_presence", *args],
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_check_reaches_redis_and_loads_the_scripts(redis_server: RedisServer) -> None:
    done = run_command("check", REDIS_URL=redis_server.url)
    assert done.returncode == 0, done.stderr
    assert "answers and holds the scripts" in done.stdout


def test_check_reaches_a_redis_cluster(redis_cluster: LocalCluster) -> None:
    nodes = ",".join(f"{host}:{port}" for host, port in redis_cluster.nodes[:2])
    done = run_command("check", REDIS_CLUSTER_NODES=nodes, PRESENCE_SHARDS="3")
    assert done.returncode == 0, done.stderr
    assert "Redis Cluster" in done.stdout
    assert "holds the scripts (3 shards)" in done.stdout
    # The fixture's slots give each shard a master of its own.
    first, second, third = (f"{host}:{port}" for host, port in redis_cluster.nodes)
    assert shards_per_master(done.stdout) == {first: "2", second: "1", third: "0"}
    assert "unevenly" not in done.stderr


def test_check_warns_of_shards_spread_unevenly_over_the_masters() -> None:
    # With the slots split evenly over three masters, the slots of {1} and {2} (9842, 5649)
    # fall on the second master, and the first serves none of the three shards.
    cluster = start_redis_cluster(binary=redis_server_binary())
    try:
        nodes = ",".join(f"{host}:{port}" for host, port in cluster.nodes)
        done = run_command("check", REDIS_CLUSTER_NODES=nodes, PRESENCE_SHARDS="3")
    finally:
        cluster.stop()
    assert done.returncode == 0, done.stderr
    first, second, third = (f"{host}:{port}" for host, port in cluster.nodes)
    assert shards_per_master(done.stdout) == {first: "none", second: "1, 2", third: "0"}
    assert "spread unevenly over the masters" in done.stderr


def shards_per_master(output: str) -> dict[str, str]:
    """From check's line "shards per master: host:port 0, 3; host:port none; ..."."""
    line = next(line for line in output.splitlines() if "shards per master: " in line)
    entries = line.split("shards per master: ", 1)[1].split("; ")
    return dict(entry.split(" ", 1) for entry in entries)


def test_check_needs_the_password_of_a_cluster_that_requires_one(
    password_cluster: LocalCluster,
) -> None:
    nodes = ",".join(f"{host}:{port}" for host, port in password_cluster.nodes)
    without = run_command("check", REDIS_CLUSTER_NODES=nodes, PRESENCE_SHARDS="3")
    assert without.returncode == 1
    assert "authenticat" in without.stderr.lower()
    assert "Traceback" not in without.stderr
    not_it = "not-the-password"
    wrong = run_command("check", REDIS_CLUSTER_NODES=nodes, REDIS_CLUSTER_PASSWORD=not_it)
    assert wrong.returncode == 1
    assert "does not serve the store" in wrong.stderr
    assert not_it not in wrong.stderr + wrong.stdout
    done = run_command("check", REDIS_CLUSTER_NODES=nodes, REDIS_CLUSTER_PASSWORD=CLUSTER_PASSWORD)
    assert done.returncode == 0, done.stderr
    assert "holds the scripts" in done.stdout


def test_check_does_not_print_the_password_of_redis_url(redis_server: RedisServer) -> None:
    with_password = redis_server.url.replace("redis://", "redis://:hunter2-secret@")
    done = run_command("check", REDIS_URL=with_password)
    assert done.returncode == 0, done.stderr  # the test Redis takes any password
    assert "redis://:***@127.0.0.1" in done.stdout
    assert "hunter2-secret" not in done.stderr + done.stdout


def test_check_does_not_print_the_cursor_secret(redis_server: RedisServer) -> None:
    chosen = "a-cursor-chosen-that-check-keeps-to-itself"
    done = run_command("check", REDIS_URL=redis_server.url, PRESENCE_CURSOR_SECRET=chosen)
    assert done.returncode == 0, done.stderr
    assert chosen not in done.stderr + done.stdout
    short = run_command("check", REDIS_URL=redis_server.url, PRESENCE_CURSOR_SECRET="x" * 31)
    assert short.returncode != 0
    assert "PRESENCE_CURSOR_SECRET is too short" in short.stderr
    assert "x" * 31 not in short.stderr + short.stdout


def test_check_fails_on_an_unreachable_redis_or_a_bad_setting() -> None:
    unreachable = run_command("check", REDIS_URL=f"redis://127.0.0.1:{free_port()}/0")
    assert unreachable.returncode == 1
    assert "does not serve the store" in unreachable.stderr
    assert "Connection refused" in unreachable.stderr or "Connect call failed" in unreachable.stderr
    assert "Check REDIS_URL" in unreachable.stderr
    assert "try again shortly" not in unreachable.stderr
    bad = run_command("check", PRESENCE_STATS_TIMEZONE="Nowhere/Atlantis")
    assert bad.returncode == 2
    assert "PRESENCE_STATS_TIMEZONE" in bad.stderr


def test_demo_serves_a_living_sample_apart_from_the_users_data(data_dir: Path) -> None:
    """As the README has it: the user's service runs, and `gql-presence demo --keep-alive` in a
    second terminal serves the sample from a data folder of its own, which deleting removes."""
    port, demo_port = free_port(), free_port()
    service = run_service(data_dir, port)
    environment = {k: v for k, v in os.environ.items() if not k.startswith(("REDIS_", "PRESENCE_"))}
    environment.update(PRESENCE_DATA_DIR=str(data_dir))
    command = ["demo", "--users", "300", "--keep-alive", "--port", str(demo_port)]
    try:
        wait_until_serving(service, port)
        post(port, 'mutation { touch(userId: "mine") { online } }')
        demo = subprocess.Popen(
            [sys.executable, "-m", "gql_presence", *command],
            env=environment,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        try:
            assert demo.stdout is not None
            lines = iter(demo.stdout.readline, b"")
            said = next(line.decode() for line in lines if b"users with friends" in line)
            body = post(
                demo_port,
                "{ onlineUsers(first: 3) { totalCount nodes { userId sessions { sessionId } } } "
                "weeklyStats { days { activeUsers } uniqueUsers activeEveryDay } "
                'friends(userId: "user-00001") }',
            )["data"]
        finally:
            demo.send_signal(signal.SIGTERM)
            demo.communicate(timeout=30)
        assert demo.returncode == 0
        assert body["onlineUsers"]["totalCount"] >= 30
        assert all(node["sessions"] for node in body["onlineUsers"]["nodes"])
        assert all(day["activeUsers"] > 0 for day in body["weeklyStats"]["days"])
        assert body["weeklyStats"]["activeEveryDay"] >= 30  # the regulars
        assert len(body["friends"]) >= 5
        # The user's own service and data have none of it.
        mine = post(
            port, '{ onlineUsers(first: 5) { nodes { userId } } friends(userId: "user-00001") }'
        )
        assert mine["data"] == {"onlineUsers": {"nodes": [{"userId": "mine"}]}, "friends": []}
    finally:
        stop(service)
    demo_dir = data_dir.with_name(data_dir.name + "-demo")
    assert str(demo_dir) in said
    assert "delete that folder to remove it" in said
    assert "touches over 35 days" in said  # five weeks, as the README says
    assert (demo_dir / "appendonly.aof").exists()
    assert not (demo_dir / "redis.sock").exists(), "the demo's service and Redis stopped"


@pytest.mark.parametrize("stop_signal", [signal.SIGINT, signal.SIGTERM])
def test_a_demo_that_serves_stops_on_ctrl_c_or_sigterm(
    data_dir: Path, stop_signal: signal.Signals
) -> None:
    """Without --keep-alive the demo waits on its service once it has said it serves: Ctrl-C
    (SIGINT to the demo's process group, as a terminal sends it) or SIGTERM stops both."""
    demo_port = free_port()
    environment = {k: v for k, v in os.environ.items() if not k.startswith(("REDIS_", "PRESENCE_"))}
    environment.update(PRESENCE_DATA_DIR=str(data_dir))
    demo = subprocess.Popen(
        [sys.executable, "-m", "gql_presence", "demo", "--users", "10", "--port", str(demo_port)],
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        assert demo.stdout is not None
        lines = iter(demo.stdout.readline, b"")
        next(line for line in lines if b"Ctrl-C stops it" in line)
        assert post(demo_port, "{ __typename }")["data"] == {"__typename": "Query"}
    finally:
        os.killpg(demo.pid, stop_signal)
        try:
            demo.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(demo.pid, signal.SIGKILL)
            demo.communicate()
            pytest.fail(f"the demo did not stop within 20 s of {stop_signal.name}")
    assert demo.returncode == 0
    assert not (data_dir.with_name(data_dir.name + "-demo") / "redis.sock").exists()


def test_sigterm_lets_requests_in_flight_finish(redis_server: RedisServer, data_dir: Path) -> None:
    port = free_port()
    service = run_service(data_dir, port, REDIS_URL=redis_server.url)
    wait_until_serving(service, port)
    batches = [[f"drain-{n}-{i}" for i in range(10_000)] for n in range(6)]
    document = "mutation($ids: [ID!]!) { touchMany(userIds: $ids) }"

    def touch_many(ids: list[str]) -> dict[str, Any]:
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/graphql",
            data=json.dumps({"query": document, "variables": {"ids": ids}}).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=20) as response:  # noqa: S310 - our own loopback
            body: dict[str, Any] = json.load(response)
            return body

    with ThreadPoolExecutor(len(batches)) as pool:
        answers = [pool.submit(touch_many, batch) for batch in batches]
        next(as_completed(answers))  # one is answered: the others are being served
        service.send_signal(signal.SIGTERM)
        results = [answer.result() for answer in answers]
    output, _ = service.communicate(timeout=20)
    assert service.returncode == 0, output.decode()
    assert [r["data"]["touchMany"] for r in results] == [10_000] * len(batches)


def test_demo_refuses_a_user_count_it_cannot_use(data_dir: Path) -> None:
    done = run_command("demo", "--users", "0", PRESENCE_DATA_DIR=str(data_dir))
    assert done.returncode == 2
    assert "10 to 1,000,000" in done.stderr
    assert not data_dir.exists()


def children_of(pid: int) -> set[int]:
    """The processes whose parent is `pid` (Linux's /proc)."""
    found = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError):
            # The command name, in parentheses, may hold spaces: fields follow the last ")".
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if int(fields[1]) == pid:
                found.add(int(stat.parent.name))
    return found


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    return state != "Z"  # a zombie has exited, only its parent has not read its status


@pytest.mark.skipif(sys.platform != "linux", reason="finds the workers in Linux's /proc")
def test_several_workers_share_the_port_and_sigterm_stops_them_and_redis(data_dir: Path) -> None:
    port = free_port()
    service = run_service(data_dir, port, PRESENCE_WORKERS="2")
    try:
        wait_until_serving(service, port)
        # Two workers and the embedded Redis, which the parent started once for both.
        children = children_of(service.pid)
        assert len(children) == 3
        for i in range(40):  # over new connections, which the kernel spreads over the workers
            assert post(port, f'mutation {{ touch(userId: "u{i}") {{ online }} }}')["data"]
        assert post(port, "{ onlineUsers { totalCount } }")["data"]["onlineUsers"] == {
            "totalCount": 40
        }
        # A cursor from one worker is valid on the other (new connections reach both).
        cursor = post(port, FIRST_PAGE)["data"]["onlineUsers"]["pageInfo"]["endCursor"]
        for _ in range(10):
            assert "errors" not in post(port, next_page(cursor))
    finally:
        output = stop(service)
    assert service.returncode == 0, output
    assert "(2 worker processes)" in output
    assert "OPEN MODE" in output, "a service open to every caller says so"
    assert not any(alive(pid) for pid in children)
    assert not (data_dir / "redis.sock").exists(), "the embedded Redis was stopped"


@pytest.mark.skipif(sys.platform != "linux", reason="finds the workers in Linux's /proc")
def test_several_workers_serve_a_redis_cluster(redis_cluster: LocalCluster, data_dir: Path) -> None:
    port = free_port()
    nodes = ",".join(f"{host}:{port}" for host, port in redis_cluster.nodes)
    service = run_service(
        data_dir, port, REDIS_CLUSTER_NODES=nodes, PRESENCE_SHARDS="3", PRESENCE_WORKERS="2"
    )
    try:
        wait_until_serving(service, port)
        assert len(children_of(service.pid)) == 2, "two workers and no embedded Redis"
        touched = post(port, 'mutation { touch(userId: "alice") { online } }')
        assert touched["data"]["touch"]["online"]
    finally:
        output = stop(service)
    assert service.returncode == 0, output
    assert not data_dir.exists(), "no embedded Redis was started"


def test_a_worker_that_dies_stops_the_service(redis_server: RedisServer, data_dir: Path) -> None:
    port = free_port()
    service = run_service(data_dir, port, REDIS_URL=redis_server.url, PRESENCE_WORKERS="2")
    try:
        wait_until_serving(service, port)
        os.kill(min(children_of(service.pid)), signal.SIGKILL)
        output, _ = service.communicate(timeout=30)
    finally:
        if service.poll() is None:
            stop(service)
    assert service.returncode == 1
    assert "exited with status -9; stopping the service" in output.decode()


async def test_the_sessions_of_a_killed_process_expire_within_the_ttl(
    own_redis_server: RedisServer, tmp_path: Path
) -> None:
    ttl_s, sweep_s = 2, 1
    # The data lives in the test's own Redis, so that it outlives the process that is killed.
    settings = {
        "REDIS_URL": own_redis_server.url,
        "PRESENCE_CONNECTION_TTL_SECONDS": str(ttl_s),
        "PRESENCE_WORKERS": "1",
    }
    holder_port, watcher_port = free_port(), free_port()
    holder = run_service(tmp_path / "holder", holder_port, **settings)
    watcher = run_service(tmp_path / "watcher", watcher_port, **settings)
    try:
        await asyncio.to_thread(wait_until_serving, holder, holder_port)
        await asyncio.to_thread(wait_until_serving, watcher, watcher_port)
        everyone = f"subscription {{ presenceChanged(all: true) {{ {FIELDS} }} }}"
        async with subscribed(f"ws://127.0.0.1:{watcher_port}/graphql", everyone) as changes:
            await _until_subscribed(changes, watcher_port)
            async with _held_session(holder_port) as socket:
                assert (await _next_change(changes, "alice"))["kind"] == "ONLINE"
                holder.kill()  # SIGKILL: no close, no clean-up of any kind
                killed_at = time.monotonic()
                await asyncio.to_thread(holder.wait, 5)
                # The killed process's socket ends with it.
                assert (await socket.receive(timeout=3)).type in CLOSED
                offline = await _next_change(changes, "alice", within_s=ttl_s + sweep_s + 2)
            assert offline["kind"] == "OFFLINE"
            assert time.monotonic() - killed_at <= ttl_s + sweep_s + 1
            assert post(watcher_port, ALICE_ONLINE)["data"]["presence"]["online"] is False
    finally:
        if holder.poll() is None:
            holder.kill()
        holder.communicate(timeout=5)
        stop(watcher)


ALICE_ONLINE = '{ presence(userId: "alice") { online } }'
HOLD = 'subscription { presenceSession(userId: "alice", sessionId: "tab") { live endReason } }'
CLOSED = {aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED, aiohttp.WSMsgType.ERROR}


async def _until_subscribed(changes: Subscriber, port: int) -> None:
    """Touches new users until the subscriber hears of one: then it is surely subscribed."""
    for attempt in range(50):
        await asyncio.to_thread(
            post, port, f'mutation {{ touch(userId: "probe-{attempt}") {{ online }} }}'
        )
        with contextlib.suppress(TimeoutError):
            await changes.next(within_s=0.2)
            return
    pytest.fail(f"not subscribed: {changes.ended!r}")


async def _next_change(changes: Subscriber, user: str, within_s: float = 3) -> dict[str, Any]:
    deadline = time.monotonic() + within_s
    while True:
        change = await changes.next(within_s=max(deadline - time.monotonic(), 0.01))
        if change["userId"] == user:
            return change


@contextlib.asynccontextmanager
async def _held_session(port: int) -> AsyncIterator[aiohttp.ClientWebSocketResponse]:
    """alice's session held by a raw WebSocket, once the service said it is live."""
    async with aiohttp.ClientSession() as http:
        socket = await http.ws_connect(
            f"ws://127.0.0.1:{port}/graphql",
            protocols=["graphql-transport-ws"],
            timeout=aiohttp.ClientWSTimeout(ws_close=2),
        )
        await socket.send_json({"type": "connection_init", "payload": {}})
        assert (await socket.receive_json(timeout=3))["type"] == "connection_ack"
        await socket.send_json({"id": "1", "type": "subscribe", "payload": {"query": HOLD}})
        first = await socket.receive_json(timeout=3)
        assert first["payload"]["data"]["presenceSession"]["live"] is True, first
        try:
            yield socket
        finally:
            await socket.close()


def test_a_token_from_the_readme_command_is_accepted_by_the_secured_service(
    data_dir: Path,
) -> None:
    [snippet] = [s for s in readme_snippets() if "gql-presence token" in s.code]
    [line] = [line for line in snippet.code.splitlines() if "gql-presence token" in line]
    command = shlex.split(line.removeprefix("token=$(").removesuffix(")"))
    assert command[0] == ".venv/bin/gql-presence"
    settings = {
        "PRESENCE_JWT_SECRET": secrets.token_urlsafe(32),
        "PRESENCE_JWT_ISSUER": "dev",
        "PRESENCE_JWT_AUDIENCE": "gql-presence",
    }
    signed = run_command(*command[1:], **settings)
    assert signed.returncode == 0, signed.stderr
    bearer = f"Bearer {signed.stdout.strip()}"
    port = free_port()
    service = run_service(data_dir, port, **settings)
    try:
        wait_until_serving(service, port)
        # As the README's curl, and as GraphiQL's Headers and the places page send it.
        mine = post(port, "mutation { setStatus(status: BUSY) { chosenStatus } }", bearer)
        assert mine == {"data": {"setStatus": {"chosenStatus": "BUSY"}}}
        assert post(port, '{ presence(userId: "ann") { chosenStatus } }', bearer) == {
            "data": {"presence": {"chosenStatus": "BUSY"}}
        }
        here = post(port, '{ placeMembers(placeId: "doc:42") { totalCount } }', bearer)
        assert here == {"data": {"placeMembers": {"totalCount": 0}}}
        elsewhere = post(port, '{ placeMembers(placeId: "team:7") { totalCount } }', bearer)
        assert elsewhere["errors"][0]["extensions"]["code"] == "FORBIDDEN"
        anonymous = post(port, "mutation { setStatus(status: BUSY) { status } }")
        assert anonymous["errors"][0]["extensions"]["code"] == "UNAUTHENTICATED"
    finally:
        stop(service)


def test_the_token_command_says_what_it_needs() -> None:
    done = run_command("token", "--user", "ann")
    assert done.returncode == 2
    assert "PRESENCE_JWT_SECRET" in done.stderr
    assert done.stdout == ""
