"""The variables and arguments of a planned document coerced for the shapes clients send most
(ids, strings, integers and booleans, lists of them, absent arguments' defaults), with what
could be worked out once per document worked out when it is planned. Each gives the same
values as graphql-core's `get_variable_values` and `get_argument_values` (3.3), or None for
anything else, which those then coerce, errors included."""

from __future__ import annotations

from collections.abc import Callable
from enum import Enum
from typing import Any

from graphql import (
    BooleanValueNode,
    EnumValueNode,
    FieldNode,
    FloatValueNode,
    GraphQLBoolean,
    GraphQLError,
    GraphQLField,
    GraphQLID,
    GraphQLInputType,
    GraphQLInt,
    GraphQLList,
    GraphQLNonNull,
    GraphQLSchema,
    GraphQLString,
    IntValueNode,
    NullValueNode,
    StringValueNode,
    Undefined,
    VariableDefinitionNode,
    VariableNode,
    is_non_null_type,
    is_required_argument,
)
from graphql.execution.get_variable_signature import (
    GraphQLVariableSignature,
    get_variable_signature,
)
from graphql.execution.values import (
    VariableValues,
    VariableValueSource,
    maybe_use_default_value,
)
from graphql.type.scalars import GRAPHQL_MAX_INT, GRAPHQL_MIN_INT
from graphql.utilities import coerce_input_literal

# Values each of these scalars' parse_value gives back unchanged (exact types: a bool is an
# int, and Int takes only 32 bits).
_SCALARS: dict[object, Callable[[Any], bool]] = {
    GraphQLID: lambda value: type(value) is str,
    GraphQLString: lambda value: type(value) is str,
    GraphQLBoolean: lambda value: type(value) is bool,
    GraphQLInt: lambda value: type(value) is int and GRAPHQL_MIN_INT <= value <= GRAPHQL_MAX_INT,
}

# Literals whose coerced value is one immutable value, shared by every run.
_CONSTANT_LITERALS = (
    StringValueNode,
    IntValueNode,
    FloatValueNode,
    BooleanValueNode,
    EnumValueNode,
    NullValueNode,
)


def _unchanged(type_: GraphQLInputType) -> Callable[[Any], bool] | None:
    """A check that a value of `type_` coerces to itself (a list: to an equal list); None
    for types whose values are left to graphql-core."""
    nullable = not isinstance(type_, GraphQLNonNull)
    inner = type_ if nullable else type_.of_type  # type: ignore[union-attr]
    if isinstance(inner, GraphQLList):
        if not isinstance(inner.of_type, GraphQLNonNull):
            return None
        item = _SCALARS.get(inner.of_type.of_type)
        if item is None:
            return None
        return lambda value: (
            (value is None and nullable) or (type(value) is list and all(item(v) for v in value))
        )
    scalar = _SCALARS.get(inner)
    if scalar is None:
        return None
    return (lambda value: value is None or scalar(value)) if nullable else scalar


class Variables:
    """An operation's variables, coerced by the checks made for their types once."""

    __slots__ = ("_specs",)

    def __init__(self, schema: GraphQLSchema, definitions: tuple[VariableDefinitionNode, ...]):
        specs: list[tuple[str, GraphQLVariableSignature, Callable[[Any], bool], bool]] = []
        self._specs: tuple[Any, ...] | None = None
        for node in definitions:
            signature = get_variable_signature(schema, node)
            if isinstance(signature, GraphQLError) or node.default_value is not None:
                return
            unchanged = _unchanged(signature.type)
            if unchanged is None:
                return
            specs.append((signature.name, signature, unchanged, is_non_null_type(signature.type)))
        self._specs = tuple(specs)

    def coerce(self, inputs: dict[str, Any]) -> VariableValues | None:
        if self._specs is None:
            return None
        sources: dict[str, VariableValueSource] = {}
        coerced: dict[str, Any] = {}
        for name, signature, unchanged, required in self._specs:
            value = inputs.get(name, Undefined)
            if value is Undefined:
                if required:
                    return None  # an error, which graphql-core words
                sources[name] = VariableValueSource(signature)
                continue
            if not unchanged(value):
                return None
            sources[name] = VariableValueSource(signature, value)
            coerced[name] = list(value) if type(value) is list else value
        return VariableValues(sources, coerced)


class Arguments:
    """One field node's arguments, each a variable, a constant literal or absent, their
    defaults and literals coerced once."""

    __slots__ = ("_steps",)

    def __init__(self, definition: GraphQLField, node: FieldNode) -> None:
        given = {argument.name.value: argument for argument in node.arguments or ()}
        # (its name in the resolver's arguments, its variable, its value when absent or
        # constant, whether an absent variable is an error, whether null is)
        steps: list[tuple[str, str | None, Any, bool, bool]] = []
        self._steps: tuple[tuple[str, str | None, Any, bool, bool], ...] | None = None
        for name, argument in definition.args.items():
            out_name = argument.out_name or name
            value_node = given[name].value if name in given else None
            required = is_required_argument(argument)
            non_null = is_non_null_type(argument.type)
            if value_node is None or isinstance(value_node, VariableNode):
                if required and value_node is None:
                    return  # an error, which graphql-core words
                default = Undefined
                if not required:
                    defaults: dict[str, Any] = {}
                    try:
                        maybe_use_default_value(defaults, out_name, argument, _refuse)
                    except GraphQLError:
                        return
                    default = defaults.get(out_name, Undefined)
                    if not _immutable(default):
                        return
                variable = None if value_node is None else value_node.name.value
                steps.append((out_name, variable, default, required, non_null))
            elif isinstance(value_node, _CONSTANT_LITERALS):
                value = coerce_input_literal(value_node, argument.type)
                if value is Undefined or not _immutable(value):
                    return
                steps.append((out_name, None, value, required, non_null))
            else:
                return
        self._steps = tuple(steps)

    @property
    def covered(self) -> bool:
        return self._steps is not None

    def coerce(self, variables: VariableValues) -> dict[str, Any] | None:
        if self._steps is None:
            return None
        args: dict[str, Any] = {}
        coerced = variables.coerced
        for out_name, variable, default, required, non_null in self._steps:
            if variable is not None and variable in coerced:
                value = coerced[variable]
                if value is None and non_null:
                    return None
                args[out_name] = value
            elif variable is not None and required:
                return None
            elif default is not Undefined:
                args[out_name] = default
        return args


def _refuse(error: GraphQLError, path: list[str | int]) -> None:
    raise error


def _immutable(value: Any) -> bool:
    return (
        value is Undefined
        or value is None
        or type(value) in (str, int, float, bool)
        or (isinstance(value, Enum))
    )
