"""clients/js, the browser client, built and tested as its CI would: `npm ci` from its lockfile,
`npm run build` (GraphQL Code Generator types its operations from the committed schema.graphql,
then tsc writes dist/), `tsc --noEmit`, and Node's test runner on its pure logic (merging reads
and events, throttling, backoff). Its real-browser tests are in tests/test_js_client_browser.py."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.conftest import JS_CLIENT

pytestmark = pytest.mark.slow  # npm and tsc


def run(*command: str, cwd: Path) -> str:
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


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
