"""Planned documents' variables and arguments coerced for the common shapes
(graphql/coercion.py) hold the values graphql-core's coercion gives, and leave every other
value, bad input included, to graphql-core."""

from __future__ import annotations

from typing import Any

import pytest
from graphql import FieldNode, GraphQLSchema, OperationDefinitionNode, parse
from graphql.execution.values import VariableValues, get_argument_values, get_variable_values

from gql_presence.graphql.coercion import Arguments, Variables
from gql_presence.graphql.schema import build_schema

SCHEMA: GraphQLSchema = build_schema()._schema

TOUCH = "mutation($u: ID!) { touch(userId: $u) { online } }"
TOUCH_ALL = (
    "mutation($u: ID!, $s: ID, $d: String, $i: Boolean!) "
    "{ touch(userId: $u, sessionId: $s, device: $d, idle: $i) { online } }"
)
TOUCH_LITERALS = 'mutation { touch(userId: "ann", sessionId: null, idle: true) { online } }'
PRESENCES = "query($u: [ID!]!) { presences(userIds: $u) { online } }"
FRIENDS = "query($u: ID!, $n: Int!, $a: String) { onlineFriends(userId: $u, first: $n, after: $a) { totalCount } }"
FRIENDS_DEFAULTS = "query($u: ID!) { onlineFriends(userId: $u) { totalCount } }"


def parts(document: str) -> tuple[OperationDefinitionNode, FieldNode]:
    operation = parse(document).definitions[0]
    assert isinstance(operation, OperationDefinitionNode)
    field = operation.selection_set.selections[0]
    assert isinstance(field, FieldNode)
    return operation, field


def by_graphql_core(document: str, inputs: dict[str, Any]) -> VariableValues:
    operation, _ = parts(document)
    values = get_variable_values(SCHEMA, operation.variable_definitions or (), inputs)
    assert isinstance(values, VariableValues), values
    return values


def field_definition(operation: OperationDefinitionNode, field: FieldNode) -> Any:
    root = SCHEMA.get_root_type(operation.operation)
    assert root is not None
    return root.fields[field.name.value]


@pytest.mark.parametrize(
    ("document", "inputs"),
    [
        (TOUCH, {"u": "ann"}),
        (TOUCH, {"u": "ann", "unused": [1, 2]}),
        (TOUCH_ALL, {"u": "ann", "s": "tab", "d": "web", "i": True}),
        (TOUCH_ALL, {"u": "ann", "s": None, "i": False}),
        (TOUCH_ALL, {"u": "ann", "i": False}),
        (TOUCH_LITERALS, {}),
        (PRESENCES, {"u": ["ann", "bob"]}),
        (PRESENCES, {"u": []}),
        (FRIENDS, {"u": "ann", "n": 20}),
        (FRIENDS, {"u": "ann", "n": 0, "a": "cursor"}),
        (FRIENDS, {"u": "ann", "n": -(2**31), "a": None}),
        (FRIENDS_DEFAULTS, {"u": "ann"}),
    ],
)
def test_common_shapes_coerce_as_graphql_core_does(document: str, inputs: dict[str, Any]) -> None:
    operation, field = parts(document)
    expected = by_graphql_core(document, inputs)
    variables = Variables(SCHEMA, tuple(operation.variable_definitions or ())).coerce(inputs)
    assert variables is not None
    assert variables.coerced == expected.coerced
    assert {k: (s.signature.name, s.value) for k, s in variables.sources.items()} == {
        k: (s.signature.name, s.value) for k, s in expected.sources.items()
    }
    definition = field_definition(operation, field)
    arguments = Arguments(definition, field)
    assert arguments.covered
    assert arguments.coerce(variables) == get_argument_values(definition, field, expected)


@pytest.mark.parametrize(
    ("document", "inputs"),
    [
        (TOUCH, {}),  # missing
        (TOUCH, {"u": None}),  # null for ID!
        (TOUCH, {"u": 5}),  # an ID from an integer: graphql-core makes it "5"
        (TOUCH, {"u": ["ann"]}),
        (TOUCH_ALL, {"u": "ann", "i": "yes"}),
        (TOUCH_ALL, {"u": "ann", "i": 1}),
        (TOUCH_ALL, {"u": "ann", "d": 3, "i": True}),
        (PRESENCES, {"u": "ann"}),  # a list of one, by graphql-core
        (PRESENCES, {"u": ["ann", 2]}),
        (PRESENCES, {"u": ["ann", None]}),
        (PRESENCES, {"u": ("ann",)}),
        (FRIENDS, {"u": "ann", "n": 2**31}),
        (FRIENDS, {"u": "ann", "n": True}),
        (FRIENDS, {"u": "ann", "n": 1.0}),
        ('query($u: ID! = "ann") { presence(userId: $u) { online } }', {}),
    ],
)
def test_other_values_are_left_to_graphql_core(document: str, inputs: dict[str, Any]) -> None:
    operation, _ = parts(document)
    assert Variables(SCHEMA, tuple(operation.variable_definitions or ())).coerce(inputs) is None


def test_an_argument_whose_variable_is_null_where_required_is_left_to_graphql_core() -> None:
    # A nullable variable in a non-null argument's position with a default, as validation
    # allows: a null value is an error graphql-core words.
    document = 'query($n: Int) { onlineFriends(userId: "ann", first: $n) { totalCount } }'
    operation, field = parts(document)
    definition = field_definition(operation, field)
    arguments = Arguments(definition, field)
    assert arguments.covered
    variables = by_graphql_core(document, {"n": None})
    assert arguments.coerce(variables) is None
    absent = by_graphql_core(document, {})
    assert arguments.coerce(absent) == get_argument_values(definition, field, absent)
