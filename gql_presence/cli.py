"""The gql-presence command: serve the API, check a deployment, fill a demo, sign a user's token
for trying it, export the schema."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import logging
import os
import random
import signal
import subprocess
import sys
from importlib import metadata
from pathlib import Path

from aiohttp import web
from redis.exceptions import RedisClusterException, RedisError

from gql_presence.observability.logs import configure_logging
from gql_presence.running.children import start_child
from gql_presence.running.collector import SurvivorFreezer
from gql_presence.running.ports import refusal_to_listen
from gql_presence.running.redis_server import RedisStartError, make_data_dir, redis_server_binary
from gql_presence.running.workers import SHUTDOWN_TIMEOUT_S, serve_workers
from gql_presence.settings import ANY, Settings, SettingsError, is_loopback_address
from gql_presence.store.errors import PresenceError

SCHEMA_FILE = Path("schema.graphql")
log = logging.getLogger("gql_presence")


def schema_sdl() -> str:
    from gql_presence.graphql.schema import build_schema  # noqa: PLC0415 - keeps `--help` fast

    return build_schema().as_str() + "\n"


def serve(host: str, port: int, workers: int | None = None, reuse_port: bool = False) -> int:
    settings = settings_or_exit()
    if settings is None:
        return 2
    if not settings.secured and not (settings.allow_open or is_loopback_address(host)):
        print(
            f"gql-presence: refusing to serve {host} with no credentials configured: anyone "
            "who reaches it could read and change all presence. Set PRESENCE_BACKEND_TOKENS "
            'and/or a JWT key (docs/operations.md, "Running in production"), or '
            "PRESENCE_ALLOW_OPEN=true if this network is private.",
            file=sys.stderr,
        )
        return 2
    configure_logging(settings.log_format, settings.log_level)
    # A worker's parent has made sure that no other process listens on the port.
    refusal = None if reuse_port else refusal_to_listen(host, port)
    if refusal is not None:
        print(f"gql-presence: cannot start: {refusal}", file=sys.stderr)
        return 1
    try:
        return _serve(settings, host, port, workers or settings.workers, reuse_port)
    # Redis at start-up (the embedded one, or one that does not answer), or the data folder.
    except (RedisStartError, PresenceError, RedisError, RedisClusterException, OSError) as error:
        print(f"gql-presence: cannot start: {described(error)}", file=sys.stderr)
        return 1


def _serve(settings: Settings, host: str, port: int, workers: int, reuse_port: bool) -> int:
    if workers > 1:
        detail = f" ({workers} worker processes)"
        return serve_workers(
            settings, host, port, workers, announce=lambda: announce(settings, host, port, detail)
        )
    from gql_presence.app import create_app  # noqa: PLC0415 - keeps `--help` fast

    app = create_app(settings)
    collect_garbage_by_growth(app)
    web.run_app(
        app,
        host=host,
        port=port,
        reuse_port=reuse_port or None,  # a worker shares the port with the others
        access_log=None,  # each request gets one line of our own, with its operation
        shutdown_timeout=SHUTDOWN_TIMEOUT_S,
        # A worker's parent says where the service is, once for all workers.
        print=None if reuse_port else lambda _: announce(settings, host, port),
        loop=new_event_loop(settings.event_loop),
    )
    return 0


def new_event_loop(kind: str) -> asyncio.AbstractEventLoop:
    """uvloop's event loop for "uvloop" where it is installed, else Python's own."""
    if kind == "uvloop":
        try:
            import uvloop  # noqa: PLC0415 - not installed everywhere (Windows)
        except ImportError:
            log.info("uvloop is not installed: serving on asyncio's event loop")
        else:
            return uvloop.new_event_loop()
    return asyncio.new_event_loop()


def announce(settings: Settings, host: str, port: int, detail: str = "") -> None:
    """Says where the service answers, once it does (and, in open mode, that anyone may)."""
    if not settings.secured:
        log.warning(
            "OPEN MODE: no credentials are configured (PRESENCE_BACKEND_TOKENS, "
            "PRESENCE_JWT_SECRET, PRESENCE_JWT_PUBLIC_KEY_FILE); every caller may read and "
            "change all presence. For local development only. Requests are answered only when "
            "addressed to %s (PRESENCE_ALLOWED_HOSTS).",
            accepted_hosts(settings),
        )
    print(f"gql-presence: GraphQL and GraphiQL at http://{host}:{port}/graphql{detail}", flush=True)


def accepted_hosts(settings: Settings) -> str:
    if ANY in settings.allowed_hosts:
        return "any host name"
    return ", ".join(("localhost", "a loopback address", *settings.allowed_hosts))


def what_redis_said(error: Exception) -> str:
    """What Redis (or the network) answered, for an operator; our message if it said nothing."""
    if isinstance(error, PresenceError):
        return str(error.__cause__ or error.message).rstrip(".")
    return str(error).rstrip(".")


def described(error: Exception) -> str:
    """What went wrong, for an operator: our message, and what Redis (or the network) said."""
    if not isinstance(error, PresenceError):
        return str(error)
    return error.message if error.__cause__ is None else f"{error.message} ({error.__cause__})"


def collect_garbage_by_growth(app: web.Application) -> None:
    """Hides what start-up made (modules, the schema, the scripts) from the garbage
    collector once the app has started, and then what survives each full collection: those
    live long, and every full collection would walk them again, stopping the process for a
    time that grows with the connections it holds (gql_presence/running/collector.py)."""
    freezer: SurvivorFreezer | None = None

    async def start(_: web.Application) -> None:
        nonlocal freezer
        freezer = SurvivorFreezer(asyncio.get_running_loop())
        freezer.start()

    async def stop(_: web.Application) -> None:
        if freezer is not None:
            freezer.stop()

    app.on_startup.append(start)
    app.on_cleanup.append(stop)


def settings_or_exit() -> Settings | None:
    try:
        return Settings.from_env()
    except SettingsError as error:
        print(f"gql-presence: {error}", file=sys.stderr)
        return None


def check() -> int:
    """For deploy pipelines: the settings are valid and the store answers."""
    settings = settings_or_exit()
    if settings is None:
        return 2
    if settings.embedded_redis:
        try:
            binary = redis_server_binary()
            make_data_dir(settings.data_dir)
            probe = settings.data_dir / ".check"
            probe.write_bytes(b"")
            probe.unlink()
        except (RedisStartError, OSError) as error:
            print(f"gql-presence: the embedded Redis cannot run: {error}", file=sys.stderr)
            return 1
        print(
            f"gql-presence: settings valid; embedded Redis {binary}, "
            f"data folder {settings.data_dir} writable"
        )
        return 0
    return asyncio.run(_check_redis(settings))


async def _check_redis(settings: Settings) -> int:
    from gql_presence.running.connection import connect  # noqa: PLC0415
    from gql_presence.store import PresenceStore  # noqa: PLC0415

    async with connect(settings) as redis:
        try:
            store = PresenceStore(redis.client, settings)
            await store.load_scripts()
            whole = not settings.redis_cluster_nodes or await store.takes_changes()
            version = (await redis.client.info("server"))["redis_version"]
            placement = store.placement() if whole else {}
        except (PresenceError, RedisError, RedisClusterException) as error:
            print(
                f"gql-presence: {redis.where} does not serve the store: {what_redis_said(error)}. "
                f"Check {redis.settings_to_check}, and that this Redis is running.",
                file=sys.stderr,
            )
            return 1
    if not whole:
        print(
            f"gql-presence: {redis.where} does not serve every slot (cluster_state is not ok)",
            file=sys.stderr,
        )
        return 1
    print(
        f"gql-presence: settings valid; Redis {version} at {redis.where} answers and holds "
        f"the scripts ({settings.shards} shard{'s' if settings.shards > 1 else ''})"
    )
    if placement:
        print(
            "gql-presence: shards per master: "
            + "; ".join(
                f"{node} {', '.join(map(str, shards)) or 'none'}"
                for node, shards in placement.items()
            )
        )
        counts = [len(shards) for shards in placement.values()]
        if max(counts) - min(counts) > 1:
            print(
                "gql-presence: warning: the shards are spread unevenly over the masters, so "
                "some masters take more of the load than others. Move slots (redis-cli "
                "--cluster reshard) so that each master serves as many of the shards' slots "
                "(shard i's is CLUSTER KEYSLOT {i}), or choose another PRESENCE_SHARDS.",
                file=sys.stderr,
            )
    return 0


def demo(users: int, seed: int, keep_alive: bool, port: int) -> int:
    """Serves a sample on a data folder of its own, beside the user's, so that it never mixes
    with their data and goes when that folder is deleted."""
    settings = settings_or_exit()
    if settings is None:
        return 2
    refusal = refusal_to_listen("127.0.0.1", port)
    if refusal is not None:
        print(f"gql-presence: cannot start the demo: {refusal}", file=sys.stderr)
        return 1
    folder = demo_data_dir(settings)
    # Its own embedded Redis in that folder, whatever Redis the settings name.
    env = {k: v for k, v in os.environ.items() if not k.startswith("REDIS_")}
    env.update(PRESENCE_DATA_DIR=str(folder), PRESENCE_WORKERS="1")
    service = start_child(
        [sys.executable, "-m", "gql_presence", "serve", "--port", str(port)], env=env
    )
    own = dataclasses.replace(settings, redis_url=None, redis_cluster_nodes=(), data_dir=folder)
    # Stopped as by Ctrl-C, its service with it.
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        asyncio.run(_demo(own, users, seed, keep_alive, service, port))
    except KeyboardInterrupt:
        pass
    except (RedisStartError, PresenceError, RedisError, RedisClusterException) as error:
        print(f"gql-presence: {described(error)}", file=sys.stderr)
        return 1
    finally:
        service.terminate()
        service.wait(timeout=SHUTDOWN_TIMEOUT_S + 5)
    return 0


def _interrupt(_signal: int, _frame: object) -> None:
    raise KeyboardInterrupt


def demo_data_dir(settings: Settings) -> Path:
    """Where the demo keeps its data: beside the service's data folder, named after it."""
    return settings.data_dir.with_name(settings.data_dir.name + "-demo")


async def _demo(  # noqa: PLR0917 - the command's options
    settings: Settings,
    users: int,
    seed: int,
    keep_alive: bool,
    service: subprocess.Popen[bytes],
    port: int,
) -> None:
    from gql_presence.running import demo as sample  # noqa: PLC0415

    await sample.serving(settings, service)
    rng = random.Random(seed)  # noqa: S311 - sample data, not secrets
    async with sample.demo_store(settings) as store:
        wrote = await sample.fill(store, users, settings, rng)
        await sample.listening(port, service)
        print(
            f"gql-presence: demo at http://127.0.0.1:{port}/dashboard: {wrote['users']:,} users "
            f"with friends, {wrote['touches']:,} touches over {wrote['days']} days, "
            f"{wrote['online']:,} online now. Its data is apart from yours, in "
            f"{settings.data_dir} (delete that folder to remove it). Ctrl-C stops it",
            flush=True,
        )
        if keep_alive:
            print("gql-presence: users now come and go every second", flush=True)
            await sample.keep_alive(store, users, rng)
    # Polled, not waited for in a thread: asyncio.run's end after Ctrl-C waits for its threads,
    # so a thread blocked in wait() would keep the demo from reaching the `finally` that stops
    # its service.
    while service.poll() is None:  # noqa: ASYNC110 - a Popen's end is not awaitable
        await asyncio.sleep(0.2)


def token(user_id: str, places: str, hours: float) -> int:
    """Prints an end user's JWT signed with the configured secret, for trying the service."""
    from gql_presence.policy.auth import development_token  # noqa: PLC0415

    settings = settings_or_exit()
    if settings is None:
        return 2
    allowed = [place.strip() for place in places.split(",") if place.strip()]
    try:
        print(development_token(settings, user_id, allowed, round(hours * 3600)))
    except ValueError as error:
        print(f"gql-presence: {error}", file=sys.stderr)
        return 2
    return 0


def export_schema(path: Path, check: bool) -> int:
    sdl = schema_sdl()
    if check:
        current = path.read_text(encoding="utf-8") if path.exists() else ""
        if current != sdl:
            print(
                f"gql-presence: {path} differs from the schema in the code; run "
                f"`gql-presence export-schema` to update it.",
                file=sys.stderr,
            )
            return 1
        print(f"gql-presence: {path} matches the schema in the code")
        return 0
    path.write_text(sdl, encoding="utf-8")
    return 0


def _worker_count(raw: str) -> int:
    if not raw.isdigit() or int(raw) < 1:
        raise argparse.ArgumentTypeError(f"{raw!r}: give a whole number of 1 or more")
    return int(raw)


def _hours(raw: str) -> float:
    try:
        hours = float(raw)
    except ValueError:
        hours = 0
    if not 0 < hours <= 24 * 30:
        raise argparse.ArgumentTypeError(f"{raw!r}: give a number of hours, at most 720")
    return hours


def _user_count(raw: str) -> int:
    if not raw.isdigit() or not 10 <= int(raw) <= 1_000_000:
        raise argparse.ArgumentTypeError(f"{raw!r}: give a whole number from 10 to 1,000,000")
    return int(raw)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="gql-presence", description=__doc__)
    parser.add_argument(
        "--version", action="version", version=f"%(prog)s {metadata.version('gql-presence')}"
    )
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("serve", help="serve GraphQL (and GraphiQL) at /graphql")
    run.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    run.add_argument("--port", type=int, default=8080, help="port to listen on (default 8080)")
    run.add_argument(
        "--workers",
        type=_worker_count,
        default=None,
        help="worker processes sharing the port (default PRESENCE_WORKERS, or one per core)",
    )
    # Set by the parent of several workers for each of them: bind with SO_REUSEPORT.
    run.add_argument("--reuse-port", action="store_true", help=argparse.SUPPRESS)
    commands.add_parser(
        "check", help="validate the settings and reach Redis (for deploy pipelines)"
    )
    fill = commands.add_parser(
        "demo",
        help="serve sample users, friends and five weeks of activity, on a data folder of "
        "their own",
    )
    fill.add_argument(
        "--users",
        type=_user_count,
        default=2000,
        help="how many users, 10 to 1,000,000 (default 2000)",
    )
    fill.add_argument("--seed", type=int, default=7, help="random seed, for the same sample again")
    fill.add_argument("--keep-alive", action="store_true", help="then keep users coming and going")
    fill.add_argument(
        "--port", type=int, default=8090, help="port to serve the demo on (default 8090)"
    )
    sign = commands.add_parser(
        "token",
        help="print an end user's JWT signed with PRESENCE_JWT_SECRET, for trying the service",
    )
    sign.add_argument("--user", required=True, help="the user id (the token's `sub`)")
    sign.add_argument(
        "--places",
        default="",
        help="places the user may join, comma-separated ids or prefixes ending in * (doc:*)",
    )
    sign.add_argument(
        "--hours", type=_hours, default=12.0, help="how long it is valid (default 12)"
    )
    export = commands.add_parser("export-schema", help="write the schema's SDL to a file")
    export.add_argument("path", nargs="?", type=Path, default=SCHEMA_FILE)
    export.add_argument("--check", action="store_true", help="fail if the file differs instead")
    args = parser.parse_args(argv)
    if args.command == "serve":
        return serve(args.host, args.port, args.workers, args.reuse_port)
    if args.command == "check":
        return check()
    if args.command == "demo":
        return demo(args.users, args.seed, args.keep_alive, args.port)
    if args.command == "token":
        return token(args.user, args.places, args.hours)
    return export_schema(args.path, args.check)
