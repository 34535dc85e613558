"""Execution planned once per document: queries and mutations seen before, run without
graphql-core's generic per-field work.

A document (with the operation name a request gives) that has passed parsing, the token
limit and validation once is planned: its root fields, and for every object below them the
fields to complete, collected from aliases, fragments and @skip/@include by graphql-core's
own `collect_fields`, each with its resolver and how to complete its value. Later requests
for the same text run the plan. Whatever the answer depends on is graphql-core's or
Strawberry's own code, called as graphql-core's executor (3.3) calls it: variables coerced by
`get_variable_values`, arguments by `get_argument_values`, resolvers by the schema's
`GraphQLField.resolve` (Strawberry's wrapper: argument conversion, permissions, our
resolvers), leaves by the type's `coerce_output_value`, errors located by `located_error` and
kept by graphql-core's `CollectedErrors`, with null propagation through non-null types as
graphql-core does it. What is left out is the per-request and per-field generic work: the
executor and its field collection, a resolve info for fields that are plain attributes (read
with getattr, as Strawberry's resolver of such a field does), and the path of a leaf field
until it fails (an error's path is the only use it has).

Covered: mutations, and queries whose selection comes to exactly one root field (or root
`__typename`) after fragments and @skip/@include, over object, list, non-null and leaf
types. Not covered, and so run the full way (`None` from `Plan.run`): queries of several
root fields (graphql-core runs them at once and reports their errors in the order they
happen), introspection (`__schema`, `__type`), federation's `_entities` and `_service`,
subscriptions, abstract types, fragment variables, variables that do not coerce, and
@skip/@include whose condition is in error.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import cached_property
from typing import Any

from graphql import (
    DocumentNode,
    FragmentDefinitionNode,
    GraphQLError,
    GraphQLField,
    GraphQLList,
    GraphQLNonNull,
    GraphQLObjectType,
    GraphQLOutputType,
    GraphQLSchema,
    OperationDefinitionNode,
    OperationType,
    TypeNameMetaFieldDef,
    VariableNode,
    is_leaf_type,
)
from graphql.execution.values import VariableValues, get_variable_values
from graphql.language import Visitor, visit
from strawberry.extensions import SchemaExtension
from strawberry.relay.types import GlobalID
from strawberry.scalars import is_scalar
from strawberry.schema.schema_converter import GraphQLCoreConverter
from strawberry.types import ExecutionContext, ExecutionResult
from strawberry.types.base import StrawberryMaybe, StrawberryOptional
from strawberry.types.field import StrawberryField

from gql_presence.graphql.coercion import Arguments, Variables
from gql_presence.graphql.internals import (
    FieldDetails,
    FragmentDetails,
    collect_fields,
    collect_subfields,
    core_schema,
    handles_exceptions,
    is_default_resolver,
    is_strawberry_resolver,
    provided_operation_name,
    strawberry_schema_of,
)
from gql_presence.graphql.labels import operation_label, root_fields
from gql_presence.graphql.plan_run import (
    Completion,
    DirectCall,
    FlatField,
    Leaf,
    ListOf,
    NonNull,
    ObjectFields,
    PlannedField,
    PlanRun,
    is_flat,
)
from gql_presence.lru import LeastRecentlyUsed

# What graphql-core's execute() is given by Strawberry: at most 50 variable errors.
_MAX_COERCION_ERRORS = 50
# Per plan, the sets of @skip/@include conditions kept compiled: a client cannot make a plan
# grow by sending every combination.
_VARIANTS_PER_PLAN = 8
_MISSING = object()


class Plan:
    """One operation of one document, planned; compiled for each combination of the values
    of the variables that @skip/@include read (usually none)."""

    def __init__(
        self,
        schema: GraphQLSchema,
        operation: OperationDefinitionNode,
        fragments: dict[str, FragmentDetails],
        fragment_definitions: dict[str, FragmentDefinitionNode],
        *,
        operation_name: str | None,
        label: str,
    ) -> None:
        self.schema = schema
        self.operation = operation
        self.fragments = fragments
        self.fragment_definitions = fragment_definitions
        # As Strawberry names the operation (logs of unexpected errors), and its log label.
        self.operation_name = operation_name
        self.label = label
        root_type = schema.get_root_type(operation.operation)
        assert root_type is not None  # the document was validated against this schema
        self.root_type = root_type
        self.propagate_errors = not any(
            d.name.value == "experimental_disableErrorPropagation"
            for d in operation.directives or ()
        )
        self._variants: dict[tuple[object, ...], tuple[PlannedField, ...] | None] = {}
        self.runs = 0  # how many requests the plan answered

    async def run(
        self,
        context: Any,
        raw_variables: dict[str, Any] | None,
        extensions: dict[str, Any] | None = None,
    ) -> ExecutionResult | None:
        """The operation's ExecutionResult, as graphql-core's would be; None when the plan
        does not cover these variables (the full path then answers)."""
        prepared = self._prepared(raw_variables)
        if isinstance(prepared, str):
            return None
        variables, roots = prepared
        self.runs += 1
        return await PlanRun(self, context, variables, extensions).run(roots)

    def covers(self, raw_variables: dict[str, Any] | None) -> str | None:
        """Why the plan does not run with these variables; None when it does."""
        prepared = self._prepared(raw_variables)
        return prepared if isinstance(prepared, str) else None

    def _prepared(
        self, raw_variables: dict[str, Any] | None
    ) -> tuple[VariableValues, tuple[PlannedField, ...]] | str:
        variables: VariableValues | list[GraphQLError] | None
        variables = self._variables.coerce(raw_variables or {})
        if variables is None:  # a shape not covered, or an error graphql-core words
            variables = get_variable_values(
                self.schema,
                self.operation.variable_definitions or (),
                raw_variables or {},
                max_errors=_MAX_COERCION_ERRORS,
            )
        if isinstance(variables, list):
            return "variables in error"  # reported by the full path
        roots = self._compiled(variables)
        if roots is None:
            return "not covered"
        return variables, roots

    @cached_property
    def _variables(self) -> Variables:
        return Variables(self.schema, tuple(self.operation.variable_definitions or ()))

    @cached_property
    def _conditions(self) -> tuple[str, ...]:
        # Worked out on the plan's first run: many documents are seen only once.
        return _condition_variables(self.operation, self.fragment_definitions.values())

    def _compiled(self, variables: VariableValues) -> tuple[PlannedField, ...] | None:
        key = tuple(variables.coerced.get(name, _MISSING) for name in self._conditions)
        if key in self._variants:
            return self._variants[key]
        try:
            roots = self._compile(variables)
        except GraphQLError:
            return None  # a condition in error: reported by the full path
        if len(self._variants) < _VARIANTS_PER_PLAN:
            self._variants[key] = roots
        return roots

    def _compile(self, variables: VariableValues) -> tuple[PlannedField, ...] | None:
        grouped = collect_fields(
            self.schema, self.fragments, variables, self.root_type, self.operation
        ).grouped_field_set
        # A mutation's root fields run one after another, so its errors come in their
        # order; a query's run at once, and graphql-core reports their errors in the order
        # they happen: only a query of one root field is planned.
        if len(grouped) != 1 and self.operation.operation is not OperationType.MUTATION:
            return None
        roots = [self._field(self.root_type, k, d, variables) for k, d in grouped.items()]
        if not roots or any(root is None for root in roots):
            return None
        return tuple(root for root in roots if root is not None)

    def _field(
        self,
        parent: GraphQLObjectType,
        key: str,
        details: list[FieldDetails],
        variables: VariableValues,
    ) -> PlannedField | None:
        name = details[0].node.name.value
        nodes = [d.node for d in details]
        if name == "__typename":
            meta = TypeNameMetaFieldDef
            return PlannedField(key, name, parent, details, nodes, meta, typename=parent.name)
        definition = parent.fields.get(name)
        if definition is None or definition.resolve is None or name.startswith("_"):
            return None  # introspection, federation; every field of Strawberry's resolves
        completion = self._completion(definition.type, details, variables)
        if completion is None:
            return None
        basic = is_default_resolver(definition.resolve) and not definition.args
        inner = completion.inner if isinstance(completion, NonNull) else completion
        leaf = inner.type if isinstance(inner, Leaf) else None
        return PlannedField(
            key,
            name,
            parent,
            details,
            nodes,
            definition,
            basic=basic,
            attribute=_attribute_read(definition) if basic else None,
            direct=None if basic else _direct_call(self.schema, definition),
            arguments=None if basic else _arguments(definition, details),
            completion=completion,
            leaf=leaf,
            needs_path=not (basic and leaf),
        )

    def _completion(
        self, type_: GraphQLOutputType, details: list[FieldDetails], variables: VariableValues
    ) -> Completion | None:
        if isinstance(type_, GraphQLNonNull):
            inner = self._completion(type_.of_type, details, variables)
            return None if inner is None else NonNull(inner)
        if isinstance(type_, GraphQLList):
            item = self._completion(type_.of_type, details, variables)
            return None if item is None else ListOf(item)
        if is_leaf_type(type_):
            return Leaf(type_)
        if not isinstance(type_, GraphQLObjectType) or type_.is_type_of is not None:
            return None  # abstract types, and objects that check their values
        grouped = collect_subfields(
            self.schema, self.fragments, variables, self.operation, type_, details
        ).grouped_field_set
        fields = [self._field(type_, k, d, variables) for k, d in grouped.items()]
        if any(f is None for f in fields):
            return None
        planned = tuple(f for f in fields if f is not None)
        return ObjectFields(type_, planned, _flat(planned))


def _flat(fields: tuple[PlannedField, ...]) -> tuple[FlatField, ...] | None:
    """ObjectFields.flat of these fields, or None when one of them is not flat."""
    flat: list[FlatField] = []
    for field in fields:
        if field.typename is not None:
            flat.append((field.key, None, field.typename, None))
        elif (
            field.attribute is not None
            and field.completion is not None
            and is_flat(field.completion)
        ):
            completion = field.completion
            inner = completion.inner if isinstance(completion, NonNull) else completion
            leaf = inner.type if isinstance(inner, Leaf) else None
            flat.append((field.key, field.attribute, completion, leaf))
        else:
            return None
    return tuple(flat)


def _arguments(definition: GraphQLField, details: list[FieldDetails]) -> Arguments | None:
    """The field's arguments coerced from what was worked out once, when they can be."""
    if not definition.args or details[0].fragment_variable_values is not None:
        return None
    arguments = Arguments(definition, details[0].node)
    return arguments if arguments.covered else None


def _attribute_read(definition: GraphQLField) -> str | None:
    """The attribute that Strawberry's resolver of a field without a resolver of its own
    reads: it calls `StrawberryField.get_result`, which calls the field's `default_resolver`
    with its `python_name`. None unless that default resolver is getattr (the default)."""
    field = definition.extensions.get(GraphQLCoreConverter.DEFINITION_BACKREF)
    if not isinstance(field, StrawberryField) or field.base_resolver is not None:
        return None
    return field.python_name if field.default_resolver is getattr else None


def _direct_call(schema: GraphQLSchema, definition: GraphQLField) -> DirectCall | None:
    """How to call the resolver of a field without Strawberry's wrapper (its `get_arguments`
    and `get_result`), when the wrapper would do no more than `DirectCall.call` does."""
    strawberry_schema = strawberry_schema_of(schema)
    field = definition.extensions.get(GraphQLCoreConverter.DEFINITION_BACKREF)
    if strawberry_schema is None or not isinstance(field, StrawberryField):
        return None
    converter = strawberry_schema.schema_converter
    resolver = field.base_resolver
    if (
        resolver is None
        or not is_strawberry_resolver(definition.resolve)
        or field.extensions
        or handles_exceptions(converter)
        or resolver.parent_parameter is not None
        or resolver.root_parameter is not None
    ):
        return None
    function = resolver.wrapped_func
    if not callable(function):
        return None  # Strawberry's wrapper raises its own error for it
    names = []
    for argument in field.arguments:
        type_ = argument.type
        if isinstance(type_, StrawberryOptional) and not isinstance(type_, StrawberryMaybe):
            type_ = type_.of_type
        if type_ is GlobalID or not is_scalar(type_, converter.scalar_registry):
            return None  # converted by Strawberry: lists, enums, input types, IDs of relay
        graphql_name = strawberry_schema.config.name_converter.from_argument(argument)
        names.append((graphql_name, argument.python_name))
    info = resolver.info_parameter
    return DirectCall(
        function,
        pass_source=resolver.self_parameter is not None,
        info_name=None if info is None else info.name,
        info_class=strawberry_schema.config.info_class,
        field=field,
        names=tuple(names),
    )


def make_plan(
    schema: GraphQLSchema, document: DocumentNode, operation_name: str | None
) -> Plan | str:
    """A plan for a validated document's operation (picked as graphql-core picks it given
    `operation_name`), or why it is not planned."""
    operation: OperationDefinitionNode | None = None
    fragments: dict[str, FragmentDetails] = {}
    fragment_definitions: dict[str, FragmentDefinitionNode] = {}
    for definition in document.definitions:
        if isinstance(definition, OperationDefinitionNode):
            if operation_name is None:
                if operation is not None:
                    return "several operations and no name"
                operation = definition
            elif definition.name and definition.name.value == operation_name:
                operation = definition
        elif isinstance(definition, FragmentDefinitionNode):
            if definition.variable_definitions:
                return "fragment variables"
            fragment_definitions[definition.name.value] = definition
            fragments[definition.name.value] = FragmentDetails(definition)
    if operation is None:
        return "no such operation"
    if operation.operation not in (OperationType.QUERY, OperationType.MUTATION):
        return "subscription"
    label = operation_label(document, operation_name, root_fields(schema))
    return Plan(
        schema,
        operation,
        fragments,
        fragment_definitions,
        operation_name=operation_name,
        label=label,
    )


class _ConditionVariables(Visitor):
    def __init__(self) -> None:
        super().__init__()
        self.names: list[str] = []

    def enter_directive(self, node: Any, *_: object) -> None:
        if node.name.value in ("skip", "include"):
            for argument in node.arguments or ():
                value = argument.value
                if isinstance(value, VariableNode) and value.name.value not in self.names:
                    self.names.append(value.name.value)


def _condition_variables(
    operation: OperationDefinitionNode, fragments: Iterable[FragmentDefinitionNode]
) -> tuple[str, ...]:
    """The variables that @skip and @include read: what field collection depends on."""
    found = _ConditionVariables()
    for node in (operation, *fragments):
        visit(node, found)
    return tuple(found.names)


class Plans:
    """The plans of the documents seen: at most `size`, the least recently used dropped."""

    def __init__(self, size: int = 256) -> None:
        self._kept: LeastRecentlyUsed[tuple[str, str | None], Plan | str] = LeastRecentlyUsed(size)

    def get(self, query: str | None, operation_name: str | None) -> Plan | None:
        if query is None:
            return None
        plan = self._kept.get((query, operation_name))
        return plan if isinstance(plan, Plan) else None

    def learn(
        self,
        schema: GraphQLSchema,
        query: str,
        provided_name: str | None,
        operation_name: str | None,
        document: DocumentNode,
    ) -> Plan | str:
        """Plans a validated document for requests that give `provided_name`; Strawberry
        runs it as `operation_name` (the first operation's name when none is given)."""
        key = (query, provided_name)
        known = self._kept.get(key)
        if known is not None:
            return known
        plan = make_plan(schema, document, operation_name)
        self._kept.put(key, plan)
        return plan


class PlanRecorder(SchemaExtension):
    """Plans each document once it has passed parsing, the token limit and validation."""

    def __init__(self, *, plans: Plans) -> None:
        super().__init__()
        self._plans = plans

    def on_validate(self) -> Any:
        yield
        context = self.execution_context
        document = context.graphql_document
        if context.pre_execution_errors == [] and document is not None and context.query:
            self.learn(context, context.query, document)

    def learn(self, context: ExecutionContext, query: str, document: DocumentNode) -> None:
        """What is kept of a document that passed: its plan."""
        self._plans.learn(
            core_schema(context.schema),
            query,
            provided_operation_name(context),
            context.operation_name,
            document,
        )
