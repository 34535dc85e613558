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
    ExecutionResult,
    GraphQLInputObjectType,
    GraphQLObjectType,
    build_schema,
    find_breaking_changes,
    parse,
)

from gql_presence.cli import main, schema_sdl
from gql_presence.graphql import schema as presence_schema
from gql_presence.graphql.internals import EventExecutionContext, core_schema
from gql_presence.graphql.types import PresenceEvent, PresenceEventKind, PresenceStatus

ROOT = Path(__file__).parents[2]
# The contract the schema was written to, round by round: the project's own copy of the API's
# promised names and types (contract/README.md).
CONTRACT = Path(__file__).parent / "contract"


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
    # Later rounds add arguments to fields of earlier ones (touch, presenceSession,
    # onlineUsers, presenceChanged, placeChanged), written as comments in their files: each
    # replaces the field's earlier signature.
    for later in ("presence-3.graphql", "feed-4.graphql", "analytics-4.graphql"):
        added_by = (CONTRACT / later).read_text(encoding="utf-8")
        for signature, name in re.findall(r"^#   ((\w+)\(.*\): \S+)$", added_by, re.MULTILINE):
            earlier = re.search(rf"^  {name}\(.*$", text, re.MULTILINE)
            assert earlier is not None, name
            text = text.replace(earlier[0], f"  {signature}")
        text += added_by
    contract = build_schema(text)
    ours = build_schema(schema_sdl())
    assert find_breaking_changes(contract, ours) == []


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
