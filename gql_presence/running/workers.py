"""Serving with several worker processes on one port.

The parent starts the embedded Redis once (when neither REDIS_URL nor REDIS_CLUSTER_NODES is
set), then starts each worker as `gql-presence serve --workers 1`, with the embedded Redis's URL
and cursor secret handed down (or else the parent's own settings), and PROMETHEUS_MULTIPROC_DIR
set to a private folder of the parent's, which it removes at the end, where every worker writes
its metrics for whichever worker is scraped. The parent has made sure that no other process
listens on the port; every worker binds the same address with SO_REUSEPORT, so the kernel
spreads new connections over them. The parent only watches: SIGTERM (or Ctrl-C) is passed on to
every worker, which drains as a single process does; when all have exited the parent stops the
embedded Redis. A worker that exits by itself stops the whole service with status 1, for its
supervisor (systemd, Kubernetes) to restart.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from types import FrameType

from gql_presence.observability.metrics import MULTIPROCESS_FOLDER
from gql_presence.running.children import start_child
from gql_presence.running.connection import started_if_embedded
from gql_presence.settings import Settings

# How long requests in flight may take to finish on SIGTERM, in each serving process.
SHUTDOWN_TIMEOUT_S = 10
# A worker that has not finished draining by then is killed.
_STOP_GRACE_S = SHUTDOWN_TIMEOUT_S + 5
_POLL_S = 0.1


def serve_workers(
    settings: Settings, host: str, port: int, workers: int, announce: Callable[[], None]
) -> int:
    """Runs `workers` worker processes until SIGTERM or SIGINT; returns the exit status.
    `announce` is called once, when the first worker accepts connections."""
    stop_requested = False

    def request_stop(signum: int, frame: FrameType | None) -> None:
        nonlocal stop_requested
        stop_requested = True

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    # The metrics folder is removed, and the embedded Redis (if any) stopped, once every
    # worker has exited: see below.
    with (
        tempfile.TemporaryDirectory(prefix="gql-presence-metrics-") as metrics_folder,
        started_if_embedded(settings) as reachable,
    ):
        processes = [_start_worker(host, port, reachable, metrics_folder) for _ in range(workers)]
        status = 0
        announced = False
        while not stop_requested:
            exited = [p for p in processes if p.poll() is not None]
            if exited:
                print(
                    f"gql-presence: worker {exited[0].pid} exited with status "
                    f"{exited[0].returncode}; stopping the service",
                    file=sys.stderr,
                    flush=True,
                )
                status = 1
                break
            if not announced and _accepts(host, port):
                announced = True
                announce()
            time.sleep(_POLL_S)
        _stop_all(processes)
    return status


def _start_worker(
    host: str, port: int, settings: Settings, metrics_folder: str
) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "gql_presence", "serve", "--host", host, "--port", str(port)]
    env = {**os.environ, "PRESENCE_WORKERS": "1", MULTIPROCESS_FOLDER: metrics_folder}
    if settings.redis_url is not None:
        env["REDIS_URL"] = settings.redis_url
    # The embedded Redis's cursor secret (from its data folder), for cursors valid on every worker.
    if settings.cursor_secret is not None:
        env["PRESENCE_CURSOR_SECRET"] = settings.cursor_secret
    # A worker must not outlive a parent killed outright (it would hold the port).
    return start_child([*command, "--workers", "1", "--reuse-port"], env=env)


def _stop_all(processes: list[subprocess.Popen[bytes]]) -> None:
    for process in processes:
        if process.poll() is None:
            process.terminate()
    deadline = time.monotonic() + _STOP_GRACE_S
    for process in processes:
        try:
            process.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _accepts(host: str, port: int) -> bool:
    """Whether some worker listens already."""
    address = "127.0.0.1" if host in {"", "0.0.0.0", "::"} else host  # noqa: S104 - a check
    try:
        with socket.create_connection((address, port), timeout=0.2):
            return True
    except OSError:
        return False
