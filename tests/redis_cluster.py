"""Throwaway Redis Clusters on loopback, for the tests and the benchmarks (which import this
module from here: the package itself never starts a cluster)."""

from __future__ import annotations

import contextlib
import random
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from redis import Redis

from gql_presence.running.redis_server import RedisServer, RedisStartError, start_redis_server

_START_TIMEOUT_S = 10.0

# A cluster node also listens on its port + 10000 (the cluster bus), so its port is at most
# 55535; ports are picked below the usual ephemeral range, with the bus port free as well.
_CLUSTER_PORTS = (20000, 30000)
_CLUSTER_BUS_OFFSET = 10000
_CLUSTER_SLOTS = 16384


def free_cluster_port() -> int:
    while True:
        port = random.randint(*_CLUSTER_PORTS)  # noqa: S311 - not a secret
        with contextlib.ExitStack() as probes:
            try:
                for candidate in (port, port + _CLUSTER_BUS_OFFSET):
                    probe = probes.enter_context(socket.socket())
                    probe.bind(("127.0.0.1", candidate))
            except OSError:
                continue
            return port


@dataclass
class LocalCluster:
    """A Redis Cluster of masters on loopback, started by this process (tests, benchmarks)."""

    servers: list[RedisServer]
    nodes: tuple[tuple[str, int], ...]

    def stop(self) -> None:
        for server in self.servers:
            server.stop()


_CLUSTER_NODE = ("--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf")


def start_redis_cluster(
    slot_starts: Sequence[int] = (0, 5461, 10923),
    *,
    binary: str | None = None,
    password: str | None = None,
) -> LocalCluster:
    """Starts one master per entry of slot_starts, master i serving the slots from
    slot_starts[i] up to the next start, joins them (CLUSTER ADDSLOTS, MEET) and waits until
    every node says cluster_state:ok. No replicas (add_replica adds one): a throwaway cluster
    for tests. With a password, every node requires it (AUTH) from then on."""
    cluster = LocalCluster([], ())
    extra = [*_CLUSTER_NODE, "--cluster-node-timeout", "2000"]
    try:
        for _ in slot_starts:
            port = free_cluster_port()
            cluster.servers.append(start_redis_server(binary=binary, port=port, extra=extra))
            cluster.nodes += (("127.0.0.1", port),)
        _join(cluster.nodes, [*slot_starts, _CLUSTER_SLOTS])
        if password is not None:
            _require_password(cluster.nodes, password)
    except BaseException:
        cluster.stop()
        raise
    return cluster


def _require_password(nodes: tuple[tuple[str, int], ...], password: str) -> None:
    # Set once the nodes are up (not on their command line, where any process can read it).
    for host, port in nodes:
        with Redis(host=host, port=port) as client:
            client.config_set("masterauth", password)
            client.config_set("requirepass", password)


def _join(nodes: tuple[tuple[str, int], ...], bounds: list[int]) -> None:
    clients = [Redis(host=host, port=port, decode_responses=True) for host, port in nodes]
    try:
        for i, client in enumerate(clients):
            client.cluster("ADDSLOTS", *range(bounds[i], bounds[i + 1]))
            client.cluster("SET-CONFIG-EPOCH", i + 1)
        for client in clients[1:]:
            client.cluster("MEET", *nodes[0])
        deadline = time.monotonic() + _START_TIMEOUT_S
        while not all(
            (info := client.cluster("INFO"))["cluster_state"] == "ok"
            and int(info["cluster_known_nodes"]) == len(clients)
            for client in clients
        ):
            if time.monotonic() > deadline:
                raise RedisStartError(f"the cluster did not come up within {_START_TIMEOUT_S:g} s")
            time.sleep(0.05)
    finally:
        for client in clients:
            client.close()


def add_replica(
    cluster: LocalCluster, master: int, *, binary: str | None = None
) -> tuple[str, int]:
    """Starts a node that replicates master `master` (an index into cluster.nodes) and
    returns its address once it has the master's data and every node knows it as a replica.
    Its server is added to cluster.servers (stopped with the cluster); cluster.nodes, the
    start-up nodes clients are given, stay the masters."""
    port = free_cluster_port()
    extra = [*_CLUSTER_NODE, "--cluster-node-timeout", "2000"]
    cluster.servers.append(start_redis_server(binary=binary, port=port, extra=extra))
    host, master_port = cluster.nodes[master]
    with (
        Redis(host=host, port=port, decode_responses=True) as replica,
        Redis(host=host, port=master_port, decode_responses=True) as primary,
    ):
        master_id = primary.execute_command("CLUSTER", "MYID")
        replica.execute_command("CLUSTER", "MEET", host, master_port)
        _wait(
            lambda: master_id in replica.execute_command("CLUSTER", "NODES"), "the replica to meet"
        )
        replica.execute_command("CLUSTER", "REPLICATE", master_id)
        replica_id = replica.execute_command("CLUSTER", "MYID")
        _wait(
            lambda: (
                replica.info("replication")["master_link_status"] == "up"
                # A master hands over only to a node it knows as its own replica.
                and all(_role_of(node, replica_id) == master_id for node in _addresses(cluster))
            ),
            "the replica to sync and be known",
        )
    return host, port


def fail_over(replica: tuple[str, int], cluster: LocalCluster) -> None:
    """Promotes the replica with a manual CLUSTER FAILOVER (its master hands over without
    losing a write) and waits until every node of the cluster takes it as the master."""
    with Redis(host=replica[0], port=replica[1], decode_responses=True) as client:
        replica_id = client.execute_command("CLUSTER", "MYID")
        client.execute_command("CLUSTER", "FAILOVER")
    _wait(
        lambda: all(_role_of(node, replica_id) == "master" for node in _addresses(cluster)),
        "the failover",
    )


def _addresses(cluster: LocalCluster) -> list[tuple[str, int]]:
    return [
        ("127.0.0.1", int(server.url.rsplit(":", 1)[1].split("/")[0])) for server in cluster.servers
    ]


def _role_of(address: tuple[str, int], node_id: str) -> str | None:
    """What the node at `address` takes `node_id` for: "master", or the id of the master it
    replicates (None: not known yet)."""
    with Redis(host=address[0], port=address[1], decode_responses=True) as client:
        for line in client.execute_command("CLUSTER", "NODES").splitlines():
            node, _, flags, master, *_ = line.split()
            if node == node_id:
                return "master" if "master" in flags.split(",") else master
    return None


def _wait(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + _START_TIMEOUT_S
    while not condition():
        if time.monotonic() > deadline:
            raise RedisStartError(f"waited {_START_TIMEOUT_S:g} s for {what} in vain")
        time.sleep(0.05)


def bus_publishes(nodes: Sequence[tuple[str, int]]) -> dict[str, int]:
    """The cluster bus messages that carried published messages, summed over the nodes: those
    of classic PUBLISH ("publish", sent to every other node) and of sharded SPUBLISH
    ("publishshard", sent to the replicas of the publishing shard only), each as sent."""
    totals = {"publish": 0, "publishshard": 0}
    for host, port in nodes:
        with Redis(host=host, port=port, decode_responses=True) as client:
            info = client.execute_command("CLUSTER", "INFO")
        for line in info.splitlines():
            name, _, value = line.partition(":")
            for kind in totals:
                if name == f"cluster_stats_messages_{kind}_sent":
                    totals[kind] += int(value)
    return totals


def subscribers(address: tuple[str, int], channel: str) -> tuple[int, int]:
    """The subscribers of a channel on one node: (sharded ones, classic ones), from PUBSUB
    SHARDNUMSUB and PUBSUB NUMSUB."""
    with Redis(host=address[0], port=address[1], decode_responses=True) as client:
        _, sharded = client.execute_command("PUBSUB", "SHARDNUMSUB", channel)
        _, classic = client.execute_command("PUBSUB", "NUMSUB", channel)
    return int(sharded), int(classic)
