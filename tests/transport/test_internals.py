"""What the package uses of Strawberry's and graphql-core's private APIs is still there: an
upgrade that removes any of it fails here, naming it, instead of somewhere deep in a request."""

from __future__ import annotations

from pathlib import Path

import strawberry
from graphql import parse

from gql_presence.graphql import internals
from gql_presence.graphql.schema import build_schema


def test_every_private_name_the_package_imports_is_still_there() -> None:
    assert internals.missing() == [], (
        "graphql/internals.py uses what the installed Strawberry or graphql-core no longer "
        f"has: {internals.missing()}; adapt that module, then the version bounds in "
        "pyproject.toml"
    )


def test_the_private_attributes_of_schemas_and_infos_are_still_there() -> None:
    schema = build_schema(plans=None)
    core = internals.core_schema(schema)
    assert internals.strawberry_schema_of(core) is schema, (
        "graphql-core's schema no longer points back to Strawberry's (_strawberry_schema)"
    )
    field = core.query_type.fields["presence"] if core.query_type else None
    assert field is not None
    assert internals.is_strawberry_resolver(field.resolve), (
        "Strawberry's resolver wrapper no longer says it is not the default (_is_default)"
    )
    user_id = core.get_type("UserPresence")
    assert user_id is not None
    assert internals.is_default_resolver(user_id.fields["online"].resolve)  # type: ignore[attr-defined]
    assert not internals.handles_exceptions(schema.schema_converter), (
        "Strawberry's converter no longer lists its exception handlers (_exception_handler_specs)"
    )


async def test_a_resolver_reaches_graphql_cores_info_and_the_operation_name_given() -> None:
    seen: list[object] = []

    @strawberry.type
    class Probe:
        @strawberry.field
        def name(self, info: strawberry.Info) -> str:
            raw = internals.raw_info(info)
            seen.append(raw.operation.name.value if raw.operation.name else None)
            return "probe"

    schema = strawberry.Schema(query=Probe)
    result = await schema.execute("query Asked { name }", operation_name="Asked")
    assert result.errors is None
    assert seen == ["Asked"], "Strawberry's info no longer holds graphql-core's (_raw_info)"


def test_an_events_executor_gets_a_memo_of_its_own() -> None:
    schema = build_schema(plans=None)
    document = parse('subscription { presenceChanged(userIds: ["a"]) { userId } }')
    executor = internals.EventExecutionContext.build(internals.core_schema(schema), document)
    assert not isinstance(executor, list)
    per_event = executor.build_per_event_executor(None)
    assert per_event._relevant_sub_fields == {}, (
        "graphql-core's executor no longer keeps its sub-field memo in _relevant_sub_fields"
    )


def test_every_body_copied_from_a_library_names_the_version_installed() -> None:
    # A copy of Strawberry's, graphql-core's or aiohttp's code (COPIED) follows one version
    # of it: an upgrade fails here, naming each copy to compare with the new upstream code
    # (then the version it names).
    assert internals.copied_from_other_versions() == [], (
        "graphql/internals.py's COPIED lists bodies copied from other versions than those "
        f"installed: {internals.copied_from_other_versions()}"
    )
    copied = {copy.ours.split(":")[0] for copy in internals.COPIED}
    assert {"gql_presence/http/view.py", "gql_presence/http/ws.py"} <= copied
    assert "gql_presence/http/sockets.py" in copied


def test_a_copy_of_another_version_is_named() -> None:
    older = internals.Copied("ours.py: run", "theirs.run", "aiohttp", "0.0.1")
    [stale] = internals.copied_from_other_versions((older,))
    assert stale.startswith("ours.py: run copies theirs.run of aiohttp 0.0.1;")


def test_no_module_but_internals_reads_strawberrys_private_schema() -> None:
    package = Path(internals.__file__).parents[1]
    readers = [
        path.relative_to(package).as_posix()
        for path in package.rglob("*.py")
        if "schema._schema" in path.read_text() and path.name != "internals.py"
    ]
    assert readers == []
