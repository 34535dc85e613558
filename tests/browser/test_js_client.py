"""clients/js, the browser client, built and tested as its CI would: `npm ci` from its lockfile,
`npm run build` (GraphQL Code Generator types its operations from the committed schema.graphql,
then tsc writes dist/), `tsc --noEmit`, and Node's test runner on its pure logic (merging reads
and events, throttling, backoff). Its real-browser tests are in tests/browser/test_js_client_browser.py."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from tests.conftest import JS_CLIENT


def run(*command: str, cwd: Path) -> str:
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


@pytest.mark.slow  # npm and tsc
@pytest.mark.timeout(600)  # the first npm ci downloads a few hundred packages
def test_the_client_builds_typechecks_and_passes_its_node_tests(built_js_client: Path) -> None:
    assert (built_js_client / "dist" / "index.d.ts").exists()
    assert (built_js_client / "dist" / "react.d.ts").exists()
    run("npx", "--no-install", "tsc", "--noEmit", cwd=JS_CLIENT)
    report = run("node", "--test", "test/", cwd=JS_CLIENT)
    assert "# fail 0" in report, report
    assert "# pass 0" not in report, report


def test_the_client_depends_on_graphql_ws_alone_at_run_time() -> None:
    package = json.loads((JS_CLIENT / "package.json").read_text())
    assert set(package["dependencies"]) == {"graphql-ws"}
    assert set(package["peerDependencies"]) == {"react"}
    lock = json.loads((JS_CLIENT / "package-lock.json").read_text())
    installed = {name: p for name, p in lock["packages"].items() if name}
    # Every package pinned by version and checksum; none from anywhere but the registry (a
    # lockfile may leave the registry's own URLs out).
    assert installed
    assert all(p.get("version") and p.get("integrity") for p in installed.values())
    resolved = [p["resolved"] for p in installed.values() if "resolved" in p]
    assert all(url.startswith("https://registry.npmjs.org/") for url in resolved), resolved


def vendoring() -> Any:
    """scripts/vendor_client.py as a module (scripts/ is not a package)."""
    path = Path(__file__).parents[2] / "scripts" / "vendor_client.py"
    spec = importlib.util.spec_from_file_location("vendor_client", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_copy_the_service_serves_is_the_client_as_built(built_js_client: Path) -> None:
    script = vendoring()
    expected = script.vendored_files(built_js_client)
    vendor: Path = script.VENDOR
    served = {str(p.relative_to(vendor)) for p in vendor.rglob("*") if p.is_file()}
    assert served == set(expected), "run: python scripts/vendor_client.py"
    for name, built in expected.items():
        assert (vendor / name).read_bytes() == built.read_bytes(), (
            f"{name} differs from the build: run python scripts/vendor_client.py"
        )


ROOT = Path(__file__).parents[2]


def tracked(folder: str) -> list[str] | None:
    """The files git tracks under `folder` (what a clone has); None outside a git checkout."""
    git = shutil.which("git")
    if git is None or not (ROOT / ".git").exists():
        return None
    return run(git, "ls-files", "--cached", "--", folder, cwd=ROOT).split()


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_committed_build_is_the_client_as_built(built_js_client: Path) -> None:
    # npm installs the folder as it is committed (no build step runs): dist/ must be current.
    files = tracked("clients/js/dist")
    if files is None:
        pytest.skip("needs a git checkout")
    built = {str(p.relative_to(ROOT)) for p in (built_js_client / "dist").rglob("*") if p.is_file()}
    assert set(files) == built, "run: python scripts/vendor_client.py, and commit clients/js/dist"
    changed = run("git", "diff", "--name-only", "--", "clients/js/dist", cwd=ROOT)
    assert changed == "", f"dist/ differs from a fresh build: commit it\n{changed}"


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_npm_install_of_the_folder_works_from_a_fresh_clone_as_the_readme_says(
    tmp_path: Path,
) -> None:
    files = tracked("clients/js")
    if files is None:
        pytest.skip("needs a git checkout")
    npm = shutil.which("npm")
    if npm is None or shutil.which("node") is None:
        pytest.skip("needs Node.js 20+ and npm: apt-get install npm")
    # The clone's files of the client, as committed: nothing built or installed beside them.
    clone = tmp_path / "gql-presence"
    for name in files:
        (clone / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(ROOT / name, clone / name)
    readme = (ROOT / "README.md").read_text()
    command = re.search(r"`(npm install [^`]*path/to/gql-presence/clients/js)`", readme)
    assert command is not None, "README.md names no npm install of clients/js"
    # An app of its own, beside the clone.
    app = tmp_path / "app"
    app.mkdir()
    (app / "package.json").write_text('{"name": "app", "private": true, "type": "module"}')
    words = command[1].replace("path/to/gql-presence", str(clone)).split()
    run(npm, *words[1:], "--no-audit", "--no-fund", cwd=app)
    uses = """
      import { createPresenceClient } from "gql-presence-client";
      import { createClient } from "graphql-ws";  // its dependency, installed beside it
      console.log(typeof createPresenceClient, typeof createClient);
    """
    assert run("node", "--input-type=module", "-e", uses, cwd=app).split() == [
        "function",
        "function",
    ]
    # Its types come with it.
    assert (app / "node_modules" / "gql-presence-client" / "dist" / "index.d.ts").is_file()


async def test_the_service_serves_the_client_at_client(api: TestClient[Any, Any]) -> None:
    for path in ("/client/index.js", "/client/graphql-ws/client.js"):
        response = await api.get(path)
        assert response.status == 200, path
        assert response.content_type in {"text/javascript", "application/javascript"}
    places = await (await api.get("/places")).text()
    assert '"gql-presence-client": "/client/index.js"' in places


async def test_the_clients_files_may_be_loaded_by_any_page_and_graphql_keeps_its_origins(
    api: TestClient[Any, Any],
) -> None:
    # The service runs with no PRESENCE_CORS_ORIGINS here: a page elsewhere imports the client.
    elsewhere = {"Origin": "http://app.example.test"}
    module = await api.get("/client/index.js", headers=elsewhere)
    assert module.status == 200
    assert module.headers["Access-Control-Allow-Origin"] == "*"
    asked = await api.post("/graphql", json={"query": "{ __typename }"}, headers=elsewhere)
    assert asked.status == 200
    assert "Access-Control-Allow-Origin" not in asked.headers
    preflight = {**elsewhere, "Access-Control-Request-Method": "POST"}
    assert (await api.options("/graphql", headers=preflight)).status == 403


async def test_every_page_has_its_icon(api: TestClient[Any, Any]) -> None:
    icon = await api.get("/favicon.ico")
    assert icon.status == 200
    assert icon.content_type == "image/vnd.microsoft.icon"
    body = await icon.read()
    assert body[:4] == b"\x00\x00\x01\x00"  # an icon file
    assert body[22:30] == b"\x89PNG\r\n\x1a\n"  # of one PNG image


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_schema_change_that_breaks_the_client_fails_its_build(
    built_js_client: Path, tmp_path: Path
) -> None:
    # The client's layout kept (its codegen reads ../../schema.graphql), its packages shared.
    client = tmp_path / "clients" / "js"
    shutil.copytree(
        built_js_client, client, ignore=shutil.ignore_patterns("node_modules", "dist", "gql")
    )
    (client / "node_modules").symlink_to(built_js_client / "node_modules")
    schema = (Path(__file__).parents[2] / "schema.graphql").read_text()
    # A field the client reads, renamed: every document that asks for it is invalid.
    broken = schema.replace("  status: PresenceStatus!\n", "  presenceStatus: PresenceStatus!\n")
    assert broken != schema
    (tmp_path / "schema.graphql").write_text(broken)
    npm = shutil.which("npm")
    assert npm is not None  # built_js_client needed it
    done = subprocess.run(
        [npm, "run", "build"], cwd=client, capture_output=True, text=True, check=False
    )
    assert done.returncode != 0
    assert 'Cannot query field "status"' in done.stdout + done.stderr
