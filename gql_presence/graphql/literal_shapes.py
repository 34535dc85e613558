"""Plans shared by documents that differ only in the literals of their arguments.

Clients written by hand often put values in the document itself (`touch(userId: "u1",
sessionId: "s9")`), so each request is a text never seen before, parsed, validated and
planned afresh. Here such a document is known by its shape: its tokens, with every string,
integer and float literal taken out. Once a shape has been seen twice, its document is
rewritten with a variable in place of each argument literal (`$__lit0: ID!`, typed as the
argument at that place), validated and planned once; a later document of that shape runs
that plan, its literals given as those variables' values.

The answer is the one the document's own run would give:
- a literal is replaced only where validation would read it as String, Int, Float or ID
  (graphql-core's built-in scalars, whose coercion of a literal and of a variable's value
  agree), outside directives and variable defaults; every other literal (custom scalars,
  @skip/@include conditions, defaults) is part of the shape and must be the same;
- each new literal is checked as validation checks it (its type's `parse_literal`, its token
  of the same kind as the shape's): any that would be refused, and any document whose
  variables do not coerce, runs the full way, which gives its errors;
- every limit of a document (tokens, depth, aliases, selections) is a matter of its shape;
- errors are located in the request's own text, token for token.
Only documents of one operation are shaped (a fragment's variables must be defined by every
operation that spreads it).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from graphql import (
    ASTValidationRule,
    DocumentNode,
    FloatValueNode,
    GraphQLError,
    GraphQLScalarType,
    GraphQLSchema,
    IntValueNode,
    Lexer,
    OperationDefinitionNode,
    Source,
    StringValueNode,
    TokenKind,
    TypeInfo,
    TypeInfoVisitor,
    ValueNode,
    Visitor,
    get_named_type,
    parse,
    visit,
)
from graphql.language.ast import Token
from graphql.language.location import get_locations
from graphql.pyutils import Undefined
from strawberry.types import ExecutionContext, ExecutionResult

from gql_presence.graphql.document_limits import validate_document
from gql_presence.graphql.internals import core_schema, provided_operation_name
from gql_presence.graphql.planned import Plan, PlanRecorder, Plans, make_plan
from gql_presence.lru import LeastRecentlyUsed
from gql_presence.policy.limits import MAX_TOKENS

_LITERALS = frozenset((TokenKind.STRING, TokenKind.BLOCK_STRING, TokenKind.INT, TokenKind.FLOAT))
# The scalars whose `parse_value(parse_literal(node))` is `parse_literal(node)`.
_REPLACEABLE = frozenset(("String", "Int", "Float", "ID"))
_PREFIX = "__lit"
# Only a text that may hold a literal is worth lexing.
_MAY_HOLD_LITERAL = re.compile(r'[0-9"]')


@dataclass(frozen=True, slots=True)
class _Slot:
    token: int  # the literal's index among the document's tokens
    variable: str
    type: GraphQLScalarType


@dataclass(frozen=True, slots=True)
class Shape:
    """A document's shape, planned with a variable in place of each argument literal."""

    plan: Plan
    slots: tuple[_Slot, ...]
    # The literals that stay in the shape: their token's index and value.
    fixed: tuple[tuple[int, str | None], ...]
    # Where each token of the planned text starts: the index of the request's token there.
    origin: dict[int, int]


@dataclass(frozen=True, slots=True)
class ShapedRun:
    """A request matched to a shape: its plan, and its variables with the literals'."""

    shape: Shape
    tokens: list[Token]
    variables: dict[str, Any]

    async def run(
        self, context: Any, source: str, extensions: dict[str, Any] | None
    ) -> ExecutionResult | None:
        result = await self.shape.plan.run(context, self.variables, extensions)
        if result is not None and result.errors:
            self._relocate(result.errors, Source(source))
        return result

    def _relocate(self, errors: list[GraphQLError], source: Source) -> None:
        """Errors located in the planned text, located in the request's instead."""
        origin, tokens = self.shape.origin, self.tokens
        for error in errors:
            if not error.positions:
                continue
            positions = [tokens[origin[p]].start for p in error.positions]
            error.source, error.positions = source, positions
            error.locations = get_locations([(source, p) for p in positions])


def _tokens(text: str) -> list[Token] | None:
    """The text's tokens as the parser reads them (comments left out); None when it does
    not lex or has more tokens than any document the service runs."""
    lexer = Lexer(Source(text))
    tokens: list[Token] = []
    try:
        token = lexer.advance()
        while token.kind is not TokenKind.EOF:
            if len(tokens) == MAX_TOKENS:
                return None
            tokens.append(token)
            token = lexer.advance()
    except GraphQLError:
        return None
    return tokens


def _key(tokens: list[Token]) -> str:
    # Names and punctuators as they are; every literal as its kind alone. "\x01" is in no
    # name or punctuator, so the two cannot be confused.
    return "\x00".join(
        f"\x01{t.kind.value}" if t.kind in _LITERALS else (t.value or t.kind.value) for t in tokens
    )


def _node(token: Token) -> ValueNode:
    assert token.value is not None  # a literal's token has its value
    if token.kind is TokenKind.INT:
        return IntValueNode(value=token.value)
    if token.kind is TokenKind.FLOAT:
        return FloatValueNode(value=token.value)
    return StringValueNode(value=token.value, block=token.kind is TokenKind.BLOCK_STRING)


def _literal_values(shape: Shape, tokens: list[Token]) -> dict[str, Any] | None:
    """The document's literals as the shape's variables, when each of them is one that
    validation accepts there."""
    for index, value in shape.fixed:
        if tokens[index].value != value:
            return None
    values = {}
    for slot in shape.slots:
        try:
            value = slot.type.parse_literal(_node(tokens[slot.token]))
        except Exception:  # refused by validation, as graphql-core's rule does
            return None
        if value is Undefined:
            return None
        values[slot.variable] = value
    return values


class LiteralShapes:
    """The shapes seen: at most `size` planned, the least recently used dropped."""

    def __init__(self, size: int = 256) -> None:
        self._kept: LeastRecentlyUsed[tuple[str, str | None], Shape | str] = LeastRecentlyUsed(size)
        # Shapes seen once: planned when seen again, so that a text sent once costs no more.
        self._seen: LeastRecentlyUsed[tuple[str, str | None], bool] = LeastRecentlyUsed(size)
        # The texts matched lately, each with its shape, tokens and literals' values: a
        # text sent again is not lexed again.
        self._texts: LeastRecentlyUsed[
            tuple[str, str | None], tuple[Shape, list[Token], dict[str, Any]]
        ] = LeastRecentlyUsed(size)
        self.hits = 0  # how many requests a shape answered

    def match(
        self, query: str | None, operation_name: str | None, variables: dict[str, Any] | None
    ) -> ShapedRun | None:
        """The shape's run of a request, when its document has a planned shape and each of
        its literals is one that validation accepts there; None otherwise."""
        if not query or not _MAY_HOLD_LITERAL.search(query):
            return None
        text = (query, operation_name)
        matched = self._texts.get(text)
        if matched is None:
            tokens = _tokens(query)
            if tokens is None:
                return None
            shape = self._kept.get((_key(tokens), operation_name))
            if not isinstance(shape, Shape):
                return None
            literals = _literal_values(shape, tokens)
            if literals is None:
                return None
            matched = (shape, tokens, literals)
            self._texts.put(text, matched)
        shape, tokens, literals = matched
        self.hits += 1
        return ShapedRun(shape, tokens, {**(variables or {}), **literals})

    def learn(
        self,
        *,
        schema: GraphQLSchema,
        query: str,
        provided_name: str | None,
        operation_name: str | None,
        document: DocumentNode,
        rules: Sequence[type[ASTValidationRule]],
    ) -> None:
        """Plans the shape of a validated document once a second text of it is seen."""
        if not _MAY_HOLD_LITERAL.search(query) or _PREFIX in query:
            return
        tokens = _tokens(query)
        if tokens is None or not any(t.kind in _LITERALS for t in tokens):
            return
        key = (_key(tokens), provided_name)
        if self._kept.get(key) is not None:
            return
        if self._seen.get(key) is None:
            self._seen.put(key, True)
            return
        self._seen.pop(key)
        shape = _shape(
            schema=schema,
            query=query,
            tokens=tokens,
            operation_name=operation_name,
            document=document,
            rules=tuple(rules),
        )
        self._kept.put(key, shape)


def _shape(
    *,
    schema: GraphQLSchema,
    query: str,
    tokens: list[Token],
    operation_name: str | None,
    document: DocumentNode,
    rules: tuple[type[ASTValidationRule], ...],
) -> Shape | str:
    """A document's shape planned, or why it is not."""
    operations = [d for d in document.definitions if isinstance(d, OperationDefinitionNode)]
    if len(operations) != 1:
        return "several operations"
    index = {t.start: i for i, t in enumerate(tokens)}
    found = _ArgumentLiterals(schema)
    visit(document, TypeInfoVisitor(found.type_info, found))
    replaced = {index[start]: type_ for start, type_ in found.literals.items()}
    slots: list[_Slot] = []
    definitions = []
    for i in sorted(replaced):
        type_ = replaced[i]
        variable = f"{_PREFIX}{len(slots)}"
        named = get_named_type(type_)
        assert isinstance(named, GraphQLScalarType)
        slots.append(_Slot(i, variable, named))
        definitions.append(f"${variable}: {type_}")
    if not slots:
        return "no argument literals"
    fixed = tuple(
        (i, t.value) for i, t in enumerate(tokens) if t.kind in _LITERALS and i not in replaced
    )
    text, origin = _rewritten(query, tokens, operations[0], slots, " ".join(definitions))
    planned = parse(text)
    # Suggestions change only the wording of errors, and a form with errors is not used.
    if validate_document(schema, planned, rules, hide_suggestions=True):
        return "its variables' form does not validate"
    plan = make_plan(schema, planned, operation_name)
    if isinstance(plan, str):
        return plan
    return Shape(plan, tuple(slots), fixed, origin)


def _rewritten(
    query: str,
    tokens: list[Token],
    operation: OperationDefinitionNode,
    slots: list[_Slot],
    definitions: str,
) -> tuple[str, dict[int, int]]:
    """The text with each slot's literal a variable, defined by the operation; and where
    each of its tokens now starts."""
    edits: dict[int, tuple[int, str]] = {}  # at an offset: how many characters go, what comes
    for slot in slots:
        token = tokens[slot.token]
        edits[token.start] = (token.end - token.start, f"${slot.variable}")
    if operation.variable_definitions:
        last = operation.variable_definitions[-1].loc
        assert last is not None
        edits[last.end] = (0, f" {definitions}")
    elif operation.name is not None and operation.name.loc is not None:
        edits[operation.name.loc.end] = (0, f"({definitions})")
    else:
        assert operation.loc is not None
        first = operation.loc.start_token
        if first.kind is TokenKind.NAME:  # `query` or `mutation`
            edits[first.end] = (0, f"({definitions})")
        else:  # a query's shorthand, `{ ... }`
            edits[first.start] = (0, f"query({definitions}) ")
    parts: list[str] = []
    at = 0
    for offset in sorted(edits):
        removed, inserted = edits[offset]
        parts += (query[at:offset], inserted)
        at = offset + removed
    parts.append(query[at:])
    # Where each token of the request starts in the new text (a replaced literal's variable
    # where the literal did; a token after an insertion at its start, after the insertion):
    # one walk over the tokens and the edits together.
    origin = {}
    pending = sorted(edits.items())
    shift = done = 0
    for i, token in enumerate(tokens):
        while done < len(pending) and (
            pending[done][0] < token.start
            or (pending[done][0] == token.start and not pending[done][1][0])
        ):
            removed, inserted = pending[done][1]
            shift += len(inserted) - removed
            done += 1
        origin[token.start + shift] = i
    return "".join(parts), origin


class _ArgumentLiterals(Visitor):
    """The String, Int, Float and ID literals of field arguments (lists and input objects
    included), outside directives and variable defaults: their start, and the type of the
    place they fill."""

    def __init__(self, schema: GraphQLSchema) -> None:
        super().__init__()
        self.type_info = TypeInfo(schema)
        self.literals: dict[int, Any] = {}
        self._in_default = 0

    def enter_variable_definition(self, *_: object) -> None:
        self._in_default += 1

    def leave_variable_definition(self, *_: object) -> None:
        self._in_default -= 1

    def enter_string_value(self, node: ValueNode, *_: object) -> None:
        self._literal(node)

    def enter_int_value(self, node: ValueNode, *_: object) -> None:
        self._literal(node)

    def enter_float_value(self, node: ValueNode, *_: object) -> None:
        self._literal(node)

    def _literal(self, node: ValueNode) -> None:
        if self._in_default or self.type_info.get_directive() is not None:
            return
        type_ = self.type_info.get_input_type()
        named = get_named_type(type_) if type_ is not None else None
        if isinstance(named, GraphQLScalarType) and named.name in _REPLACEABLE:
            assert node.loc is not None
            self.literals[node.loc.start] = type_


class ShapeRecorder(PlanRecorder):
    """Plans each document that passes parsing, the token limit and validation, as
    PlanRecorder does, and learns its shape."""

    def __init__(self, *, plans: Plans, shapes: LiteralShapes) -> None:
        super().__init__(plans=plans)
        self._shapes = shapes

    def learn(self, context: ExecutionContext, query: str, document: DocumentNode) -> None:
        super().learn(context, query, document)
        self._shapes.learn(
            schema=core_schema(context.schema),
            query=query,
            provided_name=provided_operation_name(context),
            operation_name=context.operation_name,
            document=document,
            rules=context.validation_rules,
        )
