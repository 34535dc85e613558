"""Generated GraphQL documents for this schema: hypothesis-graphql's operations from the
committed schema.graphql, with strategies of our own for the scalars that matter here (ids,
times, dates, page sizes, cursors), at and beyond the edges of input validation; argument
values moved into variables, some of them faulty; documents of several operations; and the
limits on documents the service enforces, counted at least as strictly; request bodies that
name persisted documents by hash."""

from __future__ import annotations

import dataclasses
import hashlib
import string
from datetime import UTC, date, datetime, timedelta, timezone
from pathlib import Path
from typing import Any, TypeVar

import graphql
from graphql import (
    ArgumentNode,
    DocumentNode,
    FieldNode,
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
    # Not st.one_of(*[valid] * odds, invalid): Hypothesis draws each distinct branch alike,
    # whatever the repeats, which made it one valid draw for each invalid one.
    choices = [True] * odds + [False]
    return st.sampled_from(choices).flatmap(lambda ok: valid if ok else invalid)


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

# JSON objects, as place states: mostly small, now and then over the 1 KiB allowed.
_JSON_VALUES = st.one_of(st.integers(-1000, 1000), st.text(max_size=12), st.booleans(), st.none())
JSON_OBJECT = st.one_of(
    st.dictionaries(st.text(max_size=6), _JSON_VALUES, max_size=4),
    st.dictionaries(
        st.text(max_size=3), st.text(min_size=300, max_size=400), min_size=4, max_size=4
    ),
)


def _json_literal(value: Any) -> ValueNode:
    if isinstance(value, dict):
        return nodes.Object(
            [
                ObjectFieldNode(name=NameNode(value="k" + str(i)), value=_json_literal(v))
                for i, v in enumerate(value.values())
            ]
        )
    if isinstance(value, bool):
        return nodes.Boolean(value)
    if isinstance(value, int):
        return nodes.Int(value)
    if value is None:
        return nodes.Null
    return nodes.String(str(value))


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
    "JSONObject": mostly(JSON_OBJECT.map(_json_literal), _OTHER_LITERALS, odds=9),
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
    "JSONObject": st.one_of(JSON_OBJECT, st.lists(st.integers(), max_size=2), st.text(max_size=5)),
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
    """Levels of fields, as the service's depth limit counts them: an inline fragment's
    selections are at the level of the fragment."""
    if selection_set is None:
        return 0
    return 1 + max(
        (
            depth(nested) - (not isinstance(s, FieldNode))
            for s in selection_set.selections
            if (nested := getattr(s, "selection_set", None)) is not None
        ),
        default=0,
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


# --- Persisted documents: request bodies that name a document by its hash (automatic
# persisted queries, `documentId`), right and wrong in every member: texts valid, refused by
# each check, around the size limit and beyond, holding lone surrogates, or not text at all;
# hashes right, of the wrong case or length, not hex, not strings; versions; documentId forms.

_KEPT_DOCUMENTS = [
    'query Alice { presence(userId: "alice") { online } }',
    'mutation { touch(userId: "bob") { online } }',
    "{ weeklyStats { uniqueUsers } }",
    "query Page($first: Int!) { onlineUsers(first: $first) { totalCount } }",
]
# Each of them under many names, so that most examples register a document of their own
# (and the cap of 1,000 is met), and Hypothesis does not run out of new valid bodies.
_VALID_DOCUMENTS = st.builds(
    lambda document, name: f"# {name}\n{document}",
    st.sampled_from(_KEPT_DOCUMENTS),
    st.text(string.ascii_letters + string.digits, max_size=12),
)
_REFUSED_DOCUMENTS = [
    "{ " + "__typename " * (MAX_TOKENS + 1) + "}",
    "{ " + " ".join(f'a{i}: presence(userId: "a") {{ online }}' for i in range(16)) + " }",
    "{ ...F30 } fragment F0 on Query { weeklyStats { uniqueUsers } } "
    + " ".join(f"fragment F{i} on Query {{ ...F{i - 1} ...F{i - 1} }}" for i in range(1, 31)),
    "{ nothing }",
    "{ presence(userId: true) { online } }",
    "{ presence(",
    SUBSCRIPTION,
]


def _padded(document: str, size_bytes: int, character: str) -> str:
    """The document after a comment of `character`s, about `size_bytes` bytes of UTF-8."""
    room = max(0, size_bytes - len(f"#\n{document}".encode()))
    return f"#{character * (room // len(character.encode()))}\n{document}"


def _with_surrogate(document: str, surrogate: str, where: int) -> str:
    """The document with a lone surrogate in a comment, in a string, or before it all."""
    if where == 0:
        return f"# {surrogate}\n{document}"
    if where == 1 and '"' in document:
        return document.replace('"', f'"{surrogate}', 1)
    return surrogate + document


_NOT_TEXT: st.SearchStrategy[Any] = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=False, allow_infinity=False),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)
_SURROGATE = st.characters(categories=["Cs"])
# Half of them documents that pass, so that they are registered and then named by their hash
# alone; the rest refused by one check or another, or not text.
_TEXTS: dict[str, st.SearchStrategy[Any]] = {
    "valid": _VALID_DOCUMENTS,
    "refused": st.sampled_from(_REFUSED_DOCUMENTS),
    "around the size limit": st.builds(
        _padded,
        _VALID_DOCUMENTS,
        st.integers(MAX_BYTES - 4, MAX_BYTES + 4) | st.integers(MAX_BYTES, 6 * MAX_BYTES),
        st.sampled_from(["x", "\u00e9", "\u20ac", "\U0001f600"]),
    ),
    "a lone surrogate": st.builds(_with_surrogate, _VALID_DOCUMENTS, _SURROGATE, st.integers(0, 2)),
    "any text": st.text(max_size=40),
    "not text": _NOT_TEXT,
}
_TEXT_WEIGHTS = {
    "valid": 10,
    "refused": 4,
    "around the size limit": 2,
    "a lone surrogate": 2,
    "any text": 1,
    "not text": 1,
}
PERSISTED_TEXT: st.SearchStrategy[Any] = st.sampled_from(
    [kind for kind, weight in _TEXT_WEIGHTS.items() for _ in range(weight)]
).flatmap(_TEXTS.__getitem__)


def sha256_hex(text: object) -> str:
    """The SHA-256 a client would send for the text: a lone surrogate hashed as the three
    bytes Python's "surrogatepass" writes for it."""
    encoded = (text if isinstance(text, str) else repr(text)).encode("utf-8", "surrogatepass")
    return hashlib.sha256(encoded).hexdigest()


def _hashes(right: str) -> st.SearchStrategy[Any]:
    return mostly(
        st.just(right),
        st.one_of(
            st.sampled_from([right.upper(), right[:63], right + "0", right[:32]]),
            st.text("0123456789abcdef", min_size=64, max_size=64),
            st.text(min_size=64, max_size=64),
            st.builds(lambda s: right[:10] + s + right[11:], _SURROGATE),
            _NOT_TEXT,
        ),
        odds=3,
    )


_VERSIONS = mostly(st.just(1), st.sampled_from([0, 2, "1", 1.5, -1, 2**70]) | _NOT_TEXT, odds=5)
_FORMS = st.sampled_from(
    [
        *["persistedQuery"] * 5,
        *["documentId", "documentId", "extensions.documentId", "both"],
        *["extensions", "none"],
    ]
)
_DOCUMENT_ID_PREFIXES = st.sampled_from(["sha256:", "sha256:", "", "SHA256:", "md5:", ":"])


@st.composite
def persisted_bodies(draw: st.DrawFn) -> dict[str, Any]:
    """A request body naming a document by its hash, with or without the document's text;
    mostly well formed, each member sometimes not."""
    text = draw(PERSISTED_TEXT)
    hash_value = draw(_hashes(sha256_hex(text)))
    body: dict[str, Any] = {}
    if draw(mostly(st.just(True), st.just(False), odds=3)):
        body["query"] = text
    form = draw(_FORMS)
    extensions: Any = {}
    if form in {"persistedQuery", "both"}:
        persisted = {"version": draw(_VERSIONS), "sha256Hash": hash_value}
        extensions["persistedQuery"] = draw(mostly(st.just(persisted), _NOT_TEXT, odds=9))
    if form in {"documentId", "extensions.documentId", "both"}:
        prefix = draw(_DOCUMENT_ID_PREFIXES)
        document_id = prefix + hash_value if isinstance(hash_value, str) else hash_value
        if form == "extensions.documentId":
            extensions["documentId"] = document_id
        else:
            body["documentId"] = document_id
    if form == "extensions":
        extensions = draw(_NOT_TEXT | st.dictionaries(st.text(max_size=8), _NOT_TEXT, max_size=2))
    if extensions != {}:
        body["extensions"] = extensions
    variables = draw(mostly(st.sampled_from([None, None, {"first": 5}]), _NOT_TEXT, odds=9))
    if variables is not None:
        body["variables"] = variables
    name = draw(mostly(st.sampled_from([None, None, "Alice", "Page"]), st.text(max_size=8), odds=9))
    if name is not None:
        body["operationName"] = name
    return body


# How a body is sent: JSON as most clients write it (`\u` escapes), JSON in raw UTF-8 (a lone
# surrogate then becomes bytes that are not UTF-8), JSON in UTF-16, or as a GET's parameters.
TRANSPORTS = st.sampled_from(["json", "raw-utf-8", "utf-16", "get"])
