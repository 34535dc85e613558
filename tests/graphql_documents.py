"""Generated GraphQL documents for this schema: hypothesis-graphql's operations from the
committed schema.graphql, with strategies of our own for the scalars that matter here (ids,
times, dates, page sizes, cursors), at and beyond the edges of input validation; argument
values moved into variables, some of them faulty; documents of several operations; and the
limits on documents the service enforces, counted at least as strictly."""

from __future__ import annotations

import dataclasses
import string
from datetime import UTC, date, datetime, timedelta, timezone
from pathlib import Path
from typing import Any, TypeVar

import graphql
from graphql import (
    ArgumentNode,
    DocumentNode,
    GraphQLInputType,
    GraphQLList,
    GraphQLNonNull,
    GraphQLSchema,
    Lexer,
    NameNode,
    ObjectFieldNode,
    OperationDefinitionNode,
    SelectionSetNode,
    Source,
    TokenKind,
    TypeInfo,
    TypeInfoVisitor,
    ValueNode,
    VariableDefinitionNode,
    VariableNode,
    Visitor,
)
from hypothesis import strategies as st
from hypothesis_graphql import from_schema, nodes

from gql_presence.store.cursor import Cursors

SCHEMA_SDL = (Path(__file__).parent.parent / "schema.graphql").read_text()
SCHEMA: GraphQLSchema = graphql.build_schema(SCHEMA_SDL)

# The limits on documents that the service is to enforce. The fuzz stays within them, so that
# what it meets is the schema's own validation and the resolvers, not a blanket refusal.
MAX_DEPTH = 10
MAX_ALIASES = 15
MAX_TOKENS = 2000
MAX_BYTES = 32 * 1024

MIN_INT, MAX_INT = -(2**31), 2**31 - 1


T = TypeVar("T")


def mostly(
    valid: st.SearchStrategy[T], invalid: st.SearchStrategy[T], *, odds: int
) -> st.SearchStrategy[T]:
    """`odds` draws valid for each invalid one."""
    return st.one_of(*[valid] * odds, invalid)


# --- Ids: mostly a few names that meet each other (friends, kicks, touches of the same
# user), and the edges of the rules: empty, 128 and 129 characters and far beyond, control
# characters, characters outside the Basic Multilingual Plane, lone surrogates (these only
# in variables: in a document's text they make a syntax error, which hides the rest).

NAMES = st.sampled_from(["alice", "bob", "carol", "dave", "default", "phone", "Alice", "ß"])
_LONG = st.integers(min_value=126, max_value=2_000).map("u".__mul__)
_VALID_ID = st.one_of(NAMES, NAMES, st.text(min_size=1, max_size=20))
_BAD_ID = st.one_of(
    st.just(""),
    _LONG,
    st.text(min_size=120, max_size=140),
    st.builds(
        lambda a, c, b: a + c + b,
        NAMES,
        st.text(st.characters(categories=["Cc"]), min_size=1, max_size=3),
        NAMES,
    ),
    st.sampled_from(["\U0001f600" * 128, "\U0001f600" * 129, "é" * 129, " ", "\u200b"]),
)
_SURROGATE_ID = st.builds(lambda a, c: a + c, NAMES, st.characters(categories=["Cs"]))
ID_TEXT = mostly(_VALID_ID, _BAD_ID, odds=3)
ANY_ID_TEXT = mostly(_VALID_ID, st.one_of(_BAD_ID, _SURROGATE_ID), odds=2)

# --- DateTime: ISO 8601 with an offset, near now (so that touches with `at` succeed) and
# anywhere in 0001..9999 with any offset; and what a client might send instead.

_OFFSETS = st.builds(
    timezone,
    st.timedeltas(
        min_value=timedelta(hours=-23, minutes=-59), max_value=timedelta(hours=23, minutes=59)
    ),
)
_TIMESPECS = st.sampled_from(["auto", "seconds", "milliseconds", "microseconds", "minutes"])


def _iso_now_plus(offset_ms: int, zone: timezone, timespec: str) -> str:
    moment = datetime.now(UTC) + timedelta(milliseconds=offset_ms)
    return moment.astimezone(zone).isoformat(timespec=timespec)


def _iso(moment: datetime, timespec: str) -> str:
    return moment.isoformat(timespec=timespec)


_VALID_DATETIME = st.one_of(
    st.builds(
        _iso_now_plus,
        st.integers(min_value=-40 * 86_400_000, max_value=10_000),
        _OFFSETS,
        _TIMESPECS,
    ),
    st.builds(_iso, st.datetimes(timezones=_OFFSETS), _TIMESPECS),
    st.sampled_from(
        [
            "0001-01-01T00:00:00+23:59",
            "0001-01-01T00:00:00-23:59",
            "9999-12-31T23:59:59.999999-23:59",
            "9999-12-31T23:59:59.999999+23:59",
            "2026-11-21T09:30:00,250+01:00",
            "20261121T093000Z",
        ]
    ),
)
_BAD_DATETIME = st.one_of(
    st.builds(_iso, st.datetimes(), _TIMESPECS),  # no offset
    st.sampled_from(
        [
            "2026-11-21T25:00:00Z",
            "2026-02-30T00:00:00Z",
            "2026-11-21T09:30:00+24:00",
            "2026-11-21",
            "now",
            "",
        ]
    ),
    st.text(max_size=30),
)
ANY_DATETIME_TEXT = mostly(_VALID_DATETIME, _BAD_DATETIME, odds=2)

# --- Date: any calendar date (the service takes 0001-01-07 to 9999-12-30), near today, and
# what is not a date.


def _days_from_today(days: int) -> str:
    return (datetime.now(UTC).date() + timedelta(days=days)).isoformat()


_VALID_DATE = st.one_of(
    st.dates().map(date.isoformat),
    st.integers(min_value=-400, max_value=10).map(_days_from_today),
    st.sampled_from(["20261121", "2026-W47-6", "0001-01-07", "9999-12-30"]),
)
_BAD_DATE = st.one_of(
    st.sampled_from(["2026-02-30", "2026-11-21T00:00:00Z", "0000-01-01", "10000-01-01"]),
    st.text(max_size=15),
)
ANY_DATE_TEXT = mostly(_VALID_DATE, _BAD_DATE, odds=2)

# --- Cursors: text that is none, and cursors forged with a valid tag (the fuzz knows the
# service's secret) holding any position, so that the list scripts meet extreme scores and odd ids.

CURSOR_SECRET = "the cursor secret of the fuzzed service"  # noqa: S105 - a test's own
encode_cursor = Cursors(CURSOR_SECRET).encode

CURSOR_TEXT = st.one_of(
    st.text(max_size=40),
    st.text(string.ascii_letters + string.digits + "-_=", max_size=60),
    st.builds(encode_cursor, st.integers(), st.one_of(NAMES, _LONG, st.text(max_size=140))),
    st.builds(encode_cursor, st.integers(min_value=-(2**63), max_value=2**63), NAMES),
)


def _string(text: str) -> ValueNode:
    return nodes.String(text)


# A literal of another kind where a scalar is expected.
_OTHER_LITERALS: st.SearchStrategy[ValueNode] = st.one_of(
    st.integers().map(nodes.Int),
    st.floats(allow_nan=False, allow_infinity=False).map(nodes.Float),
    st.booleans().map(nodes.Boolean),
    st.sampled_from(["ONLINE", "KICKED", "TODAY"]).map(nodes.Enum),
    st.lists(ID_TEXT.map(_string), max_size=3).map(nodes.List),
    st.dictionaries(st.sampled_from(["at", "date", "id"]), ID_TEXT.map(nodes.String)).map(
        lambda fields: nodes.Object(
            [ObjectFieldNode(name=NameNode(value=k), value=v) for k, v in fields.items()]
        )
    ),
)

# Literal values for hypothesis-graphql. A literal the scalar refuses fails validation of the
# whole document, so those are rare (one in ten); a value that the resolvers refuse (an id,
# a page size, a cursor) fails only its field, and is common.
SCALARS: dict[str, st.SearchStrategy[ValueNode]] = {
    "ID": mostly(ID_TEXT.map(nodes.String), st.integers().map(nodes.Int), odds=9),
    "DateTime": mostly(
        _VALID_DATETIME.map(nodes.String),
        st.one_of(_BAD_DATETIME.map(nodes.String), _OTHER_LITERALS),
        odds=9,
    ),
    "Date": mostly(
        _VALID_DATE.map(nodes.String),
        st.one_of(_BAD_DATE.map(nodes.String), _OTHER_LITERALS),
        odds=9,
    ),
    "String": CURSOR_TEXT.map(nodes.String),  # `after` is the only String argument
    "Int": mostly(
        st.integers(min_value=-2, max_value=1_002),
        st.integers(min_value=MIN_INT, max_value=MAX_INT),
        odds=3,
    ).map(nodes.Int),
}

OPERATIONS = from_schema(SCHEMA_SDL, custom_scalars=SCALARS)

# --- Variables. JSON values of the right shape with any content, and JSON of any shape.

_SCALAR_JSON: dict[str, st.SearchStrategy[Any]] = {
    "ID": st.one_of(ANY_ID_TEXT, st.integers()),
    "DateTime": ANY_DATETIME_TEXT,
    "Date": ANY_DATE_TEXT,
    "String": CURSOR_TEXT,
    "Int": st.integers(),  # beyond 32 bits too
    "Boolean": st.booleans(),
}


def json_for(type_: GraphQLInputType) -> st.SearchStrategy[Any]:
    """Values of the shape `type_` takes, whatever their content; null where allowed."""
    if isinstance(type_, GraphQLNonNull):
        return _json_for_nullable(type_.of_type)
    return st.none() | _json_for_nullable(type_)


def _json_for_nullable(type_: GraphQLInputType) -> st.SearchStrategy[Any]:
    if isinstance(type_, GraphQLList):
        return st.lists(json_for(type_.of_type), max_size=6)
    return _SCALAR_JSON.get(getattr(type_, "name", ""), st.text(max_size=10))


JSON_VALUES: st.SearchStrategy[Any] = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(),
        st.floats(allow_nan=False, allow_infinity=False),
        ANY_ID_TEXT,
        ANY_DATETIME_TEXT,
        ANY_DATE_TEXT,
        CURSOR_TEXT,
    ),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=5), children, max_size=3)
    ),
    max_leaves=8,
)

# Types a variable may be declared with instead of the argument's own: some merely wrong
# for the position, one that does not exist.
OTHER_VARIABLE_TYPES = st.sampled_from(
    [
        *("ID", "ID!", "[ID!]!", "[ID]", "String", "Int!", "Boolean!", "DateTime!", "Date"),
        *("Float", "PresenceEventKind", "NoSuchType"),
    ]
)


class _ArgumentsToVariables(Visitor):
    """Moves most argument values into variables. In a faulty document, some variables are
    declared with another type, some given a value of the wrong shape or none at all."""

    def __init__(self, draw: st.DrawFn, type_info: TypeInfo, *, faulty: bool) -> None:
        super().__init__()
        self.draw = draw
        self.type_info = type_info
        self.faulty = faulty
        self.definitions: list[VariableDefinitionNode] = []
        self.variables: dict[str, Any] = {}

    def fault(self) -> bool:
        return self.faulty and self.draw(st.integers(0, 9)) == 0

    def enter_argument(self, node: ArgumentNode, *_: object) -> ArgumentNode | None:
        argument = self.type_info.get_argument()
        if argument is None or self.draw(st.integers(0, 4)) == 0:  # one in five stays literal
            return None
        name = f"v{len(self.definitions)}"
        declared = self.draw(OTHER_VARIABLE_TYPES) if self.fault() else str(argument.type)
        self.definitions.append(
            VariableDefinitionNode(
                variable=VariableNode(name=NameNode(value=name)), type=graphql.parse_type(declared)
            )
        )
        if self.fault():
            if self.draw(st.booleans()):
                self.variables[name] = self.draw(JSON_VALUES)
            # else: declared, and not given
        elif self.faulty and self.draw(st.booleans()):
            self.variables[name] = self.draw(json_for(argument.type))
        else:
            self.variables[name] = graphql.value_from_ast_untyped(node.value)
        return ArgumentNode(name=node.name, value=VariableNode(name=NameNode(value=name)))


@st.composite
def with_variables(draw: st.DrawFn) -> tuple[str, dict[str, Any]]:
    """A generated operation with its argument values moved into variables; in half of them,
    with faults: any content, the wrong shape, the wrong declared type, a missing value."""
    document = graphql.parse(draw(OPERATIONS))
    type_info = TypeInfo(SCHEMA)
    faulty = draw(st.booleans())
    mover = _ArgumentsToVariables(draw, type_info, faulty=faulty)
    changed = graphql.visit(document, TypeInfoVisitor(type_info, mover))
    (operation,) = changed.definitions
    assert isinstance(operation, OperationDefinitionNode)
    operation = dataclasses.replace(
        operation, name=NameNode(value="Fuzz"), variable_definitions=tuple(mover.definitions)
    )
    variables = mover.variables
    if faulty and draw(st.integers(0, 9)) == 0:
        variables["undeclared"] = draw(JSON_VALUES)
    return graphql.print_ast(DocumentNode(definitions=(operation,))), variables


# --- The limits, counted at least as strictly as the service counts them (bytes for its
# characters; every level of fields for its depth).


def _tokens(document: str) -> int:
    lexer, count = Lexer(Source(document)), 0
    while lexer.advance().kind != TokenKind.EOF:
        count += 1
    return count


def depth(selection_set: SelectionSetNode | None) -> int:
    if selection_set is None:
        return 0
    return 1 + max(
        (depth(getattr(s, "selection_set", None)) for s in selection_set.selections), default=0
    )


def aliases(selection_set: SelectionSetNode | None) -> int:
    if selection_set is None:
        return 0
    return sum(
        (getattr(s, "alias", None) is not None) + aliases(getattr(s, "selection_set", None))
        for s in selection_set.selections
    )


def within_limits(document: str) -> bool:
    if len(document.encode()) > MAX_BYTES or _tokens(document) > MAX_TOKENS:
        return False
    selection_sets = [
        d.selection_set
        for d in graphql.parse(document).definitions
        if isinstance(d, OperationDefinitionNode)
    ]
    return (
        all(depth(s) <= MAX_DEPTH for s in selection_sets)  # each operation's own
        and sum(map(aliases, selection_sets)) <= MAX_ALIASES  # the document's, all together
    )


# A subscription, which plain HTTP refuses, among the operations of a document.
SUBSCRIPTION = 'subscription { presenceChanged(userIds: ["alice"]) { userId kind } }'


def _named(document: str, name: str) -> str:
    (operation,) = graphql.parse(document).definitions
    assert isinstance(operation, OperationDefinitionNode)
    named = dataclasses.replace(operation, name=NameNode(value=name))
    return graphql.print_ast(DocumentNode(definitions=(named,)))


@st.composite
def several_operations(draw: st.DrawFn) -> tuple[str, str | None]:
    """A document of one to three generated operations and perhaps a subscription, each
    named, and the operationName to run: one of them, or none (Strawberry runs the first)."""
    documents = draw(st.lists(OPERATIONS, min_size=1, max_size=3))
    if draw(st.booleans()):
        documents.insert(draw(st.integers(0, len(documents))), SUBSCRIPTION)
    names = [f"Op{i}" for i in range(len(documents))]
    text = "\n".join(_named(d, name) for d, name in zip(documents, names, strict=True))
    return text, draw(st.none() | st.sampled_from(names))
