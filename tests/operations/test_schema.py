"""The committed schema.graphql (the service's contract) matches the code, the schema still
contains the contract it was first written to where that contract lies beside the repository,
and it documents itself."""

from __future__ import annotations

import re
import tracemalloc
from datetime import UTC, datetime
from pathlib import Path

import pytest
import strawberry
from graphql import (
    DocumentNode,
    ExecutionResult,
    GraphQLInputObjectType,
    GraphQLObjectType,
    TypeDefinitionNode,
    TypeExtensionNode,
    build_schema,
    find_breaking_changes,
    parse,
    print_ast,
)

from gql_presence.cli import main, schema_sdl
from gql_presence.graphql import schema as presence_schema
from gql_presence.graphql.internals import EventExecutionContext, core_schema
from gql_presence.graphql.types import PresenceEvent, PresenceEventKind, PresenceStatus

ROOT = Path(__file__).parents[2]
# The contract the schema was first written to, where a checkout keeps it beside the
# repository; a clone of the repository alone has no such folder.
CONTRACT = ROOT.parent / "shared" / "contract"


def test_committed_schema_matches_the_code() -> None:
    assert (ROOT / "schema.graphql").read_text(encoding="utf-8") == schema_sdl(), (
        "schema.graphql is stale: run `gql-presence export-schema`"
    )


def test_export_schema_check_fails_on_drift(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "schema.graphql"
    assert main(["export-schema", str(target)]) == 0
    assert main(["export-schema", "--check", str(target)]) == 0
    assert capsys.readouterr().out == f"gql-presence: {target} matches the schema in the code\n"
    target.write_text(target.read_text() + "\ntype Drift { x: Int }\n")
    assert main(["export-schema", "--check", str(target)]) == 1


@pytest.mark.skipif(
    not CONTRACT.is_dir(),
    reason=f"no contract folder at {CONTRACT}: schema.graphql is the contract of this clone",
)
def test_schema_keeps_the_contract() -> None:
    # The second round adds an argument to presenceChanged, which SDL cannot add by an
    # extension: realtime-2.graphql notes it at its top.
    realtime = (CONTRACT / "realtime.graphql").read_text(encoding="utf-8")
    first_round = "presenceChanged(userIds: [ID!] = null, friendsOf: ID = null)"
    assert first_round in realtime
    second_round = realtime.replace(
        first_round,
        "presenceChanged(userIds: [ID!] = null, friendsOf: ID = null, all: Boolean = false)",
    )
    text = (
        (CONTRACT / "schema.graphql").read_text(encoding="utf-8")
        + second_round
        + (CONTRACT / "realtime-2.graphql").read_text(encoding="utf-8")
        + (CONTRACT / "places-3.graphql").read_text(encoding="utf-8")
    )
    # The third round adds arguments to touch, presenceSession and onlineUsers, written as
    # comments at presence-3.graphql's end: each replaces the field's earlier signature.
    statuses = (CONTRACT / "presence-3.graphql").read_text(encoding="utf-8")
    for added in re.findall(r"^#   ((\w+)\(.*\): \S+)$", statuses, re.MULTILINE):
        signature, name = added
        earlier = re.search(rf"^  {name}\(.*$", text, re.MULTILINE)
        assert earlier is not None, name
        text = text.replace(earlier[0], f"  {signature}")
    contract = build_schema(text + statuses + _feed_built())
    ours = build_schema(schema_sdl())
    assert find_breaking_changes(contract, ours) == []


# What the service builds of feed-4.graphql so far: all of it.
_NOT_BUILT_TYPES: frozenset[str] = frozenset()
_NOT_BUILT_FIELDS: frozenset[str] = frozenset()


def _feed_built() -> str:
    document = parse((CONTRACT / "feed-4.graphql").read_text(encoding="utf-8"))
    kept = []
    for definition in document.definitions:
        if not isinstance(definition, TypeDefinitionNode | TypeExtensionNode):
            continue
        if definition.name.value in _NOT_BUILT_TYPES:
            continue
        given = {key: getattr(definition, key) for key in definition.keys}
        if given.get("fields") is not None:
            given["fields"] = tuple(
                f for f in given["fields"] if f.name.value not in _NOT_BUILT_FIELDS
            )
        kept.append(type(definition)(**given))
    return "\n" + print_ast(DocumentNode(definitions=tuple(kept)))


def test_every_type_field_and_argument_is_described() -> None:
    schema = build_schema(schema_sdl())
    missing = []
    for name, kind in schema.type_map.items():
        if name.startswith("__") or name in {"String", "Int", "Float", "Boolean", "ID"}:
            continue
        if not kind.description:
            missing.append(name)
        if isinstance(kind, GraphQLObjectType | GraphQLInputObjectType):
            for field_name, field in kind.fields.items():
                if not field.description:
                    missing.append(f"{name}.{field_name}")
                for arg_name, arg in getattr(field, "args", {}).items():
                    if not arg.description:
                        missing.append(f"{name}.{field_name}({arg_name})")
    assert missing == []


def test_subscription_events_leave_no_memory_behind() -> None:
    """Each event of a subscription runs on its own executor; nothing of it may stay with the
    subscription, however long it lasts."""
    schema = presence_schema.build_schema()
    document = parse('subscription { presenceChanged(userIds: ["a"]) { userId kind online } }')
    executor = EventExecutionContext.build(core_schema(schema), document)
    assert not isinstance(executor, list), executor  # a list of errors: the document is bad
    event = PresenceEvent(
        user_id=strawberry.ID("a"),
        kind=PresenceEventKind.ONLINE,
        at=datetime.now(UTC),
        session_id=None,
        online=True,
        status=PresenceStatus.ONLINE,
        custom_status=None,
        cursor="",
    )

    def deliver(count: int) -> None:
        for _ in range(count):
            result = executor.build_per_event_executor(event).execute_operation()
            assert result == ExecutionResult(
                {"presenceChanged": {"userId": "a", "kind": "ONLINE", "online": True}}, None
            )

    deliver(100)  # warm caches
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        deliver(2000)
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert grown < 100_000  # about 2.8 MB when each event left its memo behind
