"""The gql-presence command: serve the API, or export its schema."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from aiohttp import web

from gql_presence.logs import configure_logging
from gql_presence.redis_server import RedisStartError
from gql_presence.settings import Settings, SettingsError

SCHEMA_FILE = Path("schema.graphql")


def schema_sdl() -> str:
    from gql_presence.schema import build_schema  # noqa: PLC0415 - keeps `--help` fast

    return build_schema().as_str() + "\n"


def serve(host: str, port: int) -> int:
    try:
        settings = Settings.from_env()
    except SettingsError as error:
        print(f"gql-presence: {error}", file=sys.stderr)
        return 2
    from gql_presence.app import create_app  # noqa: PLC0415

    configure_logging(settings.log_format)
    try:
        web.run_app(
            create_app(settings),
            host=host,
            port=port,
            access_log=None,  # each request gets one line of our own, with its operation
            shutdown_timeout=10,  # how long requests in flight may take to finish on SIGTERM
            print=lambda _: print(
                f"gql-presence: GraphQL and GraphiQL at http://{host}:{port}/graphql", flush=True
            ),
        )
    except RedisStartError as error:
        print(f"gql-presence: {error}", file=sys.stderr)
        return 1
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
        return 0
    path.write_text(sdl, encoding="utf-8")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="gql-presence", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("serve", help="serve GraphQL (and GraphiQL) at /graphql")
    run.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    run.add_argument("--port", type=int, default=8080, help="port to listen on (default 8080)")
    export = commands.add_parser("export-schema", help="write the schema's SDL to a file")
    export.add_argument("path", nargs="?", type=Path, default=SCHEMA_FILE)
    export.add_argument("--check", action="store_true", help="fail if the file differs instead")
    args = parser.parse_args(argv)
    if args.command == "serve":
        return serve(args.host, args.port)
    return export_schema(args.path, args.check)
