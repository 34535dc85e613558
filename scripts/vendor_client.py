"""Copies the browser client (clients/js, built) into gql_presence/http/client/, which the service
serves at /client/: the places page uses it, and a page anywhere may import it from there.

It builds clients/js as its CI does (`npm ci` from its lockfile, `npm run build`, which writes
clients/js/dist/, committed so that `npm install` of the folder needs no build), then copies the
ES modules tsc wrote (not the React hooks, which need React) and graphql-ws's browser client
with its licence. Run it after changing clients/js or schema.graphql, and commit what it writes
(clients/js/dist/ too):

    python scripts/vendor_client.py

`pip install` never needs npm: the copied files are part of the repository, and
tests/browser/test_js_client.py fails while they differ from a fresh build.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CLIENT = ROOT / "clients" / "js"
VENDOR = ROOT / "gql_presence" / "http" / "client"


def vendored_files(client: Path) -> dict[str, Path]:
    """The name each file is served under (below /client/) → the built file it is a copy of."""
    dist = client / "dist"
    files = {
        str(path.relative_to(dist)): path
        for path in sorted(dist.rglob("*.js"))
        if path.name != "react.js"
    }
    graphql_ws = client / "node_modules" / "graphql-ws"
    entry = graphql_ws / "dist" / "client.js"
    files["graphql-ws/client.js"] = entry
    # client.js imports one shared chunk, whose name carries a hash.
    for chunk in re.findall(r"from '\./([\w.-]+\.js)'", entry.read_text()):
        files[f"graphql-ws/{chunk}"] = graphql_ws / "dist" / chunk
    files["graphql-ws/LICENSE.md"] = graphql_ws / "LICENSE.md"
    return files


def main() -> int:
    npm = shutil.which("npm")
    if npm is None:
        print("needs npm (Node.js): apt-get install npm", file=sys.stderr)
        return 1
    for step in (["ci", "--no-audit", "--no-fund"], ["run", "build"]):
        subprocess.run([npm, *step], cwd=CLIENT, check=True)
    shutil.rmtree(VENDOR, ignore_errors=True)
    for name, source in vendored_files(CLIENT).items():
        target = VENDOR / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)
    print(f"wrote {VENDOR.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
