"""Running a plan (planned.py): what a plan is made of (the fields of each object, how each
value is completed) and one run of it, graphql-core's executor (3.3) step for step for the
cases plans cover, with the fields collected beforehand."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any, Protocol

from graphql import (
    FieldNode,
    FragmentDefinitionNode,
    GraphQLError,
    GraphQLField,
    GraphQLLeafType,
    GraphQLObjectType,
    GraphQLSchema,
    OperationDefinitionNode,
    Undefined,
    located_error,
)
from graphql.execution.values import VariableValues, get_argument_values
from graphql.pyutils import Path, inspect, is_iterable
from strawberry.execution.is_awaitable import optimized_is_awaitable as is_awaitable
from strawberry.types import ExecutionResult
from strawberry.types.field import StrawberryField

from gql_presence.graphql.coercion import Arguments
from gql_presence.graphql.internals import (
    CollectedErrors,
    FieldDetails,
    ResolveInfo,
    gather_with_cancel,
    resolve_info,
)


class Plan(Protocol):
    """What a run reads of its plan (planned.Plan)."""

    schema: GraphQLSchema
    operation: OperationDefinitionNode
    fragment_definitions: dict[str, FragmentDefinitionNode]
    propagate_errors: bool


# Values of leaf fields that are neither awaitable, nor an error, nor null: all `complete`
# would do with them is coerce them, so they are coerced at once. (Exact types: an instance
# of a subclass could be awaitable.)
_PLAIN_LEAF_VALUES = frozenset({str, bool, int, float, datetime, date})


@dataclass(frozen=True, slots=True)
class NonNull:
    inner: Completion


@dataclass(frozen=True, slots=True)
class ListOf:
    item: Completion


@dataclass(frozen=True, slots=True)
class Leaf:
    type: GraphQLLeafType


@dataclass(frozen=True, slots=True)
class ObjectFields:
    type: GraphQLObjectType
    fields: tuple[PlannedField, ...]
    # When every field is `__typename` or a plain attribute (read with getattr) of leaves,
    # lists and objects of the same kind: each field's (key, attribute, completion, leaf
    # type), the attribute None for `__typename`, whose completion is then its answer, and
    # the leaf type that of a leaf or a non-null leaf (else None). Such an object is written
    # in one pass (`_written`), without a resolver, a path or a task per field.
    flat: tuple[FlatField, ...] | None = None


Completion = NonNull | ListOf | Leaf | ObjectFields
FlatField = tuple[str, str | None, Completion | str, GraphQLLeafType | None]


@dataclass(frozen=True, slots=True)
class DirectCall:
    """A resolver of ours called as Strawberry's resolver wrapper calls it, for a field with
    no field extensions (permissions are one) and no exception handlers, whose arguments
    are all scalars: Strawberry's conversion gives each such value back as it is, so the
    arguments are only renamed, the source passed as `self`, and a Strawberry Info made."""

    function: Callable[..., Any]
    pass_source: bool
    info_name: str | None
    info_class: Callable[..., Any]
    field: StrawberryField
    # (GraphQL name, Python name) of each argument.
    names: tuple[tuple[str, str], ...]

    def call(self, source: Any, info: ResolveInfo, args: dict[str, Any]) -> Any:
        kwargs = {python: args[name] for name, python in self.names if name in args}
        if self.info_name is not None:
            kwargs[self.info_name] = resolve_info(info, self.field, self.info_class)
        return self.function(source, **kwargs) if self.pass_source else self.function(**kwargs)


@dataclass(frozen=True, slots=True)
class PlannedField:
    """One entry of a grouped field set: its response key, the field nodes merged under it,
    and how its value is resolved and completed."""

    key: str
    name: str
    parent: GraphQLObjectType
    details: list[FieldDetails]
    nodes: list[FieldNode]
    definition: GraphQLField
    # Strawberry's resolver of a plain attribute, which reads neither info nor arguments.
    basic: bool = False
    # The attribute that resolver reads, when it reads it with getattr: read here directly.
    attribute: str | None = None
    # For other resolvers of Strawberry's, when it can be called without its wrapper.
    direct: DirectCall | None = None
    # Its arguments' coercion worked out once, for the shapes that can be.
    arguments: Arguments | None = None
    # The answer of `__typename`; None for every other field.
    typename: str | None = None
    completion: Completion | None = None
    # The field's type when it is a leaf type (or a non-null one).
    leaf: GraphQLLeafType | None = None
    # Whether the field's path is needed before an error: by its resolver's info, or by
    # the fields and items below it. A basic leaf (most fields) makes its path only when it
    # fails.
    needs_path: bool = False


class PlanRun:
    """One run of a plan: graphql-core's executor (3.3) for the covered cases, step for
    step, with the fields collected beforehand."""

    __slots__ = ("context", "errors", "extensions", "plan", "variables")

    def __init__(
        self,
        plan: Plan,
        context: Any,
        variables: VariableValues,
        extensions: dict[str, Any] | None,
    ) -> None:
        self.extensions = extensions
        self.plan = plan
        self.context = context
        self.variables = variables
        self.errors = CollectedErrors()

    async def run(self, roots: tuple[PlannedField, ...]) -> ExecutionResult:
        """The root fields one after another (a query has one): an error that propagates
        from one of them nulls the whole answer, and no later field runs."""
        data: dict[str, Any] = {}
        try:
            for root in roots:
                result = self.execute_field(root, None, None)
                if is_awaitable(result):
                    result = await result
                data[root.key] = result
        except GraphQLError as error:
            self.errors.add(error, None)
            return ExecutionResult(data=None, errors=self.errors.errors or None)
        return ExecutionResult(data=data, errors=self.errors.errors or None)

    def info(self, field: PlannedField, path: Path) -> ResolveInfo:
        # As Strawberry's executor builds it (the variables as a plain dict); resolvers here
        # get no async helpers of graphql-core's executor, which none of ours use.
        plan = self.plan
        return ResolveInfo(
            field.name,
            field.nodes,
            field.definition.type,
            field.parent,
            path,
            plan.schema,
            plan.fragment_definitions,
            None,
            plan.operation,
            self.variables.coerced,
            self.context,
            is_awaitable,
            None,
            None,
            self.extensions,  # type: ignore[arg-type] # None as Strawberry's when none
        )

    def execute_field(self, field: PlannedField, source: Any, parent: Path | None) -> Any:
        if field.typename is not None:
            return field.typename
        completion = field.completion
        assert completion is not None
        definition = field.definition
        path = Path(parent, field.key, field.parent.name) if field.needs_path else None
        try:
            if field.attribute is not None:
                result = getattr(source, field.attribute)
            elif field.basic:
                result = definition.resolve(source, None)  # type: ignore[misc]
            else:
                node = field.details[0]
                args = None if field.arguments is None else field.arguments.coerce(self.variables)
                if args is None:
                    args = (
                        get_argument_values(
                            definition, node.node, self.variables, node.fragment_variable_values
                        )
                        if definition.args or node.node.arguments
                        else {}
                    )
                resolve = definition.resolve
                assert resolve is not None  # planned only so
                assert path is not None  # a resolver with info needs it
                if field.direct is not None:
                    result = field.direct.call(source, self.info(field, path), args)
                else:
                    result = resolve(source, self.info(field, path), **args)
            if field.leaf is not None and type(result) in _PLAIN_LEAF_VALUES:
                completed = _leaf_value(field.leaf, result)  # all `complete` would do
            elif is_awaitable(result):
                path = path or Path(parent, field.key, field.parent.name)
                return self.complete_awaitable(field, completion, path, result)
            else:
                completed = self.complete(field, completion, path, result)
            if is_awaitable(completed):
                path = path or Path(parent, field.key, field.parent.name)
                return self.await_completed(field, completion, path, completed)
        except Exception as raw_error:  # a field error, as graphql-core makes it
            path = path or Path(parent, field.key, field.parent.name)
            self.handle_field_error(raw_error, field, completion, path)
            return None
        return completed

    def handle_field_error(
        self, raw_error: Exception, field: PlannedField, completion: Completion, path: Path
    ) -> None:
        error = located_error(raw_error, field.nodes, path.as_list())
        if self.plan.propagate_errors and isinstance(completion, NonNull):
            raise error
        self.errors.add(error, path)

    async def complete_awaitable(
        self, field: PlannedField, completion: Completion, path: Path, result: Awaitable[Any]
    ) -> Any:
        try:
            completed = self.complete(field, completion, path, await result)
            if is_awaitable(completed):
                completed = await completed
        except Exception as raw_error:  # a field error, as graphql-core makes it
            self.handle_field_error(raw_error, field, completion, path)
            completed = None
        return completed

    async def await_completed(
        self, field: PlannedField, completion: Completion, path: Path, completed: Awaitable[Any]
    ) -> Any:
        try:
            return await completed
        except Exception as raw_error:  # a field error, as graphql-core makes it
            self.handle_field_error(raw_error, field, completion, path)
            return None

    def complete(
        self, field: PlannedField, completion: Completion, path: Path | None, result: Any
    ) -> Any:
        """The completed value; `path` is None only for a leaf, which needs none."""
        if isinstance(result, Exception):
            raise result
        if isinstance(completion, NonNull):
            completed = self.complete(field, completion.inner, path, result)
            if completed is None:
                raise TypeError(
                    f"Cannot return null for non-nullable field {field.parent}.{field.name}."
                )
            return completed
        if result is None or result is Undefined:
            return None
        if isinstance(completion, Leaf):
            return _leaf_value(completion.type, result)
        assert path is not None  # made for every field that has items or fields
        if isinstance(completion, ListOf):
            return self.complete_list(field, completion.item, path, result)
        if completion.flat is not None:
            try:
                return _written(completion, result)
            except Exception:  # noqa: S110 - done again field by field, which reports it
                pass
        return self.execute_fields(completion, result, path)

    def complete_list(self, field: PlannedField, item: Completion, path: Path, result: Any) -> Any:
        if not is_iterable(result):
            raise GraphQLError(
                f"Expected Iterable, but did not find one for field '{field.parent}.{field.name}'."
            )
        if type(result) in _PLAIN_LISTS and is_flat(item):
            try:
                return [_written(item, value) for value in result]
            except Exception:  # noqa: S110 - done again item by item, which reports it
                pass
        completed: list[Any] = []
        pending: list[int] = []
        try:
            for index, value in enumerate(result):
                item_path = path.add_key(index, None)
                if is_awaitable(value):
                    completed.append(self.complete_awaitable(field, item, item_path, value))
                    pending.append(index)
                    continue
                try:
                    done = self.complete(field, item, item_path, value)
                except Exception as raw_error:  # as graphql-core does
                    self.handle_field_error(raw_error, field, item, item_path)
                    done = None
                if is_awaitable(done):
                    done = self.await_completed(field, item, item_path, done)
                    pending.append(index)
                completed.append(done)
        except Exception:
            _settle_in_background([completed[i] for i in pending])
            raise
        if not pending:
            return completed
        return _gathered(completed, pending)

    def execute_fields(self, obj: ObjectFields, source: Any, path: Path | None) -> Any:
        results: dict[str, Any] = {}
        pending: list[str] = []
        try:
            for field in obj.fields:
                result = self.execute_field(field, source, path)
                results[field.key] = result
                if is_awaitable(result):
                    pending.append(field.key)
        except Exception:
            _settle_in_background([results[k] for k in pending])
            raise
        if not pending:
            return results
        return _gathered(results, pending)


# Classes of ours whose instances are never awaitable, nor Undefined, nor errors, added by
# themselves (types.py), so that `_written` need not ask each node of a list as graphql-core
# does (hasattr(value, "__await__")): 0.1 µs a node, and 0.7 for one with a __getattr__,
# which raises and catches an AttributeError.
NEVER_AWAITABLE: set[type] = set()
# Lists whose items `_written` may read more than once, each time the same.
_PLAIN_LISTS = frozenset({list, tuple})


class _NotPlainError(Exception):
    """A value `_written` leaves to the general completion."""


def is_flat(completion: Completion) -> bool:
    """Whether values of this completion can be written by `_written`."""
    if isinstance(completion, NonNull):
        completion = completion.inner
    if isinstance(completion, ListOf):
        return is_flat(completion.item)
    return isinstance(completion, Leaf) or (
        isinstance(completion, ObjectFields) and completion.flat is not None
    )


def _written(completion: Completion, value: Any) -> Any:
    """The completed value of a flat object, a leaf, or a list of them, for values that
    complete with no error: what `PlanRun.complete` would give, without a path, a resolve
    info or a pending result. Raises on anything else (a null where none may be, an error,
    an awaitable, a value that does not coerce), and the caller completes the value again
    the general way, which reports it: every read here is of a plain attribute, which gives
    the same value when read again."""
    if isinstance(completion, NonNull):
        if value is None:
            raise _NotPlainError
        completion = completion.inner
    elif value is None:
        return None
    kind = type(value)
    if (
        kind not in _PLAIN_LEAF_VALUES
        and kind not in NEVER_AWAITABLE
        and (value is Undefined or isinstance(value, Exception) or is_awaitable(value))
    ):
        raise _NotPlainError
    if isinstance(completion, Leaf):
        return _leaf_value(completion.type, value)
    if isinstance(completion, ListOf):
        if type(value) not in _PLAIN_LISTS:
            raise _NotPlainError
        return [_written(completion.item, item) for item in value]
    flat = completion.flat if isinstance(completion, ObjectFields) else None
    if flat is None:
        raise _NotPlainError
    row: dict[str, Any] = {}
    for key, attribute, how, leaf in flat:
        if attribute is None:
            row[key] = how
            continue
        assert not isinstance(how, str)
        field_value = getattr(value, attribute)
        # A plain leaf value is not null: a non-null leaf's completion is its leaf's.
        if leaf is not None and type(field_value) in _PLAIN_LEAF_VALUES:
            row[key] = _leaf_value(leaf, field_value)
        else:
            row[key] = _written(how, field_value)
    return row


def _leaf_value(type_: GraphQLLeafType, result: Any) -> Any:
    coerced = type_.coerce_output_value(result)
    if coerced is Undefined or coerced is None:
        raise TypeError(
            f"Expected `{inspect(type_)}.coerce_output_value("
            f"{inspect(result)})` to return non-nullable value, returned:"
            f" {inspect(coerced)}"
        )
    return coerced


async def _gathered(results: Any, pending: list[Any]) -> Any:
    """`results` (a dict or a list) with its awaitable entries awaited together, as
    graphql-core does: one on its own, several cancelled together when one fails."""
    if len(pending) == 1:
        results[pending[0]] = await results[pending[0]]
        return results
    awaited = await gather_with_cancel(*(results[k] for k in pending))
    for k, value in zip(pending, awaited, strict=True):
        results[k] = value
    return results


_background: set[asyncio.Future[Any]] = set()


def _settle_in_background(awaitables: list[Any]) -> None:
    """Siblings of an error that propagates still run to their end, their errors dropped,
    as graphql-core settles them."""
    if not awaitables:
        return
    future = asyncio.gather(*awaitables, return_exceptions=True)
    _background.add(future)
    future.add_done_callback(_background.discard)
