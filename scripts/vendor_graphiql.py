"""Vendors GraphiQL's scripts and styles into gql_presence/http/graphiql/vendor/.

The versions are pinned in scripts/graphiql/package.json and, with every transitive package
and its integrity hash, in scripts/graphiql/package-lock.json. This script installs exactly
that tree with `npm ci` in a temporary folder, copies the prebuilt browser bundles the packages
publish, and writes LICENSES.txt with the licence of every package in the tree (the bundles
contain a subset of them). Run it after changing a version, and commit what it writes:

    python scripts/vendor_graphiql.py

`pip install` never needs npm: the copied files are part of the repository.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PINNED = ROOT / "scripts" / "graphiql"
VENDOR = ROOT / "gql_presence" / "http" / "graphiql" / "vendor"

# (package, file inside it) -> the name it is served under.
BUNDLES = {
    ("react", "umd/react.production.min.js"): "react.production.min.js",
    ("react-dom", "umd/react-dom.production.min.js"): "react-dom.production.min.js",
    ("graphiql", "graphiql.min.js"): "graphiql.min.js",
    ("graphiql", "graphiql.min.css"): "graphiql.min.css",
    ("@graphiql/plugin-explorer", "dist/index.umd.js"): "plugin-explorer.umd.js",
    ("@graphiql/plugin-explorer", "dist/style.css"): "plugin-explorer.css",
}
LICENCE_NAMES = ("LICENSE", "LICENSE.md", "LICENSE.txt", "LICENCE", "license", "license.md")


def main() -> None:
    npm = shutil.which("npm")
    if npm is None:
        sys.exit("npm is needed to vendor GraphiQL (https://nodejs.org); pip install is not.")
    with tempfile.TemporaryDirectory() as work:
        tree = Path(work)
        for name in ("package.json", "package-lock.json"):
            shutil.copy(PINNED / name, tree / name)
        subprocess.run(
            [npm, "ci", "--ignore-scripts", "--no-audit", "--no-fund"], cwd=tree, check=True
        )
        if VENDOR.exists():
            shutil.rmtree(VENDOR)
        VENDOR.mkdir(parents=True)
        for (package, inside), served_as in BUNDLES.items():
            shutil.copy(tree / "node_modules" / package / inside, VENDOR / served_as)
        lock = json.loads((tree / "package-lock.json").read_text())
        (VENDOR / "LICENSES.txt").write_text(licences(tree, lock["packages"]))
    for path in sorted(VENDOR.iterdir()):
        print(f"{path.stat().st_size:>9,}  {path.relative_to(ROOT)}")


def licences(tree: Path, packages: dict[str, dict[str, str]]) -> str:
    shipped = sorted({package for package, _ in BUNDLES})
    parts = [
        "Licences of the GraphiQL page's scripts and styles, written by "
        "scripts/vendor_graphiql.py.\n"
        f"Served from this folder: {', '.join(shipped)} (versions below). Each bundle "
        "includes code of packages it depends on; every package of the pinned tree is "
        "listed, with its licence text where the package carries one.\n"
    ]
    for location, entry in sorted(packages.items()):
        if not location:
            continue  # the root: package.json itself
        name = location.rpartition("node_modules/")[2]
        parts.append(f"\n{'=' * 78}\n{name} {entry['version']} - {entry.get('license', '?')}\n")
        texts = [tree / location / n for n in LICENCE_NAMES if (tree / location / n).is_file()]
        if texts:
            parts.append("\n" + texts[0].read_text(encoding="utf-8").strip() + "\n")
        else:
            parts.append("(the package carries no licence file; the licence named above applies)\n")
    return "".join(parts)


if __name__ == "__main__":
    main()
