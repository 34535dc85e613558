"""examples/codegen run as a frontend runs it: GraphQL Code Generator from the npm registry
types the example's documents from the committed schema.graphql and writes the manifest that
PRESENCE_TRUSTED_DOCUMENTS takes."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from pathlib import Path

import pytest
from graphql import OperationDefinitionNode, build_schema, parse, validate

ROOT = Path(__file__).parents[2]
EXAMPLE = ROOT / "examples" / "codegen"
# Each operation of examples/codegen/src/documents.ts, and the type generated for its result.
OPERATIONS = {
    "OnlineFriends": "OnlineFriendsQuery",
    "WeeklyStats": "WeeklyStatsQuery",
    "Touch": "TouchMutation",
    "PresenceChanged": "PresenceChangedSubscription",
}


def npm() -> str:
    found = shutil.which("npm")
    if found is None:
        pytest.skip("needs npm (Node.js) to install GraphQL Code Generator: apt-get install npm")
    return found


@pytest.mark.slow
@pytest.mark.timeout(600)  # the first npm install downloads a few hundred packages
def test_codegen_types_the_documents_and_writes_the_trusted_documents_manifest(
    tmp_path: Path,
) -> None:
    command = npm()
    # The example's layout kept: its config reads ../../schema.graphql.
    example = tmp_path / "examples" / "codegen"
    shutil.copytree(EXAMPLE, example, ignore=shutil.ignore_patterns("node_modules", "gql"))
    shutil.copy(ROOT / "schema.graphql", tmp_path / "schema.graphql")

    def run(*arguments: str) -> None:
        done = subprocess.run(
            [command, *arguments], cwd=example, capture_output=True, text=True, check=False
        )
        assert done.returncode == 0, done.stdout + done.stderr

    run("install", "--no-audit", "--no-fund")
    run("run", "codegen")
    run("run", "typecheck")  # the example's code compiles against the generated types

    generated = (example / "src" / "gql" / "graphql.ts").read_text()
    for result_type in OPERATIONS.values():
        assert f"export type {result_type} = " in generated
        assert f"export type {result_type}Variables = " in generated
    # DateTime and Date are typed as the ISO 8601 strings they arrive as (else `any`).
    assert "lastSeen: string | null" in generated
    assert "date: string" in generated
    assert "endDate?: string | null" in generated
    manifest = json.loads((example / "src" / "gql" / "persisted-documents.json").read_text())
    schema = build_schema((ROOT / "schema.graphql").read_text())
    names: set[str] = set()
    for sha256, document in manifest.items():
        assert sha256 == hashlib.sha256(document.encode()).hexdigest()
        parsed = parse(document)
        assert validate(schema, parsed) == []
        names.update(
            d.name.value
            for d in parsed.definitions
            if isinstance(d, OperationDefinitionNode) and d.name
        )
    assert names == set(OPERATIONS)
